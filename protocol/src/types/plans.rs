//! Plans and steps: the spec a client submits (and its checks), states and views.

use super::*;

/// A plan as submitted: a DAG of steps. Also the format of plan files.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    pub name: Option<String>,
    #[serde(default)]
    pub steps: Vec<StepSpec>,
    /// Environment of every step (a step's own `env` overrides it), on top
    /// of flytod's filtered environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Sandbox profile of the plan's `run` steps (`workspace-write`,
    /// `read-only`, `off`); unset: `[plans] sandbox`. A plan an agent
    /// submits is never less confined than the agent.
    #[serde(default)]
    pub sandbox: Option<String>,
}

impl PlanSpec {
    /// The checks that need nothing but the plan itself: steps exist, ids
    /// are valid and unique, each step has exactly one of `run` or
    /// `prompt`, deps name steps of the plan and form no cycle, env names
    /// are usable. flytoctl runs them before it sends a plan file, the
    /// daemon again on every submit; each error names the step and the fix.
    pub fn check(&self) -> Result<(), String> {
        if self.steps.is_empty() {
            return Err(
                "the plan has no steps: add at least one step with `id` and `run` (a shell command) or `prompt` (an agent task)".into(),
            );
        }
        check_env_names(&self.env, "the plan")?;
        let mut seen = HashSet::new();
        for step in &self.steps {
            check_step_id(&step.id)?;
            if !seen.insert(step.id.as_str()) {
                return Err(format!(
                    "duplicate step id `{}`: every step needs its own id",
                    step.id
                ));
            }
        }
        for step in &self.steps {
            let id = &step.id;
            let text = match (&step.run, &step.prompt) {
                (Some(t), None) | (None, Some(t)) => t,
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "step `{id}` has both `run` and `prompt`: give it exactly one of them"
                    ));
                }
                (None, None) => {
                    return Err(format!(
                        "step `{id}` has neither `run` nor `prompt`: give it a shell command or an agent prompt"
                    ));
                }
            };
            if text.trim().is_empty() {
                return Err(format!("step `{id}` has an empty command or prompt"));
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
            if !step.env.is_empty() {
                check_env_names(&step.env, &format!("step `{id}`"))?;
            }
        }
        // Without deps (most plans) there is no cycle to look for.
        if self.steps.iter().any(|s| !s.deps.is_empty())
            && let Some(cycle) = find_cycle(&self.steps)
        {
            return Err(format!(
                "dependency cycle: {}: remove one of these dependencies",
                cycle.join(" -> ")
            ));
        }
        Ok(())
    }
}

fn check_step_id(id: &str) -> Result<(), String> {
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

fn check_env_names(env: &BTreeMap<String, String>, whose: &str) -> Result<(), String> {
    for (k, v) in env {
        let ok = !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!(
                "{whose}: env name `{k}` is not valid: use letters, digits and `_`, not starting with a digit"
            ));
        }
        if v.contains('\0') {
            return Err(format!(
                "{whose}: the value of env `{k}` contains a NUL byte, which no environment can hold"
            ));
        }
    }
    Ok(())
}

/// A cycle as a path of step ids (first id repeated at the end), if any.
/// Every dep must name a step (checked before).
fn find_cycle(steps: &[StepSpec]) -> Option<Vec<String>> {
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
        steps: &[StepSpec],
        index: &HashMap<&str, usize>,
        mark: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        mark[i] = 1;
        path.push(i);
        for dep in &steps[i].deps {
            let j = *index.get(dep.as_str())?;
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

/// One step: exactly one of `run` (a shell command) or `prompt` (an agent
/// turn) is set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    pub id: String,
    pub run: Option<String>,
    pub prompt: Option<String>,
    /// Named session for an agent step; a new one per plan when absent.
    pub session: Option<String>,
    #[serde(default)]
    pub deps: Vec<String>,
    /// Seconds, or a duration like `5m` in TOML and JSON.
    #[serde(default, deserialize_with = "timeout_secs")]
    pub timeout_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    pub workdir: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// This step's sandbox profile, over the plan's.
    #[serde(default)]
    pub sandbox: Option<String>,
    /// Running it twice does no harm: on the shared store, a step whose
    /// node was lost mid-run runs again elsewhere (agent steps always may).
    #[serde(default)]
    pub idempotent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl PlanState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            PlanState::Succeeded | PlanState::Failed | PlanState::Cancelled
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            PlanState::Pending => "pending",
            PlanState::Running => "running",
            PlanState::Succeeded => "succeeded",
            PlanState::Failed => "failed",
            PlanState::Cancelled => "cancelled",
        }
    }
    pub const ALL: [PlanState; 5] = [
        PlanState::Pending,
        PlanState::Running,
        PlanState::Succeeded,
        PlanState::Failed,
        PlanState::Cancelled,
    ];
}

impl std::str::FromStr for PlanState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PlanState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown plan state `{s}`: use one of pending, running, succeeded, failed, cancelled"
                )
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Skipped,
}

impl StepState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, StepState::Pending | StepState::Running)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Pending => "pending",
            StepState::Running => "running",
            StepState::Succeeded => "succeeded",
            StepState::Failed => "failed",
            StepState::Cancelled => "cancelled",
            StepState::Skipped => "skipped",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanView {
    pub id: String,
    pub name: Option<String>,
    pub state: PlanState,
    /// Why the plan failed or was cancelled, in words.
    pub reason: Option<String>,
    pub created_ms: u64,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    /// Increases with every persisted transition; watch events carry it.
    pub revision: u64,
    /// The chain the plan belongs to (its own id when a user submitted it)
    /// and how deep in it: plans submitted by an agent or a step are one
    /// level below what submitted them.
    pub chain: String,
    pub depth: u32,
    pub steps: Vec<StepView>,
    /// For a pending plan: what it waits for, in words.
    pub waiting: Option<String>,
    /// For a pending plan: its place in the queue, from 1.
    pub queue_position: Option<u32>,
    /// The plan this one was restarted from (`plan_restart`).
    pub restarted_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    pub id: String,
    /// `run` or `agent`.
    pub kind: String,
    /// The command or the prompt.
    pub text: String,
    pub deps: Vec<String>,
    pub state: StepState,
    /// How many times the step has been started.
    pub attempts: u32,
    pub max_attempts: u32,
    pub started_ms: Option<u64>,
    pub finished_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// The last bytes of stdout/stderr (lossy UTF-8).
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// The full (bounded) output log, while the plan exists.
    pub log_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    pub id: String,
    pub chain: String,
    pub name: Option<String>,
    pub state: PlanState,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
    pub steps_total: u32,
    /// Steps in a terminal state; the next three count some of them (the
    /// rest were cancelled).
    pub steps_done: u32,
    /// For a pending plan: its place in the queue, from 1.
    pub queue_position: Option<u32>,
    pub steps_succeeded: u32,
    pub steps_failed: u32,
    pub steps_skipped: u32,
}
