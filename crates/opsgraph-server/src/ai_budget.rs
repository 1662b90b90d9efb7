//! How often the AI analyzer may be asked: `limits.ai_requests_per_hour` in all and
//! `limits.ai_requests_per_identity_per_hour` for one actor, over the last hour (a sliding
//! window). Each question sends an operation's masked context off the machine and costs money:
//! one identity in a loop neither runs up the bill nor takes the others' share. Beyond either,
//! 429 `rate_limited` names the limit and says when the oldest question leaves the window.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::error::ApiError;
use crate::limits::Limits;

/// The window both limits count over.
pub(crate) const WINDOW: Duration = Duration::from_secs(3600);

/// When each question of the last hour was asked, in all and by actor.
#[derive(Default)]
pub(crate) struct AiBudget {
    asked: Mutex<Asked>,
}

#[derive(Default)]
struct Asked {
    all: VecDeque<Instant>,
    by_actor: HashMap<String, VecDeque<Instant>>,
}

impl AiBudget {
    /// Counts one question of `actor` at `now`, or refuses it (counting nothing) when either
    /// limit is reached. Both are checked and taken under one lock.
    pub(crate) fn take(&self, limits: &Limits, actor: &str, now: Instant) -> Result<(), ApiError> {
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        let Asked { all, by_actor } = &mut *asked;
        forget_before(all, now);
        by_actor.retain(|_, times| {
            forget_before(times, now);
            !times.is_empty()
        });
        let mine = by_actor.get(actor);
        let per = limits.ai_requests_per_identity_per_hour;
        if let Some(times) = mine.filter(|t| t.len() >= per) {
            return Err(refused(
                format!("{actor} asked the AI analyzer {} times in the last hour, the most limits.ai_requests_per_identity_per_hour allows", times.len()),
                "ai_requests_per_identity_per_hour",
                per,
                times[0],
                now,
            ));
        }
        let max = limits.ai_requests_per_hour;
        if all.len() >= max {
            return Err(refused(
                format!(
                    "the AI analyzer was asked {} times in the last hour, the most limits.ai_requests_per_hour allows",
                    all.len()
                ),
                "ai_requests_per_hour",
                max,
                all[0],
                now,
            ));
        }
        all.push_back(now);
        by_actor.entry(actor.to_string()).or_default().push_back(now);
        Ok(())
    }
}

/// Drops the times that left the window ending at `now`.
fn forget_before(times: &mut VecDeque<Instant>, now: Instant) {
    while times.front().is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW) {
        times.pop_front();
    }
}

fn refused(message: String, limit: &str, max: usize, oldest: Instant, now: Instant) -> ApiError {
    let retry = WINDOW.saturating_sub(now.saturating_duration_since(oldest)).as_secs().max(1);
    ApiError::new(
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!("{message}; try again in {retry} s"),
    )
    .with_details(json!({"limit": limit, "max": max, "retry_after_seconds": retry}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(all: usize, per: usize) -> Limits {
        Limits { ai_requests_per_hour: all, ai_requests_per_identity_per_hour: per, ..Limits::default() }
    }

    /// Each step: (seconds since the start, actor) and what it gets: `ok` or the limit named.
    fn check(limits: Limits, steps: &[(u64, &str, &str)]) {
        let budget = AiBudget::default();
        let start = Instant::now();
        for (i, (at, actor, expect)) in steps.iter().enumerate() {
            let got = match budget.take(&limits, actor, start + Duration::from_secs(*at)) {
                Ok(()) => "ok".to_string(),
                Err(e) => {
                    assert_eq!((e.status.as_u16(), e.code), (429, "rate_limited"), "step {i}");
                    e.details.unwrap()["limit"].as_str().unwrap().to_string()
                }
            };
            assert_eq!(&got, expect, "step {i}: {actor} at {at} s");
        }
    }

    #[test]
    fn one_identity_is_held_to_its_share_and_everyone_to_the_total() {
        check(
            limits(3, 2),
            &[
                (0, "user:ann", "ok"),
                (1, "user:ann", "ok"),
                (2, "user:ann", "ai_requests_per_identity_per_hour"),
                (3, "user:bob", "ok"),
                (4, "user:cy", "ai_requests_per_hour"),
                // A refused question is not counted: ann's first leaves the window at 3600 s.
                (3599, "user:ann", "ai_requests_per_identity_per_hour"),
                (3600, "user:cy", "ok"),
                // ann's at 1 s leaves: her share and a place in the total are free again.
                (3601, "user:ann", "ok"),
                (3602, "user:bob", "ai_requests_per_hour"),
                (3603, "user:bob", "ok"),
            ],
        );
    }

    #[test]
    fn the_refusal_says_when_to_ask_again() {
        let budget = AiBudget::default();
        let start = Instant::now();
        budget.take(&limits(1, 1), "user:ann", start).unwrap();
        let e = budget.take(&limits(1, 1), "user:ann", start + Duration::from_secs(600)).unwrap_err();
        assert_eq!(e.details.unwrap()["retry_after_seconds"], 3000);
        assert!(e.message.contains("try again in 3000 s"), "{}", e.message);
    }
}
