//! The jobs room: cron and job state. It owns job specs and records, fires
//! and what a run owes a chat (`model.rs`, with the [`model::JobStore`]
//! trait and its sled side: the jobs' store keys in tree `jobs`),
//! schedules and their evaluation in an IANA zone (`schedule.rs`), the
//! [`actor::JobsActor`] that fires them (`actor.rs`), the agent's
//! `schedule_*` tools that ask it (`tools.rs`), and the shared store's job
//! table (`shared.rs`, the PostgreSQL side of `JobStore`).
//!
//! It may not touch a plan's execution: it submits plans only through the
//! plans room's scheduler messages (`SchedulerMsg::Submit` under a fire's
//! idempotency key) and reads their state through `PlanLookup`; it never
//! runs a step. A run's result reaches a chat only through the channel
//! manager's `Notify`. Plans do not depend on this room: the scheduler
//! recognises a job's run by its key (`plans::model::job_of_key`).

pub mod actor;
pub mod model;
pub mod schedule;
pub mod shared;
pub mod tools;
