//! The `channel_*` requests, asked of the channels room's manager, and the
//! factory that turns a stored binding into its platform with this
//! config's settings.

use crate::config::ChannelsSection;
use flyto_actors::Clock;
use flyto_actors::channels::Platform;
use flyto_actors::channels::inbox::InboxPlatform;
use flyto_actors::channels::manager::{
    CHANNELS_NAME, ChannelsConfig, ChannelsMsg, PlatformFactory,
};
use flyto_actors::channels::store::{BindingKind, BindingRecord};
use flyto_actors::channels::telegram::TelegramPlatform;
use flyto_actors::channels::wechat;
use flyto_actors::channels::wecom::WecomPlatform;
use flyto_actors::plans::Reject;
use flyto_protocol::{ChannelSpec, ErrorCode, Response};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::sync::Arc;
use std::time::Duration;

const ASK: Duration = Duration::from_secs(60);

pub fn factory(c: &ChannelsSection) -> PlatformFactory {
    // What each kind's platform below is built from: a reload that
    // changes it restarts that kind's bindings, and no other.
    let settings = [
        ("inbox", format!("{:?}", c.poll_timeout)),
        (
            "telegram",
            format!("{:?} {:?}", c.poll_timeout, c.telegram.parse_mode),
        ),
        (
            "wechat",
            format!(
                "{:?} {} {}",
                c.poll_timeout, c.wechat.chunk_chars, c.wechat.max_chunks
            ),
        ),
        (
            "wecom",
            format!("{:?} {:?}", c.poll_timeout, c.wecom.api_base),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let c = c.clone();
    PlatformFactory::new(
        move |rec: &BindingRecord| -> Result<Arc<dyn Platform>, String> {
            match &rec.kind {
                BindingKind::Inbox { dir } => {
                    let p = InboxPlatform::new(std::path::Path::new(dir), c.poll_timeout)
                        .map_err(|e| e.to_string())?;
                    Ok(Arc::new(p))
                }
                BindingKind::Telegram { token, api_base } => {
                    let p = TelegramPlatform::new(
                        token.clone(),
                        api_base.clone(),
                        c.poll_timeout,
                        c.telegram.parse_mode.clone(),
                    )
                    .map_err(|e| e.to_string())?;
                    Ok(Arc::new(p))
                }
                BindingKind::Wechat {
                    bot_token,
                    base_url,
                } => {
                    let p = wechat::WechatPlatform::new(
                        bot_token.clone(),
                        base_url.clone(),
                        c.poll_timeout,
                        c.wechat.chunk_chars,
                        c.wechat.max_chunks,
                    )
                    .map_err(|e| e.to_string())?;
                    Ok(Arc::new(p))
                }
                BindingKind::Wecom {
                    corp_id,
                    agent_id,
                    secret,
                    ..
                } => {
                    let agent: i64 = agent_id.parse().map_err(|_| {
                        format!("the WeCom agent id `{agent_id}` is not a number: give the application's AgentId")
                    })?;
                    let p = WecomPlatform::new(
                        corp_id.clone(),
                        agent,
                        secret.clone(),
                        c.wecom.api_base.clone(),
                    )
                    .map_err(|e| e.to_string())?
                    .with_poll_timeout(c.poll_timeout);
                    Ok(Arc::new(p))
                }
            }
        },
        settings,
    )
}

fn actor() -> Result<ActorRef<ChannelsMsg>, Reject> {
    ractor::registry::where_is(CHANNELS_NAME.into())
        .map(ActorRef::from)
        .ok_or_else(|| {
            Reject::new(
                ErrorCode::Unavailable,
                "the channels room is not running (it restarts after a failure): try again shortly",
            )
        })
}

async fn ask<T: Send + 'static>(
    build: impl FnOnce(ractor::RpcReplyPort<Result<T, Reject>>) -> ChannelsMsg,
) -> Result<T, Reject> {
    match actor()?.call(build, Some(ASK)).await {
        Ok(CallResult::Success(r)) => r,
        _ => Err(Reject::new(
            ErrorCode::Unavailable,
            "the channels room did not answer: try again",
        )),
    }
}

/// A job's `--notify BINDING[:CHAT]` must name a binding that exists.
/// When the channels room cannot be asked, the job is not refused for it:
/// its results wait in the log's warnings instead.
pub async fn check_binding(target: &str) -> Result<(), Reject> {
    let binding = target.split(':').next().unwrap_or(target);
    // A malformed target is the jobs room's to explain.
    if flyto_actors::jobs::actor::check_notify(target).is_err() {
        return Ok(());
    }
    let Ok((channels, _)) = ask(|reply| ChannelsMsg::List { reply }).await else {
        return Ok(());
    };
    if channels.iter().any(|c| c.name == binding) {
        return Ok(());
    }
    let known: Vec<&str> = channels.iter().map(|c| c.name.as_str()).collect();
    Err(Reject::new(
        ErrorCode::BadRequest,
        if known.is_empty() {
            format!(
                "--notify {target}: there is no channel binding `{binding}` (none exists yet): bind one first with `flytoctl channel_bind`"
            )
        } else {
            format!(
                "--notify {target}: there is no channel binding `{binding}`: use one of {} (see `flytoctl channel_list`)",
                known.join(", ")
            )
        },
    ))
}

pub async fn list() -> Result<Response, Reject> {
    ask(|reply| ChannelsMsg::List { reply })
        .await
        .map(|(channels, pairings)| Response::Channels { channels, pairings })
}

pub async fn bind(spec: ChannelSpec) -> Result<Response, Reject> {
    ask(|reply| ChannelsMsg::Bind {
        spec: Box::new(spec),
        reply,
    })
    .await
    .map(|c| Response::Channel {
        message: format!("bound {} ({})", c.name, c.kind),
        channel: Some(c),
    })
}

pub async fn unbind(name: String) -> Result<Response, Reject> {
    ask(|reply| ChannelsMsg::Unbind { name, reply })
        .await
        .map(|c| Response::Channel {
            message: format!("unbound {}", c.name),
            channel: Some(c),
        })
}

pub async fn pair(code: String) -> Result<Response, Reject> {
    ask(|reply| ChannelsMsg::Pair { code, reply })
        .await
        .map(|message| Response::Channel {
            channel: None,
            message,
        })
}

pub async fn test(name: String) -> Result<Response, Reject> {
    ask(|reply| ChannelsMsg::Test { name, reply })
        .await
        .map(|message| Response::Channel {
            channel: None,
            message,
        })
}

/// A WeChat login QR code, asked of WeChat's server.
pub async fn qr(base_url: Option<&str>) -> Result<Response, Reject> {
    let base = base_url.unwrap_or(wechat::DEFAULT_BASE_URL);
    wechat::request_qr(base)
        .await
        .map(|qr| Response::ChannelQr {
            id: qr.id,
            content: qr.content,
        })
        .map_err(|e| Reject::new(ErrorCode::Unavailable, format!("WeChat QR code: {e}")))
}

/// One long poll of the QR code's status; on `confirmed` the binding is
/// stored here, so the bot token never travels to a client.
pub async fn qr_wait(
    id: &str,
    base_url: Option<&str>,
    name: Option<String>,
) -> Result<Response, Reject> {
    let base = base_url.unwrap_or(wechat::DEFAULT_BASE_URL);
    let status = wechat::qr_status(base, id, Duration::from_secs(30))
        .await
        .map_err(|e| Reject::new(ErrorCode::Unavailable, format!("WeChat QR status: {e}")))?;
    let (status, channel) = match status {
        wechat::QrStatus::Waiting => ("wait", None),
        wechat::QrStatus::Scanned => ("scanned", None),
        wechat::QrStatus::Expired => ("expired", None),
        wechat::QrStatus::Confirmed {
            bot_token,
            base_url,
        } => {
            let rec = BindingRecord {
                name: name.unwrap_or_else(|| "wechat".into()),
                kind: BindingKind::Wechat {
                    bot_token,
                    base_url: Some(base_url),
                },
                created_ms: flyto_actors::SystemClock.now_ms(),
                auth_failed: None,
                paused_until_ms: None,
            };
            let view = ask(|reply| ChannelsMsg::BindRecord {
                rec: Box::new(rec),
                reply,
            })
            .await?;
            ("confirmed", Some(view))
        }
    };
    Ok(Response::ChannelQrStatus {
        status: status.into(),
        channel,
    })
}

/// The `[channels]` in force and the factory built from it: the room
/// starts (and restarts) with it, and a reload replaces it.
pub type Current = Arc<std::sync::RwLock<(ChannelsConfig, PlatformFactory)>>;

pub fn current(c: &ChannelsSection, config: ChannelsConfig) -> Current {
    Arc::new(std::sync::RwLock::new((config, factory(c))))
}

/// A reloaded `[channels]` (SIGHUP): the running room restarts the
/// bindings it changes and keeps the others.
pub fn reload(current: &Current, c: &ChannelsSection, config: ChannelsConfig) {
    let factory = factory(c);
    if let Ok(mut now) = current.write() {
        *now = (config.clone(), factory.clone());
    }
    if let Ok(room) = actor() {
        let _ = room.cast(ChannelsMsg::Reconfigure {
            config: Box::new(config),
            factory,
        });
    }
}
