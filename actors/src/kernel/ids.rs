//! How ids look on the wire and in listings: `p<N>` plans, `s<N>`
//! sessions, `j<N>` jobs, and the stable id of a project (its workdir).
//! Every room formats and parses them here, so a plan id a session keeps
//! reads the same as the plans room's own.

use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// Plan ids: `p<N>`; a bare number parses too (users type `plan_status 7`).
pub mod plan {
    pub fn format(id: u64) -> String {
        format!("p{id}")
    }
    pub fn parse(s: &str) -> Option<u64> {
        s.strip_prefix('p').unwrap_or(s).parse().ok()
    }
}

/// Session ids: `s<N>`.
pub mod session {
    pub fn format(id: u64) -> String {
        format!("s{id}")
    }
    pub fn parse(s: &str) -> Option<u64> {
        s.strip_prefix('s')?.parse().ok()
    }
}

/// Job ids: `j<N>`.
pub mod job {
    pub fn format(id: u64) -> String {
        format!("j{id}")
    }
    pub fn parse(s: &str) -> Option<u64> {
        s.strip_prefix('j')?.parse().ok()
    }
}

/// A project's id: the first 8 bytes of the SHA-256 of its workdir, in
/// hex. Memory, dream and the compaction breaker key their state by it.
pub fn project_id(workdir: &str) -> String {
    let digest = Sha256::digest(workdir.as_bytes());
    let mut out = String::with_capacity(16);
    for b in digest.iter().take(8) {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_keep_their_letters() {
        assert_eq!(plan::parse(&plan::format(7)), Some(7));
        assert_eq!(plan::parse("7"), Some(7));
        assert_eq!(session::parse(&session::format(3)), Some(3));
        assert_eq!(session::parse("3"), None);
        assert_eq!(job::parse("j12"), Some(12));
        assert_eq!(job::parse("p12"), None);
        assert_eq!(project_id("/w").len(), 16);
        assert_ne!(project_id("/w"), project_id("/x"));
    }
}
