//! `hook_list`: the configured hooks and their last outcomes.

use flyto_protocol::{HookRunView, HookView, Response};

pub fn list(hooks: &flyto_actors::hooks::Hooks) -> Response {
    let rfc3339 = |ms: u64| {
        chrono::DateTime::from_timestamp_millis(ms as i64)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    Response::Hooks {
        hooks: hooks
            .specs()
            .iter()
            .map(|h| HookView {
                name: h.name.clone(),
                event: h.event.as_str().into(),
                matcher: h.matcher_text.clone(),
                command: h.command.clone(),
                timeout_ms: h.timeout.as_millis() as u64,
                required: h.required,
                last: hooks
                    .last(&h.name)
                    .into_iter()
                    .map(|r| HookRunView {
                        outcome: r.outcome,
                        duration_ms: r.duration_ms,
                        at: rfc3339(r.at_ms),
                    })
                    .collect(),
            })
            .collect(),
    }
}
