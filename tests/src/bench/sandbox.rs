//! `flyto-bench sessions`, sandbox part: what the kernel sandbox adds to
//! starting one `bash` tool call, against an unconfined call measured in
//! the same run (target: under 1 ms extra per call).

use anyhow::Context;
use flyto_actors::tools::bash::BashTool;
use flyto_actors::tools::policy::Policy;
use flyto_actors::tools::sandbox::{self, Host, Profile, SandboxSpec};
use flyto_actors::tools::{Tool, ToolContext};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Calls per case, after warm-up.
const CALLS: usize = 200;
const WARMUP: usize = 20;

pub fn run(rt: &tokio::runtime::Runtime) -> anyhow::Result<()> {
    println!("\n== sandbox: one bash tool call (`true`), {CALLS} calls after {WARMUP} warm-up ==");
    let support = sandbox::probe();
    println!("sandbox support: {}", support.describe());
    if support.landlock_abi == 0 {
        println!("sandbox cost: not measured (no Landlock on this kernel)");
        return Ok(());
    }
    let tmp = tempfile::tempdir().context("temp dir")?;
    let work = tmp.path().join("work");
    let state = tmp.path().join("state");
    let home = tmp.path().join("home");
    for dir in [&work, &state, &home.join(".ssh"), &tmp.path().join("run")] {
        std::fs::create_dir_all(dir).context("bench dirs")?;
    }
    // As flytod configures it: its own folders and the credential folders.
    let mut hidden = vec![state.clone(), tmp.path().join("run")];
    hidden.extend(sandbox::default_hidden(&home));
    hidden.extend(sandbox::server_dirs());
    sandbox::configure(Host {
        support,
        hidden,
        writable: Vec::new(),
        sockets: Vec::new(),
        require: false,
        tmp_root: tmp.path().join("tmp"),
    });
    let tool = BashTool::new(Arc::new(Policy::builtin_only(Some(home.clone()))));
    let ctx = |sandbox: Option<SandboxSpec>| ToolContext {
        workdir: work.clone(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        cancel: CancellationToken::new(),
        approver: None,
        sandbox,
        hooks: None,
    };
    let confined = SandboxSpec {
        profile: Profile::WorkspaceWrite,
        write_roots: vec![work.clone()],
        tmpdir: Some(tmp.path().join("tmpdir")),
        network: true,
    };
    let plain = ctx(None);
    let boxed = ctx(Some(confined));
    // Interleaved, so drift on the machine hits both alike.
    let (mut base, mut sand) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for i in 0..WARMUP + CALLS {
            let a = call(&tool, &plain).await?;
            let b = call(&tool, &boxed).await?;
            if i >= WARMUP {
                base.push(a);
                sand.push(b);
            }
        }
        anyhow::Ok(())
    })?;
    base.sort();
    sand.sort();
    let p50 = |v: &[Duration]| v[v.len() / 2];
    let extra = p50(&sand).saturating_sub(p50(&base));
    let ratio = p50(&sand).as_secs_f64() / p50(&base).as_secs_f64();
    let ok = if extra < Duration::from_millis(1) {
        "ok"
    } else {
        "MISSED"
    };
    println!(
        "bash tool call p50: unconfined {:.0}us, sandboxed {:.0}us: ratio {ratio:.2}, extra {:.0}us per call (target < 1000us) {ok}",
        p50(&base).as_secs_f64() * 1e6,
        p50(&sand).as_secs_f64() * 1e6,
        extra.as_secs_f64() * 1e6,
    );
    Ok(())
}

async fn call(tool: &BashTool, ctx: &ToolContext) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let out = tool.call(ctx, r#"{"command":"true"}"#).await;
    let took = start.elapsed();
    anyhow::ensure!(!out.is_error, "bash `true` failed: {}", out.content);
    Ok(took)
}
