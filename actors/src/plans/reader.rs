//! The read side of the plans, one for both stores: it resolves a plan's
//! id or name and answers `plan_status`, `plan_watch`, `plan_list` and the
//! counts `stats` shows through the [`PlanStore`] the daemon opened, never
//! naming a backend. It may not write.

use super::model::{format_id, parse_id};
use super::store::{PlanChanges, PlanCounts, PlanStore};
use crate::kernel::Reject;
use flyto_protocol::{PlanState, PlanSummary, PlanView};
use std::sync::Arc;

#[derive(Clone)]
pub struct PlanReader {
    store: Arc<dyn PlanStore>,
}

impl PlanReader {
    pub fn new(store: Arc<dyn PlanStore>) -> Self {
        PlanReader { store }
    }

    /// A plan's number from its id (`p12`, `12`) or its name, when one
    /// plan has it; several: `BadRequest` listing them, newest first.
    pub async fn resolve(&self, key: &str) -> Result<u64, Reject> {
        resolve(&*self.store, key).await
    }

    pub async fn status(&self, id: &str) -> Result<PlanView, Reject> {
        status(&*self.store, id).await
    }

    /// The current view (by id or name) and, unless it is known to be
    /// final, its next ones.
    pub async fn watch(&self, id: &str) -> Result<(PlanView, Option<PlanChanges>), Reject> {
        let n = self.resolve(id).await?;
        self.store.follow(n, id).await
    }

    /// Fills in where a pending plan stands in the queue (a view from
    /// [`PlanChanges`] may not carry it).
    pub fn place(&self, view: PlanView) -> PlanView {
        self.store.place(view)
    }

    pub async fn list(
        &self,
        state: Option<PlanState>,
        limit: usize,
    ) -> Result<Vec<PlanSummary>, Reject> {
        self.store.list(state, limit).await
    }

    /// Plans in `state` (every plan without one).
    pub async fn total(&self, state: Option<PlanState>) -> Result<u64, Reject> {
        self.store.total(state).await
    }

    pub async fn counts(&self) -> Result<PlanCounts, Reject> {
        self.store.counts().await
    }
}

async fn resolve(store: &dyn PlanStore, key: &str) -> Result<u64, Reject> {
    if let Some(n) = parse_id(key) {
        return Ok(n);
    }
    pick(key, store.named(key).await?)
}

async fn status(store: &dyn PlanStore, id: &str) -> Result<PlanView, Reject> {
    let n = resolve(store, id).await?;
    match store.view(n).await? {
        Some(view) => Ok(store.place(view)),
        None => Err(Reject::not_found(id)),
    }
}

/// The one plan of the plans named `key` (newest first, the first ones
/// with their state); none or several: the answer that says so.
pub(crate) fn pick(key: &str, named: Vec<(u64, Option<PlanState>)>) -> Result<u64, Reject> {
    match named.as_slice() {
        [] => Err(Reject::not_found(key)),
        [(one, _)] => Ok(*one),
        many => Err(Reject::ambiguous(
            key,
            many.len(),
            many.iter()
                .take(Reject::NAMES_SHOWN)
                .map(|&(n, state)| match state {
                    Some(state) => format!("{} ({})", format_id(n), state.as_str()),
                    None => format_id(n),
                })
                .collect(),
        )),
    }
}

/// A plan's status by id, from whichever store holds the plans: what the
/// jobs room asks of its runs.
pub trait PlanLookup: Send + Sync + 'static {
    fn status<'a>(&'a self, id: &'a str) -> crate::kernel::AnswerFut<'a, PlanView>;
}

impl PlanLookup for PlanReader {
    fn status<'a>(&'a self, id: &'a str) -> crate::kernel::AnswerFut<'a, PlanView> {
        Box::pin(status(&*self.store, id))
    }
}

/// Either backend answers the jobs room directly.
impl<S: PlanStore> PlanLookup for S {
    fn status<'a>(&'a self, id: &'a str) -> crate::kernel::AnswerFut<'a, PlanView> {
        Box::pin(status(self, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plans::store::sled_records::tests::plan;
    use crate::plans::store::{PlanRecords, SledPlanStore, SledPlans};
    use crate::store::testutil::open_no_checkpoint;
    use flyto_protocol::ErrorCode;

    #[tokio::test]
    async fn a_name_resolves_to_its_one_plan_and_an_ambiguous_one_lists_them() {
        let tmp = tempfile::tempdir().unwrap();
        let records =
            Arc::new(SledPlanStore::open(open_no_checkpoint(&tmp.path().join("db"))).unwrap());
        for (id, state, name) in [
            (1, PlanState::Succeeded, "build"),
            (2, PlanState::Pending, "build"),
            (3, PlanState::Failed, "deploy"),
        ] {
            let mut rec = plan(id, state);
            rec.name = Some(name.into());
            records.put(&rec, None).unwrap();
        }
        let reader = PlanReader::new(Arc::new(SledPlans::new(records, tmp.path().join("logs"))));

        let deploy = reader.status("deploy").await.unwrap();
        assert_eq!(
            (deploy.id.as_str(), deploy.state),
            ("p3", PlanState::Failed)
        );
        let both = reader.status("build").await.unwrap_err();
        assert_eq!(both.code, ErrorCode::BadRequest);
        assert!(
            both.message
                .contains("2 plans are named `build`: p2 (pending), p1 (succeeded)"),
            "{}",
            both.message
        );
        assert_eq!(
            reader.watch("nope").await.err().unwrap().code,
            ErrorCode::NotFound
        );
        assert_eq!(reader.total(None).await.unwrap(), 3);
    }
}
