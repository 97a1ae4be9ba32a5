//! Who is connecting to the main control socket. Processes started for an
//! agent's tools or for the steps of nested plans (depth >= 1) must stay in
//! their chain's scope: they may reach flytod only through their
//! `FLYTO_PLAN_SOCK`. Unsetting that variable or naming the main socket
//! with `--socket` must not lift the scope, so the main socket decides from
//! the peer itself (SO_PEERCRED's pid): its ancestry up to flytod, and the
//! spawn table that `flyto_actors::tools::process` fills at every spawn.
//!
//! flytod is a child subreaper, so no descendant can leave its tree by
//! double-forking: an orphan is adopted by flytod, and is attributed by the
//! session or process group it kept (a spawn leads its own session); one
//! that left both (`setsid`) is refused, as flytod cannot tell whose it is.

use flyto_actors::tools::process::{self, ProcStat, SpawnTable};
use std::collections::HashSet;
use std::sync::Mutex;

/// Where a peer comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// Not a descendant of flytod: the user's own process.
    Outside,
    /// A descendant of a step of a plan the user submitted (depth 0).
    UserStep,
    /// A descendant of an agent's tool or of a nested plan's step, with
    /// the plan socket it was given.
    Confined(Option<std::sync::Arc<str>>),
    /// An orphan flytod adopted that left the session and group it was
    /// started in.
    Detached,
    /// The peer exited before it could be checked.
    Gone,
}

/// Processes (pid, start time) known not to descend from flytod. That never
/// changes: an orphan is only ever adopted by one of its ancestors. Most
/// connections come from a shell already in here, so checking them costs
/// one or two reads of /proc.
static OUTSIDE: Mutex<Option<HashSet<(i32, u64)>>> = Mutex::new(None);
const OUTSIDE_MAX: usize = 1024;

/// Ancestry deeper than this is not walked further (and refused).
const MAX_ANCESTRY: usize = 4096;

fn origin(pid: i32) -> Origin {
    (0..3)
        .map(|_| classify(pid))
        // An ancestor that exits mid-walk hands its children to a reaper:
        // walk again from the peer.
        .find(|o| o.is_some())
        .flatten()
        .unwrap_or(Origin::Gone)
}

/// `Some(message)` when the scoped plan socket at `socket` must refuse the
/// peer: a confined process may use only the plan socket it was given, or
/// it could leave its chain (another chain's socket) or the depth cap (an
/// ancestor's socket submits less deep). The user's own processes may use
/// any: they have the main socket anyway.
pub fn scoped_refusal(pid: Option<i32>, socket: &str) -> Option<String> {
    let pid = pid.filter(|p| *p > 0)?;
    let origin = origin(pid);
    let why = match &origin {
        Origin::Outside | Origin::UserStep => return None,
        Origin::Confined(given) if given.as_deref() == Some(socket) => return None,
        Origin::Confined(given) => format!(
            "it comes from a process whose plan socket is {}, not this one",
            given.as_deref().unwrap_or("the control socket")
        ),
        Origin::Detached => "it comes from a process that detached itself (setsid) from a step or an agent's tool and outlived it, and flytod cannot tell whose it is".to_string(),
        Origin::Gone => "the connecting process exited before flytod could check it".to_string(),
    };
    tracing::warn!(
        peer_pid = pid,
        ?origin,
        socket,
        "refused a connection on a plan socket"
    );
    Some(format!(
        "flytod does not serve this connection on the plan socket {socket}: {why}. Use the socket in FLYTO_PLAN_SOCK as flytod set it; it serves plan requests for this process's own chain"
    ))
}

/// `Some(message)` when the main control socket must refuse the peer.
pub fn refusal(pid: Option<i32>) -> Option<String> {
    // No pid (or 0: a process in a pid namespace we cannot see, so not
    // one of ours) means nothing flytod spawned.
    let pid = pid.filter(|p| *p > 0)?;
    let origin = origin(pid);
    let why = match origin {
        Origin::Outside | Origin::UserStep => return None,
        Origin::Confined(_) => {
            "it comes from a process started by an agent's tool or by a step of a nested plan, which may reach flytod only through its own plan socket"
        }
        Origin::Detached => {
            "it comes from a process that detached itself (setsid) from a step or an agent's tool and outlived it, and flytod cannot tell whether an agent started it"
        }
        Origin::Gone => "the connecting process exited before flytod could check it",
    };
    tracing::warn!(
        peer_pid = pid,
        ?origin,
        "refused a connection on the control socket"
    );
    Some(format!(
        "flytod does not serve this connection on its control socket: {why}. Use the socket in FLYTO_PLAN_SOCK (flytoctl does when it is set and --socket is not given); it serves plan requests for this chain"
    ))
}

/// `None` when an ancestor vanished during the walk.
fn classify(pid: i32) -> Option<Origin> {
    let me = std::process::id() as i32;
    // Held for the walk: nothing is spawned (or forgotten) meanwhile.
    let spawns = process::spawns();
    let mut walked: Vec<(i32, u64)> = Vec::new();
    let mut cur = pid;
    for _ in 0..MAX_ANCESTRY {
        let Some(st) = process::proc_stat(cur) else {
            // The peer itself gone: refuse. An ancestor gone: walk again.
            return (cur == pid).then_some(Origin::Gone);
        };
        if known_outside(cur, st.start_time) {
            remember_outside(&walked);
            return Some(Origin::Outside);
        }
        walked.push((cur, st.start_time));
        if st.ppid == me {
            return Some(attribute(cur, &st, &spawns));
        }
        if cur == me || st.ppid <= 0 {
            remember_outside(&walked);
            return Some(Origin::Outside);
        }
        cur = st.ppid;
    }
    Some(Origin::Detached)
}

/// A direct child of flytod: a spawn (alive), or an adopted orphan.
fn attribute(pid: i32, st: &ProcStat, spawns: &SpawnTable) -> Origin {
    if let Some(spawn) = process::live_spawn(spawns, pid) {
        return if spawn.confined {
            Origin::Confined(spawn.plan_sock)
        } else {
            Origin::UserStep
        };
    }
    // A live leader holds its pid, so no other session or group can have
    // taken that id: the orphan came from that spawn.
    let leaders: Vec<_> = [st.session, st.pgrp]
        .into_iter()
        .filter_map(|id| process::live_spawn(spawns, id))
        .collect();
    if let Some(spawn) = leaders.iter().find(|s| s.confined) {
        Origin::Confined(spawn.plan_sock.clone())
    } else if leaders.is_empty() {
        Origin::Detached
    } else {
        Origin::UserStep
    }
}

fn known_outside(pid: i32, start_time: u64) -> bool {
    let known = OUTSIDE.lock().unwrap_or_else(|p| p.into_inner());
    known
        .as_ref()
        .is_some_and(|k| k.contains(&(pid, start_time)))
}

fn remember_outside(walked: &[(i32, u64)]) {
    let mut known = OUTSIDE.lock().unwrap_or_else(|p| p.into_inner());
    let known = known.get_or_insert_with(HashSet::new);
    if known.len() + walked.len() > OUTSIDE_MAX {
        known.clear();
    }
    known.extend(walked.iter().copied());
}

/// Makes flytod the reaper of every orphan among its descendants, so none
/// can leave its tree (see the module doc). Answers whether it worked.
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with an integer argument; no memory is involved.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}
