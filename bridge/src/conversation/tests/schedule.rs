//! Scheduled prompts: what `/every` and `/at` mean, and missed runs made up once, not N times.

use std::time::Duration;

use crate::conversation::commands::{Command, Parsed, parse};
use crate::conversation::schedule::{AT_USAGE, EVERY_USAGE, at, every, next_run, parse_interval};

const MIN: Duration = Duration::from_secs(60);
/// 2026-12-01 10:30:00 UTC.
const NOW: i64 = 1_796_121_000_000;

#[test]
fn the_schedule_commands_are_parsed_with_the_role_they_need() {
    use crate::core::access::Act;
    let cmd = |t: &str| match parse(t, 0) {
        Parsed::Command(c) => c,
        other => panic!("{t}: {other:?}"),
    };
    assert_eq!(
        cmd("/every 1h make test"),
        Command::Every("1h make test".into())
    );
    assert_eq!(
        cmd("/at 09:00 make report"),
        Command::At("09:00 make report".into())
    );
    assert_eq!(cmd("/schedules"), Command::Schedules);
    assert_eq!(
        cmd("/unschedule ab12cd"),
        Command::Unschedule("ab12cd".into())
    );
    assert_eq!(
        cmd("/every 1h x").act(),
        Act::Prompt,
        "a schedule runs prompts: prompting rights"
    );
    assert_eq!(cmd("/unschedule x").act(), Act::Cancel);
    assert_eq!(cmd("/schedules").act(), Act::Read);
}

#[test]
fn every_runs_first_one_interval_from_now_and_refuses_nonsense() {
    let a = every("2h git pull && make test", NOW, MIN).expect("ok");
    assert_eq!(a.every, Some(Duration::from_secs(7200)));
    assert_eq!(a.first, NOW + 7_200_000);
    assert_eq!(a.prompt, "git pull && make test");
    assert_eq!(every("1h", NOW, MIN).unwrap_err(), EVERY_USAGE, "no prompt");
    assert!(
        every("soon make", NOW, MIN)
            .unwrap_err()
            .starts_with("`soon` is not an interval")
    );
    assert!(
        every("10s make", NOW, MIN)
            .unwrap_err()
            .starts_with("Schedules repeat at most every")
    );
    assert_eq!(parse_interval("1h30m"), Some(Duration::from_secs(5400)));
    assert_eq!(parse_interval("500ms"), None, "whole seconds");
    assert_eq!(parse_interval("0s"), None);
}

#[test]
fn at_runs_once_at_the_next_such_time_of_day_utc() {
    let later_today = at("11:00 report", NOW).expect("ok");
    assert_eq!(later_today.first, NOW + 30 * 60_000);
    assert_eq!(later_today.every, None);
    let tomorrow = at("09:00 report", NOW).expect("ok");
    assert_eq!(tomorrow.first, NOW - 90 * 60_000 + 86_400_000);
    let exactly_now = at("10:30 report", NOW).expect("ok");
    assert_eq!(exactly_now.first, NOW + 86_400_000, "never in the past");
    for bad in ["24:00 x", "9:5 x", "09:60 x", "noon x", "-1:00 x"] {
        assert!(at(bad, NOW).is_err(), "{bad}");
    }
    assert_eq!(at("09:00", NOW).unwrap_err(), AT_USAGE);
}

#[test]
fn runs_missed_while_no_replica_was_active_run_once_not_once_per_interval() {
    let every = 2_000;
    assert_eq!(
        next_run(10_000, every, 10_000),
        12_000,
        "on time: the next interval"
    );
    assert_eq!(
        next_run(10_000, every, 10_150),
        12_000,
        "a little late (the scheduler's delay): on the grid, no drift"
    );
    // Down for an hour: one run now, then one whole interval later — never moments after the
    // catch-up run.
    assert_eq!(next_run(10_000, every, 3_610_000), 3_612_000);
    assert_eq!(next_run(10_000, every, 3_611_999), 3_613_999);
    assert_eq!(next_run(10_000, every, 11_000), 13_000);
    assert_eq!(
        next_run(20_000, every, 10_000),
        20_000,
        "not due yet: unchanged"
    );
}
