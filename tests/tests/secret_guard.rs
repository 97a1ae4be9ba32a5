//! The file tools' secret guard end to end: a model's `write` through the
//! real flytod and flytoctl, against the scripted fake OpenAI-compatible
//! server. A real-looking AWS secret is refused, naming the rule, and the
//! file is not created; AWS's documented example key id is written.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::fake_llm::Reply;
use flyto_tests::sessions_support::{request_tool_result, setup, workdir};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// 40 characters of base64, the shape of an AWS secret access key, made at
/// run time so this file does not itself trip secret scanners.
fn aws_like_secret() -> String {
    const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut rng = StdRng::seed_from_u64(42);
    (0..40)
        .map(|_| BASE64[rng.gen_range(0..BASE64.len())] as char)
        .collect()
}

#[test]
fn a_write_of_a_real_looking_aws_secret_is_refused_and_the_documented_example_is_written() {
    let secret = aws_like_secret();
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_call(
            "w1",
            "write",
            json!({"path": "prod.env", "content": format!("AWS_SECRET_ACCESS_KEY={secret}\n")}),
        ),
        Reply::tool_call(
            "w2",
            "write",
            json!({"path": "example.env", "content": "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"}),
        ),
        Reply::text("Wrote the example."),
    ]);
    let dir = workdir(&env, "ws");
    let wd = dir.display().to_string();
    let out = env.ctl(&["session_new", "--workdir", &wd]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();

    let out = env.ctl(&["session_send", &id, "write the env files"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("Wrote the example."), "{}", out.stdout);
    assert!(
        out.stderr.contains("error: refused to save prod.env")
            && out
                .stderr
                .contains("ok: wrote 39 bytes (1 lines) to example.env"),
        "flytoctl shows each write's outcome:\n{}",
        out.stderr
    );

    // The user's side: the refused file is not there, the example is.
    assert!(
        !dir.join("prod.env").exists(),
        "the secret reached the disk"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("example.env")).expect("example.env"),
        "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"
    );

    // The model's side: it was told which rule refused, and why, without
    // its secret echoed back.
    let requests = fake.requests();
    let refused = request_tool_result(&requests[1], "w1");
    assert!(
        refused.contains("refused to save prod.env")
            && refused.contains("aws-secret-access-key")
            && refused.contains("line 1"),
        "{refused}"
    );
    assert!(!refused.contains(&secret[..20]), "{refused}");
    let written = request_tool_result(&requests[2], "w2");
    assert!(written.contains("wrote"), "{written}");
    fake.assert_protocol_ok();
}

/// Text that only looks like a secret reaches the disk: an anti-CSRF token
/// (issue 31: refused before), an empty assignment followed by another
/// line, a vendor prefix inside a longer name and a key already masked. A
/// whole key in the same kind of file is still refused.
#[test]
fn look_alikes_of_secrets_are_written_and_a_real_key_beside_them_is_not() {
    let random = aws_like_secret().replace(['+', '/'], "x");
    let look_alikes = format!(
        "csrf_token = \"{random}\"\nX-XSRF-TOKEN: {random}\nAPI_KEY=\nNEXT={random}\n\
         cache = \"risk-sk-{random}{random}\"\nOPENAI_API_KEY=sk-{}***\n",
        &random[..30]
    );
    let real = format!("OPENAI_API_KEY=sk-{random}ABCD\n");
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_call(
            "w1",
            "write",
            json!({"path": "settings.env", "content": look_alikes}),
        ),
        Reply::tool_call("w2", "write", json!({"path": "prod.env", "content": real})),
        Reply::text("done"),
    ]);
    let dir = workdir(&env, "ws");
    let wd = dir.display().to_string();
    let out = env.ctl(&["session_new", "--workdir", &wd]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    let out = env.ctl(&["session_send", &id, "write the settings"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);

    assert_eq!(
        std::fs::read_to_string(dir.join("settings.env")).unwrap_or_default(),
        look_alikes,
        "the look-alikes were not written as given:\n{}",
        out.stderr
    );
    assert!(
        !dir.join("prod.env").exists(),
        "the real key reached the disk"
    );
    let requests = fake.requests();
    let refused = request_tool_result(&requests[2], "w2");
    assert!(
        refused.contains("refused to save prod.env") && refused.contains("openai-style-api-key"),
        "{refused}"
    );
    fake.assert_protocol_ok();
}
