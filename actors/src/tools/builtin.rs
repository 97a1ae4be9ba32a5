//! builtin: the set of file tools a session offers (`read`, `write`, `edit`,
//! `glob`, `grep`) and the small pieces they share — argument parsing with
//! messages the model can act on, and running blocking file work off the
//! async runtime.
//!
//! It may not hold tool logic of its own, and, like every tool, it never
//! touches storage or actors.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::edit::EditTool;
use super::glob::GlobTool;
use super::grep::GrepTool;
use super::read::ReadTool;
use super::write::WriteTool;
use super::{Tool, ToolContext, ToolOutput};

/// The five file tools, confined to the session workdir.
pub fn file_tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool),
        Arc::new(WriteTool),
        Arc::new(EditTool),
        Arc::new(GlobTool),
        Arc::new(GrepTool),
    ]
}

/// Every builtin tool: the file tools and `bash` under `policy`.
pub fn all(policy: super::bash::SharedPolicy) -> Vec<Arc<dyn Tool>> {
    let mut tools = file_tools();
    tools.push(Arc::new(super::bash::BashTool::shared(policy)));
    tools
}

/// Parses a tool's arguments. On failure the error output says what was
/// wrong and shows the expected shape, so the model can retry correctly.
pub(crate) fn parse_args<T: DeserializeOwned>(
    tool: &str,
    args_json: &str,
    expected: &str,
) -> Result<T, ToolOutput> {
    let text = if args_json.trim().is_empty() {
        "{}"
    } else {
        args_json
    };
    serde_json::from_str(text).map_err(|err| {
        ToolOutput::error(format!(
            "invalid arguments for {tool}: {err}. Expected a JSON object {expected}"
        ))
    })
}

/// Whether a blocking job may be abandoned when the run is cancelled.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnCancel {
    /// Reads: answer at once; the job sees the token and stops by itself.
    Abandon,
    /// Writes: let the (short, atomic) job finish so the answer says
    /// truthfully whether the file changed.
    Finish,
}

/// Runs blocking file work on tokio's blocking pool. The job gets the
/// cancellation token to poll in its loops.
pub(crate) async fn run_blocking<F>(
    ctx: &ToolContext,
    tool: &str,
    on_cancel: OnCancel,
    job: F,
) -> ToolOutput
where
    F: FnOnce(CancellationToken) -> ToolOutput + Send + 'static,
{
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error(format!("{tool} was not run: the run was cancelled"));
    }
    let token = ctx.cancel.clone();
    let handle = tokio::task::spawn_blocking(move || job(token));
    let joined = match on_cancel {
        OnCancel::Finish => handle.await,
        OnCancel::Abandon => tokio::select! {
            res = handle => res,
            () = ctx.cancel.cancelled() => {
                return ToolOutput::error(format!("{tool} was stopped: the run was cancelled"));
            }
        },
    };
    joined.unwrap_or_else(|err| {
        ToolOutput::error(format!(
            "{tool} failed inside flytod ({err}); the call can be retried"
        ))
    })
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub(crate) fn ctx(workdir: &std::path::Path) -> ToolContext {
        ToolContext {
            workdir: std::fs::canonicalize(workdir).unwrap(),
            env: Vec::new(),
            cancel: CancellationToken::new(),
            approver: None,
            sandbox: None,
            hooks: None,
        }
    }

    pub(crate) async fn call(
        tool: &dyn Tool,
        ctx: &ToolContext,
        args: serde_json::Value,
    ) -> ToolOutput {
        tool.call(ctx, &args.to_string()).await
    }

    /// A GitHub-token-shaped string built at run time, so no source file
    /// holds one.
    pub(crate) fn fake_github_token() -> String {
        let mut s = String::from("ghp_");
        s.extend("aB3dE5fG7hJ9kL1m".chars().cycle().take(36));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_tools_are_the_five_with_valid_schemas() {
        let tools = file_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["read", "write", "edit", "glob", "grep"]);
        for tool in &tools {
            let schema: serde_json::Value = serde_json::from_str(tool.input_schema())
                .unwrap_or_else(|e| panic!("{} schema: {e}", tool.name()));
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert!(schema["properties"].is_object(), "{}", tool.name());
            for req in schema["required"].as_array().unwrap() {
                let req = req.as_str().unwrap();
                assert!(
                    schema["properties"][req].is_object(),
                    "{}: {req}",
                    tool.name()
                );
            }
            assert!(!tool.description().is_empty());
        }
        let read_only: Vec<bool> = tools.iter().map(|t| t.concurrency_safe("{}")).collect();
        assert_eq!(read_only, [true, false, false, true, true]);
    }

    #[tokio::test]
    async fn bad_or_missing_arguments_name_the_expected_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = test_support::ctx(dir.path());
        for tool in file_tools() {
            for bad in ["", "not json", "{}", "{\"bogus\": 1}", "[1]"] {
                let out = tool.call(&ctx, bad).await;
                assert!(out.is_error, "{} accepted {bad:?}", tool.name());
                assert!(
                    out.content.contains("invalid arguments for")
                        && out.content.contains("Expected"),
                    "{}: {}",
                    tool.name(),
                    out.content
                );
            }
        }
    }

    #[tokio::test]
    async fn a_cancelled_run_does_not_start_tools() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = test_support::ctx(dir.path());
        ctx.cancel.cancel();
        let out = run_blocking(&ctx, "read", OnCancel::Abandon, |_| ToolOutput::ok("ran")).await;
        assert!(out.is_error && out.content.contains("cancelled"), "{out:?}");
    }
}
