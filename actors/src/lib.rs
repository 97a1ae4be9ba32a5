//! flyto-actors: the actors that make up `flytod` and the domain logic each
//! one owns. One folder per room; a room owns its actor, its state machine
//! and its storage keys, and other rooms reach it only through its
//! `ActorRef` messages or a narrow trait it exports.
//!
//! This crate knows nothing about sockets, connections or the wire encoding:
//! the daemon translates requests into actor messages.

pub mod channels;
pub mod clock;
pub mod compaction;
pub mod dream;
pub mod durable;
pub mod failpoint;
#[cfg(test)]
mod floors;
pub mod hooks;
pub mod jobs;
pub mod kernel;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod plans;
pub mod session;
pub mod skills;
pub mod store;
pub mod subrun;
pub mod supervisor;
pub mod tools;

pub use clock::{Clock, ManualClock, SystemClock};
