//! `policy_check`: the `bash` tool's own decision on the live policy, run
//! on nothing.

use super::canonical_workdir;
use crate::server::Ctx;
use flyto_actors::plans::Reject;
use flyto_protocol::{ErrorCode, PolicyCheckView, Response, Verdict};

/// [`Policy::check`] on the live policy, in the workdir canonicalised as a
/// session's is.
///
/// [`Policy::check`]: flyto_actors::tools::policy::Policy::check
pub fn check(ctx: &Ctx, command: &str, workdir: &str) -> Result<Response, Reject> {
    let dir = canonical_workdir("policy_check", workdir)?;
    let policy = ctx.policy.read().map(|p| p.clone()).map_err(|_| {
        Reject::new(
            ErrorCode::Internal,
            "policy_check: the permission policy is unavailable; restart flytod",
        )
    })?;
    let check = policy.check(command, &dir);
    let verdict = match check.verdict() {
        "deny" => Verdict::Deny,
        "ask" => Verdict::Ask,
        _ => Verdict::Allow,
    };
    Ok(Response::PolicyVerdict {
        check: PolicyCheckView {
            verdict,
            rule: check.rule_id(),
            reason: check.reason(),
            command: check.command().map(str::to_string),
            commands: check.commands.clone(),
            message: check.decision.message(),
            workdir: dir.display().to_string(),
        },
    })
}
