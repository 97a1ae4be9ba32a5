//! Model profiles and roles, as the user writes them in `config.toml`, and
//! the resolution of a role (`main`, `fast`) to the profile that serves it.
//! No model id is written in code: every model comes from here.

use super::error::LlmError;
use super::event::Usage;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Where the user is told to put model settings: the file the daemon
/// reads, once it has said which ([`set_config_path`]).
static CONFIG_PATH: std::sync::RwLock<Option<String>> = std::sync::RwLock::new(None);

/// Names `path` as the config file in every hint from now on.
pub fn set_config_path(path: &std::path::Path) {
    if let Ok(mut p) = CONFIG_PATH.write() {
        *p = Some(path.display().to_string());
    }
}

fn config_hint() -> String {
    CONFIG_PATH
        .read()
        .ok()
        .and_then(|p| p.clone())
        .unwrap_or_else(|| "~/.config/flyto/config.toml".to_string())
}

/// The wire protocol a profile speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// OpenAI-compatible chat completions (`POST {base_url}/chat/completions`):
    /// DeepSeek, OpenAI, vLLM, llama.cpp server, Ollama, LiteLLM, Groq.
    Openai,
    /// Anthropic Messages (`POST {base_url}/v1/messages`).
    Anthropic,
}

/// Which request field carries the output budget on an OpenAI-compatible
/// server: most take `max_tokens`; OpenAI's reasoning models insist on
/// `max_completion_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensParam {
    #[default]
    MaxTokens,
    MaxCompletionTokens,
}

/// One `[models.<name>]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelProfile {
    pub api: Api,
    /// e.g. `https://api.deepseek.com`, `http://127.0.0.1:8080/v1`,
    /// `https://api.anthropic.com`.
    pub base_url: String,
    /// The model id sent to the server.
    pub model: String,
    /// Name of the environment variable that holds the API key. The key is
    /// read at request time and never logged, stored or put in an error.
    /// Leave it out for local servers that need no key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default = "default_context_window")]
    pub context_window: u32,
    #[serde(default = "default_max_output")]
    pub max_output: u32,
    /// Prices in USD per million tokens. The cache prices default to the
    /// input price, so an unknown cache discount never under-reports cost.
    #[serde(default)]
    pub input_price: f64,
    #[serde(default)]
    pub output_price: f64,
    #[serde(default)]
    pub cache_read_price: Option<f64>,
    #[serde(default)]
    pub cache_write_price: Option<f64>,
    /// Whether the model may call several tools in one response.
    #[serde(default = "default_true")]
    pub parallel_tool_calls: bool,
    /// A stream with no event for this long fails with a retryable timeout.
    #[serde(default = "default_idle", with = "flyto_protocol::duration::human")]
    pub stream_idle_timeout: Duration,
    /// OpenAI-compatible only: the name of the output budget field.
    #[serde(default)]
    pub max_tokens_param: MaxTokensParam,
    /// OpenAI-compatible only: sent as `reasoning_effort` when set.
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    /// Anthropic only: enables extended thinking with this token budget.
    #[serde(default)]
    pub thinking_budget: Option<u32>,
    #[serde(default)]
    pub retry: RetrySettings,
}

/// `[models.<name>.retry]`: how failed calls are retried.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// Attempts in total, the first included.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles each time, with jitter.
    #[serde(with = "flyto_protocol::duration::human")]
    pub initial_backoff: Duration,
    #[serde(with = "flyto_protocol::duration::human")]
    pub max_backoff: Duration,
    /// A `retry-after` longer than this is not waited for: the call fails
    /// with the rate-limit error instead of stalling the session.
    #[serde(with = "flyto_protocol::duration::human")]
    pub max_retry_after: Duration,
    /// For the `main` role: switch to `roles.main_fallback` after this many
    /// consecutive "overloaded" answers.
    pub fallback_after: u32,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 4,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
            fallback_after: 2,
        }
    }
}

fn default_context_window() -> u32 {
    128_000
}
fn default_max_output() -> u32 {
    8_192
}
fn default_true() -> bool {
    true
}
fn default_idle() -> Duration {
    Duration::from_secs(90)
}

impl ModelProfile {
    /// A profile with the defaults of every optional field, for code that
    /// builds profiles itself (tests, the daemon's own checks).
    pub fn new(api: Api, base_url: impl Into<String>, model: impl Into<String>) -> ModelProfile {
        ModelProfile {
            api,
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            context_window: default_context_window(),
            max_output: default_max_output(),
            input_price: 0.0,
            output_price: 0.0,
            cache_read_price: None,
            cache_write_price: None,
            parallel_tool_calls: true,
            stream_idle_timeout: default_idle(),
            max_tokens_param: MaxTokensParam::default(),
            reasoning_effort: None,
            thinking_budget: None,
            retry: RetrySettings::default(),
        }
    }

    /// What `usage` cost in USD at this profile's prices.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(usage.uncached_input_tokens(), self.input_price)
            + per(
                usage.cache_read_tokens,
                self.cache_read_price.unwrap_or(self.input_price),
            )
            + per(
                usage.cache_write_tokens,
                self.cache_write_price.unwrap_or(self.input_price),
            )
            + per(usage.output_tokens, self.output_price)
    }

    fn problems(&self, name: &str, out: &mut Vec<String>) {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            out.push(format!(
                "models.{name}.base_url = {:?} must start with http:// or https://",
                self.base_url
            ));
        }
        if self.model.trim().is_empty() {
            out.push(format!("models.{name}.model is empty"));
        }
        if self
            .api_key_env
            .as_deref()
            .is_some_and(|env| env.trim().is_empty())
        {
            out.push(format!(
                "models.{name}.api_key_env is empty: name an environment variable or leave it out"
            ));
        }
        if self.max_output == 0 || self.max_output > self.context_window {
            out.push(format!(
                "models.{name}.max_output ({}) must be between 1 and context_window ({})",
                self.max_output, self.context_window
            ));
        }
        if self.retry.max_attempts == 0 {
            out.push(format!(
                "models.{name}.retry.max_attempts must be at least 1"
            ));
        }
        if self.stream_idle_timeout.is_zero() {
            out.push(format!("models.{name}.stream_idle_timeout must not be 0"));
        }
        for (field, price) in [
            ("input_price", Some(self.input_price)),
            ("output_price", Some(self.output_price)),
            ("cache_read_price", self.cache_read_price),
            ("cache_write_price", self.cache_write_price),
        ] {
            if price.is_some_and(|p| !(p.is_finite() && p >= 0.0)) {
                out.push(format!(
                    "models.{name}.{field} must be a non-negative number"
                ));
            }
        }
        if let Some(budget) = self.thinking_budget.filter(|b| *b >= self.max_output) {
            out.push(format!(
                "models.{name}.thinking_budget ({budget}) must be below max_output ({})",
                self.max_output
            ));
        }
    }
}

/// The `[roles]` table: which profile serves which purpose.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roles {
    /// The agent loop.
    #[serde(default)]
    pub main: Option<String>,
    /// Summaries and other cheap calls; `main` serves when unset.
    #[serde(default)]
    pub fast: Option<String>,
    /// Where `main` goes after repeated "overloaded" answers.
    #[serde(default)]
    pub main_fallback: Option<String>,
}

/// All model settings: the `[models.<name>]` tables and the `[roles]` table.
/// The daemon can embed the two fields in its own config struct and build
/// this with [`Models::new`], or deserialize it from a document holding
/// only those tables.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Models {
    #[serde(default, rename = "models")]
    pub profiles: BTreeMap<String, ModelProfile>,
    #[serde(default)]
    pub roles: Roles,
}

/// A profile together with the name it has in the config.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedProfile {
    pub name: String,
    pub profile: ModelProfile,
}

/// What a call for a role goes to: the profile, and for `main` the optional
/// fallback used after repeated overloads.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub role: String,
    pub primary: NamedProfile,
    pub fallback: Option<NamedProfile>,
}

impl Route {
    /// A route to one profile with no fallback.
    pub fn single(name: impl Into<String>, profile: ModelProfile) -> Route {
        Route {
            role: "custom".to_string(),
            primary: NamedProfile {
                name: name.into(),
                profile,
            },
            fallback: None,
        }
    }
}

impl Models {
    pub fn new(profiles: BTreeMap<String, ModelProfile>, roles: Roles) -> Models {
        Models { profiles, roles }
    }

    pub fn profile(&self, name: &str) -> Option<&ModelProfile> {
        self.profiles.get(name)
    }

    /// Every problem of the config in one error, for the daemon to report
    /// at load and reload. An empty config is valid: the error then comes at
    /// the first call, from [`Models::resolve_role`].
    pub fn validate(&self) -> Result<(), LlmError> {
        let mut problems = Vec::new();
        for (name, profile) in &self.profiles {
            profile.problems(name, &mut problems);
        }
        for (field, target) in [
            ("main", &self.roles.main),
            ("fast", &self.roles.fast),
            ("main_fallback", &self.roles.main_fallback),
        ] {
            let Some(target) = target else { continue };
            if !self.profiles.contains_key(target) {
                problems.push(format!(
                    "roles.{field} = {target:?} but there is no [models.{target}] ({})",
                    self.known()
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LlmError::Config {
                detail: format!("invalid model config: {}", problems.join("; ")),
            })
        }
    }

    fn known(&self) -> String {
        if self.profiles.is_empty() {
            "no model profile is defined".to_string()
        } else {
            let names: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            format!("defined: {}", names.join(", "))
        }
    }

    fn named(&self, field: &str, name: &str) -> Result<&ModelProfile, LlmError> {
        self.profiles.get(name).ok_or_else(|| LlmError::Config {
            detail: format!(
                "roles.{field} = {name:?} but there is no [models.{name}] in {} ({})",
                config_hint(),
                self.known()
            ),
        })
    }

    /// The name of the profile serving `role` ("main" or "fast").
    ///
    /// `fast` falls back to `main` when unset; when `main` is unset and
    /// exactly one profile is defined, that profile is `main`.
    pub fn role_profile_name(&self, role: &str) -> Result<&str, LlmError> {
        let main = || -> Result<&str, LlmError> {
            match &self.roles.main {
                Some(name) => {
                    self.named("main", name)?;
                    Ok(name.as_str())
                }
                None if self.profiles.len() == 1 => self
                    .profiles
                    .keys()
                    .next()
                    .map(String::as_str)
                    .ok_or_else(no_model_configured),
                None if self.profiles.is_empty() => Err(no_model_configured()),
                None => Err(LlmError::Config {
                    detail: format!(
                        "no main model chosen: set [roles] main = \"<name>\" in {} ({})",
                        config_hint(),
                        self.known()
                    ),
                }),
            }
        };
        match role {
            "main" => main(),
            "fast" => match &self.roles.fast {
                Some(name) => {
                    self.named("fast", name)?;
                    Ok(name.as_str())
                }
                None => main(),
            },
            other => Err(LlmError::Config {
                detail: format!("unknown model role {other:?}: the roles are main and fast"),
            }),
        }
    }

    /// The profile serving `role`; see [`resolve_role`].
    pub fn resolve_role(&self, role: &str) -> Result<&ModelProfile, LlmError> {
        let name = self.role_profile_name(role)?;
        self.named(role, name)
    }

    /// The route for `role`: its profile and, for `main`, the fallback.
    pub fn route(&self, role: &str) -> Result<Route, LlmError> {
        let name = self.role_profile_name(role)?;
        let primary = NamedProfile {
            name: name.to_string(),
            profile: self.named(role, name)?.clone(),
        };
        let fallback = match (role, &self.roles.main_fallback) {
            ("main", Some(fb)) if fb != name => Some(NamedProfile {
                name: fb.clone(),
                profile: self.named("main_fallback", fb)?.clone(),
            }),
            _ => None,
        };
        Ok(Route {
            role: role.to_string(),
            primary,
            fallback,
        })
    }
}

/// The profile serving `role` ("main" or "fast"). When nothing is
/// configured the error says exactly what to add to the config file.
pub fn resolve_role<'a>(models: &'a Models, role: &str) -> Result<&'a ModelProfile, LlmError> {
    models.resolve_role(role)
}

fn no_model_configured() -> LlmError {
    LlmError::Config {
        detail: format!(
            "no model configured: add [models.<name>] with api, base_url, model and api_key_env \
             to {} and set [roles] main = \"<name>\" (for DeepSeek: api = \"openai\", \
             base_url = \"https://api.deepseek.com\", api_key_env = \"DEEPSEEK_API_KEY\", and \
             export DEEPSEEK_API_KEY in flytod's environment)",
            config_hint()
        ),
    }
}
