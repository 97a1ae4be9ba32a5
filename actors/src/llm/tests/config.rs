//! Profiles and roles as written in TOML, role resolution, and cost.

use crate::llm::config::{Api, Models, resolve_role};
use crate::llm::event::Usage;
use std::time::Duration;

const EXAMPLE: &str = r#"
[models.deepseek]
api = "openai"
base_url = "https://api.deepseek.com"
model = "made-up-chat"
api_key_env = "DEEPSEEK_API_KEY"
context_window = 128000
max_output = 8192
input_price = 0.27
output_price = 1.10
cache_read_price = 0.07
parallel_tool_calls = true
stream_idle_timeout = "2m"

[models.deepseek.retry]
max_attempts = 6
initial_backoff = "500ms"

[models.claude]
api = "anthropic"
base_url = "https://api.anthropic.com"
model = "made-up-sonnet"
api_key_env = "ANTHROPIC_API_KEY"
thinking_budget = 4000
input_price = 3.0
output_price = 15.0
cache_read_price = 0.3
cache_write_price = 3.75

[models.local]
api = "openai"
base_url = "http://127.0.0.1:8080/v1"
model = "made-up-local"

[roles]
main = "deepseek"
fast = "local"
main_fallback = "claude"
"#;

fn models(toml_text: &str) -> Models {
    toml::from_str(toml_text).unwrap()
}

#[test]
fn the_documented_example_parses_and_validates() {
    let m = models(EXAMPLE);
    m.validate().unwrap();
    let ds = m.profile("deepseek").unwrap();
    assert_eq!(ds.api, Api::Openai);
    assert_eq!(ds.stream_idle_timeout, Duration::from_secs(120));
    assert_eq!(ds.retry.max_attempts, 6);
    assert_eq!(ds.retry.initial_backoff, Duration::from_millis(500));
    assert_eq!(
        ds.retry.max_backoff,
        Duration::from_secs(30),
        "unset fields keep defaults"
    );
    let local = m.profile("local").unwrap();
    assert_eq!(local.api_key_env, None);
    assert_eq!(local.stream_idle_timeout, Duration::from_secs(90));
    assert_eq!(local.context_window, 128_000);

    let main = m.route("main").unwrap();
    assert_eq!(main.primary.name, "deepseek");
    assert_eq!(main.fallback.as_ref().unwrap().name, "claude");
    let fast = m.route("fast").unwrap();
    assert_eq!(fast.primary.name, "local");
    assert!(fast.fallback.is_none());
    assert_eq!(resolve_role(&m, "fast").unwrap().model, "made-up-local");
}

#[test]
fn unknown_fields_are_refused() {
    let err = toml::from_str::<Models>(
        "[models.x]\napi = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\napi_key = \"sk-oops\"\n",
    )
    .unwrap_err();
    assert!(err.to_string().contains("api_key"), "{err}");
    assert!(toml::from_str::<Models>("[roles]\nmian = \"x\"\n").is_err());
    assert!(
        toml::from_str::<Models>(
            "[models.x]\napi = \"gemini\"\nbase_url = \"http://h\"\nmodel = \"m\"\n"
        )
        .is_err()
    );
}

#[test]
fn nothing_configured_says_what_to_set() {
    let err = resolve_role(&Models::default(), "main").unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.kind(), "config");
    assert!(
        msg.starts_with(
            "no model configured: add [models.<name>] with api, base_url, model and api_key_env \
             to ~/.config/flyto/config.toml and set [roles] main = \"<name>\""
        ),
        "{msg}"
    );
    assert!(
        msg.contains("DEEPSEEK_API_KEY") && msg.contains("https://api.deepseek.com"),
        "{msg}"
    );
    // fast falls back to main, so it says the same.
    assert_eq!(resolve_role(&Models::default(), "fast").unwrap_err(), err);
}

#[test]
fn role_resolution_rules() {
    let one = models("[models.solo]\napi = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\n");
    assert_eq!(
        one.role_profile_name("main").unwrap(),
        "solo",
        "a single profile is main"
    );
    assert_eq!(one.role_profile_name("fast").unwrap(), "solo");

    let two = models(
        "[models.a]\napi = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\n\
         [models.b]\napi = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\n",
    );
    let err = two.resolve_role("main").unwrap_err().to_string();
    assert!(
        err.contains("[roles] main") && err.contains("a, b"),
        "{err}"
    );

    let dangling = models(
        "[models.a]\napi = \"openai\"\nbase_url = \"http://h\"\nmodel = \"m\"\n[roles]\nmain = \"zz\"\n",
    );
    let err = dangling.resolve_role("main").unwrap_err().to_string();
    assert!(
        err.contains("roles.main = \"zz\"") && err.contains("[models.zz]"),
        "{err}"
    );
    assert!(dangling.validate().is_err());
    assert!(
        two.resolve_role("slow")
            .unwrap_err()
            .to_string()
            .contains("main and fast")
    );
}

#[test]
fn validation_lists_every_problem() {
    let m = models(
        "[models.bad]\napi = \"anthropic\"\nbase_url = \"api.anthropic.com\"\nmodel = \"\"\n\
         max_output = 0\nthinking_budget = 10\n[models.bad.retry]\nmax_attempts = 0\n",
    );
    let err = m.validate().unwrap_err().to_string();
    for needle in [
        "base_url",
        "model is empty",
        "max_output",
        "max_attempts",
        "thinking_budget",
    ] {
        assert!(err.contains(needle), "{needle} missing from: {err}");
    }
}

#[test]
fn cost_uses_every_price() {
    let m = models(EXAMPLE);
    let claude = m.profile("claude").unwrap();
    let usage = Usage {
        input_tokens: 1_000_000 + 2_000_000 + 500_000,
        output_tokens: 100_000,
        cache_read_tokens: 2_000_000,
        cache_write_tokens: 500_000,
        reasoning_tokens: 0,
    };
    // 1M plain × 3 + 2M read × 0.3 + 0.5M write × 3.75 + 0.1M out × 15
    let want = 3.0 + 0.6 + 1.875 + 1.5;
    assert!(
        (claude.cost(&usage) - want).abs() < 1e-9,
        "{}",
        claude.cost(&usage)
    );
    // Without cache prices, cached tokens cost the input price.
    let local = m.profile("local").unwrap();
    assert_eq!(local.cost(&usage), 0.0);
    let ds = m.profile("deepseek").unwrap();
    let no_write = Usage {
        cache_write_tokens: 0,
        input_tokens: 3_000_000,
        ..usage
    };
    let want = 1.0 * 0.27 + 2.0 * 0.07 + 0.1 * 1.10;
    assert!((ds.cost(&no_write) - want).abs() < 1e-9);
}
