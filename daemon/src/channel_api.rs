//! The `channel_*` requests, asked of the channels room's manager, and the
//! factory that turns a stored binding into its platform with this
//! config's settings.

use crate::config::ChannelsSection;
use flyto_actors::channels::Platform;
use flyto_actors::channels::inbox::InboxPlatform;
use flyto_actors::channels::manager::{CHANNELS_NAME, ChannelsMsg, PlatformFactory};
use flyto_actors::channels::store::{BindingKind, BindingRecord};
use flyto_actors::channels::wechat::WechatPlatform;
use flyto_actors::channels::wecom::WecomPlatform;
use flyto_actors::plans::Reject;
use flyto_protocol::{ErrorCode, Request, Response};
use ractor::ActorRef;
use ractor::rpc::CallResult;
use std::sync::Arc;
use std::time::Duration;

const ASK: Duration = Duration::from_secs(60);

pub fn factory(c: &ChannelsSection) -> PlatformFactory {
    let c = c.clone();
    Arc::new(
        move |rec: &BindingRecord| -> Result<Arc<dyn Platform>, String> {
            match &rec.kind {
                BindingKind::Inbox { dir } => {
                    let p = InboxPlatform::new(std::path::Path::new(dir), c.poll_timeout)
                        .map_err(|e| e.to_string())?;
                    Ok(Arc::new(p))
                }
                other => Err(format!(
                    "{} bindings are not supported by this flytod",
                    other.name()
                )),
            }
        },
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

/// `None`: not a channel request.
pub async fn handle(req: &Request) -> Option<Result<Response, Reject>> {
    let answer = match req {
        Request::ChannelList {} => ask(|reply| ChannelsMsg::List { reply })
            .await
            .map(|(channels, pairings)| Response::Channels { channels, pairings }),
        Request::ChannelBind { spec } => ask(|reply| ChannelsMsg::Bind {
            spec: Box::new(spec.clone()),
            reply,
        })
        .await
        .map(|c| Response::Channel {
            message: format!("bound {} ({})", c.name, c.kind),
            channel: Some(c),
        }),
        Request::ChannelUnbind { name } => ask(|reply| ChannelsMsg::Unbind {
            name: name.clone(),
            reply,
        })
        .await
        .map(|c| Response::Channel {
            message: format!("unbound {}", c.name),
            channel: Some(c),
        }),
        Request::ChannelPair { code } => ask(|reply| ChannelsMsg::Pair {
            code: code.clone(),
            reply,
        })
        .await
        .map(|message| Response::Channel {
            channel: None,
            message,
        }),
        Request::ChannelTest { name } => ask(|reply| ChannelsMsg::Test {
            name: name.clone(),
            reply,
        })
        .await
        .map(|message| Response::Channel {
            channel: None,
            message,
        }),
        _ => return None,
    };
    Some(answer)
}
