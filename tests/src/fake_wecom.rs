//! A scripted fake of the WeCom app API on 127.0.0.1, for the WeCom push
//! platform's tests: `cgi-bin/gettoken` (counted, checking the corp id and
//! secret), `cgi-bin/message/send` (recorded, checking the access token),
//! token expiry on demand and scripted errcodes. HTTP/1.1 with
//! `Connection: close`, on the [`crate::fake_http`] plumbing.
//!
//! ```no_run
//! use flyto_tests::fake_wecom::FakeWecom;
//! let fake = FakeWecom::start("corp", "secret");
//! fake.expire_token(); // the next send answers errcode 42001
//! ```

use crate::fake_http::{self, read_request};
use crate::fake_ilink::{query_param, split_target, write_response};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// One `message/send` the fake saw.
#[derive(Debug, Clone)]
pub struct WecomSend {
    pub access_token: String,
    pub body: Value,
    /// The errcode the fake answered.
    pub errcode: i64,
}

#[derive(Default)]
struct State {
    gettoken_calls: usize,
    /// The token `gettoken` handed out last; older ones are refused (40014).
    current: Option<String>,
    /// The current token was expired by the test: sends with it get 42001.
    expired: bool,
    sends: Vec<WecomSend>,
    send_failures: VecDeque<i64>,
    expires_in: u64,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    corp_id: String,
    secret: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake; it stops when dropped.
pub struct FakeWecom {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeWecom {
    pub fn start(corp_id: &str, secret: &str) -> FakeWecom {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake WeCom server");
        let addr = listener.local_addr().expect("fake WeCom address");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                expires_in: 7200,
                ..State::default()
            }),
            stop: AtomicBool::new(false),
            corp_id: corp_id.to_string(),
            secret: secret.to_string(),
        });
        fake_http::spawn_accept(
            listener,
            "fake-wecom",
            "fake WeCom",
            shared.clone(),
            |s| &s.stop,
            serve,
        );
        FakeWecom { addr, shared }
    }

    /// `http://127.0.0.1:<port>`: the platform's `api_base`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn gettoken_calls(&self) -> usize {
        self.shared.lock().gettoken_calls
    }

    /// The next send with the current token answers errcode 42001.
    pub fn expire_token(&self) {
        self.shared.lock().expired = true;
    }

    /// `gettoken` answers this `expires_in` from now on (7200 by default).
    pub fn set_expires_in(&self, seconds: u64) {
        self.shared.lock().expires_in = seconds;
    }

    /// The next send answers this errcode.
    pub fn fail_next_send(&self, errcode: i64) {
        self.shared.lock().send_failures.push_back(errcode);
    }

    pub fn sends(&self) -> Vec<WecomSend> {
        self.shared.lock().sends.clone()
    }
}

impl Drop for FakeWecom {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(mut conn: TcpStream, shared: &Shared) {
    let Some(request) = read_request(&mut conn) else {
        return;
    };
    let (path, query) = split_target(&request.path);
    let answer = match path.as_str() {
        "/cgi-bin/gettoken" => {
            let corp = query_param(&query, "corpid").unwrap_or_default();
            let secret = query_param(&query, "corpsecret").unwrap_or_default();
            let mut state = shared.lock();
            state.gettoken_calls += 1;
            if corp != shared.corp_id || secret != shared.secret {
                json!({"errcode": 40001, "errmsg": "invalid credential"})
            } else {
                let token = format!(
                    "access-{}-{:08x}",
                    state.gettoken_calls,
                    rand::random::<u32>()
                );
                state.current = Some(token.clone());
                state.expired = false;
                json!({"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": state.expires_in})
            }
        }
        "/cgi-bin/message/send" => {
            let token = query_param(&query, "access_token").unwrap_or_default();
            let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
            let mut state = shared.lock();
            let errcode = if state.current.as_deref() != Some(token.as_str()) {
                40014
            } else if state.expired {
                42001
            } else {
                state.send_failures.pop_front().unwrap_or(0)
            };
            state.sends.push(WecomSend {
                access_token: token,
                body,
                errcode,
            });
            let n = state.sends.len();
            if errcode == 0 {
                json!({"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": format!("msg-{n}")})
            } else {
                json!({"errcode": errcode, "errmsg": "scripted"})
            }
        }
        _ => return write_response(&mut conn, 404, "{\"errcode\":404}"),
    };
    write_response(&mut conn, 200, &answer.to_string());
}
