//! Checks a submitted plan and turns it into step records. Every error names
//! the step and says how to fix it.

use super::model::{StepAction, StepRecord};
use crate::tools::env::is_secret_name;
use flyto_protocol::{PlanSpec, StepState};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_steps: usize,
    pub max_text_bytes: usize,
    pub default_timeout_secs: u64,
    pub default_max_attempts: u32,
    pub default_workdir: String,
}

/// How long a workdir found to be a directory is taken to stay one.
const WORKDIR_FRESH: Duration = Duration::from_secs(1);
/// Workdirs remembered at most (a submitter using many directories only
/// pays the `statx` it paid before).
const WORKDIRS_KEPT: usize = 64;

/// Workdirs recently found to be directories: a stream of submits in the
/// same directory costs one `statx` a second instead of one each (about
/// 1 us of flytod CPU per acknowledged submit). The check at submit only
/// catches typos early; a directory removed later fails its step when the
/// step starts.
#[derive(Debug, Default)]
pub struct Workdirs {
    seen: HashMap<String, Instant>,
}

impl Workdirs {
    pub fn is_dir(&mut self, path: &str) -> bool {
        let now = Instant::now();
        let fresh = |t: &Instant| now.duration_since(*t) < WORKDIR_FRESH;
        if self.seen.get(path).is_some_and(fresh) {
            return true;
        }
        if !Path::new(path).is_dir() {
            self.seen.remove(path);
            return false;
        }
        if self.seen.len() >= WORKDIRS_KEPT {
            self.seen.retain(|_, t| fresh(t));
        }
        if self.seen.len() < WORKDIRS_KEPT {
            self.seen.insert(path.to_owned(), now);
        }
        true
    }
}

pub fn validate(spec: &PlanSpec, limits: &Limits) -> Result<Vec<StepRecord>, String> {
    validate_in(spec, limits, &mut Workdirs::default())
}

/// [`validate`], remembering the workdirs it checked in `workdirs`.
pub fn validate_in(
    spec: &PlanSpec,
    limits: &Limits,
    workdirs: &mut Workdirs,
) -> Result<Vec<StepRecord>, String> {
    spec.check()?;
    if spec.steps.len() > limits.max_steps {
        return Err(format!(
            "the plan has {} steps, more than the limit of {}: split it into several plans or raise `plans.max_steps`",
            spec.steps.len(),
            limits.max_steps
        ));
    }
    if let Some(name) = &spec.name {
        if name.len() > 256 {
            return Err("the plan name is longer than 256 bytes: shorten it".into());
        }
        // The name index ends names with a NUL; control characters have no
        // place in a name a terminal shows anyway.
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(
                "the plan name is empty or holds control characters: use printable text".into(),
            );
        }
    }
    let mut out = Vec::with_capacity(spec.steps.len());
    for step in &spec.steps {
        let id = &step.id;
        let action = match (&step.run, &step.prompt) {
            (Some(command), _) => StepAction::Run {
                command: command.clone(),
            },
            (None, prompt) => StepAction::Agent {
                prompt: prompt.clone().unwrap_or_default(),
                session: step.session.clone(),
            },
        };
        let text = match &action {
            StepAction::Run { command } => command,
            StepAction::Agent { prompt, .. } => prompt,
        };
        if text.len() > limits.max_text_bytes {
            return Err(format!(
                "step `{id}`: its command or prompt is {} bytes, more than the limit of {}: put long input in a file and refer to it",
                text.len(),
                limits.max_text_bytes
            ));
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
        if !workdirs.is_dir(&workdir) {
            return Err(format!(
                "step `{id}`: workdir {workdir} does not exist or is not a directory: create it or fix the path"
            ));
        }
        let mut env = spec.env.clone();
        env.extend(step.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(name) = env.keys().find(|k| is_secret_name(k)) {
            return Err(format!(
                "step `{id}`: env `{name}` looks like a secret (by its name), and plans are stored and shown: let the step read it from a file instead"
            ));
        }
        // flytod sets these for every step (the chain's scope and
        // identity); a plan cannot choose them.
        if let Some(name) = env.keys().find(|k| k.starts_with("FLYTO_")) {
            return Err(format!(
                "step `{id}`: env `{name}` is set by flytod for every step (FLYTO_* names are reserved): remove it from the plan"
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
            env: env.into_iter().collect(),
            idempotent: step.idempotent,
        });
    }
    Ok(out)
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
        PlanSpec {
            steps,
            ..Default::default()
        }
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
        let mut secret = plan(vec![step("a", &[])]);
        secret.env.insert("GITHUB_TOKEN".into(), "x".into());
        let err = validate(&secret, &limits()).unwrap_err();
        assert!(
            err.contains("env `GITHUB_TOKEN` looks like a secret"),
            "{err}"
        );
        let mut bad = plan(vec![step("a", &[])]);
        bad.steps[0].env.insert("1X".into(), "x".into());
        let err = validate(&bad, &limits()).unwrap_err();
        assert!(err.contains("env name `1X` is not valid"), "{err}");
        let mut reserved = plan(vec![step("a", &[])]);
        reserved.steps[0]
            .env
            .insert("FLYTO_PLAN_SOCK".into(), "/tmp/x.sock".into());
        let err = validate(&reserved, &limits()).unwrap_err();
        assert!(err.contains("FLYTO_* names are reserved"), "{err}");
    }

    #[test]
    fn a_step_env_overrides_the_plan_env() {
        let mut p = plan(vec![step("a", &[])]);
        p.env.insert("A".into(), "plan".into());
        p.env.insert("B".into(), "plan".into());
        p.steps[0].env.insert("B".into(), "step".into());
        let steps = validate(&p, &limits()).unwrap();
        assert_eq!(
            steps[0].env,
            vec![("A".into(), "plan".into()), ("B".into(), "step".into())]
        );
    }

    #[test]
    fn a_workdir_removed_after_its_check_is_refused_once_the_check_expires() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w");
        std::fs::create_dir(&path).unwrap();
        let path = path.to_str().unwrap().to_owned();
        let mut workdirs = Workdirs::default();
        assert!(workdirs.is_dir(&path));
        std::fs::remove_dir(&path).unwrap();
        // Remembered: no statx for the next submits.
        assert!(workdirs.is_dir(&path));
        workdirs
            .seen
            .insert(path.clone(), Instant::now() - WORKDIR_FRESH);
        assert!(!workdirs.is_dir(&path));
        assert!(
            !workdirs.is_dir(&path),
            "a missing directory is not remembered"
        );
        assert!(!workdirs.is_dir("/definitely/not/here"));
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
