//! The agent's schedule tools, so a user creates jobs by talking. They
//! live in this room, not in `tools/`, because they talk to the JobsActor
//! (tools there never touch actors). A job's workdir is the session's.
//!
//! A run started by a job (its tools see `FLYTO_JOB`) is not offered them
//! and a call is refused: a job must not breed or edit jobs unattended.

use super::actor::{JOBS, JobsMsg};
use super::schedule::Schedule;
use crate::clock::Clock;
use crate::kernel::Reject;
use crate::tools::builtin::parse_args;
use crate::tools::{Tool, ToolContext, ToolFuture, ToolOutput};
use chrono::{DateTime, Utc};
use flyto_protocol::{JobSpec, JobView};
use ractor::RpcReplyPort;
use ractor::rpc::CallResult;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// How many fires a created or changed job's answer names.
const SHOWN_FIRES: usize = 3;

/// The four schedule tools.
pub fn all(clock: Arc<dyn Clock>) -> Vec<Arc<dyn Tool>> {
    let shared = Arc::new(Shared { clock });
    vec![
        Arc::new(Create(shared.clone())),
        Arc::new(List),
        Arc::new(Update(shared)),
        Arc::new(Cancel),
    ]
}

struct Shared {
    clock: Arc<dyn Clock>,
}

/// The job whose run this is, from the tools' environment.
fn job_run(env: &[(String, String)]) -> Option<&str> {
    env.iter()
        .find(|(k, _)| k == "FLYTO_JOB")
        .map(|(_, v)| v.as_str())
}

/// The refusal of a call inside a job's run, if it is one.
fn refused(ctx: &ToolContext) -> Option<ToolOutput> {
    job_run(&ctx.env).map(|job| {
        ToolOutput::error(format!(
            "this run was started by job {job}; a job's run cannot create, change or delete jobs: tell the user what to schedule instead"
        ))
    })
}

/// A call's arguments, or its refusal (inside a job's run, or bad
/// arguments) as the tool's output.
fn prepare<T: serde::de::DeserializeOwned>(
    tool: &str,
    ctx: &ToolContext,
    args_json: &str,
    expected: &str,
) -> Result<T, ToolOutput> {
    match refused(ctx) {
        Some(no) => Err(no),
        None => parse_args(tool, args_json, expected),
    }
}

/// Asks the JobsActor; its refusals come back as their message.
async fn ask<T: Send + 'static>(
    build: impl FnOnce(RpcReplyPort<Result<T, Reject>>) -> JobsMsg,
) -> Result<T, String> {
    let jobs = JOBS.find().ok_or(
        "the jobs scheduler is not running; see the daemon log (`journalctl --user -u flytod`)",
    )?;
    match jobs.call(build, Some(Duration::from_secs(30))).await {
        Ok(CallResult::Success(Ok(v))) => Ok(v),
        Ok(CallResult::Success(Err(r))) => Err(r.message),
        _ => Err("the jobs scheduler did not answer; see the daemon log".into()),
    }
}

fn utc(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms as i64).unwrap_or_default()
}

/// A job in a few lines the model can read back to the user; with `now`,
/// the fires after the next one too.
fn describe(view: &JobView, now_ms: Option<u64>) -> String {
    let name = view
        .name
        .as_ref()
        .map_or_else(String::new, |n| format!(" `{n}`"));
    let mut out = format!(
        "job {}{name}: `{}` in {} ({}, {}), in {}\nruns: {}",
        view.id,
        view.schedule,
        view.tz,
        view.mode,
        view.state,
        view.workdir
            .as_deref()
            .unwrap_or("flytod's default workdir"),
        view.what
    );
    match (&view.next_fire, &view.next_fire_utc) {
        (Some(local), Some(at_utc)) => {
            out.push_str(&format!("\nnext fire: {local} (UTC {at_utc})"));
            // The fires after it, from the stored zone as the actor does.
            let after = DateTime::parse_from_rfc3339(at_utc).map(|t| t.with_timezone(&Utc));
            if let (Some(now), Ok(after)) = (now_ms, after)
                && let Ok((schedule, _)) = Schedule::parse(&view.schedule, &view.tz, utc(now))
            {
                for t in schedule.upcoming(after, SHOWN_FIRES - 1) {
                    out.push_str(&format!(
                        "\nthen: {} (UTC {})",
                        t.to_rfc3339(),
                        t.with_timezone(&Utc).to_rfc3339()
                    ));
                }
            }
        }
        _ => out.push_str("\nnext fire: none (it will not fire again as it is)"),
    }
    if let Some(last) = &view.last_outcome {
        out.push_str(&format!("\nlast run: {last}"));
    }
    out
}

fn with_warnings(mut text: String, warnings: &[String]) -> String {
    for w in warnings {
        text.push_str(&format!("\nwarning: {w}"));
    }
    text
}

/// The schema properties create and update share (a macro, so `concat!`
/// can build the schemas as static text).
macro_rules! fields {
    () => {
        r#"
    "schedule": {"type": "string", "description": "When it runs: a 5-field cron expression (`0 8 * * MON-FRI`: weekdays at 08:00; day-of-month and day-of-week are ORed when both are set), a nickname (`@daily`, `@hourly`, `@weekly`), an interval (`every 15m`, `every 2h`), or one time (`at 2026-12-24 08:00` in the zone, or an RFC 3339 instant)."},
    "tz": {"type": "string", "description": "IANA time zone the schedule is read in, e.g. Europe/Berlin; leave it out for the machine's zone."},
    "prompt": {"type": "string", "description": "What the agent does at each run. It runs later with no memory of this conversation: self-contained, saying what to do, where, and what to report."},
    "name": {"type": "string", "description": "A short unique name to refer to the job by, e.g. morning-inbox."},
    "mode": {"type": "string", "enum": ["isolated", "persistent"], "description": "isolated (default): a new session per run; persistent: one session that keeps its history across runs."}"#
    };
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    schedule: String,
    tz: Option<String>,
    prompt: String,
    name: Option<String>,
    mode: Option<String>,
}

struct Create(Arc<Shared>);

impl Tool for Create {
    fn name(&self) -> &'static str {
        "schedule_create"
    }
    fn description(&self) -> &'static str {
        "Creates a job: a prompt the agent runs on a schedule (at a time, or regularly), in \
         this session's working directory. Use it when the user asks for something to \
         happen later or repeatedly. Answers the job's id, its schedule and zone, and its \
         next fire times (local and UTC), with any warnings. Then confirm the schedule back \
         to the user in plain words (e.g. \"every weekday at 08:00 Berlin time, first on \
         Monday 2 March\"), naming the next fire times you got back and any warning."
    }
    fn input_schema(&self) -> &'static str {
        concat!(
            r#"{
  "type": "object",
  "properties": {"#,
            fields!(),
            r#"
  },
  "required": ["schedule", "prompt"],
  "additionalProperties": false
}"#
        )
    }
    fn offered(&self, env: &[(String, String)]) -> bool {
        job_run(env).is_none()
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            const EXPECTED: &str = "{\"schedule\": string, \"prompt\": string, \"tz\"?: string, \"name\"?: string, \"mode\"?: \"isolated\" | \"persistent\"}";
            let args: CreateArgs = match prepare(self.name(), ctx, args_json, EXPECTED) {
                Ok(a) => a,
                Err(out) => return out,
            };
            let spec = JobSpec {
                schedule: Some(args.schedule),
                tz: args.tz,
                prompt: Some(args.prompt),
                mode: args.mode,
                name: args.name,
                workdir: Some(ctx.workdir.display().to_string()),
                ..Default::default()
            };
            let now = self.0.clock.now_ms();
            match ask(|reply| JobsMsg::Create {
                spec: Box::new(spec),
                reply,
            })
            .await
            {
                Ok((view, warnings)) => ToolOutput::ok(with_warnings(
                    format!("created {}", describe(&view, Some(now))),
                    &warnings,
                )),
                Err(m) => ToolOutput::error(format!("no job was created: {m}")),
            }
        })
    }
}

struct List;

impl Tool for List {
    fn name(&self) -> &'static str {
        "schedule_list"
    }
    fn description(&self) -> &'static str {
        "Lists the scheduled jobs: each one's id, name, schedule and zone, state, what it \
         runs, its next fire (local and UTC) and its last run. Use it to find the job the \
         user means before changing or cancelling it."
    }
    fn input_schema(&self) -> &'static str {
        r#"{"type": "object", "properties": {}, "additionalProperties": false}"#
    }
    fn offered(&self, env: &[(String, String)]) -> bool {
        job_run(env).is_none()
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        true
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, _args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            if let Some(no) = refused(ctx) {
                return no;
            }
            match ask(|reply| JobsMsg::List { reply }).await {
                Ok(views) if views.is_empty() => ToolOutput::ok("no jobs are scheduled"),
                // One next fire per job keeps a long list short.
                Ok(views) => ToolOutput::ok(
                    views
                        .iter()
                        .map(|v| describe(v, None))
                        .collect::<Vec<_>>()
                        .join("\n\n"),
                ),
                Err(m) => ToolOutput::error(m),
            }
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    job: String,
    schedule: Option<String>,
    tz: Option<String>,
    prompt: Option<String>,
    name: Option<String>,
    mode: Option<String>,
    paused: Option<bool>,
}

struct Update(Arc<Shared>);

impl Tool for Update {
    fn name(&self) -> &'static str {
        "schedule_update"
    }
    fn description(&self) -> &'static str {
        "Changes a job, found by its id (j3) or name: give only the fields to change; \
         `paused` pauses or resumes it. A new schedule counts from now. Answers the job as \
         it now is, with its next fire times; confirm the change back to the user in plain \
         words."
    }
    fn input_schema(&self) -> &'static str {
        concat!(
            r#"{
  "type": "object",
  "properties": {
    "job": {"type": "string", "description": "The job's id (e.g. j3) or name, as schedule_list shows it."},"#,
            fields!(),
            r#",
    "paused": {"type": "boolean", "description": "true pauses the job (it stops firing), false resumes it."}
  },
  "required": ["job"],
  "additionalProperties": false
}"#
        )
    }
    fn offered(&self, env: &[(String, String)]) -> bool {
        job_run(env).is_none()
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            const EXPECTED: &str = "{\"job\": id or name, and any of \"schedule\", \"tz\", \"prompt\", \"name\", \"mode\": string, \"paused\": boolean}";
            let args: UpdateArgs = match prepare(self.name(), ctx, args_json, EXPECTED) {
                Ok(a) => a,
                Err(out) => return out,
            };
            let changes = [
                &args.schedule,
                &args.tz,
                &args.prompt,
                &args.name,
                &args.mode,
            ]
            .iter()
            .any(|c| c.is_some());
            if !changes && args.paused.is_none() {
                return ToolOutput::error(
                    "nothing to change: give at least one of schedule, tz, prompt, name, mode or paused",
                );
            }
            let spec = JobSpec {
                schedule: args.schedule,
                tz: args.tz,
                prompt: args.prompt,
                mode: args.mode,
                name: args.name,
                ..Default::default()
            };
            let mut warnings = Vec::new();
            let mut view = None;
            if changes {
                let id = args.job.clone();
                match ask(|reply| JobsMsg::Update {
                    id,
                    spec: Box::new(spec),
                    reply,
                })
                .await
                {
                    Ok((v, w)) => {
                        warnings = w;
                        view = Some(v);
                    }
                    Err(m) => return ToolOutput::error(format!("the job was not changed: {m}")),
                }
            }
            if let Some(paused) = args.paused {
                // By id once the update answered: a rename must not lose it.
                let id = view.as_ref().map_or(args.job.clone(), |v| v.id.clone());
                match ask(|reply| JobsMsg::SetEnabled {
                    id,
                    enabled: !paused,
                    reply,
                })
                .await
                {
                    Ok(v) => view = Some(v),
                    Err(m) => {
                        return ToolOutput::error(format!(
                            "the job was not paused or resumed: {m}"
                        ));
                    }
                }
            }
            let now = self.0.clock.now_ms();
            match view {
                Some(v) => ToolOutput::ok(with_warnings(
                    format!("changed {}", describe(&v, Some(now))),
                    &warnings,
                )),
                None => ToolOutput::error("nothing was changed"),
            }
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelArgs {
    job: String,
}

struct Cancel;

impl Tool for Cancel {
    fn name(&self) -> &'static str {
        "schedule_cancel"
    }
    fn description(&self) -> &'static str {
        "Cancels a job for good, found by its id (j3) or name: it is deleted with its run \
         history and never fires again (a run already going is not stopped). To stop it for \
         a while instead, use schedule_update with paused: true."
    }
    fn input_schema(&self) -> &'static str {
        r#"{
  "type": "object",
  "properties": {
    "job": {"type": "string", "description": "The job's id (e.g. j3) or name, as schedule_list shows it."}
  },
  "required": ["job"],
  "additionalProperties": false
}"#
    }
    fn offered(&self, env: &[(String, String)]) -> bool {
        job_run(env).is_none()
    }
    fn concurrency_safe(&self, _: &str) -> bool {
        false
    }
    fn call<'a>(&'a self, ctx: &'a ToolContext, args_json: &'a str) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: CancelArgs =
                match prepare(self.name(), ctx, args_json, "{\"job\": id or name}") {
                    Ok(a) => a,
                    Err(out) => return out,
                };
            let id = args.job;
            match ask(|reply| JobsMsg::Delete { id, reply }).await {
                Ok(v) => ToolOutput::ok(format!(
                    "cancelled job {}{}: `{}` in {} will not fire again",
                    v.id,
                    v.name.map_or_else(String::new, |n| format!(" `{n}`")),
                    v.schedule,
                    v.tz
                )),
                Err(m) => ToolOutput::error(format!("no job was cancelled: {m}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schemas_are_json_objects() {
        for t in all(Arc::new(crate::clock::SystemClock)) {
            let v: serde_json::Value = serde_json::from_str(t.input_schema())
                .unwrap_or_else(|e| panic!("{}: {e}", t.name()));
            assert_eq!(v["type"], "object", "{}", t.name());
        }
    }

    #[test]
    fn a_jobs_run_is_not_offered_the_tools() {
        let env = vec![("FLYTO_JOB".to_string(), "j3".to_string())];
        for t in all(Arc::new(crate::clock::SystemClock)) {
            assert!(!t.offered(&env), "{}", t.name());
            assert!(t.offered(&[]), "{}", t.name());
        }
    }
}
