//! `/every`, `/at`, `/schedules`, `/unschedule`: a thread's scheduled prompts, written with the
//! notice that confirms them in one transaction (D1); the active replica's scheduler runs them
//! ([`crate::schedules`]).

use daemon_client::liveness::human_duration;

use super::Runner;
use crate::channel::Tone;
use crate::conversation::effects;
use crate::conversation::schedule::{self, Asked};
use crate::core::render;
use crate::store::schedules::{self, Schedule};
use crate::store::{Result, now_ms};

impl Runner {
    /// `/every <interval> <prompt>` (`repeat`) or `/at <HH:MM> <prompt>`.
    pub(super) async fn cmd_schedule(
        &mut self,
        user: &str,
        rest: &str,
        repeat: bool,
    ) -> Result<()> {
        let now = now_ms();
        let asked = if repeat {
            schedule::every(rest, now, self.core.cfg.schedule_min_interval)
        } else {
            schedule::at(rest, now)
        };
        let Asked {
            every,
            first,
            prompt,
        } = match asked {
            Ok(a) => a,
            Err(why) => return self.notice(Tone::Warning, &why).await,
        };
        let mut tx = self.begin().await?;
        let existing = schedules::of(tx.conn(), &self.conv.id).await?;
        let cap = self.core.cfg.schedules_per_thread;
        if existing.len() >= cap {
            drop(tx);
            return self
                .notice(
                    Tone::Warning,
                    &format!("This thread has {cap} schedules, the most it may have; `/unschedule <id>` one first."),
                )
                .await;
        }
        let id = uuid::Uuid::new_v4().simple().to_string()[..6].to_owned();
        let row = Schedule {
            id: id.clone(),
            conversation_id: self.conv.id.clone(),
            created_by: user.to_owned(),
            prompt: self.kept(&prompt).into_owned(),
            every_ms: every.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            next_run_at: first,
            created_at: now,
        };
        schedules::add(tx.conn(), &row).await?;
        let when = match every {
            Some(d) => format!("every {}", human_duration(d)),
            None => format!("once, at {}", utc(first)),
        };
        let text = format!(
            "Scheduled `{id}`: {when}, first at {} — `/unschedule {id}` removes it.",
            utc(first)
        );
        self.confirm(tx, &text).await
    }

    /// `/schedules`.
    pub(super) async fn cmd_schedules(&mut self) -> Result<()> {
        let mut c = self.core.store.conn().await?;
        let all = schedules::of(&mut c, &self.conv.id).await?;
        drop(c);
        if all.is_empty() {
            return self
                .notice(Tone::Neutral, "No schedules in this thread.")
                .await;
        }
        let mut text = match all.len() {
            1 => "1 schedule in this thread:".to_owned(),
            n => format!("{n} schedules in this thread:"),
        };
        for s in &all {
            let when = match s.every_ms {
                Some(ms) => format!(
                    "every {}",
                    human_duration(std::time::Duration::from_millis(
                        u64::try_from(ms).unwrap_or(0)
                    ))
                ),
                None => "once".to_owned(),
            };
            let prompt: String = self
                .core
                .redactor
                .redact(&s.prompt)
                .chars()
                .take(60)
                .collect();
            text.push_str(&format!(
                "\n`{}` — {when}, next at {} — {prompt}",
                s.id,
                utc(s.next_run_at)
            ));
        }
        self.notice(Tone::Neutral, &text).await
    }

    /// `/unschedule <id>`.
    pub(super) async fn cmd_unschedule(&mut self, id: &str) -> Result<()> {
        let id = id.trim().trim_matches('`');
        if id.is_empty() {
            return self
                .notice(
                    Tone::Warning,
                    "Usage: `/unschedule <id>` (`/schedules` lists them).",
                )
                .await;
        }
        let mut tx = self.begin().await?;
        if schedules::remove(tx.conn(), &self.conv.id, id).await? {
            self.confirm(tx, &format!("Schedule `{id}` removed.")).await
        } else {
            drop(tx);
            self.notice(
                Tone::Warning,
                &format!("This thread has no schedule `{id}` (`/schedules` lists them)."),
            )
            .await
        }
    }

    /// Posts `text` as a notice inside `tx` (with what the step wrote) and commits.
    async fn confirm(&mut self, mut tx: crate::store::Tx, text: &str) -> Result<()> {
        let key = self.state.next_notice_key(now_ms());
        self.record(&mut tx, None, "notice", "bridge", &self.kept(text), None)
            .await?;
        let msg = render::notice(&self.core.redactor, Tone::Neutral, text);
        self.enqueue(&mut tx, &effects::post(&self.target, &key, msg))
            .await?;
        self.commit(tx).await
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM UTC`.
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Days since 1970-01-01 as (year, month, day) (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
