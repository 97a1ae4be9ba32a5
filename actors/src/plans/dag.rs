//! Pure step-DAG rules: which steps are skipped, which may start, and what
//! a finished plan's outcome is. No I/O, so every rule is unit-tested.

use super::model::PlanRecord;
use flyto_protocol::{PlanState, StepState};

/// Skips pending steps whose dependencies can no longer succeed and returns
/// the indexes of steps whose dependencies all succeeded, at most `slots`.
/// `changed` tells whether any step was skipped.
pub fn advance(plan: &mut PlanRecord, slots: usize, now_ms: u64) -> (bool, Vec<usize>) {
    let mut changed = false;
    loop {
        let mut skipped_any = false;
        for i in 0..plan.steps.len() {
            if plan.steps[i].state != StepState::Pending {
                continue;
            }
            let blocker = plan.steps[i].deps.iter().find_map(|d| {
                let dep = plan.steps.iter().find(|s| &s.id == d)?;
                matches!(
                    dep.state,
                    StepState::Failed | StepState::Cancelled | StepState::Skipped
                )
                .then(|| (dep.id.clone(), dep.state))
            });
            if let Some((dep, state)) = blocker {
                let step = &mut plan.steps[i];
                step.state = StepState::Skipped;
                step.finished_ms = Some(now_ms);
                step.error = Some(format!("skipped: dependency `{dep}` {}", state.as_str()));
                skipped_any = true;
            }
        }
        if !skipped_any {
            break;
        }
        changed = true;
    }
    let ready = plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state == StepState::Pending)
        .filter(|(_, s)| {
            s.deps.iter().all(|d| {
                plan.steps
                    .iter()
                    .any(|o| &o.id == d && o.state == StepState::Succeeded)
            })
        })
        .map(|(i, _)| i)
        .take(slots)
        .collect();
    (changed, ready)
}

/// The plan's final state and reason once every step is terminal.
pub fn outcome(plan: &PlanRecord, cancelling: bool) -> Option<(PlanState, Option<String>)> {
    if plan.steps.iter().any(|s| !s.state.is_terminal()) {
        return None;
    }
    if cancelling || plan.steps.iter().any(|s| s.state == StepState::Cancelled) {
        return Some((PlanState::Cancelled, Some("cancelled by user".into())));
    }
    if let Some(failed) = plan.steps.iter().find(|s| s.state == StepState::Failed) {
        let why = failed.error.as_deref().unwrap_or("failed");
        return Some((
            PlanState::Failed,
            Some(format!("step `{}` failed: {why}", failed.id)),
        ));
    }
    Some((PlanState::Succeeded, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plans::model::{StepAction, StepRecord};

    fn step(id: &str, deps: &[&str], state: StepState) -> StepRecord {
        StepRecord {
            id: id.into(),
            action: StepAction::Run {
                command: "true".into(),
            },
            deps: deps.iter().map(|d| d.to_string()).collect(),
            timeout_secs: 1,
            max_attempts: 1,
            workdir: "/".into(),
            state,
            attempts: 0,
            started_ms: None,
            finished_ms: None,
            exit_code: None,
            error: None,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            pgid: None,
            has_log: false,
            env: Vec::new(),
            idempotent: false,
        }
    }

    fn plan(steps: Vec<StepRecord>) -> PlanRecord {
        PlanRecord {
            chain: "p1".into(),
            depth: 0,
            id: 1,
            name: None,
            state: PlanState::Running,
            reason: None,
            created_ms: 0,
            started_ms: None,
            finished_ms: None,
            revision: 0,
            idempotency_key: None,
            steps,
            restarted_from: None,
            sandboxes: Vec::new(),
        }
    }

    #[test]
    fn failed_step_skips_its_dependants_transitively() {
        let mut p = plan(vec![
            step("a", &[], StepState::Failed),
            step("b", &["a"], StepState::Pending),
            step("c", &["b"], StepState::Pending),
            step("d", &[], StepState::Pending),
        ]);
        let (changed, ready) = advance(&mut p, 10, 5);
        assert!(changed);
        assert_eq!(ready, vec![3]);
        assert_eq!(p.steps[2].state, StepState::Skipped);
        assert_eq!(
            p.steps[1].error.as_deref(),
            Some("skipped: dependency `a` failed")
        );
    }

    #[test]
    fn ready_steps_respect_deps_and_slots() {
        let mut p = plan(vec![
            step("a", &[], StepState::Succeeded),
            step("b", &["a"], StepState::Pending),
            step("c", &["a"], StepState::Pending),
            step("d", &["b"], StepState::Pending),
        ]);
        assert_eq!(advance(&mut p, 1, 0).1, vec![1]);
        assert_eq!(advance(&mut p, 5, 0).1, vec![1, 2]);
    }

    #[test]
    fn outcome_names_the_failed_step() {
        let mut p = plan(vec![step("a", &[], StepState::Succeeded)]);
        assert_eq!(outcome(&p, false), Some((PlanState::Succeeded, None)));
        p.steps.push(step("b", &[], StepState::Failed));
        p.steps[1].error = Some("exit code 2".into());
        let (st, why) = outcome(&p, false).unwrap();
        assert_eq!(st, PlanState::Failed);
        assert_eq!(why.unwrap(), "step `b` failed: exit code 2");
        p.steps.push(step("c", &[], StepState::Running));
        assert_eq!(outcome(&p, false), None);
    }
}
