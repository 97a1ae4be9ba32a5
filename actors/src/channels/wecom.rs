//! The WeCom (企业微信) push platform: outbound only, through an app's
//! `cgi-bin/message/send`, with the `gettoken` access token cached until
//! shortly before it expires. It owns the wire format and error classes
//! only; the room owns the outbox. The corp secret and the access token
//! (which travels in the URL) never appear in an error or a Debug line.

use super::platform::{OutChunk, Platform, PlatformError, PlatformFuture, Polled};
use super::wechat::{build_client, read_json, redact, split_text};
use serde_json::{Value, json};
use std::fmt;
use std::sync::RwLock;
use std::time::{Duration, Instant};

pub const DEFAULT_API_BASE: &str = "https://qyapi.weixin.qq.com";

/// WeCom's limit for a text message's content, in bytes of UTF-8.
const TEXT_LIMIT_BYTES: usize = 2048;
/// A cached token is replaced this long before WeCom says it expires.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a poll idles: nothing ever arrives from a push-only app.
const DEFAULT_POLL_TIMEOUT: Duration = Duration::from_secs(60);
/// `errcode`s of an invalid (40014) or expired (42001) access token.
const TOKEN_INVALID: i64 = 40014;
const TOKEN_EXPIRED: i64 = 42001;
/// `errcode` of the app's API frequency limit.
const RATE_LIMITED: i64 = 45009;

pub struct WecomPlatform {
    corp_id: String,
    agent_id: i64,
    secret: String,
    api_base: String,
    poll_timeout: Duration,
    http: RwLock<reqwest::Client>,
    /// The access token and when to stop using it; one refresh at a time.
    token: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl fmt::Debug for WecomPlatform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WecomPlatform")
            .field("corp_id", &self.corp_id)
            .field("agent_id", &self.agent_id)
            .field("secret", &"[redacted]")
            .field("api_base", &self.api_base)
            .finish()
    }
}

impl WecomPlatform {
    /// `api_base` defaults to [`DEFAULT_API_BASE`].
    pub fn new(
        corp_id: String,
        agent_id: i64,
        secret: String,
        api_base: Option<String>,
    ) -> Result<WecomPlatform, PlatformError> {
        let api_base = api_base
            .as_deref()
            .unwrap_or(DEFAULT_API_BASE)
            .trim()
            .trim_end_matches('/')
            .to_string();
        let http = build_client(&api_base)?;
        Ok(WecomPlatform {
            corp_id,
            agent_id,
            secret,
            api_base,
            poll_timeout: DEFAULT_POLL_TIMEOUT,
            http: RwLock::new(http),
            token: tokio::sync::Mutex::new(None),
        })
    }

    /// How long [`Platform::poll`] idles (60 s unless set).
    pub fn with_poll_timeout(mut self, poll_timeout: Duration) -> WecomPlatform {
        self.poll_timeout = poll_timeout;
        self
    }

    fn client(&self) -> reqwest::Client {
        self.http.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Scrubs both secrets from `e`.
    fn scrub(&self, e: PlatformError, token: &str) -> PlatformError {
        redact(redact(e, &self.secret), token)
    }

    /// The cached access token, fetched anew when missing, near expiry, or
    /// when `stale` names the token a send was refused with.
    async fn access_token(&self, stale: Option<&str>) -> Result<String, PlatformError> {
        let mut cached = self.token.lock().await;
        if let Some((token, use_until)) = cached.as_ref()
            && Instant::now() < *use_until
            && stale != Some(token.as_str())
        {
            return Ok(token.clone());
        }
        let what = "WeCom gettoken";
        let request = self
            .client()
            .get(format!("{}/cgi-bin/gettoken", self.api_base))
            .query(&[("corpid", &self.corp_id), ("corpsecret", &self.secret)])
            .timeout(CALL_TIMEOUT);
        let answer = read_json(what, request)
            .await
            .map_err(|e| self.scrub(e, ""))?;
        let errcode = answer["errcode"].as_i64().unwrap_or(0);
        let token = answer["access_token"].as_str().unwrap_or("");
        if errcode != 0 || token.is_empty() {
            return Err(self.scrub(
                PlatformError::Auth(format!(
                    "{what} refused corp id {} (errcode {errcode}: {}); check the corp id \
                     and the app secret",
                    self.corp_id,
                    answer["errmsg"].as_str().unwrap_or("")
                )),
                token,
            ));
        }
        let lifetime = Duration::from_secs(answer["expires_in"].as_u64().unwrap_or(7200));
        let use_until = Instant::now() + lifetime.saturating_sub(REFRESH_MARGIN);
        *cached = Some((token.to_string(), use_until));
        Ok(token.to_string())
    }

    /// One `message/send` with `token`; answers the raw reply.
    async fn send_with(&self, token: &str, body: &Value) -> Result<Value, PlatformError> {
        let request = self
            .client()
            .post(format!("{}/cgi-bin/message/send", self.api_base))
            .query(&[("access_token", token)])
            .timeout(CALL_TIMEOUT)
            .json(body);
        read_json("WeCom message/send", request)
            .await
            .map_err(|e| self.scrub(e, token))
    }
}

impl Platform for WecomPlatform {
    fn poll<'a>(&'a self, _cursor: Option<&'a str>) -> PlatformFuture<'a, Polled> {
        Box::pin(async move {
            tokio::time::sleep(self.poll_timeout).await;
            Ok(Polled::default())
        })
    }

    fn send<'a>(&'a self, chat: &'a str, chunk: &'a OutChunk) -> PlatformFuture<'a, String> {
        Box::pin(async move {
            let body = json!({
                "touser": chat,
                "msgtype": "text",
                "agentid": self.agent_id,
                "text": { "content": chunk.text },
                "safe": 0,
            });
            let mut token = self.access_token(None).await?;
            let mut answer = self.send_with(&token, &body).await?;
            let mut errcode = answer["errcode"].as_i64().unwrap_or(0);
            if errcode == TOKEN_INVALID || errcode == TOKEN_EXPIRED {
                // The cached token died early: fetch a fresh one, retry once.
                token = self.access_token(Some(&token)).await?;
                answer = self.send_with(&token, &body).await?;
                errcode = answer["errcode"].as_i64().unwrap_or(0);
                if errcode == TOKEN_INVALID || errcode == TOKEN_EXPIRED {
                    return Err(PlatformError::Auth(format!(
                        "WeCom refused a freshly fetched access token (errcode {errcode}); \
                         check the app secret and that app {} is enabled",
                        self.agent_id
                    )));
                }
            }
            let errmsg = answer["errmsg"].as_str().unwrap_or("").to_string();
            if errcode == RATE_LIMITED {
                return Err(PlatformError::RateLimited {
                    retry_after: Duration::from_secs(60),
                });
            }
            if errcode != 0 {
                return Err(self.scrub(
                    PlatformError::Rejected(format!(
                        "WeCom message/send to {chat} answered errcode {errcode} ({errmsg}); \
                         check the user id and the app's visible range"
                    )),
                    &token,
                ));
            }
            let invalid = answer["invaliduser"].as_str().unwrap_or("");
            if invalid.split('|').any(|u| u == chat) {
                return Err(PlatformError::Rejected(format!(
                    "WeCom does not know user {chat} in app {}; check the user id and the \
                     app's visible range",
                    self.agent_id
                )));
            }
            Ok(answer["msgid"]
                .as_str()
                .filter(|m| !m.is_empty())
                .map_or_else(|| chunk.id.clone(), str::to_string))
        })
    }

    fn typing<'a>(&'a self, _chat: &'a str) -> PlatformFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn chunk(&self, text: &str) -> Vec<String> {
        split_text(text, TEXT_LIMIT_BYTES, char::len_utf8)
    }

    fn poll_timeout(&self) -> Duration {
        self.poll_timeout
    }

    fn reset(&self) {
        if let Ok(fresh) = build_client(&self.api_base) {
            *self.http.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        }
    }

    fn inbound(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn debug_hides_the_secret_and_chunks_fit_2048_bytes() {
        let p = WecomPlatform::new("corp".into(), 1000002, "s3cret".into(), None).unwrap();
        assert!(!format!("{p:?}").contains("s3cret"));
        let text = "微".repeat(1500);
        let pieces = p.chunk(&text);
        assert_eq!(pieces.concat(), text);
        assert!(pieces.iter().all(|c| c.len() <= TEXT_LIMIT_BYTES));
        assert_eq!(pieces.len(), 3);
    }
}
