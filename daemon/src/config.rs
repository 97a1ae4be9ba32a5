//! The daemon's config file: TOML, every key optional, unknown keys refused.

use anyhow::{Context, bail};
use flyto_actors::llm::{ModelProfile, Models, Roles};
use flyto_actors::memory::prompt::InjectConfig;
use flyto_actors::plans::PlanConfig;
use flyto_actors::session::SessionConfig;
use flyto_actors::supervisor::RestartPolicy;
use flyto_actors::tools::policy::{PermissionsConfig, Policy};
use flyto_actors::tools::sandbox::{Profile, SandboxConfig};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub daemon: DaemonSection,
    pub plans: PlansSection,
    pub sessions: SessionsSection,
    /// `[models.<name>]` profiles.
    pub models: BTreeMap<String, ModelProfile>,
    pub roles: Roles,
    /// What the agent's `bash` tool may run.
    pub permissions: PermissionsConfig,
    /// How the processes agents start are confined.
    pub sandbox: SandboxConfig,
    pub skills: SkillsSection,
    pub memory: MemorySection,
    pub dream: DreamSection,
    pub jobs: JobsSection,
    pub channels: ChannelsSection,
    pub store: StoreSection,
    /// `[[hooks]]`: people's commands around runs and tool calls.
    pub hooks: Vec<HookEntry>,
    /// `[mcp]`: MCP servers whose tools sessions get.
    pub mcp: flyto_actors::mcp::McpSection,
}

/// One `[[hooks]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    /// Shown in events and `hook_list`; default `<event>#<n>`.
    pub name: Option<String>,
    pub event: String,
    /// A tool name or glob (`bash`, `write*`); tool events only.
    pub matcher: Option<String>,
    pub command: String,
    #[serde(default = "hook_timeout", with = "flyto_protocol::duration::human")]
    pub timeout: Duration,
    /// Block when the hook fails or times out (default: go on).
    #[serde(default)]
    pub required: bool,
}

fn hook_timeout() -> Duration {
    Duration::from_secs(30)
}

impl Config {
    /// The hooks as the session room runs them (parse() checked them).
    pub fn hooks(&self) -> anyhow::Result<Vec<flyto_actors::hooks::HookSpec>> {
        use flyto_actors::hooks::{HookEvent, HookSpec, tool_matcher};
        let mut out: Vec<HookSpec> = Vec::new();
        for (i, h) in self.hooks.iter().enumerate() {
            let at = format!("[[hooks]] #{}", i + 1);
            let event = HookEvent::parse(&h.event).ok_or_else(|| {
                let known: Vec<&str> = HookEvent::ALL.iter().map(|e| e.as_str()).collect();
                anyhow::anyhow!(
                    "{at}: event `{}` is not known: use one of {}",
                    h.event,
                    known.join(", ")
                )
            })?;
            if h.command.trim().is_empty() {
                bail!("{at}: `command` is empty: give the command to run");
            }
            if h.timeout.is_zero() {
                bail!("{at}: `timeout` must be more than 0 (for example \"10s\")");
            }
            let matcher = match &h.matcher {
                Some(m) if !matches!(event, HookEvent::PreToolUse | HookEvent::PostToolUse) => {
                    bail!(
                        "{at}: `matcher = \"{m}\"` applies only to pre_tool_use and post_tool_use hooks: remove it"
                    )
                }
                Some(m) => Some(tool_matcher(m).map_err(|e| anyhow::anyhow!("{at}: {e}"))?),
                None => None,
            };
            let name = h
                .name
                .clone()
                .unwrap_or_else(|| format!("{}#{}", h.event, i + 1));
            if out.iter().any(|o| o.name == name) {
                bail!("{at}: the name `{name}` is used twice: give each hook its own name");
            }
            out.push(HookSpec {
                name,
                event,
                matcher,
                matcher_text: h.matcher.clone(),
                command: h.command.clone(),
                timeout: h.timeout,
                required: h.required,
            });
        }
        Ok(out)
    }
}

/// `[store]`: where plans are kept. `sled` (the default) is this node's
/// own database in its state directory; `postgres` is a PostgreSQL that
/// several daemons share.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    pub backend: Backend,
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE; FLYTO_DATABASE_URL
    /// overrides it.
    pub url: Option<DatabaseUrl>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Sled,
    Postgres,
}

/// A database URL: it may hold a password, so it never prints.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(..)")
    }
}

/// Names the variable that overrides `[store] url`.
pub const DATABASE_URL_VAR: &str = "FLYTO_DATABASE_URL";

/// `[channels]`: how chat bindings poll, answer and keep their outbox.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelsSection {
    /// Reply chunks not sent within this long are dropped, never sent late.
    #[serde(with = "flyto_protocol::duration::human")]
    pub outbox_ttl: Duration,
    /// After this long without a message, a chat's next turn starts the
    /// model's window afresh (the history keeps everything).
    #[serde(with = "flyto_protocol::duration::hours")]
    pub session_gap_hours: f64,
    /// How long one long poll waits (Telegram, WeChat, the inbox rescan).
    #[serde(with = "flyto_protocol::duration::human")]
    pub poll_timeout: Duration,
    /// A poll not completed within its timeout plus this is abandoned and
    /// the connection rebuilt.
    #[serde(with = "flyto_protocol::duration::human")]
    pub stall_grace: Duration,
    /// Where chat sessions work; default the home directory.
    pub workdir: Option<String>,
    /// Binding name → user ids admitted without pairing.
    pub allow: std::collections::HashMap<String, Vec<String>>,
    pub telegram: TelegramSection,
    pub wechat: WechatSection,
    pub wecom: WecomSection,
}

impl Default for ChannelsSection {
    fn default() -> Self {
        ChannelsSection {
            outbox_ttl: Duration::from_secs(600),
            session_gap_hours: 6.0,
            poll_timeout: Duration::from_secs(30),
            stall_grace: Duration::from_secs(15),
            workdir: None,
            allow: Default::default(),
            telegram: TelegramSection::default(),
            wechat: WechatSection::default(),
            wecom: WecomSection::default(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramSection {
    /// `MarkdownV2` or `HTML`; unset sends plain text.
    pub parse_mode: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WechatSection {
    pub chunk_chars: usize,
    pub max_chunks: usize,
    /// A proactive send needs a context token younger than this.
    #[serde(with = "flyto_protocol::duration::human")]
    pub context_ttl: Duration,
    /// How long a binding whose session expired (errcode -14) pauses.
    #[serde(with = "flyto_protocol::duration::human")]
    pub pause_on_expiry: Duration,
}

impl Default for WechatSection {
    fn default() -> Self {
        WechatSection {
            chunk_chars: 1000,
            max_chunks: 8,
            context_ttl: Duration::from_secs(20 * 3600),
            pause_on_expiry: Duration::from_secs(3600),
        }
    }
}

/// WeCom's API host (the credentials come from WECOM_CORP_ID,
/// WECOM_AGENT_ID and WECOM_SECRET in flytoctl's environment at
/// `channel_bind wecom`, and are kept in the state directory).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WecomSection {
    pub api_base: Option<String>,
}

/// `[jobs]`: how jobs retry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobsSection {
    /// Waits before each retry of a run that failed transiently (rate
    /// limit, overload, provider error, connection); one retry per entry.
    /// Each a duration (`"30s"`) or a number of seconds.
    #[serde(deserialize_with = "duration_words")]
    pub retry_backoff: Vec<String>,
}

/// A list of durations as written, numbers kept as their digits (checked
/// by [`Config::retry_backoff`]).
fn duration_words<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Vec::<toml::Value>::deserialize(d)?
        .into_iter()
        .map(|v| match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        })
        .collect())
}

impl Default for JobsSection {
    fn default() -> Self {
        JobsSection {
            retry_backoff: vec!["30s".into(), "1m".into(), "5m".into()],
        }
    }
}

/// `[dream]`: when and how each project's memory is consolidated.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DreamSection {
    pub enabled: bool,
    #[serde(with = "flyto_protocol::duration::human")]
    pub check_every: Duration,
    #[serde(with = "flyto_protocol::duration::whole_hours")]
    pub min_hours: u64,
    pub min_sessions: usize,
    /// A role (`main`, `fast`) or a `[models.<name>]` profile.
    pub model: String,
    pub max_calls: u32,
    /// USD per run; 0 means no cap.
    pub max_cost_usd: f64,
    #[serde(with = "flyto_protocol::duration::human")]
    pub time_limit: Duration,
    /// Entries one run may remove: a count (`3`) or a share (`"10%"`).
    pub max_removed: MaxRemoved,
    /// Memory versions kept per project.
    pub keep: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MaxRemoved {
    Count(usize),
    Share(String),
}

impl Default for DreamSection {
    fn default() -> Self {
        let d = flyto_actors::dream::DreamConfig::default();
        DreamSection {
            enabled: d.enabled,
            check_every: d.check_every,
            min_hours: d.min_hours,
            min_sessions: d.min_sessions,
            model: d.model,
            max_calls: d.max_calls,
            max_cost_usd: d.max_cost_usd,
            time_limit: d.time_limit,
            max_removed: MaxRemoved::Share("10%".into()),
            keep: d.keep,
        }
    }
}

/// `[memory]`: how much memory goes into each model call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySection {
    /// Most entries injected per call.
    pub inject: usize,
    /// Most tokens the injected entries take together.
    pub token_budget: u64,
    /// Past this many days an injected entry says to verify it.
    #[serde(with = "flyto_protocol::duration::whole_days")]
    pub stale_days: u64,
    /// A background extraction after this many turns of a session in
    /// which the agent saved nothing itself; 0 turns it off.
    pub extract_every: u32,
    /// `[memory.types.NAME]`: entry types besides the four built in.
    pub types: BTreeMap<String, MemoryType>,
}

/// A memory type the user declares: what the model is told about it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryType {
    /// When an entry of this type is worth saving.
    pub when_to_save: String,
    /// How the model should use such entries.
    pub how_to_use: String,
}

impl Default for MemorySection {
    fn default() -> Self {
        let d = InjectConfig::default();
        MemorySection {
            inject: d.inject,
            token_budget: d.token_budget,
            stale_days: d.stale_days,
            extract_every: 5,
            types: BTreeMap::new(),
        }
    }
}

/// `[skills]`: where skills come from besides the built-ins and
/// `<config dir>/skills`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsSection {
    /// Read `<workdir>/.flyto/skills` and `<workdir>/.agents/skills`.
    pub project: bool,
    /// The periodic rescan behind the folder watcher.
    #[serde(with = "flyto_protocol::duration::human")]
    pub rescan_every: Duration,
}

impl Default for SkillsSection {
    fn default() -> Self {
        SkillsSection {
            project: true,
            rescan_every: flyto_actors::skills::watch::RESCAN_EVERY,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsSection {
    pub max_iterations: u32,
    /// USD per run; 0 means no limit.
    pub max_run_cost_usd: f64,
    pub max_continuations: u32,
    /// A session actor with nothing to do stops after this long.
    #[serde(with = "flyto_protocol::duration::human")]
    pub idle_stop: Duration,
    /// Profile or role for sessions that name none.
    pub default_model: String,
    /// How long an `ask` command waits for an attached person's y/N.
    #[serde(with = "flyto_protocol::duration::human")]
    pub approval_timeout: Duration,
    /// Sub-agents below a session people started (0: no `agent` tool).
    pub max_agent_depth: u32,
    /// Model calls of one sub-agent's run.
    pub agent_max_iterations: u32,
    /// Share (0-1) of the parent's remaining run budget a sub-agent gets.
    pub agent_budget_share: f64,
}

impl Default for SessionsSection {
    fn default() -> Self {
        let d = SessionConfig::default();
        SessionsSection {
            max_iterations: d.max_iterations,
            max_run_cost_usd: d.max_run_cost_usd,
            max_continuations: d.max_continuations,
            idle_stop: d.idle_stop,
            default_model: d.default_model,
            approval_timeout: d.approval_timeout,
            max_agent_depth: d.max_agent_depth,
            agent_max_iterations: d.agent_max_iterations,
            agent_budget_share: d.agent_budget_share,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSection {
    /// How long running steps may go on after SIGTERM before they are killed.
    #[serde(with = "flyto_protocol::duration::human")]
    pub shutdown_grace: Duration,
    /// Used when RUST_LOG is unset: error, warn, info, debug, trace.
    pub log_level: String,
    /// Open client connections; more are answered `Unavailable`.
    pub max_connections: usize,
    /// Requests waiting for the scheduler; more are answered `Unavailable`.
    pub max_inflight: usize,
    /// sled's page cache, the bulk of the daemon's memory.
    pub cache_mb: u64,
    pub max_restarts: usize,
    #[serde(with = "flyto_protocol::duration::human")]
    pub restart_window: Duration,
}

impl Default for DaemonSection {
    fn default() -> Self {
        DaemonSection {
            shutdown_grace: Duration::from_secs(30),
            log_level: "info".into(),
            max_connections: 512,
            max_inflight: 4096,
            cache_mb: 32,
            max_restarts: 5,
            restart_window: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlansSection {
    pub max_parallel_plans: usize,
    pub max_parallel_steps: usize,
    #[serde(with = "flyto_protocol::duration::human")]
    pub plan_ttl: Duration,
    #[serde(with = "flyto_protocol::duration::human")]
    pub step_timeout: Duration,
    pub max_attempts: u32,
    pub max_steps: usize,
    /// Between SIGTERM and SIGKILL when a step's process group is stopped.
    #[serde(with = "flyto_protocol::duration::human")]
    pub kill_grace: Duration,
    pub output_tail_bytes: usize,
    pub log_max_bytes: u64,
    /// Where steps without `workdir` run; the daemon's $HOME by default.
    pub default_workdir: Option<PathBuf>,
    /// How deep plans submitted by agents and steps (through their
    /// `FLYTO_PLAN_SOCK`) may nest.
    pub max_depth: u32,
    /// Sandbox profile of `run` steps of plans users submit (`off`,
    /// `workspace-write`, `read-only`) when the plan names none.
    pub sandbox: Profile,
}

impl Default for PlansSection {
    fn default() -> Self {
        let d = PlanConfig::default();
        PlansSection {
            max_parallel_plans: d.max_parallel_plans,
            max_parallel_steps: d.max_parallel_steps,
            plan_ttl: d.plan_ttl,
            step_timeout: d.default_step_timeout,
            max_attempts: d.default_max_attempts,
            max_steps: d.max_steps,
            kill_grace: d.kill_grace,
            output_tail_bytes: d.output_tail_bytes,
            log_max_bytes: d.log_max_bytes,
            default_workdir: None,
            max_depth: d.max_depth,
            sandbox: d.sandbox,
        }
    }
}

/// Where the config came from, for messages.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub path: PathBuf,
    pub exists: bool,
}

/// `explicit` is `--config`; a file named explicitly must exist, the
/// default one may be missing (defaults apply).
pub fn load(explicit: Option<&Path>) -> anyhow::Result<Loaded> {
    let (path, must_exist) = crate::paths::config_file(explicit);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
            return Ok(Loaded {
                config: Config::default(),
                path,
                exists: false,
            });
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read config file {}", path.display()));
        }
    };
    let config = parse(&text, &path)?;
    Ok(Loaded {
        config,
        path,
        exists: true,
    })
}

/// Where a TOML error is and what it is, without the quoted line or
/// value toml's own message carries: the line may hold a secret (a
/// store URL's password, a token), and this message reaches the log.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let mut message = e.message().trim().to_string();
    for kind in ["invalid type:", "invalid value:"] {
        if let Some(rest) = message.strip_prefix(kind)
            && let Some((_, expected)) = rest.split_once(", expected")
        {
            message = format!("{kind} (the value is not shown), expected{expected}");
        }
    }
    let Some(span) = e.span() else {
        return message;
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    match error_key(text, line) {
        Some(key) => format!("line {line}, column {column}, key `{key}`: {message}"),
        None => format!("line {line}, column {column}: {message}"),
    }
}

/// The key a line assigns, under its table (`plans.step_timeout`): the
/// names only, never the value after `=`.
fn error_key(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (key, _) = lines.get(line.checked_sub(1)?)?.split_once('=')?;
    let key = key.trim();
    let bare = |k: &str| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"' | ' '))
    };
    if !bare(key) {
        return None;
    }
    let table = lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim())
        .filter(|t| bare(t));
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_string(),
    })
}

pub fn parse(text: &str, path: &Path) -> anyhow::Result<Config> {
    let mut config: Config = toml::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "invalid config file {}: {}",
            path.display(),
            toml_error(text, &e)
        )
    })?;
    // `~` as in plan files (a shell would expand it; TOML does not).
    if let Some(dir) = &config.plans.default_workdir
        && let Some(home) = std::env::var_os("HOME")
        && let Ok(rest) = dir.strip_prefix("~")
    {
        config.plans.default_workdir = Some(PathBuf::from(home).join(rest));
    }
    // 0 would mean "never" (no plan or step starts, no model call is
    // made), which nobody wants: refuse it instead of quietly using 1.
    let (p, s) = (&config.plans, &config.sessions);
    let zero = [
        ("plans.max_parallel_plans", p.max_parallel_plans == 0),
        ("plans.max_parallel_steps", p.max_parallel_steps == 0),
        ("plans.max_attempts", p.max_attempts == 0),
        ("sessions.max_iterations", s.max_iterations == 0),
        ("sessions.agent_max_iterations", s.agent_max_iterations == 0),
    ];
    if let Some((key, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
        bail!(
            "invalid config file {}: {key} must be at least 1 (it is 0); set it to 1 or more, or remove it for the default",
            path.display()
        );
    }
    let share = config.sessions.agent_budget_share;
    if !(share > 0.0 && share <= 1.0) {
        bail!(
            "invalid config file {}: sessions.agent_budget_share = {share} must be more than 0 and at most 1 (0.5: a sub-agent may spend half of what its parent's run has left)",
            path.display()
        );
    }
    check_log_level(&config.daemon.log_level)
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    config
        .hooks()
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    flyto_actors::mcp::check(&config.mcp)
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    if config.store.backend == Backend::Sled && config.store.url.is_some() {
        bail!(
            "invalid config file {}: [store] url is set but backend is sled (the default): set backend = \"postgres\" to use the shared store, or remove url",
            path.display()
        );
    }
    for (name, t) in &config.memory.types {
        let valid = !name.is_empty()
            && name.len() <= 32
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !valid || ["user", "feedback", "project", "reference"].contains(&name.as_str()) {
            bail!(
                "invalid config file {}: [memory.types.{name}]: a declared memory type needs a new name of lowercase letters, digits and `-` (user, feedback, project and reference are built in)",
                path.display()
            );
        }
        if t.when_to_save.trim().is_empty() || t.how_to_use.trim().is_empty() {
            bail!(
                "invalid config file {}: [memory.types.{name}] needs both `when_to_save` and `how_to_use`: they are what the model is told about the type",
                path.display()
            );
        }
    }
    config
        .dream_config()
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    config
        .retry_backoff()
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    config
        .channels_config()
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    let dm = &config.dream.model;
    if dm != "main" && dm != "fast" && !config.models.contains_key(dm) {
        bail!(
            "invalid config file {}: [dream] model = {dm:?} is neither a role (main, fast) nor a [models.<name>] profile: name one of those",
            path.display()
        );
    }
    config
        .models()
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e}", path.display()))?;
    config
        .policy()
        .map_err(|e| anyhow::anyhow!("invalid config file {}: {e:#}", path.display()))?;
    Ok(config)
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `daemon.log_level` must be a level or EnvFilter directives that each
/// name a level: a bare word like `loud` parses as a target (and would
/// silence every log line), so it is refused.
pub fn check_log_level(value: &str) -> anyhow::Result<()> {
    let is_level = |l: &str| LEVELS.iter().any(|v| v.eq_ignore_ascii_case(l.trim()));
    let each_has_level = !value.trim().is_empty()
        && value.split(',').all(|d| {
            let d = d.trim();
            is_level(d)
                || d.rsplit_once('=')
                    .is_some_and(|(t, l)| !t.is_empty() && is_level(l))
        });
    if each_has_level && tracing_subscriber::EnvFilter::try_new(value).is_ok() {
        return Ok(());
    }
    bail!(
        "daemon.log_level = {value:?} is not a log level: use one of error, warn, info, debug, trace (or off), or EnvFilter directives that each name a level, like \"flyto_actors=debug,info\""
    )
}

/// Problems of the config that depend on this machine, found by
/// `flytod check-config`: errors, then warnings.
pub fn check_environment(config: &Config) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    if let Err(e) = config.database_url() {
        errors.push(e.to_string());
    }
    if let Some(dir) = &config.plans.default_workdir
        && !dir.is_dir()
    {
        errors.push(format!(
            "plans.default_workdir = {:?} is not a directory: create it, or change or remove the setting (steps without a workdir then run in $HOME)",
            dir.display().to_string()
        ));
    }
    for (name, profile) in &config.models {
        if let Some(var) = &profile.api_key_env
            && std::env::var_os(var).is_none_or(|v| v.is_empty())
        {
            warnings.push(format!(
                "models.{name}.api_key_env = {var:?} but {var} is not set in this environment: export it where flytod starts (for the systemd user service: `systemctl --user set-environment {var}=...` or an EnvironmentFile), or calls to {name} fail"
            ));
        }
    }
    (errors, warnings)
}

impl Config {
    /// The shared store's URL when `[store] backend = "postgres"`:
    /// FLYTO_DATABASE_URL, else `[store] url`.
    pub fn database_url(&self) -> anyhow::Result<Option<String>> {
        if self.store.backend != Backend::Postgres {
            return Ok(None);
        }
        if let Some(url) = std::env::var(DATABASE_URL_VAR)
            .ok()
            .filter(|u| !u.is_empty())
        {
            return Ok(Some(url));
        }
        match &self.store.url {
            Some(url) => Ok(Some(url.0.clone())),
            None => bail!(
                "[store] backend = \"postgres\" needs the database: set [store] url = \"postgres://USER@HOST/DATABASE\" in the config file or {DATABASE_URL_VAR}"
            ),
        }
    }

    pub fn plan_config(&self, socket: &Path) -> PlanConfig {
        let p = &self.plans;
        let mut out = PlanConfig {
            max_parallel_plans: p.max_parallel_plans,
            max_parallel_steps: p.max_parallel_steps,
            plan_ttl: p.plan_ttl,
            default_step_timeout: p.step_timeout,
            default_max_attempts: p.max_attempts,
            max_steps: p.max_steps,
            kill_grace: p.kill_grace,
            output_tail_bytes: p.output_tail_bytes,
            log_max_bytes: p.log_max_bytes,
            plan_socket: socket.display().to_string(),
            max_depth: p.max_depth,
            sandbox: p.sandbox,
            sandbox_network: self.sandbox.network,
            ..PlanConfig::default()
        };
        if let Some(dir) = &p.default_workdir {
            out.default_workdir = dir.display().to_string();
        }
        out
    }

    /// The MCP servers (parse() checked them) and where they run.
    pub fn mcp(
        &self,
        socket: &Path,
    ) -> anyhow::Result<(Vec<flyto_actors::mcp::ServerSpec>, flyto_actors::mcp::Host)> {
        let specs = flyto_actors::mcp::check(&self.mcp).map_err(|e| anyhow::anyhow!(e))?;
        let host = flyto_actors::mcp::Host {
            default_cwd: PathBuf::from(self.plan_config(socket).default_workdir),
            sandbox_profile: self.sandbox.profile,
            sandbox_network: self.sandbox.network,
        };
        Ok((specs, host))
    }

    /// The declared memory types as the memory room takes them.
    pub fn memory_types(&self) -> Vec<(String, String, String)> {
        self.memory
            .types
            .iter()
            .map(|(n, t)| (n.clone(), t.when_to_save.clone(), t.how_to_use.clone()))
            .collect()
    }

    pub fn policy(&self) -> anyhow::Result<Policy> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        Policy::new(&self.permissions, home)
            .map_err(|e| anyhow::anyhow!("invalid [permissions]: {e}"))
    }

    pub fn models(&self) -> Models {
        Models::new(self.models.clone(), self.roles.clone())
    }

    /// The skill sources: the user's folder next to the config file.
    pub fn skill_config(&self, config_path: &Path) -> flyto_actors::skills::SkillConfig {
        flyto_actors::skills::SkillConfig {
            user_dir: config_path.parent().map(|d| d.join("skills")),
            project: self.skills.project,
            rescan_every: Some(self.skills.rescan_every),
        }
    }

    pub fn session_config(&self, socket: &Path) -> SessionConfig {
        let s = &self.sessions;
        SessionConfig {
            max_iterations: s.max_iterations,
            max_run_cost_usd: s.max_run_cost_usd,
            max_continuations: s.max_continuations,
            idle_stop: s.idle_stop,
            default_workdir: self.plan_config(socket).default_workdir,
            default_model: s.default_model.clone(),
            plan_socket: socket.display().to_string(),
            approval_timeout: s.approval_timeout,
            sandbox_profile: self.sandbox.profile,
            sandbox_network: self.sandbox.network,
            memory: InjectConfig {
                inject: self.memory.inject,
                token_budget: self.memory.token_budget,
                stale_days: self.memory.stale_days,
            },
            extract_every: self.memory.extract_every,
            max_agent_depth: s.max_agent_depth,
            agent_max_iterations: s.agent_max_iterations,
            agent_budget_share: s.agent_budget_share,
        }
    }

    pub fn dream_config(&self) -> anyhow::Result<flyto_actors::dream::DreamConfig> {
        use flyto_actors::dream::LossCap;
        let d = &self.dream;
        let max_removed = match &d.max_removed {
            MaxRemoved::Count(n) => LossCap::Entries(*n),
            MaxRemoved::Share(s) => {
                let pct = s
                    .trim()
                    .strip_suffix('%')
                    .and_then(|n| n.trim().parse::<f64>().ok())
                    .filter(|p| (0.0..=100.0).contains(p));
                match pct {
                    Some(p) => LossCap::Percent(p),
                    None => bail!(
                        "[dream] max_removed = {s:?} is not a count or a share: write a number of entries (3) or a percentage (\"10%\")"
                    ),
                }
            }
        };
        if d.check_every.is_zero() {
            bail!(
                "[dream] check_every must be more than 0 (for example \"10m\"); set enabled = false to stop consolidation"
            );
        }
        if d.keep == 0 {
            bail!(
                "[dream] keep must be at least 1: the version before each run is what dream_undo restores"
            );
        }
        Ok(flyto_actors::dream::DreamConfig {
            enabled: d.enabled,
            check_every: d.check_every,
            min_hours: d.min_hours,
            min_sessions: d.min_sessions,
            model: d.model.clone(),
            max_calls: d.max_calls,
            max_cost_usd: d.max_cost_usd,
            time_limit: d.time_limit,
            max_removed,
            keep: d.keep,
        })
    }

    pub fn retry_backoff(&self) -> anyhow::Result<Vec<Duration>> {
        self.jobs
            .retry_backoff
            .iter()
            .map(|d| {
                flyto_protocol::duration::parse(
                    "[jobs] retry_backoff",
                    d,
                    flyto_protocol::duration::Unit::Secs,
                )
                .map_err(|e| anyhow::anyhow!("{e}"))
            })
            .collect()
    }

    pub fn channels_config(
        &self,
    ) -> anyhow::Result<flyto_actors::channels::manager::ChannelsConfig> {
        let c = &self.channels;
        if !(c.session_gap_hours > 0.0 && c.session_gap_hours.is_finite()) {
            anyhow::bail!(
                "[channels] session_gap_hours = {} must be a positive number of hours (default 6)",
                c.session_gap_hours
            );
        }
        if c.poll_timeout < Duration::from_secs(1) || c.poll_timeout > Duration::from_secs(50) {
            anyhow::bail!(
                "[channels] poll_timeout = {:?} must be between 1s and 50s (Telegram's limit; default 30s)",
                c.poll_timeout
            );
        }
        if let Some(m) = &c.telegram.parse_mode
            && !["MarkdownV2", "HTML", "Markdown"].contains(&m.as_str())
        {
            anyhow::bail!(
                "[channels.telegram] parse_mode = {m:?} is not one of MarkdownV2, HTML, Markdown: fix it, or remove it for plain text"
            );
        }
        if c.wechat.chunk_chars < 50 || c.wechat.max_chunks == 0 {
            anyhow::bail!(
                "[channels.wechat] chunk_chars must be at least 50 and max_chunks at least 1 (defaults 1000 and 8)"
            );
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let workdir = match (&c.workdir, &home) {
            (Some(w), Some(h)) if w.starts_with("~/") || w == "~" => {
                h.join(w.trim_start_matches('~').trim_start_matches('/'))
            }
            (Some(w), _) => PathBuf::from(w),
            (None, Some(h)) => h.clone(),
            (None, None) => PathBuf::from("/"),
        };
        Ok(flyto_actors::channels::manager::ChannelsConfig {
            outbox_ttl: c.outbox_ttl,
            session_gap: Duration::from_secs_f64(c.session_gap_hours * 3600.0),
            stall_grace: c.stall_grace,
            context_ttl: c.wechat.context_ttl,
            pause_on_expiry: c.wechat.pause_on_expiry,
            workdir: workdir.display().to_string(),
            allow: c.allow.clone().into_iter().collect(),
        })
    }

    pub fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy {
            max_restarts: self.daemon.max_restarts,
            window: self.daemon.restart_window,
            ..RestartPolicy::default()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_config_syntax_or_type_error_says_where_without_quoting_the_line() {
        for text in [
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://flyto:hunter2-secret@db/flyto\n",
            "[store]\nbackend = \"postgres\"\nurl = \"postgres://flyto:hunter2-secret@db/flyto\" x\n",
            "[store]\nbackend = [\"hunter2-secret\"]\n",
        ] {
            let err = format!("{:#}", super::parse(text, Path::new("c.toml")).unwrap_err());
            assert!(!err.contains("hunter2"), "{err}");
            assert!(err.contains("c.toml") && err.contains("line "), "{err}");
        }
        let err = format!(
            "{:#}",
            super::parse(
                "[store]\nbackend = \"postgres\"\nurl = \"x\" y\n",
                Path::new("c.toml")
            )
            .unwrap_err()
        );
        assert!(err.contains("line 3, column"), "{err}");
        let err = format!(
            "{:#}",
            super::parse("[plans]\nstep_timeout = \"soon\"\n", Path::new("c.toml")).unwrap_err()
        );
        assert!(err.contains("key `plans.step_timeout`"), "{err}");
    }

    use super::*;

    #[test]
    fn default_workdir_expands_a_leading_tilde() {
        let home = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
        let at = |v: &str| {
            parse(
                &format!("[plans]\ndefault_workdir = {v:?}\n"),
                Path::new("c.toml"),
            )
            .expect("valid")
            .plans
            .default_workdir
            .expect("set")
        };
        assert_eq!(at("~/src"), home.join("src"));
        assert!(at("~").starts_with(&home));
        assert_eq!(at("/srv/~x"), PathBuf::from("/srv/~x"));
    }

    #[test]
    fn retry_backoff_takes_numbers_and_durations_and_names_a_bad_one() {
        let backoff = |v: &str| {
            parse(
                &format!("[jobs]\nretry_backoff = {v}\n"),
                Path::new("c.toml"),
            )
            .and_then(|c| c.retry_backoff())
        };
        assert_eq!(
            backoff(r#"[30, "1m", "1h30m"]"#).expect("durations"),
            [30, 60, 5400].map(Duration::from_secs)
        );
        let err = format!("{:#}", backoff(r#"["30s", "soon"]"#).unwrap_err());
        assert!(
            err.contains("[jobs] retry_backoff: `soon`") && err.contains("30s, 5m, 2h, 1h30m"),
            "{err}"
        );
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let err = parse(
            "[plans]\nmax_parallel_plans = 2\nmax_paralel_steps = 3\n",
            Path::new("/etc/flyto/config.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/etc/flyto/config.toml"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("max_paralel_steps"), "{err}");
    }

    #[test]
    fn counts_of_zero_name_the_file_the_key_and_the_fix() {
        for (section, key) in [
            ("sessions", "max_iterations"),
            ("plans", "max_attempts"),
            ("plans", "max_parallel_plans"),
            ("plans", "max_parallel_steps"),
        ] {
            let err = parse(
                &format!("[{section}]\n{key} = 0\n"),
                Path::new("/etc/flyto/config.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(
                err.starts_with("invalid config file /etc/flyto/config.toml: "),
                "{err}"
            );
            assert!(
                err.contains(&format!("{section}.{key} must be at least 1")),
                "{err}"
            );
        }
        let c = parse("[sessions]\nmax_iterations = 1\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.sessions.max_iterations, 1);
    }

    #[test]
    fn log_levels_and_directives_are_accepted_and_anything_else_refused() {
        for ok in [
            "info",
            "DEBUG",
            "flyto_actors=debug,info",
            "warn,flytod=trace",
            "off",
        ] {
            check_log_level(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in ["loud", "", "flyto_actors", "info,verbose", "x=loud"] {
            let err = check_log_level(bad).unwrap_err().to_string();
            assert!(err.contains("error, warn, info, debug, trace"), "{err}");
            assert!(err.contains("flyto_actors=debug,info"), "{err}");
        }
    }

    #[test]
    fn memory_section_has_defaults_and_refuses_unknown_keys() {
        let d = parse("", Path::new("c.toml"))
            .unwrap()
            .session_config(Path::new("/s"));
        assert_eq!(d.memory, InjectConfig::default());
        assert_eq!(d.extract_every, 5);
        let c = parse(
            "[memory]\ninject = 2\ntoken_budget = 300\nstale_days = 30\nextract_every = 0\n",
            Path::new("c.toml"),
        )
        .unwrap()
        .session_config(Path::new("/s"));
        assert_eq!(
            c.memory,
            InjectConfig {
                inject: 2,
                token_budget: 300,
                stale_days: 30
            }
        );
        assert_eq!(c.extract_every, 0);
        let err = parse("[memory]\ninjects = 2\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("injects") && err.contains("line 2"), "{err}");
    }

    #[test]
    fn wrong_type_is_an_error_and_durations_parse() {
        let err = parse("[plans]\nmax_attempts = \"x\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        let c = parse("[daemon]\nshutdown_grace = \"5s\"\n", Path::new("c.toml")).unwrap();
        assert_eq!(c.daemon.shutdown_grace, Duration::from_secs(5));
    }
}
