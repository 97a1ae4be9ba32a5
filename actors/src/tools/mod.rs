//! tools: everything that runs on the user's machine on the agent's or a
//! plan's behalf. So far: process execution with the process rules of
//! DESIGN section 2. It never touches storage or actors; callers persist.

pub mod env;
pub mod process;
