//! L-rule tests on paused tokio time.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::*;
use crate::event::{Outcome, ShellProgress, ToolInfo, ToolResult};
use crate::ids::{SessionId, ToolCallId};

fn s() -> SessionId {
    SessionId::parse("s").unwrap()
}
fn c() -> ToolCallId {
    ToolCallId::parse("c").unwrap()
}
fn started(kind: Option<&str>, timeout: Option<Duration>) -> DaemonEvent {
    let info = ToolInfo {
        title: Some("sleep 10".into()),
        kind: kind.map(str::to_owned),
        tool_name: None,
        timeout,
    };
    DaemonEvent::ToolStarted {
        session: s(),
        call: c(),
        info,
    }
}
fn heartbeat(timeout_ms: Option<u64>) -> DaemonEvent {
    DaemonEvent::ToolProgress {
        session: s(),
        call: c(),
        progress: ShellProgress {
            timeout_ms,
            ..ShellProgress::default()
        },
        beats: 1,
    }
}
fn finished() -> DaemonEvent {
    let result = ToolResult {
        outcome: Outcome::Completed,
        summary: None,
        output: String::new(),
        exit_code: Some(0),
        signal: None,
    };
    DaemonEvent::ToolFinished {
        session: s(),
        call: c(),
        result,
    }
}
fn cfg(idle: u64) -> LivenessConfig {
    LivenessConfig {
        idle: Duration::from_secs(idle),
        wall: Duration::from_secs(3600),
        tool_grace: Duration::from_secs(30),
        ..LivenessConfig::default()
    }
}

/// Drives the liveness clock over `secs` seconds in 100 ms steps, feeding `feed` at the given
/// whole seconds, and returns the stalls seen.
async fn run(l: &mut Liveness, secs: u64, feed: impl Fn(u64) -> Option<DaemonEvent>) -> Vec<Stall> {
    let mut stalls = Vec::new();
    for tick in 1..=secs * 10 {
        advance(Duration::from_millis(100)).await;
        if tick % 10 == 0
            && let Some(ev) = feed(tick / 10)
        {
            l.observe(&ev, Instant::now());
        }
        if let Some(st) = l.poll(Instant::now()) {
            stalls.push(st);
        }
    }
    stalls
}

#[tokio::test(start_paused = true)]
async fn l1_heartbeats_every_second_keep_a_10s_tool_alive_under_a_2s_idle_limit() {
    let mut l = Liveness::new(cfg(2), Instant::now());
    l.observe(&started(None, None), Instant::now());
    let stalls = run(&mut l, 10, |_| Some(heartbeat(None))).await;
    assert!(stalls.is_empty(), "{stalls:?}");
    l.observe(&finished(), Instant::now());
    assert_eq!(l.first_cause(), None);
}

#[tokio::test(start_paused = true)]
async fn l1_without_heartbeats_the_same_tool_stalls_at_the_idle_limit() {
    let mut l = Liveness::new(cfg(2), Instant::now());
    l.observe(&started(None, None), Instant::now());
    let stalls = run(&mut l, 10, |_| None).await;
    assert_eq!(stalls.len(), 1, "one notice per silence: {stalls:?}");
    assert_eq!(stalls[0].kind, StallKind::Idle);
    assert_eq!(stalls[0].silent_for, Duration::from_secs(2));
    assert!(l.is_stalled());
}

#[tokio::test(start_paused = true)]
async fn l1_wall_limit_is_never_re_armed_by_frames() {
    let mut l = Liveness::new(
        LivenessConfig {
            wall: Duration::from_secs(5),
            ..cfg(2)
        },
        Instant::now(),
    );
    let stalls = run(&mut l, 8, |_| Some(heartbeat(None))).await;
    assert_eq!(stalls.len(), 1, "{stalls:?}");
    assert_eq!(stalls[0].kind, StallKind::Wall);
    assert_eq!(stalls[0].elapsed, Duration::from_secs(5));
    assert_eq!(l.deadline(), None, "every limit has fired");
}

#[tokio::test(start_paused = true)]
async fn l2_a_tools_timeout_plus_grace_binds_over_a_shorter_turn_idle_limit() {
    // Tool timeout 60 s, grace 30 s: silent for 80 s with no heartbeat at all must not stall,
    // because the binding idle limit is 90 s, not the turn's 10 s.
    let mut l = Liveness::new(cfg(10), Instant::now());
    l.observe(
        &started(Some("execute"), Some(Duration::from_secs(60))),
        Instant::now(),
    );
    assert_eq!(l.binding_idle(), Duration::from_secs(90));
    assert!(run(&mut l, 80, |_| None).await.is_empty());
    let stalls = run(&mut l, 20, |_| None).await;
    assert_eq!(stalls.len(), 1);
    assert_eq!(stalls[0].limit, Duration::from_secs(90));
}

#[tokio::test(start_paused = true)]
async fn l2_heartbeat_timeout_ms_extends_the_binding_limit_and_settling_restores_it() {
    let mut l = Liveness::new(cfg(10), Instant::now());
    l.observe(&started(None, None), Instant::now());
    assert_eq!(l.binding_idle(), Duration::from_secs(10));
    l.observe(&heartbeat(Some(25_000)), Instant::now());
    assert_eq!(l.binding_idle(), Duration::from_secs(55));
    l.observe(&finished(), Instant::now());
    assert_eq!(l.binding_idle(), Duration::from_secs(10));
    assert_eq!(l.running_tools(), 0);
}

#[tokio::test(start_paused = true)]
async fn l2_per_kind_override_replaces_timeout_plus_grace() {
    let mut config = cfg(10);
    config
        .kind_overrides
        .insert("execute".into(), Duration::from_secs(1200));
    let mut l = Liveness::new(config, Instant::now());
    l.observe(
        &started(Some("execute"), Some(Duration::from_secs(60))),
        Instant::now(),
    );
    assert_eq!(l.binding_idle(), Duration::from_secs(1200));
    // The deadline the caller sleeps to is the binding one, not the tighter turn idle limit.
    assert_eq!(
        l.deadline(),
        Some(Instant::now() + Duration::from_secs(1200))
    );
}

#[tokio::test(start_paused = true)]
async fn l3_first_cause_is_kept_stall_then_cancel_stays_a_stall() {
    let mut l = Liveness::new(cfg(2), Instant::now());
    advance(Duration::from_secs(3)).await;
    assert!(l.poll(Instant::now()).is_some());
    l.record_cancel();
    assert_eq!(l.first_cause(), Some(EndCause::Stalled(StallKind::Idle)));

    let mut l = Liveness::new(cfg(2), Instant::now());
    l.record_cancel();
    advance(Duration::from_secs(3)).await;
    assert!(
        l.poll(Instant::now()).is_some(),
        "the stall is still reported"
    );
    assert_eq!(l.first_cause(), Some(EndCause::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn l3_idle_notice_fires_again_only_after_the_session_spoke_and_fell_silent_again() {
    let mut l = Liveness::new(cfg(2), Instant::now());
    let stalls = run(&mut l, 10, |s| (s == 5).then(|| heartbeat(None))).await;
    assert_eq!(stalls.len(), 2, "{stalls:?}");
}

#[test]
fn human_durations_read_like_the_thread_shows_them() {
    assert_eq!(human_duration(Duration::from_secs(120)), "2m 0s");
    assert_eq!(human_duration(Duration::from_secs(45)), "45s");
    assert_eq!(human_duration(Duration::from_secs(3780)), "1h 3m");
    assert_eq!(human_duration(Duration::from_millis(850)), "850ms");
}

#[tokio::test(start_paused = true)]
async fn l2_a_permission_requests_stated_timeout_counts_before_any_heartbeat() {
    let mut l = Liveness::new(cfg(10), Instant::now());
    l.observe(&started(None, None), Instant::now());
    let info = ToolInfo {
        timeout: Some(Duration::from_secs(25)),
        ..ToolInfo::default()
    };
    let req = crate::event::PermissionRequest {
        request_id: crate::ids::RequestId::Number(1),
        session: s(),
        call: Some(c()),
        info,
        options: Vec::new(),
        input: None,
    };
    l.observe(&DaemonEvent::PermissionRequested(req), Instant::now());
    assert_eq!(l.binding_idle(), Duration::from_secs(55));
}
