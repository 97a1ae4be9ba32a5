//! The scheduler's storage, behind [`PlanStore`] so another backend (a shared
//! PostgreSQL queue) can replace sled without touching the actor.
//!
//! sled layout, all in tree `plans`, each plan change one atomic batch:
//! `r<id>` record · `s<state><id>` state index · `e<finished_ms><id>` expiry
//! index · `i<key>` idempotency key → id · `n` next id. Ids and times are
//! big-endian so keys sort numerically.

use super::model::{PLAN_FORMAT_VERSION, PlanRecord, format_id};
use crate::store::{AfterSync, Store, StoreError, decode_record, encode_record};
use flyto_protocol::PlanState;

pub trait PlanStore: Send + Sync + 'static {
    /// The id the next new plan gets.
    fn next_id(&self) -> Result<u64, StoreError>;
    /// Writes `plan` and its indexes atomically; `prev` is the state it was
    /// stored with (`None` for a new plan).
    fn put(&self, plan: &PlanRecord, prev: Option<PlanState>) -> Result<(), StoreError>;
    fn get(&self, id: u64) -> Result<Option<PlanRecord>, StoreError>;
    fn delete(&self, plan: &PlanRecord) -> Result<(), StoreError>;
    /// Pending and running plans, oldest first.
    fn load_active(&self) -> Result<Vec<PlanRecord>, StoreError>;
    /// Newest first.
    fn list(&self, state: Option<PlanState>, limit: usize) -> Result<Vec<PlanRecord>, StoreError>;
    fn find_idempotent(&self, key: &str) -> Result<Option<u64>, StoreError>;
    /// Ids of terminal plans finished before `before_ms`, oldest first.
    fn expired(&self, before_ms: u64, limit: usize) -> Result<Vec<u64>, StoreError>;
    fn count(&self, state: PlanState) -> Result<u64, StoreError>;
    /// Runs `then` once every write so far is durable (group commit).
    fn after_sync(&self, then: AfterSync);
    fn sync_blocking(&self) -> Result<(), StoreError>;
    fn size_on_disk(&self) -> u64;
}

pub struct SledPlanStore {
    store: Store,
    tree: sled::Tree,
}

impl SledPlanStore {
    pub fn open(store: Store) -> Result<Self, StoreError> {
        let tree = store.tree("plans")?;
        Ok(SledPlanStore { store, tree })
    }

    fn err(&self, e: sled::Error) -> StoreError {
        self.store.sled_err(e)
    }

    fn decode(&self, id_bytes: &[u8], bytes: &[u8]) -> Result<PlanRecord, StoreError> {
        let id = id_bytes
            .try_into()
            .map(u64::from_be_bytes)
            .map(format_id)
            .unwrap_or_else(|_| "?".into());
        decode_record(
            &format!("plan {id}"),
            bytes,
            PLAN_FORMAT_VERSION,
            |found, _| Err(format!("no migration from plan format {found}")),
        )
    }
}

fn record_key(id: u64) -> Vec<u8> {
    let mut k = vec![b'r'];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn state_byte(state: PlanState) -> u8 {
    match state {
        PlanState::Pending => b'p',
        PlanState::Running => b'r',
        PlanState::Succeeded => b's',
        PlanState::Failed => b'f',
        PlanState::Cancelled => b'c',
    }
}

fn state_key(state: PlanState, id: u64) -> Vec<u8> {
    let mut k = vec![b's', state_byte(state)];
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn expiry_key(finished_ms: u64, id: u64) -> Vec<u8> {
    let mut k = vec![b'e'];
    k.extend_from_slice(&finished_ms.to_be_bytes());
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn idem_key(key: &str) -> Vec<u8> {
    let mut k = vec![b'i'];
    k.extend_from_slice(key.as_bytes());
    k
}

fn tail_id(key: &[u8]) -> Option<u64> {
    let start = key.len().checked_sub(8)?;
    key[start..].try_into().ok().map(u64::from_be_bytes)
}

impl PlanStore for SledPlanStore {
    fn next_id(&self) -> Result<u64, StoreError> {
        Ok(self
            .tree
            .get(b"n")
            .map_err(|e| self.err(e))?
            .and_then(|v| tail_id(&v))
            .unwrap_or(1))
    }

    fn put(&self, plan: &PlanRecord, prev: Option<PlanState>) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        batch.insert(
            record_key(plan.id),
            encode_record(PLAN_FORMAT_VERSION, plan),
        );
        if prev != Some(plan.state) {
            if let Some(p) = prev {
                batch.remove(state_key(p, plan.id));
            }
            batch.insert(state_key(plan.state, plan.id), &[]);
        }
        if plan.state.is_terminal()
            && let Some(f) = plan.finished_ms
        {
            batch.insert(expiry_key(f, plan.id), &[]);
        }
        if prev.is_none() {
            batch.insert(&b"n"[..], &(plan.id + 1).to_be_bytes());
            if let Some(key) = &plan.idempotency_key {
                batch.insert(idem_key(key), &plan.id.to_be_bytes());
            }
        }
        self.tree.apply_batch(batch).map_err(|e| self.err(e))?;
        self.store.mark_dirty();
        Ok(())
    }

    fn get(&self, id: u64) -> Result<Option<PlanRecord>, StoreError> {
        match self.tree.get(record_key(id)).map_err(|e| self.err(e))? {
            Some(bytes) => Ok(Some(self.decode(&id.to_be_bytes(), &bytes)?)),
            None => Ok(None),
        }
    }

    fn delete(&self, plan: &PlanRecord) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        batch.remove(record_key(plan.id));
        batch.remove(state_key(plan.state, plan.id));
        if let Some(f) = plan.finished_ms {
            batch.remove(expiry_key(f, plan.id));
        }
        if let Some(key) = &plan.idempotency_key {
            batch.remove(idem_key(key));
        }
        self.tree.apply_batch(batch).map_err(|e| self.err(e))?;
        self.store.mark_dirty();
        Ok(())
    }

    fn load_active(&self) -> Result<Vec<PlanRecord>, StoreError> {
        let mut ids = Vec::new();
        for state in [PlanState::Pending, PlanState::Running] {
            for kv in self.tree.scan_prefix([b's', state_byte(state)]) {
                let (k, _) = kv.map_err(|e| self.err(e))?;
                ids.extend(tail_id(&k));
            }
        }
        ids.sort_unstable();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(self.get(id)?);
        }
        Ok(out)
    }

    fn list(&self, state: Option<PlanState>, limit: usize) -> Result<Vec<PlanRecord>, StoreError> {
        let mut out = Vec::new();
        match state {
            Some(st) => {
                for kv in self.tree.scan_prefix([b's', state_byte(st)]).rev() {
                    if out.len() >= limit {
                        break;
                    }
                    let (k, _) = kv.map_err(|e| self.err(e))?;
                    if let Some(id) = tail_id(&k) {
                        out.extend(self.get(id)?);
                    }
                }
            }
            None => {
                for kv in self.tree.scan_prefix(b"r").rev() {
                    if out.len() >= limit {
                        break;
                    }
                    let (k, v) = kv.map_err(|e| self.err(e))?;
                    out.push(self.decode(&k[1..], &v)?);
                }
            }
        }
        Ok(out)
    }

    fn find_idempotent(&self, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .tree
            .get(idem_key(key))
            .map_err(|e| self.err(e))?
            .and_then(|v| tail_id(&v)))
    }

    fn expired(&self, before_ms: u64, limit: usize) -> Result<Vec<u64>, StoreError> {
        let mut out = Vec::new();
        for kv in self.tree.range(expiry_key(0, 0)..expiry_key(before_ms, 0)) {
            if out.len() >= limit {
                break;
            }
            let (k, _) = kv.map_err(|e| self.err(e))?;
            out.extend(tail_id(&k));
        }
        Ok(out)
    }

    fn count(&self, state: PlanState) -> Result<u64, StoreError> {
        let mut n = 0;
        for kv in self.tree.scan_prefix([b's', state_byte(state)]) {
            kv.map_err(|e| self.err(e))?;
            n += 1;
        }
        Ok(n)
    }

    fn after_sync(&self, then: AfterSync) {
        self.store.after_sync(then);
    }

    fn sync_blocking(&self) -> Result<(), StoreError> {
        self.store.sync_blocking()
    }

    fn size_on_disk(&self) -> u64 {
        self.store.size_on_disk()
    }
}
