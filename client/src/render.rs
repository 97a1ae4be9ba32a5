//! Daemon answers as text: the plan table with output tails, the plan list,
//! stats and pong lines. Pure functions of their inputs (and `now_ms`).

use crate::context_render;
use crate::format::{age, bytes, cost, duration};
use crate::style::{Style, Tone, plan_tone, step_tone};
use crate::table::{Cell, Table};
use flyto_protocol::{DaemonStats, PlanState, PlanSummary, PlanView, StepView};

/// What running steps printed so far (the end of their log files), by
/// step id.
pub type Live = std::collections::HashMap<String, String>;

/// Header line, step table, then each step's error and output tails (for
/// a running step: its output so far, from `live`).
pub fn plan_view(plan: &PlanView, now_ms: u64, style: Style, live: &Live) -> String {
    let mut out = plan_header(plan, now_ms, style);
    out.push('\n');
    out.push_str(&step_table(plan, now_ms, style));
    let details: Vec<String> = plan
        .steps
        .iter()
        .map(|s| step_details(&plan.id, s, style, live.get(&s.id)))
        .filter(|d| !d.is_empty())
        .collect();
    if !details.is_empty() {
        out.push('\n');
        out.push_str(&details.concat());
    }
    out
}

/// `plan p12 "nightly" failed after 3m04s: <reason>`.
pub fn plan_header(plan: &PlanView, now_ms: u64, style: Style) -> String {
    let mut out = format!("plan {}", style.paint(&plan.id, Tone::Bold));
    if let Some(name) = &plan.name {
        out.push_str(&format!(" {:?}", style.text(name)));
    }
    out.push(' ');
    out.push_str(&style.paint(plan.state.as_str(), plan_tone(plan.state)));
    match (plan.state, plan.started_ms, plan.finished_ms) {
        (PlanState::Pending, _, _) => {
            out.push_str(&format!(", created {}", age(now_ms, plan.created_ms)));
            if let Some(waiting) = &plan.waiting {
                out.push_str(&format!(" ({waiting})"));
            }
        }
        (PlanState::Running, Some(start), _) => {
            out.push_str(&format!(" for {}", duration(now_ms.saturating_sub(start))));
        }
        (_, Some(start), Some(end)) => {
            out.push_str(&format!(" after {}", duration(end.saturating_sub(start))));
        }
        _ => {}
    }
    if let Some(reason) = &plan.reason {
        out.push_str(": ");
        out.push_str(&style.text(reason));
    }
    if let Some(old) = &plan.restarted_from {
        out.push_str(&format!("; restarted from {old}"));
    }
    out
}

fn step_table(plan: &PlanView, now_ms: u64, style: Style) -> String {
    let mut table = Table::new(&["STEP", "KIND", "STATE", "ATTEMPTS", "DURATION", "EXIT"]);
    for step in &plan.steps {
        table.row(vec![
            Cell::plain(&step.id),
            Cell::plain(&step.kind),
            Cell::toned(step.state.as_str(), step_tone(step.state)),
            Cell::plain(attempts(step)),
            Cell::plain(step_duration(step, now_ms).map_or_else(|| "-".to_string(), duration)),
            Cell::plain(
                step.exit_code
                    .map_or_else(|| "-".to_string(), |c| c.to_string()),
            ),
        ]);
    }
    table.render(style)
}

/// Starts so far; while a step may still start again (an interrupted
/// attempt is retried), out of how many.
fn attempts(step: &StepView) -> String {
    if step.state.is_terminal() {
        step.attempts.to_string()
    } else {
        format!("{}/{}", step.attempts, step.max_attempts)
    }
}

/// Run time of a step: to its end, or to `now_ms` while it runs.
pub fn step_duration(step: &StepView, now_ms: u64) -> Option<u64> {
    let start = step.started_ms?;
    Some(step.finished_ms.unwrap_or(now_ms).saturating_sub(start))
}

/// Lines of each output tail shown under the table.
pub const TAIL_LINES: usize = 10;

fn step_details(plan_id: &str, step: &StepView, style: Style, live: Option<&String>) -> String {
    let mut out = String::new();
    if let Some(so_far) = live {
        let follow = format!(
            "`flytoctl plan_status {plan_id} --log {} --follow`",
            step.id
        );
        tail_section(
            &mut out,
            step,
            "output so far",
            so_far,
            Tone::Plain,
            style,
            |hidden| {
                if hidden {
                    format!("… earlier output not shown; {follow} follows the whole log")
                } else {
                    format!("{follow} follows it")
                }
            },
        );
    }
    if let Some(error) = &step.error {
        out.push_str(&format!(
            "{} {}: {}\n",
            step.id,
            style.paint("error", Tone::Red),
            style.text(error)
        ));
    }
    for (label, tail, tone) in [
        ("stdout", &step.stdout_tail, Tone::Plain),
        ("stderr", &step.stderr_tail, Tone::Red),
    ] {
        tail_section(&mut out, step, label, tail, tone, style, |hidden| {
            match (hidden, &step.log_path) {
                (false, _) => String::new(),
                (true, Some(_)) => format!(
                    "… earlier output not shown; `flytoctl plan_status {plan_id} --log {}` shows the whole log",
                    step.id
                ),
                (true, None) => "… earlier output not shown".to_string(),
            }
        });
    }
    out
}

/// `<step> <label>:`, then the last [`TAIL_LINES`] lines of `tail`
/// indented; `hint(cut)` is a dim line under the label (when not empty),
/// `cut` telling whether earlier lines were left out.
fn tail_section(
    out: &mut String,
    step: &StepView,
    label: &str,
    tail: &str,
    tone: Tone,
    style: Style,
    hint: impl Fn(bool) -> String,
) {
    let tail = style.text(tail);
    let tail = tail.trim_end_matches(['\n', '\r']);
    if tail.trim().is_empty() {
        return;
    }
    out.push_str(&format!("{} {}:\n", step.id, style.paint(label, tone)));
    let lines: Vec<&str> = tail.lines().collect();
    let hidden = lines.len().saturating_sub(TAIL_LINES);
    let note = hint(hidden > 0);
    if !note.is_empty() {
        out.push_str(&format!("    {}\n", style.paint(&note, Tone::Dim)));
    }
    for line in lines.iter().skip(hidden) {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
}

pub fn plan_list(plans: &[PlanSummary], now_ms: u64, style: Style) -> String {
    let mut table = Table::new(&["ID", "STATE", "STEPS", "CREATED", "NAME"]);
    for plan in plans {
        table.row(vec![
            Cell::plain(&plan.id),
            Cell::toned(
                match plan.queue_position {
                    Some(n) => format!("{} #{n}", plan.state.as_str()),
                    None => plan.state.as_str().to_string(),
                },
                plan_tone(plan.state),
            ),
            Cell::plain(step_counts(plan)),
            Cell::plain(age(now_ms, plan.created_ms)),
            Cell::plain(plan.name.as_deref().unwrap_or("-")),
        ]);
    }
    table.render(style)
}

/// `12 more plans; `flytoctl plan_list --limit 62` lists them`, when the
/// list was cut.
pub fn more_plans(shown: usize, total: u64, state: Option<PlanState>) -> Option<String> {
    let more = total.checked_sub(shown as u64).filter(|n| *n > 0)?;
    let state = state.map_or_else(String::new, |s| format!(" --state {}", s.as_str()));
    let plural = if more == 1 { "" } else { "s" };
    Some(format!(
        "{more} more plan{plural}; `flytoctl plan_list{state} --limit {total}` lists them"
    ))
}

/// `3 ok, 1 failed, 2 skipped` once every step ended; before that how many
/// did, then how they ended (`1/3: 1 ok`).
pub fn step_counts(plan: &PlanSummary) -> String {
    let cancelled = plan
        .steps_done
        .saturating_sub(plan.steps_succeeded + plan.steps_failed + plan.steps_skipped);
    let outcomes: Vec<String> = [
        (plan.steps_succeeded, "ok"),
        (plan.steps_failed, "failed"),
        (plan.steps_skipped, "skipped"),
        (cancelled, "cancelled"),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let outcomes = outcomes.join(", ");
    if plan.steps_done >= plan.steps_total {
        outcomes
    } else if outcomes.is_empty() {
        format!("{}/{}", plan.steps_done, plan.steps_total)
    } else {
        format!("{}/{}: {outcomes}", plan.steps_done, plan.steps_total)
    }
}

/// What `plan_cancel` reports for the state the plan ended in.
pub fn cancelled(id: &str, state: PlanState) -> String {
    match state {
        PlanState::Cancelled => format!("cancelled {id}"),
        s if s.is_terminal() => format!("{id} had already finished: {}", s.as_str()),
        s => format!("{id} is {} (cancel requested)", s.as_str()),
    }
}

pub fn pong(daemon_version: &str, pid: u32, uptime_ms: u64) -> String {
    format!(
        "flytod {daemon_version} pid {pid} up {}",
        duration(uptime_ms)
    )
}

pub fn stats(s: &DaemonStats) -> String {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    let rows = [
        ("version", s.daemon_version.clone()),
        ("pid", s.pid.to_string()),
        ("uptime", duration(s.uptime_ms)),
        ("draining", yes_no(s.draining)),
        ("plans pending", s.plans_pending.to_string()),
        ("plans running", s.plans_running.to_string()),
        ("plans succeeded", s.plans_succeeded.to_string()),
        ("plans failed", s.plans_failed.to_string()),
        ("plans cancelled", s.plans_cancelled.to_string()),
        ("steps running", s.steps_running.to_string()),
        ("sessions", s.sessions.to_string()),
        ("sessions running", s.sessions_running.to_string()),
        ("sessions in memory", s.sessions_live.to_string()),
        ("input tokens", s.input_tokens.to_string()),
        ("output tokens", s.output_tokens.to_string()),
        ("cost", cost(s.cost_usd)),
        ("compactions", s.compactions.to_string()),
        ("breakers open", s.breakers_open.to_string()),
        ("scheduler restarts", s.scheduler_restarts.to_string()),
        ("database size", bytes(s.db_bytes)),
        ("sandbox", s.sandbox.clone()),
        ("store", s.store.clone()),
    ];
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out: String = rows
        .iter()
        .map(|(key, value)| format!("{:<width$} {value}\n", format!("{key}:")))
        .collect();
    if !s.node.is_empty() {
        out.push_str(&format!("{:<width$} {}\n", "node:", s.node));
        out.push_str("nodes (last heartbeat):\n");
        for p in &s.peers {
            let me = if p.node == s.node { " (this one)" } else { "" };
            out.push_str(&format!(
                "  {} on {} pid {}: {} ago{me}\n",
                p.node,
                p.host,
                p.pid,
                duration(p.heartbeat_age_ms)
            ));
        }
    }
    if !s.contexts.is_empty() {
        out.push_str("contexts (fullest first):\n");
        out.push_str(&context_render::stats_contexts(&s.contexts));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flyto_protocol::{ContextView, SessionContext, StepState};

    fn step(id: &str, kind: &str, state: StepState) -> StepView {
        StepView {
            id: id.into(),
            kind: kind.into(),
            text: "true".into(),
            deps: vec![],
            state,
            attempts: 0,
            max_attempts: 3,
            started_ms: None,
            finished_ms: None,
            exit_code: None,
            error: None,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            log_path: None,
        }
    }

    fn sample() -> PlanView {
        let mut fetch = step("fetch", "run", StepState::Succeeded);
        fetch.attempts = 1;
        fetch.started_ms = Some(1_000);
        fetch.finished_ms = Some(2_200);
        fetch.exit_code = Some(0);
        fetch.stdout_tail = "hello\nworld\n".into();
        let mut build = step("build", "run", StepState::Failed);
        build.attempts = 3;
        build.started_ms = Some(2_200);
        build.finished_ms = Some(186_200);
        build.exit_code = Some(1);
        build.error = Some("exited with status 1".into());
        build.stderr_tail = "boom\n".into();
        let mut docs = step("docs", "agent", StepState::Skipped);
        docs.max_attempts = 1;
        PlanView {
            waiting: None,
            queue_position: None,
            restarted_from: None,
            chain: "p1".into(),
            depth: 0,
            id: "p12".into(),
            name: Some("nightly".into()),
            state: PlanState::Failed,
            reason: Some("step build failed".into()),
            created_ms: 500,
            started_ms: Some(1_000),
            finished_ms: Some(186_200),
            revision: 7,
            steps: vec![fetch, build, docs],
        }
    }

    #[test]
    fn renders_a_plan() {
        let text = plan_view(&sample(), 200_000, Style::plain(), &Live::new());
        let expected = "\
plan p12 \"nightly\" failed after 3m05s: step build failed
STEP   KIND   STATE      ATTEMPTS  DURATION  EXIT
fetch  run    succeeded  1         1.2s      0
build  run    failed     3         3m04s     1
docs   agent  skipped    0         -         -

fetch stdout:
    hello
    world
build error: exited with status 1
build stderr:
    boom
";
        assert_eq!(text, expected);
    }

    #[test]
    fn long_tails_show_their_last_lines() {
        let mut plan = sample();
        plan.steps.truncate(1);
        plan.steps[0].stdout_tail = (1..=25).map(|i| format!("line {i}\n")).collect();
        plan.steps[0].log_path = Some("/logs/p12/fetch.log".into());
        let text = plan_view(&plan, 200_000, Style::plain(), &Live::new());
        let details = &text[text.find("fetch stdout:").unwrap()..];
        let mut expected = "fetch stdout:\n    … earlier output not shown; `flytoctl plan_status p12 --log fetch` shows the whole log\n".to_string();
        for i in 16..=25 {
            expected.push_str(&format!("    line {i}\n"));
        }
        assert_eq!(details, expected);
    }

    #[test]
    fn running_steps_count_to_now() {
        let mut plan = sample();
        plan.state = PlanState::Running;
        plan.reason = None;
        plan.steps[1].state = StepState::Running;
        plan.steps[1].finished_ms = None;
        assert_eq!(step_duration(&plan.steps[1], 12_200), Some(10_000));
        assert_eq!(
            plan_header(&plan, 4_000, Style::plain()),
            "plan p12 \"nightly\" running for 3.0s"
        );
    }

    #[test]
    fn renders_the_list_and_the_daemon_lines() {
        let plans = vec![PlanSummary {
            queue_position: None,
            id: "p2".into(),
            chain: "p1".into(),
            name: None,
            state: PlanState::Running,
            created_ms: 0,
            finished_ms: None,
            steps_total: 3,
            steps_done: 1,
            steps_succeeded: 1,
            steps_failed: 0,
            steps_skipped: 0,
        }];
        assert_eq!(
            plan_list(&plans, 300_000, Style::plain()),
            "ID  STATE    STEPS      CREATED  NAME\np2  running  1/3: 1 ok  5m ago   -\n"
        );
        let counts = |done, ok, failed, skipped| {
            step_counts(&PlanSummary {
                steps_total: 6,
                steps_done: done,
                steps_succeeded: ok,
                steps_failed: failed,
                steps_skipped: skipped,
                ..plans[0].clone()
            })
        };
        assert_eq!(counts(6, 3, 1, 2), "3 ok, 1 failed, 2 skipped");
        assert_eq!(counts(6, 5, 0, 0), "5 ok, 1 cancelled");
        assert_eq!(counts(0, 0, 0, 0), "0/6");
        assert_eq!(more_plans(5, 5, None), None);
        assert_eq!(
            more_plans(50, 51, Some(PlanState::Failed)).as_deref(),
            Some("1 more plan; `flytoctl plan_list --state failed --limit 51` lists them")
        );
        assert_eq!(pong("0.1.0", 42, 184_000), "flytod 0.1.0 pid 42 up 3m04s");
        assert_eq!(cancelled("p1", PlanState::Cancelled), "cancelled p1");
        assert_eq!(
            cancelled("p1", PlanState::Succeeded),
            "p1 had already finished: succeeded"
        );
        let text = stats(&DaemonStats {
            db_bytes: 2048,
            sessions: 3,
            sessions_running: 1,
            sessions_live: 1,
            input_tokens: 12_345,
            cost_usd: 0.5,
            sandbox: "landlock ABI 7, mount namespace".into(),
            store: "sled at /state/db".into(),
            ..Default::default()
        });
        assert!(text.contains("\nsessions:           3\n"), "{text}");
        assert!(text.contains("\nsessions running:   1\n"), "{text}");
        assert!(text.contains("\ninput tokens:       12345\n"), "{text}");
        assert!(text.contains("\ncost:               $0.5000\n"), "{text}");
        assert!(text.contains("\ndraining:           no\n"), "{text}");
        assert!(text.contains("\ndatabase size:      2.0 KiB\n"), "{text}");
        assert!(
            text.contains("\nsandbox:            landlock ABI 7, mount namespace\n"),
            "{text}"
        );
        assert!(
            text.ends_with("store:              sled at /state/db\n"),
            "{text}"
        );
        assert!(!text.contains("contexts"), "{text}");
        assert!(!text.contains("node"), "{text}");

        // On the shared store: this node and its peers.
        let text = stats(&DaemonStats {
            store: "postgres at db:5432 (database flyto, user flyto) (node a-1-5)".into(),
            node: "a-1-5".into(),
            peers: vec![
                flyto_protocol::PeerView {
                    node: "a-1-5".into(),
                    host: "a".into(),
                    pid: 1,
                    heartbeat_age_ms: 2_000,
                },
                flyto_protocol::PeerView {
                    node: "b-7-9".into(),
                    host: "b".into(),
                    pid: 7,
                    heartbeat_age_ms: 61_000,
                },
            ],
            ..Default::default()
        });
        assert!(text.contains("\nnode:               a-1-5\n"), "{text}");
        assert!(
            text.contains("\nnodes (last heartbeat):\n  a-1-5 on a pid 1: 2.0s ago (this one)\n  b-7-9 on b pid 7: 1m01s ago\n"),
            "{text}"
        );

        let text = stats(&DaemonStats {
            compactions: 4,
            breakers_open: 1,
            contexts: vec![SessionContext {
                session: "s3".into(),
                context: ContextView {
                    tokens: 18_200,
                    context_window: 128_000,
                    compact_at: 97_000,
                    ..Default::default()
                },
            }],
            ..Default::default()
        });
        assert!(text.contains("\ncompactions:        4\n"), "{text}");
        assert!(text.contains("\nbreakers open:      1\n"), "{text}");
        assert!(
            text.ends_with(
                "contexts (fullest first):\n  s3: 18,200 / 97,000 tokens before compaction\n"
            ),
            "{text}"
        );
    }
}
