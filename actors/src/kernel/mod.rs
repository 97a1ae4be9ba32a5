//! kernel: the vocabulary every room shares and no room owns: ids and how
//! they are written, a refused request ([`Reject`]), the scoped plan
//! sockets a child reaches the daemon through, the confinement words a
//! plan or session carries, and the registry names of the rooms' actors.
//!
//! It uses no room of this crate (only std, serde, ractor and the
//! protocol), so any room may use it and no cycle can run through it.
//! It holds words, not behaviour: nothing here spawns, stores or decides.

pub mod confinement;
pub mod ids;
pub mod names;
pub mod reject;
pub mod sockets;

pub use confinement::{Profile, SandboxSpec};
pub use names::Name;
pub use reject::{AnswerFut, Reject};
pub use sockets::{NoPlanSockets, PlanSockets};
