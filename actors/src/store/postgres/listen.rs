//! Wake-ups between nodes: one dedicated connection per daemon LISTENs on
//! a channel; a NOTIFY from any node wakes it. A notification is only a
//! hint: the listener also wakes at every (re)connect, since what was
//! notified while it was away is lost, and every `poll_every` as a
//! fallback. Whoever is woken re-reads the database.

use super::{Shared, detail};
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

pub struct Listener {
    wake: Arc<Notify>,
    reconnects: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `channel` as an SQL identifier.
fn quoted(channel: &str) -> String {
    format!("\"{}\"", channel.replace('"', "\"\""))
}

impl Listener {
    pub fn start(shared: &Shared, channel: &str, poll_every: Duration) -> Listener {
        let wake = Arc::new(Notify::new());
        let reconnects = Arc::new(AtomicU64::new(0));
        let mut config = shared.config.clone();
        config.application_name(format!("flyto-listen {channel}"));
        let (target, channel) = (shared.target.clone(), channel.to_string());
        let (w, r) = (wake.clone(), reconnects.clone());
        let task = tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            let mut first = true;
            loop {
                let (client, mut connection) = match config.connect(tokio_postgres::NoTls).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(db = %target, error = %detail(&e), "the listener cannot connect; polling meanwhile");
                        w.notify_one();
                        tokio::time::sleep(backoff.min(poll_every)).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                        continue;
                    }
                };
                let (tx, mut rx) = mpsc::channel::<()>(1);
                // The connection's messages, notifications among them, come
                // only while someone polls it.
                let driver = tokio::spawn(async move {
                    let mut messages =
                        futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(m) = messages.next().await {
                        match m {
                            Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                                let _ = tx.try_send(());
                            }
                            Ok(_) => {}
                            Err(_) => break,
                        }
                    }
                });
                if let Err(e) = client
                    .batch_execute(&format!("LISTEN {}", quoted(&channel)))
                    .await
                {
                    tracing::warn!(db = %target, error = %detail(&e), "the listener cannot LISTEN; reconnecting");
                    driver.abort();
                    tokio::time::sleep(backoff).await;
                    continue;
                }
                backoff = Duration::from_millis(200);
                if !first {
                    r.fetch_add(1, Ordering::SeqCst);
                }
                first = false;
                // Whatever was notified while away is lost: look now.
                w.notify_one();
                loop {
                    tokio::select! {
                        got = rx.recv() => match got {
                            Some(()) => w.notify_one(),
                            None => break,
                        },
                        _ = tokio::time::sleep(poll_every) => w.notify_one(),
                    }
                }
                driver.abort();
                tracing::warn!(db = %target, "the listener's connection ended; reconnecting");
            }
        });
        Listener {
            wake,
            reconnects,
            task,
        }
    }

    /// Waits for the next reason to look at the database.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// How often the listener had to connect again.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::SeqCst)
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
