//! One binding's poller actor: it owns two tasks, the poll loop (poll,
//! journal durably, then acknowledge; strangers get a pairing code) and
//! the outbox sender (pending chunks in order, each recorded once sent;
//! stale ones dropped). Health is the last completed poll: a poll that
//! does not complete within its timeout plus a grace is abandoned and the
//! platform's HTTP client rebuilt. It reaches sessions never; the chats'
//! turns are the manager's.

use super::platform::{Inbound, OutChunk, Platform, PlatformError};
use super::store::{
    BindingRecord, ChannelStore, ChatRecord, CursorRecord, InboundRecord, OutRecord, OutState,
    PairingRecord, TurnState, Write,
};
use crate::clock::Clock;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Telegram forgets an offset after a week without polls.
const OFFSET_FORGOTTEN_AFTER_MS: u64 = 7 * 86_400_000;
/// A cursor in use is re-stamped this often, so "last used" stays true.
const RESTAMP_MS: u64 = 3_600_000;
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A poll that brought nothing new is followed by the next no sooner than
/// this after its start, whatever the platform did (a server that answers
/// a long poll at once, a folder watch that fires on our own reads): an
/// idle binding costs at most one request a second.
pub const MIN_POLL_GAP: Duration = Duration::from_secs(1);
/// A server that does not hold a poll open (it answers an empty poll at
/// once) is asked less often the longer it has nothing: the gap doubles
/// after every [`QUIET_POLLS`] such answers in a row, up to this. A
/// message brings the gap back to [`MIN_POLL_GAP`]; a server that long
/// polls (Telegram, iLink) never gets here.
const QUIET_POLL_GAP_MAX: Duration = Duration::from_secs(4);
const QUIET_POLLS: u32 = 10;

/// The gap before the next poll after `quiet` empty at-once answers.
fn quiet_gap(quiet: u32) -> Duration {
    let doublings = (quiet / QUIET_POLLS).min(8);
    (MIN_POLL_GAP * 2u32.pow(doublings)).min(QUIET_POLL_GAP_MAX)
}
/// The sender's safety net: it looks at the outbox this often even when
/// nothing woke it (every enqueue, here or on another node, wakes it; a
/// transient failure has its own backoff), so an idle binding does not
/// query its store every few seconds.
const RESEND_EVERY: Duration = Duration::from_secs(60);

/// What `channel_list` shows of a binding; written by its tasks.
#[derive(Debug, Clone, Default)]
pub struct BindingStatus {
    /// `ok`, `starting`, `backing_off`, `auth_failed`, `paused`.
    pub state: String,
    pub last_poll_ms: Option<u64>,
    pub last_error: Option<String>,
}

pub type SharedStatus = Arc<Mutex<BindingStatus>>;

fn set_status(s: &SharedStatus, f: impl FnOnce(&mut BindingStatus)) {
    if let Ok(mut g) = s.lock() {
        f(&mut g);
    }
}

/// Journaled messages, for the manager to hand to their chats' workers.
pub type Route = tokio::sync::mpsc::Sender<(String, String, u64)>;

#[derive(Clone)]
pub struct BindingArgs {
    pub name: String,
    /// `telegram`, `wechat`, `wecom` or `inbox`.
    pub kind: &'static str,
    pub store: ChannelStore,
    pub platform: Arc<dyn Platform>,
    pub clock: Arc<dyn Clock>,
    pub status: SharedStatus,
    pub flush: Arc<Notify>,
    pub route: Route,
    /// Users admitted by config; the inbox admits its one local user.
    pub allow: Vec<String>,
    pub open: bool,
    pub stall_grace: Duration,
    pub outbox_ttl: Duration,
    pub context_ttl: Duration,
    pub pause_on_expiry: Duration,
    pub out_seq: Arc<tokio::sync::Mutex<u64>>,
    /// The binding's record as last read or written here. While this
    /// actor runs only its own loops change the record (a rebind needs an
    /// unbind first, which stops it), so it is read from the store once,
    /// not on every poll: on the shared store each read is a round trip.
    pub record: Arc<Mutex<Option<BindingRecord>>>,
}

impl BindingArgs {
    fn binding_record(&self) -> Option<BindingRecord> {
        let mut cached = self.record.lock().unwrap_or_else(|p| p.into_inner());
        if cached.is_none() {
            *cached = self.store.binding(&self.name).ok().flatten();
        }
        cached.clone()
    }

    /// Changes the record, durably first, then here.
    fn update_record(&self, change: impl FnOnce(&mut BindingRecord)) {
        let Some(mut b) = self.binding_record() else {
            return;
        };
        change(&mut b);
        let mut w = Write::default();
        w.binding(&b);
        match self.store.apply(&w) {
            Ok(()) => *self.record.lock().unwrap_or_else(|p| p.into_inner()) = Some(b),
            Err(e) => {
                tracing::warn!(binding = %self.name, error = %e, "cannot record the binding's state");
                // Read again next time: the store says what holds.
                *self.record.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
        }
    }
}

pub struct BindingActor;

pub enum BindingMsg {
    /// One of the actor's tasks ended on its own: restart through the
    /// supervisor.
    TaskEnded(String),
}

pub struct BindingState {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Actor for BindingActor {
    type Msg = BindingMsg;
    type State = BindingState;
    type Arguments = BindingArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<BindingMsg>,
        args: BindingArgs,
    ) -> Result<BindingState, ActorProcessingErr> {
        set_status(&args.status, |s| s.state = "starting".into());
        let mut tasks = Vec::new();
        if args.platform.inbound() {
            let (a, me) = (args.clone(), myself.clone());
            tasks.push(tokio::spawn(async move {
                let why = poll_loop(&a).await;
                let _ = me.send_message(BindingMsg::TaskEnded(why));
            }));
        } else {
            set_status(&args.status, |s| s.state = "ok".into());
        }
        let (a, me) = (args.clone(), myself.clone());
        tasks.push(tokio::spawn(async move {
            send_loop(&a).await;
            let _ = me.send_message(BindingMsg::TaskEnded("the outbox sender ended".into()));
        }));
        Ok(BindingState { tasks })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<BindingMsg>,
        s: &mut BindingState,
    ) -> Result<(), ActorProcessingErr> {
        for t in s.tasks.drain(..) {
            t.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<BindingMsg>,
        msg: BindingMsg,
        _s: &mut BindingState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            // A poll loop that stopped for good (auth failed) stays
            // stopped; anything else is a failure the supervisor sees.
            BindingMsg::TaskEnded(why) if why.starts_with("auth_failed") => {
                tracing::warn!(binding = %myself.get_name().unwrap_or_default(), "{why}");
            }
            BindingMsg::TaskEnded(why) => return Err(why.into()),
        }
        Ok(())
    }
}

fn jittered(d: Duration) -> Duration {
    let ms = d.as_millis() as u64;
    let spread = rand::thread_rng().gen_range(0..=ms / 2 + 1);
    Duration::from_millis(ms / 2 + spread)
}

/// Polls until the binding's token is refused; returns why it stopped.
async fn poll_loop(a: &BindingArgs) -> String {
    let mut backoff = Duration::from_secs(1);
    // Empty polls in a row that the server answered at once.
    let mut quiet = 0u32;
    let mut in_seq = a.store.last_seq(b'i', &a.name).unwrap_or(0);
    // Only this loop writes the cursor: read once, then kept as written.
    let mut stored = a.store.cursor(&a.name).ok().flatten();
    loop {
        if let Some(b) = a.binding_record() {
            if let Some(why) = &b.auth_failed {
                set_status(&a.status, |s| {
                    s.state = "auth_failed".into();
                    s.last_error = Some(why.clone());
                });
                return format!("auth_failed: {why}");
            }
            if let Some(until) = b.paused_until_ms {
                let now = a.clock.now_ms();
                if until > now {
                    set_status(&a.status, |s| s.state = "paused".into());
                    tokio::time::sleep(Duration::from_millis((until - now).min(60_000))).await;
                    continue;
                }
            }
        }
        let now = a.clock.now_ms();
        let cursor = stored.as_ref().and_then(|c| {
            let forgotten =
                a.kind == "telegram" && now.saturating_sub(c.used_ms) > OFFSET_FORGOTTEN_AFTER_MS;
            (!forgotten).then(|| c.cursor.clone())
        });
        let limit = a.platform.poll_timeout() + a.stall_grace;
        let started = tokio::time::Instant::now();
        let polled = tokio::time::timeout(limit, a.platform.poll(cursor.as_deref())).await;
        let err = match polled {
            Ok(Ok(p)) => {
                set_status(&a.status, |s| {
                    s.state = "ok".into();
                    s.last_poll_ms = Some(a.clock.now_ms());
                });
                match journal(a, &mut in_seq, p.updates, p.cursor, &mut stored).await {
                    Ok(fresh) => {
                        backoff = Duration::from_secs(1);
                        let held = started.elapsed() >= a.platform.poll_timeout() / 2;
                        // An inbox poll asks no server: its folder watch
                        // wakes it, and it stays at the floor.
                        if fresh || held || a.kind == "inbox" {
                            quiet = 0;
                        } else {
                            quiet = quiet.saturating_add(1);
                        }
                        if !fresh {
                            tokio::time::sleep_until(started + quiet_gap(quiet)).await;
                        }
                    }
                    Err(e) => {
                        set_status(&a.status, |s| s.last_error = Some(e.clone()));
                        tracing::warn!(binding = %a.name, error = %e, "cannot journal inbound messages; polling again");
                        tokio::time::sleep(jittered(backoff).max(MIN_POLL_GAP)).await;
                        backoff = (backoff * 2).min(BACKOFF_MAX);
                    }
                }
                continue;
            }
            Ok(Err(e)) => e,
            Err(_) => {
                // The rebuilt connection is the remedy: poll again at once
                // (a stall is not the server refusing), so messages sent
                // meanwhile wait one stall, not a stall and a backoff.
                a.platform.reset();
                let e = format!(
                    "no completed poll within {}s: rebuilt the connection",
                    limit.as_secs()
                );
                tracing::warn!(binding = %a.name, "{e}");
                set_status(&a.status, |s| s.last_error = Some(e));
                continue;
            }
        };
        set_status(&a.status, |s| s.last_error = Some(err.to_string()));
        match err {
            PlatformError::Auth(why) => {
                a.update_record(|b| b.auth_failed = Some(why.clone()));
                set_status(&a.status, |s| s.state = "auth_failed".into());
                return format!("auth_failed: {why}: rebind it with `flytoctl channel_bind`");
            }
            PlatformError::RateLimited { retry_after } => {
                set_status(&a.status, |s| s.state = "backing_off".into());
                // "Retry after 0" must not become a busy loop.
                tokio::time::sleep(retry_after.max(MIN_POLL_GAP)).await;
            }
            PlatformError::SessionExpired(_) => {
                pause(a);
                tokio::time::sleep_until(started + MIN_POLL_GAP).await;
            }
            _ => {
                set_status(&a.status, |s| s.state = "backing_off".into());
                a.platform.reset();
                tokio::time::sleep(jittered(backoff).max(MIN_POLL_GAP)).await;
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

fn pause(a: &BindingArgs) {
    let until = a.clock.now_ms() + a.pause_on_expiry.as_millis() as u64;
    a.update_record(|b| b.paused_until_ms = Some(until));
    set_status(&a.status, |s| s.state = "paused".into());
}

fn pairing_code() -> String {
    // No 0/O or 1/I: read aloud or typed from a phone.
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::thread_rng();
    (0..8)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Journals one poll's updates and the cursor acknowledging them in one
/// durable write, then acknowledges and routes them. Whether the poll
/// brought anything new (an update not seen before, or a moved cursor).
/// `stored` is the cursor on record, updated once a new one is durable.
async fn journal(
    a: &BindingArgs,
    in_seq: &mut u64,
    updates: Vec<Inbound>,
    cursor: Option<String>,
    stored: &mut Option<CursorRecord>,
) -> Result<bool, String> {
    if !updates.is_empty() {
        crate::failpoint::reached("channel-after-receive");
    }
    let now = a.clock.now_ms();
    let mut w = Write::default();
    let mut routed = Vec::new();
    let mut replies = Vec::new();
    let mut touched = false;
    let mut fresh: std::collections::HashSet<String> = std::collections::HashSet::new();
    for u in &updates {
        if a.store
            .seen_update(&a.name, &u.update_id)
            .map_err(|e| e.to_string())?
            || a.store
                .seen_message(&a.name, &u.chat, &u.message_id)
                .map_err(|e| e.to_string())?
            || !fresh.insert(u.update_id.clone())
        {
            continue;
        }
        touched = true;
        if let Some(to) = &u.migrate_to {
            // The chat's session follows it to its new id.
            if let Ok(Some(old)) = a.store.chat(&a.name, &u.chat) {
                w.chat(&a.name, to, &old);
            }
            w.seen(&a.name, &u.update_id);
            continue;
        }
        let allowed = a.open
            || a.allow.iter().any(|x| x == &u.user)
            || a.store
                .allowed(&a.name, &u.user)
                .map_err(|e| e.to_string())?;
        if !allowed {
            // A stranger: one pairing code, and nothing of theirs is kept
            // beyond the request itself.
            w.seen(&a.name, &u.update_id);
            if !a
                .store
                .pending_pairing(&a.name, &u.user)
                .map_err(|e| e.to_string())?
            {
                let code = pairing_code();
                w.pairing(&PairingRecord {
                    code: code.clone(),
                    binding: a.name.clone(),
                    user: u.user.clone(),
                    user_name: u.user_name.clone(),
                    chat: u.chat.clone(),
                    created_ms: now,
                });
                replies.push((u.chat.clone(), code));
            }
            continue;
        }
        *in_seq += 1;
        let rec = InboundRecord {
            binding: a.name.clone(),
            seq: *in_seq,
            update_id: u.update_id.clone(),
            chat: u.chat.clone(),
            user: u.user.clone(),
            message_id: u.message_id.clone(),
            text: u.text.clone(),
            received_ms: now,
            state: TurnState::Queued,
        };
        w.inbound(&rec);
        let known = a.store.chat(&a.name, &u.chat).map_err(|e| e.to_string())?;
        if u.context_token.is_some() || known.as_ref().is_some_and(|c| c.closed) {
            let mut chat: ChatRecord = known.unwrap_or_default();
            // A message from a chat closed by a refused send shows it is
            // open again (the user unblocked the bot): its reply must go.
            chat.closed = false;
            if let Some(token) = &u.context_token {
                chat.context_token = Some((token.clone(), now));
            }
            w.chat(&a.name, &u.chat, &chat);
        }
        routed.push((u.chat.clone(), rec.seq));
    }
    let cursor_moved =
        cursor.is_some() && cursor.as_deref() != stored.as_ref().map(|c| c.cursor.as_str());
    let restamp = stored
        .as_ref()
        .is_some_and(|c| now.saturating_sub(c.used_ms) > RESTAMP_MS);
    let next = cursor.or_else(|| stored.as_ref().map(|c| c.cursor.clone()));
    let mut new_cursor = None;
    if let Some(c) = next
        && (cursor_moved || restamp)
    {
        let rec = CursorRecord {
            cursor: c,
            used_ms: now,
        };
        w.cursor(&a.name, &rec);
        new_cursor = Some(rec);
        touched = true;
    }
    let mut seq = a.out_seq.lock().await;
    pairing_replies(a, &mut seq, &mut w, &replies, now)?;
    if touched || !replies.is_empty() {
        a.store.apply(&w).map_err(|e| e.to_string())?;
    }
    drop(seq);
    if touched || !replies.is_empty() {
        // Durable before anything acknowledges it to the platform.
        a.store.synced().await?;
        if new_cursor.is_some() {
            *stored = new_cursor;
        }
    }
    if !updates.is_empty() {
        crate::failpoint::reached("channel-after-journal");
        a.platform.ack(&updates).await.map_err(|e| e.to_string())?;
        crate::failpoint::reached("channel-after-ack");
    }
    for (chat, seq) in routed {
        if a.route.send((a.name.clone(), chat, seq)).await.is_err() {
            return Err("the channel manager stopped".into());
        }
    }
    if !replies.is_empty() {
        a.flush.notify_one();
    }
    Ok(!fresh.is_empty() || cursor_moved)
}

/// Queues each stranger's pairing code in the outbox, in the batch `w`
/// (the caller holds the outbox sequence until the batch is applied).
fn pairing_replies(
    a: &BindingArgs,
    out_seq: &mut u64,
    w: &mut Write,
    replies: &[(String, String)],
    now: u64,
) -> Result<(), String> {
    for (chat, code) in replies {
        let seq = a.store.next_out_seq(out_seq).map_err(|e| e.to_string())?;
        w.out(&OutRecord {
            binding: a.name.clone(),
            seq,
            id: format!("pair/{code}/0"),
            chat: chat.clone(),
            text: format!(
                "This agent answers only people its owner has admitted. To be admitted, ask the owner to run:\n\nflytoctl channel_pair {code}"
            ),
            index: 0,
            last: true,
            plain: true,
            created_ms: now,
            reply_to: None,
            state: OutState::Pending,
        });
    }
    Ok(())
}

/// Sends pending chunks, oldest first, until the actor stops.
async fn send_loop(a: &BindingArgs) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let wait = match send_pending(a).await {
            Ok(()) => {
                backoff = Duration::from_secs(1);
                // A paused binding sends again when its pause ends.
                let now = a.clock.now_ms();
                match a.binding_record().and_then(|b| b.paused_until_ms) {
                    Some(until) if until > now => {
                        RESEND_EVERY.min(Duration::from_millis(until - now))
                    }
                    _ => RESEND_EVERY,
                }
            }
            Err(Some(d)) => {
                // The platform said when: a reply queued meanwhile must
                // not wake the sender early (a wake-up during the sleep is
                // kept, and taken after it). "Retry after 0" still waits.
                tokio::time::sleep(d.max(MIN_POLL_GAP)).await;
                continue;
            }
            Err(None) => {
                let d = jittered(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
                d
            }
        };
        let _ = tokio::time::timeout(wait, a.flush.notified()).await;
    }
}

/// `Err(Some(d))`: wait exactly `d` (rate limited); `Err(None)`: back off.
async fn send_pending(a: &BindingArgs) -> Result<(), Option<Duration>> {
    let Ok(outbox) = a.store.outbox(&a.name) else {
        return Err(None);
    };
    if let Some(b) = a.binding_record()
        && (b.auth_failed.is_some() || b.paused_until_ms.is_some_and(|u| u > a.clock.now_ms()))
    {
        return Ok(());
    }
    let ttl = a.outbox_ttl.as_millis() as u64;
    for mut o in outbox
        .into_iter()
        .filter(|o| matches!(o.state, OutState::Pending | OutState::Sending))
    {
        if o.state == OutState::Sending {
            // Only a restart finds one: this loop owns the chunk until it
            // records how its send ended.
            tracing::warn!(binding = %a.name, chunk = %o.id, "a reply chunk was being sent when flytod stopped; not sending it again");
            o.state = OutState::Dropped {
                why: "flytod stopped while sending it: it may not have arrived, and is not sent twice".into(),
            };
            record(a, &o).await;
            continue;
        }
        let now = a.clock.now_ms();
        if now.saturating_sub(o.created_ms) > ttl {
            tracing::warn!(
                binding = %a.name, chunk = %o.id, age_s = (now - o.created_ms) / 1000,
                "dropped a reply chunk not sent within channels.outbox_ttl; it is not sent late"
            );
            o.state = OutState::Dropped {
                why: format!("not sent within the outbox ttl ({}s)", ttl / 1000),
            };
            record(a, &o).await;
            continue;
        }
        let chat = a
            .store
            .chat(&a.name, &o.chat)
            .ok()
            .flatten()
            .unwrap_or_default();
        if chat.closed {
            o.state = OutState::Dropped {
                why: "the chat is closed (the user blocked the bot)".into(),
            };
            record(a, &o).await;
            continue;
        }
        let context_ttl = a.context_ttl.as_millis() as u64;
        let context_token = chat
            .context_token
            .clone()
            .filter(|(_, at)| now.saturating_sub(*at) <= context_ttl)
            .map(|(t, _)| t);
        if o.index > 0 {
            tokio::time::sleep(a.platform.chunk_gap()).await;
        }
        let mut chunk = OutChunk {
            id: o.id.clone(),
            text: o.text.clone(),
            index: o.index,
            last: o.last,
            plain: o.plain,
            context_token,
            reply_to: o.reply_to.clone(),
        };
        crate::failpoint::reached("channel-before-send");
        // Durably `sending` first: a crash from here on must not send it
        // a second time. Not recorded (the binding's lease was lost, or
        // the store failed): not sent; the binding's holder decides.
        o.state = OutState::Sending;
        if !record(a, &o).await {
            return Err(None);
        }
        let mut sent = a.platform.send(&o.chat, &chunk).await;
        if matches!(sent, Err(PlatformError::Markup(_))) && !chunk.plain {
            chunk.plain = true;
            o.plain = true;
            sent = a.platform.send(&o.chat, &chunk).await;
        }
        crate::failpoint::reached("channel-after-send");
        match sent {
            Ok(platform_id) => {
                o.state = OutState::Sent {
                    platform_id,
                    at_ms: a.clock.now_ms(),
                };
                record(a, &o).await;
            }
            Err(PlatformError::RateLimited { retry_after }) => {
                o.state = OutState::Pending;
                record(a, &o).await;
                return Err(Some(retry_after));
            }
            Err(PlatformError::ChatClosed(why)) => {
                // Read again: the chat's worker may have changed it while
                // the send was under way.
                let mut c = a
                    .store
                    .chat(&a.name, &o.chat)
                    .ok()
                    .flatten()
                    .unwrap_or(chat);
                c.closed = true;
                let mut w = Write::default();
                w.chat(&a.name, &o.chat, &c);
                let _ = a.store.apply(&w);
                o.state = OutState::Dropped {
                    why: format!("the chat is closed: {why}"),
                };
                record(a, &o).await;
            }
            Err(PlatformError::NeedsUserMessage(_)) => {
                o.state = OutState::NeedsUserMessage;
                record(a, &o).await;
            }
            Err(PlatformError::SessionExpired(why)) => {
                o.state = OutState::Pending;
                record(a, &o).await;
                set_status(&a.status, |s| s.last_error = Some(why));
                pause(a);
                return Ok(());
            }
            Err(PlatformError::Auth(why)) => {
                set_status(&a.status, |s| {
                    s.state = "auth_failed".into();
                    s.last_error = Some(why.clone());
                });
                o.state = OutState::Pending;
                record(a, &o).await;
                a.update_record(|b| b.auth_failed = Some(why));
                return Ok(());
            }
            Err(PlatformError::Rejected(why) | PlatformError::Markup(why)) => {
                tracing::warn!(binding = %a.name, chunk = %o.id, error = %why, "the platform refused a reply chunk");
                o.state = OutState::Dropped { why };
                record(a, &o).await;
            }
            Err(e @ (PlatformError::Transient(_) | PlatformError::Conflict(_))) => {
                // Not sent (as far as anyone can tell): tried again later.
                o.state = OutState::Pending;
                record(a, &o).await;
                set_status(&a.status, |s| s.last_error = Some(e.to_string()));
                return Err(None);
            }
        }
    }
    Ok(())
}

/// A chunk's new state, durable before the next chunk goes out: after a
/// restart a sent chunk is never sent again. Whether it was recorded.
async fn record(a: &BindingArgs, o: &OutRecord) -> bool {
    let mut w = Write::default();
    w.out(o);
    match a.store.apply(&w) {
        Ok(()) => a.store.synced().await.is_ok(),
        Err(e) => {
            tracing::warn!(binding = %a.name, chunk = %o.id, error = %e, "cannot record a reply chunk's state");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_answers_empty_polls_at_once_is_asked_less_often_up_to_a_cap() {
        let secs = |q| quiet_gap(q).as_secs();
        assert_eq!([secs(0), secs(1), secs(9)], [1, 1, 1]);
        assert_eq!([secs(10), secs(19), secs(20)], [2, 2, 4]);
        assert_eq!([secs(30), secs(1000), secs(u32::MAX)], [4, 4, 4]);
    }
}
