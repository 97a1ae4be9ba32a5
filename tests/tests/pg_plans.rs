//! Plans on the shared store against a real PostgreSQL: a plan's steps
//! become ready as their dependencies succeed, are skipped behind one that
//! did not, and the plan ends once no step is left to run; a cancel
//! revokes running leases so that their nodes' later writes change
//! nothing; idempotency keys and plan ids hold across nodes.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_actors::store::postgres::Shared;
use flyto_actors::store::postgres::claims::{self, StepEnd};
use flyto_actors::store::postgres::plans::{self, Cancel, Inserted, NewPlan, NewStep, PlanRow};
use flyto_tests::pg::{TestPostgres, expire_leases, fresh, runtime};
use std::collections::HashSet;

fn step(id: &str, deps: &[&str]) -> NewStep {
    NewStep {
        step: id.into(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
        max_attempts: 1,
        retry_on_lease_loss: false,
    }
}

/// Submits a plan of `steps` (the record is just its id's bytes here).
async fn submit(shared: &Shared, steps: Vec<NewStep>, key: Option<&str>) -> (i64, Inserted) {
    let id = plans::next_plan_id(shared).await.unwrap();
    let plan = NewPlan {
        depth: 0,
        id,
        record: id.to_be_bytes().to_vec(),
        idempotency_key: key.map(str::to_string),
        name: Some("build".into()),
        steps,
    };
    (id, plans::insert_plan(shared, &plan).await.unwrap())
}

async fn plan(shared: &Shared, id: i64) -> PlanRow {
    plans::get_plan(shared, id).await.unwrap().unwrap()
}

fn states(p: &PlanRow) -> Vec<(String, String)> {
    p.steps
        .iter()
        .map(|s| (s.step.clone(), s.state.clone()))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Claims what is ready, as `node`, by step name.
async fn claim(shared: &Shared, node: &str) -> Vec<(String, i64)> {
    let mut got: Vec<(String, i64)> = claims::claim(shared, node, 16)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.step, c.token))
        .collect();
    got.sort();
    got
}

#[test]
fn a_plan_runs_its_steps_in_dependency_order_and_ends_succeeded() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "order").await;
        let (id, inserted) = submit(
            &shared,
            vec![step("a", &[]), step("b", &["a"]), step("c", &["a"])],
            None,
        )
        .await;
        assert_eq!(inserted, Inserted::New);
        let p = plan(&shared, id).await;
        assert_eq!(p.state, "pending");
        assert_eq!(
            states(&p),
            pairs(&[("a", "ready"), ("b", "waiting"), ("c", "waiting")])
        );
        let first = claim(&shared, "n1").await;
        assert_eq!(first.len(), 1, "only a is ready: {first:?}");
        let p = plan(&shared, id).await;
        assert_eq!(p.state, "running");
        assert!(p.started_ms.is_some());
        assert_eq!(p.steps[0].node.as_deref(), Some("n1"));
        // Nothing else is ready while a runs.
        assert!(claim(&shared, "n2").await.is_empty());
        let end = StepEnd {
            stdout: "built\n".into(),
            ..StepEnd::succeeded()
        };
        assert!(claims::complete(&shared, first[0].1, &end).await.unwrap());
        let p = plan(&shared, id).await;
        assert_eq!(
            states(&p),
            pairs(&[("a", "succeeded"), ("b", "ready"), ("c", "ready")])
        );
        assert_eq!(p.steps[0].stdout.as_deref(), Some("built\n"));
        assert_eq!(p.steps[0].exit_code, Some(0));
        // b and c run on two nodes at once.
        let b = claims::claim(&shared, "n1", 1).await.unwrap();
        let c = claims::claim(&shared, "n2", 1).await.unwrap();
        assert_eq!(b.len() + c.len(), 2);
        let before = plan(&shared, id).await.revision;
        for t in b.iter().chain(&c) {
            assert!(
                claims::complete(&shared, t.token, &StepEnd::succeeded())
                    .await
                    .unwrap()
            );
        }
        let p = plan(&shared, id).await;
        assert_eq!(p.state, "succeeded");
        assert!(p.finished_ms.is_some());
        assert!(p.revision > before, "every change bumps the revision");
        assert!(p.steps.iter().all(|s| s.finished_ms.is_some()));
    });
}

#[test]
fn a_failed_step_skips_what_depends_on_it_and_fails_the_plan() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "skip").await;
        let (id, _) = submit(
            &shared,
            vec![
                step("a", &[]),
                step("b", &["a"]),
                step("c", &["b"]),
                step("d", &[]),
            ],
            None,
        )
        .await;
        let ready = claim(&shared, "n1").await;
        assert_eq!(
            ready.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(),
            ["a", "d"]
        );
        let failed = StepEnd {
            exit_code: Some(3),
            ..StepEnd::failed("exit status 3")
        };
        assert!(
            claims::complete(&shared, ready[0].1, &failed)
                .await
                .unwrap()
        );
        let p = plan(&shared, id).await;
        // b and c behind it are skipped; d still runs; the plan is not over.
        assert_eq!(
            states(&p),
            pairs(&[
                ("a", "failed"),
                ("b", "skipped"),
                ("c", "skipped"),
                ("d", "running")
            ])
        );
        assert_eq!(p.state, "running");
        assert_eq!(p.steps[0].exit_code, Some(3));
        assert!(
            claims::complete(&shared, ready[1].1, &StepEnd::succeeded())
                .await
                .unwrap()
        );
        let p = plan(&shared, id).await;
        assert_eq!(p.state, "failed");
        assert!(p.finished_ms.is_some());
    });
}

#[test]
fn a_cancel_revokes_running_leases_and_their_later_writes_change_nothing() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "cancel").await;
        let (id, _) = submit(&shared, vec![step("a", &[]), step("b", &["a"])], None).await;
        let running = claim(&shared, "n1").await;
        let token = running[0].1;
        let cancelled = plans::cancel_plan(&shared, id, "cancelled by the user")
            .await
            .unwrap();
        assert_eq!(
            cancelled,
            Cancel::Cancelled {
                revoked: vec![token]
            }
        );
        // The node that ran a hears of it at its next heartbeat; whatever
        // it reports now is refused.
        assert!(
            claims::heartbeat(&shared, "n1", &[token])
                .await
                .unwrap()
                .is_empty()
        );
        assert!(!claims::write_output(&shared, token, "late").await.unwrap());
        assert!(
            !claims::complete(&shared, token, &StepEnd::succeeded())
                .await
                .unwrap()
        );
        let p = plan(&shared, id).await;
        assert_eq!(p.state, "cancelled");
        assert_eq!(p.reason.as_deref(), Some("cancelled by the user"));
        assert_eq!(states(&p), pairs(&[("a", "cancelled"), ("b", "cancelled")]));
        assert!(claim(&shared, "n2").await.is_empty());
        assert_eq!(
            plans::cancel_plan(&shared, id, "again").await.unwrap(),
            Cancel::Finished("cancelled".into())
        );
        assert_eq!(
            plans::cancel_plan(&shared, id + 1000, "x").await.unwrap(),
            Cancel::NotFound
        );
    });
}

#[test]
fn a_step_whose_lease_ran_out_fails_its_plan_when_it_may_not_run_again() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "lease").await;
        let (id, _) = submit(&shared, vec![step("a", &[]), step("b", &["a"])], None).await;
        let running = claim(&shared, "n1").await;
        expire_leases(&shared).await;
        let swept = claims::sweep(&shared).await.unwrap().unwrap();
        assert_eq!(swept, [(id, "a".to_string(), running[0].1)]);
        let p = plan(&shared, id).await;
        assert_eq!(p.state, "failed");
        assert_eq!(states(&p), pairs(&[("a", "failed"), ("b", "skipped")]));
        assert_eq!(p.steps[0].error.as_deref(), Some("lease lost"));
    });
}

#[test]
fn keys_names_and_ids_hold_across_nodes() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "keys").await;
        let other = Shared::connect(&pg.url_for("keys"), "test-2")
            .await
            .unwrap();
        let (first, inserted) = submit(&shared, vec![step("a", &[])], Some("deploy-42")).await;
        assert_eq!(inserted, Inserted::New);
        // The same key from another node gives back the first plan.
        let (_, again) = submit(&other, vec![step("a", &[])], Some("deploy-42")).await;
        assert_eq!(
            again,
            Inserted::Existing {
                id: first,
                record: first.to_be_bytes().to_vec()
            }
        );
        // Two nodes taking ids at once never get the same one.
        let mut ids = HashSet::new();
        for _ in 0..20 {
            let (a, b) = tokio::join!(plans::next_plan_id(&shared), plans::next_plan_id(&other));
            assert!(ids.insert(a.unwrap()));
            assert!(ids.insert(b.unwrap()));
        }
        let (second, _) = submit(&other, vec![step("a", &[])], None).await;
        assert_eq!(
            plans::find_by_name(&shared, "build")
                .await
                .unwrap()
                .into_iter()
                .map(|(id, _)| id)
                .collect::<Vec<_>>(),
            [second, first]
        );
        assert_eq!(plans::count_plans(&shared, None).await.unwrap(), 2);
        assert_eq!(
            plans::count_plans(&shared, Some("pending")).await.unwrap(),
            2
        );
        let listed: Vec<i64> = plans::list_plans(&other, Some("pending"), 1)
            .await
            .unwrap()
            .iter()
            .map(|p| p.id)
            .collect();
        assert_eq!(listed, [second]);
        assert!(plans::get_plan(&shared, 999_999).await.unwrap().is_none());
    });
}

#[test]
fn last_steps_ending_at_once_on_several_nodes_still_end_their_plan() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "skew").await;
        let mut nodes = Vec::new();
        for i in 0..4 {
            nodes.push(
                Shared::connect(&pg.url_for("skew"), &format!("test-{i}"))
                    .await
                    .unwrap(),
            );
        }
        let ok = StepEnd::succeeded();
        for _ in 0..30 {
            let steps = ["a", "b", "c", "d"].map(|s| step(s, &[])).to_vec();
            let (id, _) = submit(&shared, steps, None).await;
            let all = claim(&shared, "n1").await;
            assert_eq!(all.len(), 4);
            // Each node reports its step at the same moment.
            let reports = all
                .iter()
                .zip(&nodes)
                .map(|((_, token), node)| claims::complete(node, *token, &ok));
            for r in futures_util::future::join_all(reports).await {
                assert!(r.unwrap());
            }
            assert_eq!(plan(&shared, id).await.state, "succeeded");
        }
    });
}

#[test]
fn finished_plans_older_than_the_ttl_are_deleted_once_and_live_ones_stay() {
    let pg = TestPostgres::start();
    runtime().block_on(async {
        let shared = fresh(&pg, "ttl").await;
        let (old, _) = submit(&shared, vec![step("a", &[])], None).await;
        let (live, _) = submit(&shared, vec![step("a", &[])], None).await;
        // Both steps run; one ends, and with it its plan.
        let claimed = claim(&shared, "n1").await;
        assert_eq!(claimed.len(), 2);
        assert!(
            claims::complete(&shared, claimed[0].1, &StepEnd::succeeded())
                .await
                .unwrap()
        );
        // Its end is made old.
        let c = shared.client().await.unwrap();
        c.execute(
            "UPDATE flyto_plans SET finished_at = now() - interval '2 hours'
             WHERE state = 'succeeded'",
            &[],
        )
        .await
        .unwrap();
        let ended: i64 = c
            .query_one("SELECT id FROM flyto_plans WHERE state = 'succeeded'", &[])
            .await
            .unwrap()
            .get(0);
        assert!([old, live].contains(&ended));
        let ttl = std::time::Duration::from_secs(3600);
        let (a, b) = tokio::join!(plans::expire(&shared, ttl), plans::expire(&shared, ttl));
        let mut gone = a.unwrap();
        gone.extend(b.unwrap());
        assert_eq!(gone, vec![ended], "deleted once, by one of the two");
        assert!(plans::get_plan(&shared, ended).await.unwrap().is_none());
        let other = if ended == old { live } else { old };
        assert!(plans::get_plan(&shared, other).await.unwrap().is_some());
        assert_eq!(
            plans::existing(&shared, &[old, live]).await.unwrap(),
            vec![other]
        );
        let steps: i64 = c
            .query_one(
                "SELECT count(*) FROM flyto_steps WHERE plan = $1",
                &[&ended],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(steps, 0);
    });
}
