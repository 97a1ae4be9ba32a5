//! Checks a submitted plan and turns it into step records. Every error names
//! the step and says how to fix it.

use super::model::{StepAction, StepRecord};
use flyto_protocol::{PlanSpec, StepState};
use std::collections::{HashMap, HashSet};
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_steps: usize,
    pub max_text_bytes: usize,
    pub default_timeout_secs: u64,
    pub default_max_attempts: u32,
    pub default_workdir: String,
}

pub fn validate(spec: &PlanSpec, limits: &Limits) -> Result<Vec<StepRecord>, String> {
    if spec.steps.is_empty() {
        return Err(
            "the plan has no steps: add at least one step with `id` and `run` (a shell command) or `prompt` (an agent task)".into(),
        );
    }
    if spec.steps.len() > limits.max_steps {
        return Err(format!(
            "the plan has {} steps, more than the limit of {}: split it into several plans or raise `plans.max_steps`",
            spec.steps.len(),
            limits.max_steps
        ));
    }
    if let Some(name) = &spec.name
        && name.len() > 256
    {
        return Err("the plan name is longer than 256 bytes: shorten it".into());
    }
    let mut seen = HashSet::new();
    for step in &spec.steps {
        check_id(&step.id)?;
        if !seen.insert(step.id.as_str()) {
            return Err(format!(
                "duplicate step id `{}`: every step needs its own id",
                step.id
            ));
        }
    }
    let mut out = Vec::with_capacity(spec.steps.len());
    for step in &spec.steps {
        let id = &step.id;
        let action = match (&step.run, &step.prompt) {
            (Some(command), None) => StepAction::Run {
                command: command.clone(),
            },
            (None, Some(prompt)) => StepAction::Agent {
                prompt: prompt.clone(),
                session: step.session.clone(),
            },
            (Some(_), Some(_)) => {
                return Err(format!(
                    "step `{id}` has both `run` and `prompt`: give it exactly one"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "step `{id}` has neither `run` nor `prompt`: give it a shell command or an agent prompt"
                ));
            }
        };
        let text = match &action {
            StepAction::Run { command } => command,
            StepAction::Agent { prompt, .. } => prompt,
        };
        if text.trim().is_empty() {
            return Err(format!("step `{id}` has an empty command or prompt"));
        }
        if text.len() > limits.max_text_bytes {
            return Err(format!(
                "step `{id}`: its command or prompt is {} bytes, more than the limit of {}: put long input in a file and refer to it",
                text.len(),
                limits.max_text_bytes
            ));
        }
        for dep in &step.deps {
            if dep == id {
                return Err(format!(
                    "step `{id}` depends on itself: remove it from its `deps`"
                ));
            }
            if !seen.contains(dep.as_str()) {
                return Err(format!(
                    "step `{id}` depends on `{dep}`, which is not a step of this plan: fix the name or add the step"
                ));
            }
        }
        if step.timeout_secs == Some(0) {
            return Err(format!("step `{id}`: timeout_secs must be at least 1"));
        }
        if step.max_attempts == Some(0) {
            return Err(format!("step `{id}`: max_attempts must be at least 1"));
        }
        let workdir = step
            .workdir
            .clone()
            .unwrap_or_else(|| limits.default_workdir.clone());
        let path = Path::new(&workdir);
        if !path.is_absolute() {
            return Err(format!(
                "step `{id}`: workdir `{workdir}` is relative: give an absolute path"
            ));
        }
        if !path.is_dir() {
            return Err(format!(
                "step `{id}`: workdir {workdir} does not exist or is not a directory: create it or fix the path"
            ));
        }
        out.push(StepRecord {
            id: id.clone(),
            action,
            deps: step.deps.clone(),
            timeout_secs: step.timeout_secs.unwrap_or(limits.default_timeout_secs),
            max_attempts: step.max_attempts.unwrap_or(limits.default_max_attempts),
            workdir,
            state: StepState::Pending,
            attempts: 0,
            started_ms: None,
            finished_ms: None,
            exit_code: None,
            error: None,
            stdout_tail: String::new(),
            stderr_tail: String::new(),
            pgid: None,
            has_log: false,
        });
    }
    if let Some(cycle) = find_cycle(&out) {
        return Err(format!(
            "dependency cycle: {}: remove one of these dependencies",
            cycle.join(" -> ")
        ));
    }
    Ok(out)
}

fn check_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !id.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "step id `{id}` is not valid: use 1 to 64 letters, digits, `-`, `_` or `.`"
        ))
    }
}

/// A cycle as a path of step ids (first id repeated at the end), if any.
fn find_cycle(steps: &[StepRecord]) -> Option<Vec<String>> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut mark = vec![0u8; steps.len()];
    let mut path: Vec<usize> = Vec::new();
    fn visit(
        i: usize,
        steps: &[StepRecord],
        index: &HashMap<&str, usize>,
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        mark[i] = 1;
        path.push(i);
        for dep in &steps[i].deps {
            let j = index[dep.as_str()];
            if mark[j] == 1 {
                let start = path.iter().position(|&p| p == j).unwrap_or(0);
                let mut cycle: Vec<String> =
                    path[start..].iter().map(|&p| steps[p].id.clone()).collect();
                cycle.push(steps[j].id.clone());
                return Some(cycle);
            }
            if mark[j] == 0
                && let Some(c) = visit(j, steps, index, mark, path)
            {
                return Some(c);
            }
        }
        path.pop();
        mark[i] = 2;
        None
    }
    for i in 0..steps.len() {
        if mark[i] == 0
            && let Some(c) = visit(i, steps, &index, &mut mark, &mut path)
        {
            return Some(c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use flyto_protocol::StepSpec;

    fn limits() -> Limits {
        Limits {
            max_steps: 10,
            max_text_bytes: 100,
            default_timeout_secs: 60,
            default_max_attempts: 3,
            default_workdir: "/".into(),
        }
    }

    fn step(id: &str, deps: &[&str]) -> StepSpec {
        StepSpec {
            id: id.into(),
            run: Some("true".into()),
            deps: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    fn plan(steps: Vec<StepSpec>) -> PlanSpec {
        PlanSpec { name: None, steps }
    }

    #[test]
    fn rejects_bad_plans_with_a_reason() {
        let cases = [
            (plan(vec![]), "no steps"),
            (
                plan(vec![step("a", &[]), step("a", &[])]),
                "duplicate step id `a`",
            ),
            (plan(vec![step("a", &["x"])]), "depends on `x`"),
            (
                plan(vec![
                    step("a", &["c"]),
                    step("b", &["a"]),
                    step("c", &["b"]),
                ]),
                "dependency cycle: a -> c -> b -> a",
            ),
            (plan(vec![step("a", &["a"])]), "depends on itself"),
            (plan(vec![step("a b", &[])]), "not valid"),
        ];
        for (p, want) in cases {
            let err = validate(&p, &limits()).unwrap_err();
            assert!(err.contains(want), "{err} should contain {want}");
        }
        let mut missing = step("a", &[]);
        missing.workdir = Some("/definitely/not/here".into());
        let err = validate(&plan(vec![missing]), &limits()).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }

    #[test]
    fn accepts_a_dag() {
        let steps = validate(
            &plan(vec![
                step("a", &[]),
                step("b", &["a"]),
                step("c", &["a", "b"]),
            ]),
            &limits(),
        )
        .unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[2].max_attempts, 3);
    }
}
