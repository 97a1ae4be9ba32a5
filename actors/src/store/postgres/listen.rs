//! Wake-ups between nodes: one dedicated connection per daemon LISTENs on
//! the channels it needs; a NOTIFY from any node wakes every waiter on
//! that channel. A notification is only a
//! hint: the listener also wakes at every (re)connect, since what was
//! notified while it was away is lost, and every `poll_every` as a
//! fallback. Whoever is woken re-reads the database.

use super::{Shared, detail};
use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

pub struct Listener {
    channels: HashMap<String, Arc<watch::Sender<u64>>>,
    /// Waiters for one payload of a channel (a plan's id): woken by its
    /// notifications, at every reconnect and poll, not by the others.
    keyed: Keyed,
    reconnects: Arc<AtomicU64>,
    /// Connections that got to LISTEN (and woke everyone after).
    connects: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// (channel, payload) → its waiters' sender, while any waiter is left.
type Keyed = Arc<std::sync::Mutex<HashMap<(String, String), Weak<watch::Sender<u64>>>>>;

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One waiter's wake-ups on one channel: a change it has not seen yet
/// is kept until it looks, however many came meanwhile.
pub struct Wake {
    rx: watch::Receiver<u64>,
    /// The channel's wake-up count this waiter has seen.
    seen: u64,
    /// A keyed waiter's sender: it lives as long as one of its waiters.
    _keyed: Option<Arc<watch::Sender<u64>>>,
}

impl Wake {
    /// Whether a wake-up is waiting, without taking it.
    pub fn pending(&self) -> bool {
        *self.rx.borrow() != self.seen
    }

    /// Waits for the next reason to look at the database.
    pub async fn woken(&mut self) {
        loop {
            let now = *self.rx.borrow_and_update();
            if now != self.seen {
                self.seen = now;
                return;
            }
            if self.rx.changed().await.is_err() {
                // The listener is gone: nothing will wake this waiter again.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// `channel` as an SQL identifier.
fn quoted(channel: &str) -> String {
    format!("\"{}\"", channel.replace('"', "\"\""))
}

/// Keyed waiters first: whoever sees a channel's waiter woken knows every
/// keyed one was woken too.
fn wake_all(channels: &HashMap<String, Arc<watch::Sender<u64>>>, keyed: &Keyed) {
    {
        let mut k = keyed.lock().unwrap_or_else(|e| e.into_inner());
        k.retain(|_, tx| match tx.upgrade() {
            Some(tx) => {
                tx.send_modify(|n| *n += 1);
                true
            }
            None => false,
        });
    }
    for tx in channels.values() {
        tx.send_modify(|n| *n += 1);
    }
}

fn wake_key(keyed: &Keyed, channel: &str, payload: &str) {
    let k = keyed.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tx) = k
        .get(&(channel.to_string(), payload.to_string()))
        .and_then(Weak::upgrade)
    {
        tx.send_modify(|n| *n += 1);
    }
}

impl Listener {
    /// One connection LISTENing on every one of `channels`.
    pub fn start(shared: &Shared, channels: &[&str], poll_every: Duration) -> Listener {
        let channels: HashMap<String, Arc<watch::Sender<u64>>> = channels
            .iter()
            .map(|c| (c.to_string(), Arc::new(watch::channel(0).0)))
            .collect();
        let reconnects = Arc::new(AtomicU64::new(0));
        let connects = Arc::new(AtomicU64::new(0));
        let mut config = shared.config.clone();
        config.application_name("flyto-listen");
        // A connection that died silently (a cut network) would lose every
        // notification until the fallback poll: the kernel's keepalives
        // find it within about half a minute, and the reconnect wakes all.
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(15))
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3);
        let (target, tls) = (shared.target.clone(), shared.tls.clone());
        let keyed: Keyed = Arc::default();
        let (all, r, keys) = (channels.clone(), reconnects.clone(), keyed.clone());
        let c = connects.clone();
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            let mut first = true;
            loop {
                let (client, mut connection) = match config.connect(tls.clone()).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(db = %target, error = %detail(&e), "the listener cannot connect; polling meanwhile");
                        wake_all(&all, &keys);
                        tokio::time::sleep(backoff.min(poll_every)).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                        continue;
                    }
                };
                let (tx, mut rx) = mpsc::channel::<(String, String)>(64);
                // The connection's messages, notifications among them, come
                // only while someone polls it.
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                                // Full: wake-ups are pending anyway.
                                let _ =
                                    tx.try_send((n.channel().to_string(), n.payload().to_string()));
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                });
                let listen: String = all
                    .keys()
                    .map(|c| format!("LISTEN {};", quoted(c)))
                    .collect();
                if let Err(e) = client.batch_execute(&listen).await {
                    tracing::warn!(db = %target, error = %detail(&e), "the listener cannot LISTEN; reconnecting");
                    driver.abort();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    continue;
                }
                let connected_at = tokio::time::Instant::now();
                if !first {
                    r.fetch_add(1, Ordering::SeqCst);
                }
                first = false;
                // Counted before the wake-up: whoever it wakes sees the
                // connection counted.
                c.fetch_add(1, Ordering::SeqCst);
                // Whatever was notified while away is lost: look now.
                wake_all(&all, &keys);
                loop {
                    tokio::select! {
                        got = rx.recv() => match got {
                            Some((channel, payload)) => {
                                if let Some(tx) = all.get(&channel) {
                                    tx.send_modify(|n| *n += 1);
                                }
                                wake_key(&keys, &channel, &payload);
                            }
                            None => break,
                        },
                        _ = tokio::time::sleep(poll_every) => wake_all(&all, &keys),
                    }
                }
                driver.abort();
                tracing::warn!(db = %target, "the listener's connection ended; reconnecting");
                // A server that accepts, then drops each connection at
                // once must not get a reconnect loop: the backoff restarts
                // only after a connection that lasted.
                if connected_at.elapsed() >= Duration::from_secs(60) {
                    backoff = Duration::from_millis(200);
                }
                tokio::time::sleep(backoff.min(poll_every)).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        });
        Listener {
            channels,
            keyed,
            reconnects,
            connects,
            task,
        }
    }

    /// A new waiter on `channel` (one the listener was started with). Its
    /// first wait returns at once when anything woke the channel since the
    /// listener started (its connect, at least): that is for it to look at.
    /// A channel it does not listen on never wakes (a mistake in the
    /// caller, logged).
    pub fn subscribe(&self, channel: &str) -> Wake {
        let rx = match self.channels.get(channel) {
            Some(tx) => tx.subscribe(),
            None => {
                tracing::error!(
                    channel,
                    "a waiter subscribed to a channel the listener does not listen on: it is never woken"
                );
                watch::channel(0).1
            }
        };
        Wake {
            rx,
            seen: 0,
            _keyed: None,
        }
    }

    /// A new waiter for `payload`'s notifications on `channel` (say, one
    /// plan's), also woken at every reconnect and fallback poll, but not by
    /// the channel's other notifications. Its first wait returns at once.
    pub fn subscribe_key(&self, channel: &str, payload: &str) -> Wake {
        let mut k = self.keyed.lock().unwrap_or_else(|e| e.into_inner());
        let key = (channel.to_string(), payload.to_string());
        let tx = match k.get(&key).and_then(Weak::upgrade) {
            Some(tx) => tx,
            None => {
                let tx = Arc::new(watch::channel(1).0);
                k.insert(key, Arc::downgrade(&tx));
                tx
            }
        };
        Wake {
            rx: tx.subscribe(),
            seen: 0,
            _keyed: Some(tx),
        }
    }

    /// How often the listener had to connect again.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::SeqCst)
    }

    /// How often a connection got to LISTEN; counted once it has woken
    /// every waiter for it.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::SeqCst)
    }
}

/// Wakes every node listening on `channel`.
pub async fn notify(shared: &Shared, channel: &str, payload: &str) -> Result<(), super::PgError> {
    let c = shared.client().await?;
    c.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
        .await
        .map_err(shared.query_err("notifying"))?;
    Ok(())
}
