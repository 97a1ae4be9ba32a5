//! The lease keeper of the channels room on the shared store. Every tick
//! (10 s, or at once when a node notifies a change) it reads the bindings,
//! takes the lease of each one nobody holds, renews this node's leases
//! every 10 s, gives up those of bindings that are gone, and, when no
//! renewal reached the database for 30 s (well inside the 45 s lease),
//! drops them all (self-fencing), so a paused or cut-off node stops
//! polling before another may start. It only reports to the manager,
//! which starts and stops the bindings; it may not touch them.

use super::shared::{CHANNELS_CHANNEL, SharedChannels};
use super::store::BindingRecord;
use crate::store::postgres::claims::{HEARTBEAT_EVERY, LEASE, SELF_FENCE_AFTER};
use crate::store::postgres::listen::Listener;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct LeaseTimes {
    pub tick: Duration,
    pub renew_every: Duration,
    pub lease: Duration,
    pub fence_after: Duration,
}

impl Default for LeaseTimes {
    fn default() -> Self {
        LeaseTimes {
            // Two reads a tick: an idle node's cost. A binding whose holder
            // died waits for its lease (45 s) anyway.
            tick: Duration::from_secs(10),
            renew_every: HEARTBEAT_EVERY,
            lease: LEASE,
            fence_after: SELF_FENCE_AFTER,
        }
    }
}

/// What the manager needs to run the room on the shared store.
#[derive(Clone)]
pub struct Cluster {
    pub backend: Arc<SharedChannels>,
    /// This node's id.
    pub node: String,
    /// This node's id in its previous run on the same state directory:
    /// that run's leases are given up at once.
    pub previous: Option<String>,
    /// Wakes the keeper on a NOTIFY; its fallback is the tick.
    pub listener: Option<Arc<Listener>>,
    pub times: LeaseTimes,
}

/// binding → this node's lease token; shared by the keeper and the
/// manager (which releases them when it stops).
pub type Held = Arc<Mutex<HashMap<String, i64>>>;

/// One tick's news for the manager.
#[derive(Debug, Default)]
pub struct Tick {
    /// Every binding (`None`: they could not be read this tick).
    pub records: Option<Vec<BindingRecord>>,
    /// Leases this node took: start these bindings.
    pub acquired: Vec<(BindingRecord, i64)>,
    /// Leases this node lost or gave up: stop these bindings now.
    pub lost: Vec<String>,
    /// binding → the node that holds it (`None`: not read this tick).
    pub holders: Option<HashMap<String, String>>,
    /// A node notified a change (an outbox to look at); not a timer tick.
    pub notified: bool,
}

fn held_now(held: &Held) -> HashMap<String, i64> {
    held.lock().map(|h| h.clone()).unwrap_or_default()
}

fn forget(held: &Held, name: &str) {
    if let Ok(mut h) = held.lock() {
        h.remove(name);
    }
}

/// The longest one tick's round trips may take: a database that does not
/// answer must not delay the self-fencing check past the lease.
const TICK_BUDGET: Duration = Duration::from_secs(5);

/// Runs until `report` says the manager is gone.
pub async fn run(c: Cluster, held: Held, report: impl Fn(Tick) -> bool) {
    let mut wake = c.listener.as_ref().map(|l| l.subscribe(CHANNELS_CHANNEL));
    if let Some(prev) = &c.previous {
        match c.backend.release_node(prev).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(node = %prev, n, "gave up the channel leases of this node's previous run")
            }
            Err(e) => {
                tracing::warn!(node = %prev, error = %e, "cannot give up the channel leases of this node's previous run; they run out by themselves")
            }
        }
    }
    let mut k = Keeper {
        c: &c,
        held: &held,
        last_renewed: Instant::now(),
        last_ok: Instant::now(),
        records: None,
    };
    let mut notified = false;
    loop {
        let mut tick = Tick {
            notified,
            ..Tick::default()
        };
        let budget = TICK_BUDGET.max(c.times.tick);
        if tokio::time::timeout(budget, k.tick(&mut tick))
            .await
            .is_err()
        {
            tracing::warn!(node = %c.node, "the database did not answer the channel lease keeper in time");
        }
        let mine = held_now(&held);
        if mine.is_empty() {
            k.last_ok = Instant::now();
        } else if k.last_ok.elapsed() >= c.times.fence_after {
            tracing::error!(
                node = %c.node,
                after_s = c.times.fence_after.as_secs(),
                "no channel lease renewal reached the database: stopping this node's channel bindings before their leases expire"
            );
            if let Ok(mut h) = held.lock() {
                h.clear();
            }
            tick.acquired.clear();
            tick.lost.extend(mine.into_keys());
        }
        if tick.records.is_none() && !tick.lost.is_empty() {
            // A binding stopped here is listed as another node's from now
            // on: the manager needs the list to show it.
            tick.records = k.records.as_ref().map(|(r, _)| r.clone());
        }
        if !report(tick) {
            return;
        }
        notified = match wake.as_mut() {
            Some(w) => tokio::time::timeout(c.times.tick, w.woken()).await.is_ok(),
            None => {
                tokio::time::sleep(c.times.tick).await;
                false
            }
        };
    }
}

struct Keeper<'a> {
    c: &'a Cluster,
    held: &'a Held,
    last_renewed: Instant,
    /// The last renewal that reached the database (or since when this
    /// node holds nothing).
    last_ok: Instant,
    /// The bindings as last read, and when: re-read when a node notifies
    /// a change (bind and unbind do), else every [`RECORDS_EVERY`].
    records: Option<(Vec<BindingRecord>, Instant)>,
}

/// How stale the keeper's list of bindings may get without a notification.
const RECORDS_EVERY: Duration = Duration::from_secs(60);

impl Keeper<'_> {
    /// One tick's round trips, filling `tick` as they go (so what was
    /// done before a timeout is still reported).
    async fn tick(&mut self, tick: &mut Tick) {
        let (c, held) = (self.c, self.held);
        let stale = self
            .records
            .as_ref()
            .is_none_or(|(_, at)| tick.notified || at.elapsed() >= RECORDS_EVERY);
        // Fresh from the store, or `None` (the manager keeps what it has).
        let records = if stale {
            match c.backend.bindings().await {
                Ok(r) => {
                    self.records = Some((r.clone(), Instant::now()));
                    Some(r)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the channel bindings");
                    None
                }
            }
        } else {
            None
        };
        if let Some(recs) = &records {
            for (name, token) in held_now(held) {
                if !recs.iter().any(|r| r.name == name) {
                    let _ = c.backend.release(&name, Some(token)).await;
                    forget(held, &name);
                    tick.lost.push(name);
                }
            }
        }
        let mine = held_now(held);
        if !mine.is_empty() && self.last_renewed.elapsed() >= c.times.renew_every {
            let tokens: Vec<i64> = mine.values().copied().collect();
            match c.backend.renew(&tokens, c.times.lease).await {
                Ok(kept) => {
                    self.last_renewed = Instant::now();
                    self.last_ok = self.last_renewed;
                    for (name, token) in &mine {
                        if !kept.contains(token) {
                            tracing::warn!(binding = %name, node = %c.node, "this node lost a channel binding's lease: another node polls it now");
                            forget(held, name);
                            tick.lost.push(name.clone());
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(node = %c.node, error = %e, "cannot renew the channel leases")
                }
            }
        }
        // Who holds what: only a binding nobody holds is worth a try.
        let holders = c.backend.holders().await.ok();
        if let (Some((recs, _)), Some(holders)) = (&self.records, &holders) {
            let mine = held_now(held);
            for rec in recs
                .iter()
                .filter(|r| !mine.contains_key(&r.name) && !holders.contains_key(&r.name))
            {
                match c.backend.acquire(&rec.name, &c.node, c.times.lease).await {
                    Ok(Some(token)) => {
                        if let Ok(mut h) = held.lock() {
                            if h.is_empty() {
                                self.last_renewed = Instant::now();
                                self.last_ok = self.last_renewed;
                            }
                            h.insert(rec.name.clone(), token);
                        }
                        tick.acquired.push((rec.clone(), token));
                        // The other nodes list it as this node's at once,
                        // not at their next tick.
                        if let Err(e) = c.backend.notify(&rec.name).await {
                            tracing::debug!(binding = %rec.name, error = %e, "cannot tell the other nodes who polls the binding");
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(binding = %rec.name, error = %e, "cannot take a channel binding's lease")
                    }
                }
            }
        }
        tick.records = records;
        tick.holders = holders.map(|mut h| {
            for (rec, _) in &tick.acquired {
                h.insert(rec.name.clone(), c.node.clone());
            }
            h
        });
    }
}
