//! One connection to one server: start it (a stdio process or streamable
//! HTTP), the MCP handshake, the tool list. Every failure is one line
//! that says what went wrong and what to change; none ever carries a
//! value of `env` or `headers`.

use super::clip;
use super::config::{SandboxChoice, ServerSpec, Transport, expand, mask_url};
use super::stdio::{self, ServerProcess};
use crate::tools::sandbox::{Profile, SandboxSpec};
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, InitializeRequestParams, ProtocolVersion,
};
use rmcp::service::{
    ClientInitializeError, NotificationContext, RoleClient, RunningService, ServiceError,
};
use rmcp::{ClientHandler, ServiceExt};
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// What a connection needs from the daemon.
#[derive(Debug, Clone)]
pub struct Host {
    /// Where a stdio server without `cwd` runs.
    pub default_cwd: PathBuf,
    /// The sessions' sandbox, for servers without their own `sandbox`.
    pub sandbox_profile: Profile,
    pub sandbox_network: bool,
}

/// flytod's side of the protocol: who it is, and what it does with the
/// server's notifications (a changed tool list is listed again).
pub struct Handler {
    pub list_changed: Arc<dyn Fn() + Send + Sync>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("flytod", env!("CARGO_PKG_VERSION")),
        );
        // The newest revision that still has the `initialize` handshake,
        // which every server released so far speaks.
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        info
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        (self.list_changed)();
        std::future::ready(())
    }
}

pub type Service = RunningService<RoleClient, Handler>;

/// A server that answered the handshake and listed its tools.
pub struct Connected {
    pub service: Service,
    /// A stdio server's process (killed when dropped).
    pub process: Option<ServerProcess>,
    pub tools: Vec<rmcp::model::Tool>,
    pub protocol: String,
    /// Tools that need task-based execution, which flytod does not do.
    pub task_tools: stdio::TaskTools,
}

/// The largest message read from a server: a result may be up to
/// `max_result_bytes` of text, and JSON escaping can double it.
pub fn max_message(max_result_bytes: u64) -> usize {
    usize::try_from(max_result_bytes.saturating_mul(2).saturating_add(64 << 10))
        .unwrap_or(usize::MAX)
}

/// Starts server `spec`, within its `startup_timeout`.
pub async fn connect(
    spec: &ServerSpec,
    host: &Host,
    handler: Handler,
    reconnects: Arc<AtomicU32>,
) -> Result<Connected, String> {
    let entry = &spec.entry;
    let timeout = entry.startup_timeout;
    let max = max_message(entry.max_result_bytes);
    let late = |what: &str, process: Option<&ServerProcess>| {
        let mut msg = format!(
            "{what} within {} (startup_timeout)",
            humantime::format_duration(timeout)
        );
        if let Some(why) = process.map(|p| p.explain()).filter(|w| !w.is_empty()) {
            msg.push_str(&format!("; {why}"));
        } else {
            msg.push_str("; raise startup_timeout if it is only slow");
        }
        msg
    };
    let started = tokio::time::Instant::now();
    // Filled by the HTTP client from the raw `tools/list` answers (a stdio
    // server's process reads its own).
    let mut http_task_tools = stdio::TaskTools::default();
    let (service, mut process) = match &spec.transport {
        Transport::Stdio { command, args } => {
            let cwd = match &entry.cwd {
                Some(c) => crate::tools::sandbox::expand(
                    c,
                    std::env::var_os("HOME").map(PathBuf::from).as_deref(),
                ),
                None => host.default_cwd.clone(),
            };
            let mut extra = vec![("FLYTO_MCP_SERVER".to_string(), spec.name.clone())];
            for (k, v) in &entry.env {
                let value =
                    expand(v, |n| std::env::var(n).ok()).map_err(|e| format!("env `{k}` {e}"))?;
                extra.push((k.clone(), value));
            }
            let env = crate::tools::env::child_env(std::env::vars(), &extra);
            let profile = match spec.sandbox {
                SandboxChoice::Sessions => host.sandbox_profile,
                SandboxChoice::Profile(p) => p,
            };
            let sandbox = (profile != Profile::Off).then(|| SandboxSpec {
                profile,
                write_roots: vec![cwd.clone()],
                tmpdir: Some(stdio::tmpdir(&spec.name)),
                network: host.sandbox_network,
            });
            let (process, out, inp) = stdio::spawn(
                command,
                args,
                &cwd,
                &env,
                sandbox.as_ref(),
                max,
                Arc::new(spec.scrubber()),
            )?;
            match tokio::time::timeout(timeout, handler.serve((out, inp))).await {
                Ok(Ok(service)) => (service, Some(process)),
                Ok(Err(e)) => {
                    let mut msg = init_error(&e);
                    let mut process = process;
                    if let Some(status) = process.settle().await {
                        msg.push_str(&format!(" ({status})"));
                    }
                    let why = process.explain();
                    if !why.is_empty() {
                        msg.push_str(&format!("; {why}"));
                    }
                    return Err(msg);
                }
                Err(_) => return Err(late("it did not answer the MCP handshake", Some(&process))),
            }
        }
        Transport::Http { url } => {
            use rmcp::transport::StreamableHttpClientTransport;
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut headers = HashMap::new();
            for (k, v) in &entry.headers {
                let value = expand(v, |n| std::env::var(n).ok())
                    .map_err(|e| format!("header `{k}` {e}"))?;
                let name = http::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| format!("`{k}` is not a valid header name"))?;
                let mut value = http::HeaderValue::from_str(&value)
                    .map_err(|_| format!("the value of header `{k}` is not valid in a header"))?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
            install_crypto();
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(headers)
                .max_json_response_size(max)
                .max_sse_event_size(max);
            let client = super::http_client::Client::new(&spec.name, reconnects)?;
            http_task_tools = client.task_tools.clone();
            let transport = StreamableHttpClientTransport::with_client(client, config);
            match tokio::time::timeout(timeout, handler.serve(transport)).await {
                Ok(Ok(service)) => (service, None),
                Ok(Err(e)) => return Err(http_init_error(&e, url).await),
                Err(_) => {
                    return Err(late(
                        &format!("{} did not answer the MCP handshake", mask_url(url)),
                        None,
                    ));
                }
            }
        }
    };
    let protocol = service
        .peer_info()
        .map(|i| i.protocol_version.as_str().to_string())
        .unwrap_or_default();
    if !ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .any(|v| v.as_str() == protocol)
    {
        let known: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .map(|v| v.as_str())
            .collect();
        return Err(format!(
            "it speaks MCP protocol version `{protocol}`, which flytod does not (it speaks {}): use a server release that supports one of these",
            known.join(", ")
        ));
    }
    let left = timeout.saturating_sub(started.elapsed());
    let tools = match tokio::time::timeout(left, service.peer().list_all_tools()).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            let mut msg = format!("its tools/list answer is not usable: {}", call_error(&e));
            if let Some(p) = process.as_mut() {
                p.settle().await;
                let why = p.explain();
                if !why.is_empty() {
                    msg.push_str(&format!("; {why}"));
                }
            }
            return Err(msg);
        }
        Err(_) => return Err(late("it did not list its tools", process.as_ref())),
    };
    let task_tools = process
        .as_ref()
        .map(|p| p.task_tools.clone())
        .unwrap_or(http_task_tools);
    Ok(Connected {
        service,
        process,
        tools,
        protocol,
        task_tools,
    })
}

/// reqwest 0.13 (rmcp's) is built without a TLS crypto provider of its
/// own: the ring provider flytod's other TLS uses becomes the default.
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn init_error(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::ConnectionClosed(_) => {
            "it closed the connection before the MCP handshake ended (did it exit?)".into()
        }
        ClientInitializeError::JsonRpcError(err) => {
            format!("it refused the MCP handshake: {}", err.message)
        }
        ClientInitializeError::NoCompatibleProtocolVersion { .. } => {
            format!("{e}: use a server release that supports one of flytod's versions")
        }
        other => format!("the MCP handshake failed: {other}"),
    }
}

async fn http_init_error(e: &ClientInitializeError, url: &str) -> String {
    let url = mask_url(url);
    if e.is_authorization_required() {
        return format!(
            "{url} answered 401 Unauthorized: give the credentials in `headers` (for example Authorization = \"Bearer ${{TOKEN}}\")"
        );
    }
    let text = match e {
        ClientInitializeError::TransportError { error, .. } => chain(error),
        other => chain(other),
    };
    let lower = text.to_lowercase();
    if lower.contains("error sending request") || lower.contains("connect") {
        // reqwest keeps the cause (refused, no such host) to itself here:
        // a plain connection says which it is.
        let why = match probe(&url).await {
            Some(why) => why,
            None => "the request could not be sent".into(),
        };
        return format!("cannot reach {url} ({why}): is the server running, and is `url` right?");
    }
    if lower.contains("403") || lower.contains("forbidden") {
        return format!("{url} answered 403 Forbidden: the credentials in `headers` lack access");
    }
    format!("{url}: {}", clip(&init_error(e), 300))
}

/// Why a TCP connection to `url`'s host fails, if it does.
async fn probe(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?.to_string();
    let port = parsed.port_or_known_default()?;
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    match tokio::time::timeout(Duration::from_secs(3), connect).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("the connection timed out".into()),
    }
}

/// An error and its sources, innermost last.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = s.source();
    }
    parts.join(": ")
}

/// A failed request, in words.
pub fn call_error(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(err) => err.message.to_string(),
        ServiceError::TransportClosed => "the connection closed (the server exited?)".into(),
        ServiceError::Timeout { timeout } => format!(
            "no answer within {}",
            humantime::format_duration(Duration::from_millis(timeout.as_millis() as u64))
        ),
        other => clip(&other.to_string(), 300),
    }
}
