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
    let Some(usec) = watchdog_usec() else {
        return;
    };
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

/// As sd_watchdog_enabled(3): `WATCHDOG_USEC` asks for keep-alives, unless
/// `WATCHDOG_PID` is set and names another process. (The sd-notify crate
/// wrongly requires `WATCHDOG_PID`.)
fn watchdog_usec() -> Option<u64> {
    let usec = std::env::var("WATCHDOG_USEC").ok()?.parse::<u64>().ok()?;
    let for_us = match std::env::var("WATCHDOG_PID") {
        Ok(pid) => pid.parse::<u32>().ok() == Some(std::process::id()),
        Err(_) => true,
    };
    (usec > 0 && for_us).then_some(usec)
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
