//! End-to-end tests: one binary, one module per area. They drive the real
//! binaries; build them first (`cargo build --workspace --bins`).

/// One suite, both stores: each named test body (a `fn(Backend)` of the
/// module) runs once on sled (`name::sled`) and once on a PostgreSQL of
/// its own (`name::postgres`).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sled() {
                super::$name(flyto_tests::Backend::Sled)
            }
            #[test]
            fn postgres() {
                super::$name(flyto_tests::Backend::Postgres)
            }
        }
    )*};
}

mod approval_prompt;
mod bad_input;
mod call_ids;
mod channel_clients;
mod channel_clients_wx;
mod channels;
mod channels_idle;
mod channels_telegram;
mod channels_wechat;
mod cli;
mod compaction;
mod dream;
mod durability;
mod durations;
mod extraction;
mod guards;
mod hooks;
mod jobs;
mod leftovers;
mod lifecycle;
mod mcp;
mod memory;
mod pg_channels;
mod pg_chaos;
mod pg_cluster;
mod pg_daemon;
mod pg_harness;
mod pg_memory;
mod pg_plans;
mod pg_sessions;
mod plan_status_stores;
mod plans;
mod policy_check;
mod postgres;
mod providers;
mod sandbox;
mod schedule_tools;
mod scope;
mod secret_guard;
mod sessions;
mod skills;
mod subagents;
mod systemd;
