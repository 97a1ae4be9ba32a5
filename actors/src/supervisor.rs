//! The root supervisor: starts the daemon's long-lived actors, restarts a
//! child that fails (with exponential backoff) and gives up — stopping
//! itself with an error, so the daemon exits and systemd restarts it — when
//! children fail too often in a window. It owns no domain state.

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr, SupervisionEvent};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub type StartFuture = Pin<Box<dyn Future<Output = Result<ActorCell, SpawnErr>> + Send>>;

/// How to (re)start one child, linked to the supervisor.
#[derive(Clone)]
pub struct ChildSpec {
    pub name: String,
    pub start: Arc<dyn Fn(ActorCell) -> StartFuture + Send + Sync>,
}

#[derive(Debug, Clone)]
pub struct RestartPolicy {
    pub max_restarts: usize,
    pub window: Duration,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

pub struct SupervisorArgs {
    pub children: Vec<ChildSpec>,
    pub policy: RestartPolicy,
    /// Total restarts so far, for `stats`.
    pub restarts: Arc<AtomicU64>,
}

pub enum SupervisorMsg {
    Restart(String),
    /// Answers whether every child is up.
    Healthy(ractor::RpcReplyPort<bool>),
}

pub struct Supervisor;

pub struct SupervisorState {
    specs: Vec<ChildSpec>,
    policy: RestartPolicy,
    running: HashMap<ractor::ActorId, String>,
    recent: VecDeque<Instant>,
    restarts: Arc<AtomicU64>,
}

impl SupervisorState {
    fn spec(&self, name: &str) -> Option<ChildSpec> {
        self.specs.iter().find(|s| s.name == name).cloned()
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut running = HashMap::new();
        for spec in &args.children {
            let cell = (spec.start)(myself.get_cell()).await?;
            running.insert(cell.get_id(), spec.name.clone());
        }
        Ok(SupervisorState {
            specs: args.children,
            policy: args.policy,
            running,
            recent: VecDeque::new(),
            restarts: args.restarts,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Restart(name) => {
                let Some(spec) = state.spec(&name) else {
                    return Ok(());
                };
                match (spec.start)(myself.get_cell()).await {
                    Ok(cell) => {
                        tracing::info!(child = %name, "restarted");
                        state.running.insert(cell.get_id(), name);
                    }
                    Err(e) => {
                        tracing::error!(child = %name, "restart failed: {e}");
                        self.schedule_restart(&myself, state, name)?;
                    }
                }
            }
            SupervisorMsg::Healthy(reply) => {
                let _ = reply.send(state.running.len() == state.specs.len());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, err.to_string()),
            SupervisionEvent::ActorTerminated(cell, _, reason) => (
                cell,
                reason.unwrap_or_else(|| "stopped unexpectedly".into()),
            ),
            _ => return Ok(()),
        };
        let Some(name) = state.running.remove(&cell.get_id()) else {
            return Ok(());
        };
        tracing::error!(child = %name, "actor failed: {why}");
        self.schedule_restart(&myself, state, name)
    }
}

impl Supervisor {
    fn schedule_restart(
        &self,
        myself: &ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
        name: String,
    ) -> Result<(), ActorProcessingErr> {
        let now = Instant::now();
        while state
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > state.policy.window)
        {
            state.recent.pop_front();
        }
        if state.recent.len() >= state.policy.max_restarts {
            let msg = format!(
                "`{name}` failed {} times within {:?}; giving up so the service manager can restart flytod",
                state.recent.len() + 1,
                state.policy.window
            );
            tracing::error!("{msg}");
            myself.stop(Some(msg));
            return Ok(());
        }
        state.recent.push_back(now);
        state.restarts.fetch_add(1, Ordering::Relaxed);
        let exp = (state.recent.len() as u32).saturating_sub(1).min(16);
        let backoff = (state.policy.base_backoff * 2u32.pow(exp)).min(state.policy.max_backoff);
        myself.send_after(backoff, move || SupervisorMsg::Restart(name));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ractor::ActorStatus;
    use std::sync::atomic::AtomicUsize;

    /// Panics on every message; counts its starts.
    struct Fragile(Arc<AtomicUsize>);

    impl Actor for Fragile {
        type Msg = ();
        type State = ();
        type Arguments = ();
        async fn pre_start(&self, _: ActorRef<()>, _: ()) -> Result<(), ActorProcessingErr> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        async fn handle(
            &self,
            _: ActorRef<()>,
            _: (),
            _: &mut (),
        ) -> Result<(), ActorProcessingErr> {
            panic!("boom");
        }
    }

    fn fragile_spec(starts: Arc<AtomicUsize>) -> ChildSpec {
        ChildSpec {
            name: "fragile".into(),
            start: Arc::new(move |sup| {
                let starts = starts.clone();
                Box::pin(async move {
                    let (r, _) =
                        Actor::spawn_linked(Some("test.fragile".into()), Fragile(starts), (), sup)
                            .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }

    async fn wait_for(mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "condition not reached in 10 s");
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn poke() {
        if let Some(cell) = ractor::registry::where_is("test.fragile".into()) {
            let _ = ActorRef::<()>::from(cell).cast(());
        }
    }

    #[tokio::test]
    async fn panicking_child_is_restarted_then_supervisor_gives_up() {
        let starts = Arc::new(AtomicUsize::new(0));
        let restarts = Arc::new(AtomicU64::new(0));
        let policy = RestartPolicy {
            max_restarts: 2,
            window: Duration::from_secs(60),
            base_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(10),
        };
        let (sup, handle) = Actor::spawn(
            None,
            Supervisor,
            SupervisorArgs {
                children: vec![fragile_spec(starts.clone())],
                policy,
                restarts: restarts.clone(),
            },
        )
        .await
        .unwrap();
        assert_eq!(starts.load(Ordering::SeqCst), 1);
        for expected in 2..=3 {
            poke();
            wait_for(|| starts.load(Ordering::SeqCst) == expected).await;
            // The restarted child is registered again before it is poked.
            wait_for(|| ractor::registry::where_is("test.fragile".into()).is_some()).await;
        }
        assert_eq!(restarts.load(Ordering::SeqCst), 2);
        // Third failure within the window: the supervisor stops itself.
        poke();
        handle.await.unwrap();
        assert_eq!(sup.get_status(), ActorStatus::Stopped);
        assert_eq!(starts.load(Ordering::SeqCst), 3);
    }
}
