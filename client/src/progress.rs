//! Live views of a watched plan: an indicatif bar on a terminal, one
//! `<step> <state>` line per change otherwise, nothing for `--wait`.

use crate::output;
use crate::style::{Style, step_tone};
use crate::watch::WatchSink;
use anyhow::Result;
use flyto_protocol::{PlanView, StepState, StepView};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// Steps whose state differs from `prev` (all of them on the first snapshot).
pub fn changed_steps<'a>(prev: Option<&PlanView>, plan: &'a PlanView) -> Vec<&'a StepView> {
    plan.steps
        .iter()
        .filter(|step| {
            let before = prev.and_then(|p| p.steps.iter().find(|s| s.id == step.id));
            before.is_none_or(|b| b.state != step.state)
        })
        .collect()
}

/// Bar message: the running steps, else the plan state.
pub fn running_message(plan: &PlanView) -> String {
    let running: Vec<&str> = plan
        .steps
        .iter()
        .filter(|s| s.state == StepState::Running)
        .map(|s| s.id.as_str())
        .collect();
    if running.is_empty() {
        plan.state.as_str().to_string()
    } else {
        running.join(", ")
    }
}

/// Progress bar on stdout: steps finished / total; finished steps are
/// printed above it as they end.
pub struct BarSink {
    bar: ProgressBar,
    style: Style,
    last: Option<PlanView>,
}

impl BarSink {
    pub fn new(style: Style) -> BarSink {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stdout());
        if let Ok(look) =
            ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} steps  {wide_msg}")
        {
            bar.set_style(look.progress_chars("=> "));
        }
        BarSink {
            bar,
            style,
            last: None,
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl WatchSink for BarSink {
    fn update(&mut self, plan: &PlanView) -> Result<()> {
        if self.last.is_none() {
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
        let finished = plan.steps.iter().filter(|s| s.state.is_terminal()).count();
        self.bar.set_length(plan.steps.len() as u64);
        self.bar.set_position(finished as u64);
        self.bar.set_message(running_message(plan));
        for step in changed_steps(self.last.as_ref(), plan) {
            if step.state.is_terminal() {
                let state = self.style.paint(step.state.as_str(), step_tone(step.state));
                self.bar.println(format!("{} {state}", step.id));
            }
        }
        self.last = Some(plan.clone());
        Ok(())
    }

    fn notice(&mut self, message: &str) {
        self.bar.suspend(|| output::note(message));
    }
}

/// One plain `<step> <state>` line per change, for pipes and logs.
#[derive(Default)]
pub struct LineSink {
    last: Option<PlanView>,
}

impl WatchSink for LineSink {
    fn update(&mut self, plan: &PlanView) -> Result<()> {
        let lines: String = changed_steps(self.last.as_ref(), plan)
            .iter()
            .map(|s| format!("{} {}\n", s.id, s.state.as_str()))
            .collect();
        output::stdout(&lines)?;
        self.last = Some(plan.clone());
        Ok(())
    }
}

/// Nothing while the plan runs (`submit_plan --wait`).
pub struct QuietSink;

impl WatchSink for QuietSink {
    fn update(&mut self, _plan: &PlanView) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flyto_protocol::PlanState;

    fn plan(states: &[(&str, StepState)]) -> PlanView {
        PlanView {
            waiting: None,
            queue_position: None,
            restarted_from: None,
            chain: "p1".into(),
            depth: 0,
            id: "p1".into(),
            name: None,
            state: PlanState::Running,
            reason: None,
            created_ms: 0,
            started_ms: Some(0),
            finished_ms: None,
            revision: 1,
            steps: states
                .iter()
                .map(|(id, state)| StepView {
                    id: (*id).into(),
                    kind: "run".into(),
                    text: "true".into(),
                    deps: vec![],
                    state: *state,
                    attempts: 1,
                    max_attempts: 1,
                    started_ms: None,
                    finished_ms: None,
                    exit_code: None,
                    error: None,
                    stdout_tail: String::new(),
                    stderr_tail: String::new(),
                    log_path: None,
                })
                .collect(),
        }
    }

    #[test]
    fn reports_only_changed_steps() {
        let first = plan(&[("a", StepState::Running), ("b", StepState::Pending)]);
        let ids = |steps: Vec<&StepView>| steps.iter().map(|s| s.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(changed_steps(None, &first)), ["a", "b"]);
        let second = plan(&[("a", StepState::Succeeded), ("b", StepState::Pending)]);
        assert_eq!(ids(changed_steps(Some(&first), &second)), ["a"]);
        assert!(changed_steps(Some(&second), &second).is_empty());
    }

    #[test]
    fn message_names_running_steps() {
        let p = plan(&[("a", StepState::Running), ("b", StepState::Running)]);
        assert_eq!(running_message(&p), "a, b");
        let p = plan(&[("a", StepState::Pending)]);
        assert_eq!(running_message(&p), "running");
    }
}
