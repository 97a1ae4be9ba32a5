//! flyto-protocol: everything that crosses the control socket between
//! `flytod` and its clients — wire types, framing, the handshake, socket-path
//! resolution and a small blocking client.
//!
//! Only this crate knows the wire encoding; the daemon and the CLI see typed
//! [`Request`]s and [`Response`]s.
//!
//! # Bytes on the wire
//!
//! A connection speaks one of two encodings, chosen by its first byte:
//!
//! * **Binary** (any first byte but `{` or ASCII whitespace): every message is a frame of a
//!   4-byte big-endian payload length followed by that many bytes of bincode 2
//!   (serde, `bincode::config::standard()`). A length above [`MAX_FRAME`]
//!   (16 MiB) is answered with `Error { code: TooLarge }` and the connection is
//!   closed. The client's first frame must be [`Request::Hello`]; the daemon
//!   answers [`Response::Welcome`] or `Error { code: ProtocolMismatch }`.
//! * **JSON lines** (first byte `{` or whitespace): every message is one JSON
//!   object on one line, `{"<op>":{...}}`, with the same types. No handshake
//!   is needed, so `echo '{"ping":{}}' | socat - UNIX-CONNECT:$FLYTO_SOCK`
//!   works. Blank lines are skipped; a line that is not a request is
//!   answered `{"error":{"code":"BadRequest","message":...}}` and the next
//!   line is served.
//!
//! One request gets one response, except `plan_watch`, which answers with the
//! current snapshot ([`Response::Plan`]), then [`Response::Event`] frames with
//! increasing sequence numbers, then [`Response::End`].
//!
//! ```no_run
//! use flyto_protocol::{Client, Request, paths};
//! let mut client = Client::connect(&paths::client_socket(None)).unwrap();
//! let pong = client.call(&Request::Ping {}).unwrap();
//! ```

pub mod client;
pub mod duration;
pub mod framing;
pub mod paths;
pub mod types;

pub use client::{Client, ClientError};
pub use framing::{FrameError, MAX_FRAME};
pub use types::*;

/// Version of the request/response types. Bumped on any incompatible change
/// (2: `ContextView::head_from_idx`; 3: issue 10's foundation fixes:
/// plan env, names, restart, remove, queue positions, `Plans::total` and
/// the per-outcome step counts of `PlanSummary`, session approvals,
/// `session_delete`, message times, `DaemonStats::disk_syncs`; 4: the
/// agent sandbox: `policy_check`, `session_new` sandbox and network, plan
/// and step `sandbox`, `DaemonStats::sandbox`; 5: memory and skills:
/// `skill_list`, `skill_show`, `skill_reload`, `memory_*`; 10: the shared
/// store's `DaemonStats::store`, `node` and `peers`).
pub const PROTOCOL_VERSION: u32 = 10;
