//! The chain scope holds whatever the confined process does: a step of a
//! nested plan (or an agent's tool) that unsets `FLYTO_PLAN_SOCK`, names
//! the main socket with `--socket`, or detaches itself is refused on the
//! main control socket, while the steps of the user's own plans keep it.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::flyto_protocol::PlanState;
use flyto_tests::{DEADLINE, TestEnv, bin, wait_until};

/// Child plans must run while their parent waits (`--wait`).
const CONFIG: &str =
    "[daemon]\nshutdown_grace = \"1s\"\n[plans]\nmax_parallel_plans = 4\nkill_grace = \"200ms\"\n";

/// Children of `pid` that exited and were not reaped.
fn zombie_children(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            fields.first() == Some(&"Z") && fields.get(1) == Some(&pid.to_string().as_str())
        })
        .collect()
}

#[test]
fn a_nested_step_cannot_leave_its_scope_for_the_main_socket() {
    let env = TestEnv::new(CONFIG);
    let daemon = env.start();
    let ctl = bin("flytoctl").display().to_string();
    let sock = env.sock.display().to_string();
    let detached = env.work.join("detached.out");
    // Run in the depth-1 plan: both one-line escapes, and a double fork
    // that detaches (setsid) so its parent chain ends at flytod. The step
    // waits until it has detached: its group is killed when its shell ends.
    let escape = format!(
        "env -u FLYTO_PLAN_SOCK {ctl} session_list; echo unset=$?; \
         {ctl} --socket {sock} plan_list; echo socket=$?; \
         (setsid sh -c \"touch {up}; {ctl} --socket {sock} ping 2>&1; echo detached=\\$?\" > {out} &); \
         while [ ! -e {up} ]; do sleep 0.01; done; \
         {ctl} plan_list >/dev/null; echo scoped=$?",
        out = detached.display(),
        up = env.work.join("detached.up").display()
    );
    // The user's own step (depth 0) keeps the main socket either way.
    let outer = format!(
        "env -u FLYTO_PLAN_SOCK {ctl} plan_list >/dev/null; echo user_unset=$?; \
         {ctl} --socket {sock} ping >/dev/null; echo user_socket=$?; \
         {ctl} submit_plan --run '{escape}' --wait; echo nested=$?"
    );
    let top = env.submit(TestEnv::run_plan(&outer));
    let view = env.wait_plan(&top, "finished", |p| p.state.is_terminal());
    let out = &view.steps[0].stdout_tail;
    assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
    assert!(out.contains("user_unset=0"), "{view:?}");
    assert!(out.contains("user_socket=0"), "{view:?}");

    let nested = env
        .plans()
        .into_iter()
        .find(|p| p.id != top)
        .expect("the nested plan");
    let nested = env.status(&nested.id);
    assert_eq!(nested.depth, 1);
    let step = &nested.steps[0];
    assert!(step.stdout_tail.contains("unset=4"), "{step:?}");
    assert!(step.stdout_tail.contains("socket=4"), "{step:?}");
    // Its own plan socket still serves it.
    assert!(step.stdout_tail.contains("scoped=0"), "{step:?}");
    assert!(step.stderr_tail.contains("PermissionDenied"), "{step:?}");
    assert!(step.stderr_tail.contains("FLYTO_PLAN_SOCK"), "{step:?}");

    let detached_out = wait_until("the detached process to finish", DEADLINE, || {
        std::fs::read_to_string(&detached)
            .ok()
            .filter(|t| t.contains("detached="))
    });
    assert!(detached_out.contains("detached=4"), "{detached_out}");
    assert!(detached_out.contains("detached itself"), "{detached_out}");
    // flytod adopted it (as subreaper) and reaped it when it exited.
    wait_until("flytod to reap the orphans it adopted", DEADLINE, || {
        zombie_children(daemon.pid()).is_empty().then_some(())
    });
}

/// An agent's `bash` is confined whatever the session's depth: neither
/// form reaches the main socket. With the sandbox off, so that flytod's own
/// peer check is what refuses (the sandbox also hides the socket).
#[test]
fn an_agents_bash_cannot_reach_the_main_socket() {
    use flyto_tests::fake_llm::Reply;
    use flyto_tests::sessions_support::{
        done, new_session, request_tool_result, send, setup_with, workdir,
    };
    let ctl = bin("flytoctl").display().to_string();
    // And another chain's plan socket (a running plan's, below).
    let command = format!(
        "env -u FLYTO_PLAN_SOCK {ctl} session_list; echo unset=$?; \
         {ctl} --socket \"$FLYTO_SOCK\" session_list; echo socket=$?; \
         for s in $(dirname $FLYTO_PLAN_SOCK)/plan-p*.sock; do \
           FLYTO_PLAN_SOCK=$s {ctl} plan_list; echo other=$?; done"
    );
    let (fake, env, _daemon) = setup_with(
        "[sandbox]\nprofile = \"off\"\n",
        vec![
            Reply::tool_call(
                "call_escape",
                "bash",
                serde_json::json!({ "command": command }),
            ),
            Reply::text("refused, as it should be"),
        ],
    );
    let other = env.submit(TestEnv::run_plan("sleep 300"));
    env.wait_plan(&other, "the other plan to run", |p| {
        p.state == PlanState::Running
    });
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);
    let events = send(&env, &id, "list every session");
    assert!(done(&events), "{events:#?}");
    let content = request_tool_result(&fake.requests()[1], "call_escape");
    assert!(content.contains("unset=4"), "{content}");
    assert!(content.contains("socket=4"), "{content}");
    // Both refused by flytod (not by a missing socket).
    assert_eq!(content.matches("PermissionDenied").count(), 3, "{content}");
    assert!(content.contains("FLYTO_PLAN_SOCK"), "{content}");
    // (Only the other socket's refusal names this session's own socket.)
    let (mains, _) = content
        .split_once("socket=4")
        .expect("both main-socket tries");
    assert!(!mains.contains(&id), "the session list leaked: {content}");
    assert!(content.contains("other=4"), "{content}");
    // plan_list would have shown the other plan running.
    assert!(
        !content.contains("running"),
        "the other chain leaked: {content}"
    );
    env.ctl(&["plan_cancel", &other]);
}

/// A nested step cannot hop to another plan socket (they are all in one
/// directory): its parent's would submit one level less deep, so the depth
/// cap would never bind, and another chain's would show that chain.
#[test]
fn a_nested_step_is_served_only_on_its_own_plan_socket() {
    let env = TestEnv::new(CONFIG);
    let _daemon = env.start();
    let ctl = bin("flytoctl").display().to_string();
    // Another chain with a running step, so its plan socket exists.
    let other = env.submit(TestEnv::run_plan("sleep 300"));
    env.wait_plan(&other, "the other plan to run", |p| {
        p.state == PlanState::Running
    });
    let hop = format!(
        "for s in $(dirname $FLYTO_PLAN_SOCK)/plan-*.sock; do \
           [ $s = $FLYTO_PLAN_SOCK ] && continue; \
           FLYTO_PLAN_SOCK=$s {ctl} submit_plan --run \"echo hopped\"; echo hop=$?; \
         done; {ctl} plan_list >/dev/null; echo own=$?"
    );
    let top = env.submit(TestEnv::run_plan(&format!(
        "{ctl} submit_plan --run '{hop}' --wait"
    )));
    let view = env.wait_plan(&top, "finished", |p| p.state.is_terminal());
    assert_eq!(view.state, PlanState::Succeeded, "{view:?}");
    let out = &view.steps[0].stdout_tail;
    // The parent's socket and the other chain's: both refused.
    assert_eq!(out.matches("hop=4").count(), 2, "{view:?}");
    assert!(out.contains("own=0"), "{view:?}");
    assert!(
        view.steps[0].stderr_tail.contains("not this one"),
        "{view:?}"
    );
    assert!(
        env.plans()
            .iter()
            .all(|p| !env.status(&p.id).steps[0].stdout_tail.contains("hopped")),
        "a plan was submitted through a foreign plan socket"
    );
    env.ctl(&["plan_cancel", &other]);
}
