//! The channels room: chat platforms (Telegram, WeChat iLink, WeCom, an
//! inbox folder) as bindings, each with one poller; an inbound message is
//! journaled before the platform's cursor moves, gets exactly one agent
//! turn in its chat's own persistent session, and its reply goes out
//! through a persisted outbox. The room reaches sessions only through the
//! session manager's messages and may not touch plans or memory.

pub mod binding;
pub mod chat;
pub mod chunk;
pub mod inbox;
pub mod lease;
pub mod manager;
pub mod platform;
pub mod shared;
pub mod store;
pub mod telegram;
pub mod tools;
pub mod wechat;
pub mod wecom;

pub use platform::{Inbound, OutChunk, Platform, PlatformError, PlatformFuture, Polled};
