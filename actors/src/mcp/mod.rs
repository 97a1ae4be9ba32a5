//! mcp: the servers people bring their own tools in, over the Model
//! Context Protocol (the `rmcp` SDK, client side). It owns the
//! connections (the [`manager::McpManager`] actor) and offers each
//! server's tools to sessions as `mcp__<server>__<tool>`.
//!
//! It may start server processes (with the process rules and sandbox of
//! the agent's own commands) and talk to servers; it never touches
//! storage or transcripts: the session room records calls and results
//! like any other tool's.

pub mod config;
pub mod conn;
pub mod http_client;
pub mod manager;
pub mod stdio;
pub mod tool;

pub use config::{McpSection, ServerSpec, check};
pub use conn::Host;
pub use manager::{MCP_NAME, McpArgs, McpHandle, McpManager, McpMsg, Snapshot};

/// `s` cut to `max` characters, with `…` when cut (for error messages).
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
}
