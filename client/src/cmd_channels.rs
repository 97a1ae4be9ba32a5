//! `channel_*`: chat bindings (Telegram, WeChat, WeCom, an inbox folder):
//! their health, binding and unbinding, admitting a user, a test send.

use crate::conn::{Ctx, unexpected};
use crate::exit;
use crate::output;
use crate::sanitize::for_tty;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use flyto_protocol::{ChannelSpec, ChannelView, Request, Response};
use std::io::IsTerminal;

#[derive(Debug, Args)]
pub struct ListArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BindArgs {
    #[command(subcommand)]
    pub kind: BindKind,
    /// The binding's name [default: the kind]
    #[arg(long, global = true)]
    pub name: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum BindKind {
    /// A Telegram bot (its token from @BotFather, read from an environment variable)
    Telegram {
        /// The environment variable holding the bot token
        #[arg(long, value_name = "VAR")]
        token_env: String,
        /// A self-hosted Bot API server, a proxy or a test server
        #[arg(long, value_name = "URL")]
        api_base: Option<String>,
    },
    /// WeChat (ClawBot, iLink bot API): shows a QR code to scan with WeChat
    Wechat {
        #[arg(long, value_name = "URL")]
        base_url: Option<String>,
    },
    /// WeCom application push to one user (outbound only); corp id, agent id
    /// and secret from WECOM_CORP_ID, WECOM_AGENT_ID and WECOM_SECRET
    Wecom {
        #[arg(long, value_name = "ID")]
        userid: String,
    },
    /// A folder: write a file into DIR/tmp, rename it into DIR/new; the reply
    /// appears as DIR/out/<same name>
    Inbox {
        #[arg(long, value_name = "DIR")]
        dir: std::path::PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct NameArgs {
    pub name: String,
}

#[derive(Debug, Args)]
pub struct CodeArgs {
    pub code: String,
}

fn print(text: &str) -> Result<()> {
    output::stdout(&for_tty(text, std::io::stdout().is_terminal()))
}

fn channel_text(c: &ChannelView) -> String {
    format!(
        "{} ({}) {}{}\n  last poll: {}; queued {}, outbox {} pending, {} sent, {} dropped, {} waiting for the user; {} chats\n{}",
        c.name,
        c.kind,
        c.state,
        c.target
            .as_ref()
            .map_or_else(String::new, |t| format!(" [{t}]")),
        c.last_poll.as_deref().unwrap_or("-"),
        c.queued,
        c.outbox_pending,
        c.sent,
        c.dropped,
        c.needs_user_message,
        c.chats,
        c.last_error
            .as_ref()
            .map_or_else(String::new, |e| format!("  last error: {e}\n")),
    )
}

pub fn list(ctx: &Ctx, args: ListArgs) -> Result<u8> {
    match ctx.request(&Request::ChannelList {})? {
        Response::Channels { channels, pairings } => {
            if args.json {
                print(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"channels": channels, "pairings": pairings})
                    )?
                ))?;
                return Ok(exit::SUCCESS);
            }
            let mut text = String::new();
            if channels.is_empty() {
                text.push_str(
                    "no channel bindings; try `flytoctl channel_bind inbox --dir ~/flyto-inbox`\n",
                );
            }
            for c in &channels {
                text.push_str(&channel_text(c));
            }
            for p in &pairings {
                text.push_str(&format!(
                    "pairing request {} on {} from {} ({}), {}: admit with `flytoctl channel_pair {}`\n",
                    p.code, p.binding, p.user_name, p.user, p.created, p.code
                ));
            }
            print(&text)?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected("channel_list", &other)),
    }
}

fn env_secret(var: &str, what: &str) -> Result<String> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => bail!(
            "{var} is not set: export {what} in {var} (it is sent to flytod, which keeps it in its state directory)"
        ),
    }
}

pub fn bind(ctx: &Ctx, args: BindArgs) -> Result<u8> {
    let mut spec = ChannelSpec {
        name: args.name.clone(),
        ..ChannelSpec::default()
    };
    match args.kind {
        BindKind::Telegram {
            token_env,
            api_base,
        } => {
            spec.kind = "telegram".into();
            spec.token = Some(env_secret(&token_env, "the bot token from @BotFather")?);
            spec.api_base = api_base;
        }
        BindKind::Wechat { base_url } => return bind_wechat(ctx, base_url, args.name),
        BindKind::Wecom { userid } => {
            spec.kind = "wecom".into();
            spec.userid = Some(userid);
            spec.corp_id = Some(env_secret("WECOM_CORP_ID", "the corp id")?);
            spec.agent_id = Some(env_secret("WECOM_AGENT_ID", "the application's agent id")?);
            spec.secret = Some(env_secret("WECOM_SECRET", "the application's secret")?);
        }
        BindKind::Inbox { dir } => {
            spec.kind = "inbox".into();
            let dir = if dir.is_absolute() {
                dir
            } else {
                std::env::current_dir()
                    .context("cannot read the current directory")?
                    .join(dir)
            };
            spec.dir = Some(dir.display().to_string());
        }
    }
    answer(ctx.request(&Request::ChannelBind { spec })?, "channel_bind")
}

fn answer(resp: Response, op: &str) -> Result<u8> {
    match resp {
        Response::Channel { channel, message } => {
            let mut text = format!("{message}\n");
            if let Some(c) = &channel {
                text.push_str(&channel_text(c));
            }
            print(&text)?;
            Ok(exit::SUCCESS)
        }
        other => Err(unexpected(op, &other)),
    }
}

fn bind_wechat(ctx: &Ctx, base_url: Option<String>, name: Option<String>) -> Result<u8> {
    let (id, content) = match ctx.request(&Request::ChannelQr {
        base_url: base_url.clone(),
    })? {
        Response::ChannelQr { id, content } => (id, content),
        other => return Err(unexpected("channel_qr", &other)),
    };
    print(&format!(
        "Scan this with WeChat to bind the bot ({content}):\n{}\n",
        crate::qr::render(&content)
    ))?;
    let mut shown = id;
    loop {
        match ctx.request(&Request::ChannelQrWait {
            id: shown.clone(),
            base_url: base_url.clone(),
            name: name.clone(),
        })? {
            Response::ChannelQrStatus { status, channel } => match status.as_str() {
                "confirmed" => {
                    let text = channel.as_ref().map(channel_text).unwrap_or_default();
                    print(&format!("bound\n{text}"))?;
                    return Ok(exit::SUCCESS);
                }
                "scanned" => eprintln!("flytoctl: scanned; confirm in WeChat"),
                "expired" => {
                    // A fresh code, shown again.
                    match ctx.request(&Request::ChannelQr {
                        base_url: base_url.clone(),
                    })? {
                        Response::ChannelQr { id, content } => {
                            print(&format!(
                                "The code expired; scan this one:\n{}\n",
                                crate::qr::render(&content)
                            ))?;
                            shown = id;
                        }
                        other => return Err(unexpected("channel_qr", &other)),
                    }
                }
                _ => {}
            },
            other => return Err(unexpected("channel_qr_wait", &other)),
        }
    }
}

pub fn unbind(ctx: &Ctx, args: NameArgs) -> Result<u8> {
    answer(
        ctx.request(&Request::ChannelUnbind { name: args.name })?,
        "channel_unbind",
    )
}

pub fn pair(ctx: &Ctx, args: CodeArgs) -> Result<u8> {
    answer(
        ctx.request(&Request::ChannelPair { code: args.code })?,
        "channel_pair",
    )
}

pub fn test(ctx: &Ctx, args: NameArgs) -> Result<u8> {
    answer(
        ctx.request(&Request::ChannelTest { name: args.name })?,
        "channel_test",
    )
}
