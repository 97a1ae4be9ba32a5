//! sd_notify: READY, STATUS, STOPPING and the watchdog keep-alive, which is
//! only sent while the supervisor says every actor is up.

use flyto_actors::plans::{SCHEDULER_NAME, SchedulerMsg};
use flyto_actors::supervisor::SupervisorMsg;
use ractor::{ActorRef, rpc::CallResult};
use sd_notify::NotifyState;
use std::time::Duration;

pub fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!("sd_notify failed: {e}");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

/// Pings at half of `WATCHDOG_USEC` while the actors answer.
pub fn spawn_watchdog(supervisor: ActorRef<SupervisorMsg>) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let period = Duration::from_micros(usec / 2);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            if healthy(&supervisor, period).await {
                send(&[NotifyState::Watchdog]);
            } else {
                tracing::warn!("actors unhealthy: withholding the watchdog keep-alive");
            }
        }
    });
}

async fn healthy(supervisor: &ActorRef<SupervisorMsg>, within: Duration) -> bool {
    let up = matches!(
        supervisor.call(SupervisorMsg::Healthy, Some(within)).await,
        Ok(CallResult::Success(true))
    );
    let Some(cell) = ractor::registry::where_is(SCHEDULER_NAME.into()) else {
        return false;
    };
    let scheduler: ActorRef<SchedulerMsg> = cell.into();
    up && matches!(
        scheduler.call(SchedulerMsg::Ping, Some(within)).await,
        Ok(CallResult::Success(()))
    )
}
