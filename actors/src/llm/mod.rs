//! llm: the provider layer. It owns the conversation model sent to models,
//! model profiles and roles, the two streaming clients (OpenAI-compatible
//! chat completions and Anthropic Messages), error classification, retries
//! and the overload fallback. It knows nothing of sessions, storage or
//! events on the wire: a session turns a [`ChatRequest`] into an
//! [`LlmStream`] and the stream's [`StreamEvent`]s into its own events.
//!
//! # Use
//!
//! ```no_run
//! # async fn run(models: flyto_actors::llm::Models) -> Result<(), flyto_actors::llm::LlmError> {
//! use flyto_actors::llm::{ChatRequest, LlmClient, Message, StreamEvent};
//! let client = LlmClient::new()?;
//! let route = models.route("main")?; // says what to configure when nothing is
//! let request = ChatRequest {
//!     system: "You are terse.".into(),
//!     messages: vec![Message::user_text("hello")],
//!     tools: vec![],
//!     max_tokens: 0, // the profile's max_output
//! };
//! let mut stream = client.stream(&route, request);
//! while let Some(event) = stream.next_event().await {
//!     match event? {
//!         StreamEvent::TextDelta(t) => print!("{t}"),
//!         StreamEvent::Restart => { /* discard what was printed since the start */ }
//!         StreamEvent::Done(response) => println!("\n{:?} ${:.4}", response.usage, response.cost),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! # Config
//!
//! The daemon embeds [`Models`] (or its two fields) in `config.toml`:
//!
//! ```toml
//! [models.deepseek]
//! api = "openai"                        # or "anthropic"
//! base_url = "https://api.deepseek.com" # {base_url}/chat/completions, {base_url}/v1/messages
//! model = "<model id>"
//! api_key_env = "DEEPSEEK_API_KEY"      # read at request time; omit for local servers
//! context_window = 128000               # default 128000
//! max_output = 8192                     # default 8192
//! input_price = 0.27                    # USD per million tokens, default 0
//! output_price = 1.10
//! cache_read_price = 0.07               # default: input_price
//! cache_write_price = 0.27              # default: input_price
//! parallel_tool_calls = true            # default true
//! stream_idle_timeout = "90s"           # default 90s
//! # max_tokens_param = "max_completion_tokens"  # OpenAI reasoning models
//! # reasoning_effort = "high"                   # OpenAI-compatible only
//! # thinking_budget = 4000                      # Anthropic only
//!
//! [models.deepseek.retry]               # all optional, defaults shown
//! max_attempts = 4
//! initial_backoff = "1s"
//! max_backoff = "30s"
//! max_retry_after = "60s"
//! fallback_after = 2
//!
//! [roles]
//! main = "deepseek"
//! fast = "deepseek"                     # default: main
//! # main_fallback = "other-profile"
//! ```
//!
//! # Streams
//!
//! Content events are text, reasoning (kept apart from text), refusals and
//! tool calls (a start, then argument fragments split anywhere). A stream
//! ends with `Done(Assembled)` or with one `Err`. An attempt that fails
//! with a retryable error is retried after a `Retrying` event; if it had
//! already handed content out, a `Restart` event follows and the caller
//! drops that partial output (a restarted stream is never spliced onto
//! the old one). On the `main` role, repeated overloads switch to the
//! fallback profile with a `Fallback` event.
//!
//! **Invariants**
//! - A response is `Done` only after the provider's end marker (`[DONE]`,
//!   `message_stop`) or its stop reason; a body that ends sooner, an
//!   `event: error`, or no event for `stream_idle_timeout` is an error.
//! - Errors are classified once, in `error`; callers match on [`LlmError`].
//! - The API key is read at request time and appears in no log, error,
//!   event or Debug output.
//! - Dropping an [`LlmStream`] drops the HTTP connection at once.
//! - Tool-call ids in an [`Assembled`] are the provider's (a missing one is
//!   made up) and need not be unique: some servers send `call_0` for every
//!   call. The session gives each call an id of its own before storing it
//!   (`llm::normalize::CallIds`); requests send the stored ids.
//!
//! Anthropic `redacted_thinking` blocks are kept opaque and sent back
//! unchanged to Anthropic; other providers never see them.

mod anthropic;
mod client;
mod config;
mod conversation;
mod error;
mod event;
pub mod normalize;
mod openai;
mod retry;
mod stream;

#[cfg(test)]
mod tests;

pub use client::{KeySource, LlmClient, LlmStream};
pub use config::{
    Api, MaxTokensParam, ModelProfile, Models, NamedProfile, RetrySettings, Roles, Route,
    resolve_role, set_config_path,
};
pub use conversation::{Block, ChatRequest, Message, Role, ToolSpec};
pub use error::LlmError;
pub use event::{Assembled, StopReason, StreamEvent, ToolCall, Usage};
