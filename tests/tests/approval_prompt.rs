//! Ctrl-C at flytoctl's `allow it? [y/N]` prompt, on a real terminal (a
//! pty from util-linux `script`): the pending request is denied before
//! flytoctl exits, the run goes on without the tool, and nothing is left
//! waiting for an answer.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::flyto_protocol::BlockView;
use flyto_tests::sessions_support::{
    assert_every_call_answered, history, new_session, setup_with, workdir,
};
use flyto_tests::{DEADLINE, bin, wait_until};
use serde_json::json;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

const ASK_TOUCH: &str = "[permissions]\nask = [\"touch\"]\n";

/// util-linux `script`, which runs a command on a pty of its own.
fn script() -> &'static Path {
    let path = Path::new("/usr/bin/script");
    assert!(
        path.exists(),
        "this test needs `script` (util-linux, `apt-get install bsdutils`) to give flytoctl a terminal"
    );
    path
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn ctrl_c_at_the_approval_prompt_denies_and_the_run_goes_on() {
    let (fake, env, _daemon) = setup_with(
        ASK_TOUCH,
        vec![
            Reply::tool_call("call_touch", "bash", json!({"command": "touch no.txt"})),
            Reply::text("fine, I will not touch it"),
        ],
    );
    let dir = workdir(&env, "ws");
    let id = new_session(&env, &dir);

    let command = format!(
        "{} session_send {id} 'make no.txt'",
        shell_quote(&bin("flytoctl").display().to_string())
    );
    let mut child = env
        .command(script())
        .args(["-q", "-e", "-f", "-c", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    let seen = Arc::new(Mutex::new(String::new()));
    let mut out = child.stdout.take().unwrap();
    let sink = seen.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    wait_until("the y/N prompt", DEADLINE, || {
        seen.lock()
            .unwrap()
            .contains("allow it? [y/N]")
            .then_some(())
    });
    // The terminal's interrupt character: the pty sends flytoctl SIGINT.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\x03").unwrap();
    stdin.flush().unwrap();
    let status = child.wait().expect("script");
    drop(stdin);
    reader.join().unwrap();
    let text = seen.lock().unwrap().clone();
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(
        text.contains(&format!("denied the request of {id}")),
        "{text}"
    );

    // The run went on: the model was told, and answered.
    let (session, messages) = wait_until("the run to end", DEADLINE, || {
        let (session, messages) = history(&env, &id);
        (session.status == "idle").then_some((session, messages))
    });
    assert_every_call_answered(&messages);
    let result = messages
        .iter()
        .flat_map(|m| &m.blocks)
        .find_map(|b| match b {
            BlockView::ToolResult {
                call_id, content, ..
            } if call_id == "call_touch" => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for the denied call: {messages:#?}"));
    assert!(result.contains("the user declined"), "{result}");
    assert!(!dir.join("no.txt").exists(), "the denied command ran");
    assert_eq!(fake.request_count(), 2, "{session:#?}");
    let last = messages.last().unwrap();
    assert_eq!(last.role, "assistant", "{messages:#?}");
    fake.assert_protocol_ok();
}
