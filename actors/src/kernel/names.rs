//! The registry names of the rooms' long-lived actors, all in one list so
//! two rooms never claim one name, and a typed handle to find each: a
//! look-up of the scheduler always yields an `ActorRef` of the scheduler's
//! messages. A restarted actor takes its name over, so callers look up
//! per request instead of keeping a reference.

use ractor::ActorRef;
use std::marker::PhantomData;

pub const SCHEDULER: &str = "flyto.scheduler";
pub const SESSIONS: &str = "flyto.sessions";
pub const JOBS: &str = "flyto.jobs";
pub const CHANNELS: &str = "flyto.channels";
pub const DREAM: &str = "flyto.dream";
pub const BREAKER: &str = "flyto.breaker";
pub const MEMORY: &str = "flyto.memory";
pub const MCP: &str = "mcp";

/// An actor's registry name, typed by the messages it takes. The room
/// that owns the actor declares its `Name`, since only it knows `M`.
pub struct Name<M> {
    name: &'static str,
    messages: PhantomData<fn() -> M>,
}

impl<M> Name<M> {
    pub const fn new(name: &'static str) -> Self {
        Name {
            name,
            messages: PhantomData,
        }
    }
    pub const fn as_str(&self) -> &'static str {
        self.name
    }
}

impl<M: ractor::Message> Name<M> {
    /// The actor now registered under this name, if it runs.
    pub fn find(&self) -> Option<ActorRef<M>> {
        ractor::registry::where_is(self.name.into()).map(ActorRef::from)
    }
}
