//! failpoint: named places where a test may have the daemon killed, to
//! prove that a crash at each step of a multi-step change leaves a state
//! the restart repairs. `FLYTO_TEST_CRASH_AT=<name>` in flytod's
//! environment sends SIGKILL to the daemon itself when it reaches
//! `<name>`; unset (always, outside tests) a failpoint is one comparison.

use std::sync::OnceLock;

fn armed() -> Option<&'static str> {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    AT.get_or_init(|| {
        std::env::var("FLYTO_TEST_CRASH_AT")
            .ok()
            .filter(|s| !s.is_empty())
    })
    .as_deref()
}

/// Dies here, by SIGKILL, if the environment names this place.
pub fn reached(name: &str) {
    if armed() == Some(name) {
        tracing::warn!("failpoint {name}: killing flytod as the test asked");
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    }
}
