//! Fleet rollouts at run time ([P]), pure: where each rollout of the plan stands (per wave:
//! instances done, failed, running, untouched), which wave may start, whether a failure budget
//! is spent, and the timeline entries of a wave's start, end and a rollout's pause. `decide.rs`
//! asks it; nothing here reads the store.

use std::collections::HashMap;

use opsgraph_core::plan::rollout::WaveProgress;
use opsgraph_core::plan::{JobInstance, RolloutPlan};
use opsgraph_store::{JobState, TimelineEntry};
use serde_json::json;

use crate::timeline::entry;

/// One wave's instances by where they stand.
#[derive(Debug, Default, Clone)]
pub(crate) struct Wave<'a> {
    pub(crate) done: Vec<&'a JobInstance>,
    pub(crate) failed: Vec<&'a JobInstance>,
    /// Started at least once and not finished (running, or pending again for a retry).
    pub(crate) running: Vec<&'a JobInstance>,
    pub(crate) untouched: Vec<&'a JobInstance>,
    /// When its last instance finished (milliseconds since the epoch, from the job records):
    /// the pause before the next wave counts from there, so a restarted driver keeps it.
    pub(crate) ended_ms: Option<i64>,
}

impl Wave<'_> {
    fn size(&self) -> usize {
        self.done.len() + self.failed.len() + self.running.len() + self.untouched.len()
    }
    /// Every instance finished: done or failed.
    pub(crate) fn settled(&self) -> bool {
        self.running.is_empty() && self.untouched.is_empty()
    }
}

/// Where one rollout stands.
pub(crate) struct Standing<'a> {
    pub(crate) plan: &'a RolloutPlan,
    pub(crate) waves: Vec<Wave<'a>>,
    /// Its instances in flight now.
    pub(crate) in_flight: usize,
    /// Its checks between waves: after which wave, the instance, where it stands.
    pub(crate) checks: Vec<(u32, &'a JobInstance, Stand)>,
    /// `pause_between` in milliseconds.
    pause_ms: i64,
}

/// How a job record's state counts in a rollout.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Stand {
    Done,
    Failed,
    Running,
    Untouched,
}

pub(crate) fn stand(state: Option<JobState>, attempts: u32, in_flight: bool) -> Stand {
    match state {
        _ if in_flight => Stand::Running,
        Some(s) if s.is_done() => Stand::Done,
        Some(JobState::Failed | JobState::Cancelled) => Stand::Failed,
        Some(JobState::Running) => Stand::Running,
        _ if attempts > 0 => Stand::Running,
        _ => Stand::Untouched,
    }
}

/// Every rollout of the plan, as `stand_of` (an instance's standing) and `finished_ms` (when its
/// record last changed) say; instances in plan order.
pub(crate) fn standings<'a>(
    rollouts: &'a [RolloutPlan],
    plan: &'a [JobInstance],
    stand_of: impl Fn(&JobInstance) -> Stand,
    in_flight: impl Fn(&str) -> bool,
    finished_ms: impl Fn(&JobInstance) -> Option<i64>,
) -> Vec<Standing<'a>> {
    let mut out: Vec<Standing<'a>> = rollouts
        .iter()
        .map(|r| Standing {
            plan: r,
            waves: vec![Wave::default(); r.waves.len()],
            in_flight: 0,
            checks: Vec::new(),
            pause_ms: r
                .pause_between
                .as_deref()
                .and_then(|p| opsgraph_exec::parse_duration(p).ok())
                .map_or(0, |d| d.as_millis() as i64),
        })
        .collect();
    let index: HashMap<&str, usize> = rollouts.iter().enumerate().map(|(i, r)| (r.job.as_str(), i)).collect();
    for j in plan {
        if let Some(v) = &j.verifies {
            if let Some(&i) = index.get(v.job.as_str()) {
                out[i].checks.push((v.wave, j, stand_of(j)));
            }
            continue;
        }
        let (Some(k), Some(&i)) = (j.wave, index.get(j.job.as_str())) else { continue };
        let st = &mut out[i];
        let Some(w) = st.waves.get_mut(k as usize - 1) else { continue };
        if in_flight(&j.id) {
            st.in_flight += 1;
        }
        let stand = stand_of(j);
        if matches!(stand, Stand::Done | Stand::Failed) {
            w.ended_ms = w.ended_ms.max(finished_ms(j));
        }
        match stand {
            Stand::Done => w.done.push(j),
            Stand::Failed => w.failed.push(j),
            Stand::Running => w.running.push(j),
            Stand::Untouched => w.untouched.push(j),
        }
    }
    out
}

/// Why something of a rollout may not start yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Wait {
    /// Not yet: an earlier wave, its checks or a free slot.
    NotYet,
    /// Only the pause between waves: this many milliseconds are left.
    Pause(i64),
}

impl<'a> Standing<'a> {
    /// The first wave not finished (1-based); past the last when all are.
    pub(crate) fn open_wave(&self) -> u32 {
        self.waves.iter().position(|w| !w.settled()).map_or(self.waves.len() as u32 + 1, |i| i as u32 + 1)
    }

    /// May an instance of wave `k` start at `now_ms` (earlier waves finished, the checks after
    /// them passed, the pause after them over, a slot free)?
    pub(crate) fn may_start(&self, k: u32, chosen: usize, now_ms: i64) -> Result<(), Wait> {
        let checked = self.checks.iter().filter(|(w, _, _)| *w < k).all(|(_, _, st)| *st == Stand::Done);
        if k > self.open_wave() || !checked || self.plan.max_in_flight.is_some_and(|m| self.in_flight + chosen >= m) {
            return Err(Wait::NotYet);
        }
        self.pause_left(k, now_ms)
    }

    /// May the checks after wave `k` start at `now_ms` (waves up to `k` finished, the pause after
    /// wave `k` over)?
    pub(crate) fn may_check(&self, k: u32, now_ms: i64) -> Result<(), Wait> {
        if k >= self.open_wave() {
            return Err(Wait::NotYet);
        }
        self.pause_left(k + 1, now_ms)
    }

    /// The pause before wave `k`: over, or how long is left.
    fn pause_left(&self, k: u32, now_ms: i64) -> Result<(), Wait> {
        let ended = (k > 1).then(|| self.waves.get(k as usize - 2).and_then(|w| w.ended_ms)).flatten();
        match ended.map(|e| e + self.pause_ms - now_ms) {
            Some(left) if self.pause_ms > 0 && left > 0 => Err(Wait::Pause(left)),
            _ => Ok(()),
        }
    }

    /// The checks between waves that failed: after which wave, and the instance.
    pub(crate) fn failed_check(&self) -> Option<(u32, &'a JobInstance)> {
        self.checks.iter().find(|(_, _, st)| *st == Stand::Failed).map(|(k, j, _)| (*k, *j))
    }

    fn failed(&self) -> usize {
        self.waves.iter().map(|w| w.failed.len()).sum()
    }

    /// The spent budget, in words, with the wave it was spent in (`None`: within budget).
    pub(crate) fn over_budget(&self) -> Option<(u32, String)> {
        let total = self.failed();
        for (i, w) in self.waves.iter().enumerate() {
            if let Some(max) = self.plan.waves[i].max_failures.filter(|m| w.failed.len() > *m) {
                return Some((
                    i as u32 + 1,
                    format!("wave {} has {} failed, over its budget of {max}", i + 1, w.failed.len()),
                ));
            }
        }
        (total > self.plan.max_failures).then(|| {
            let wave = self.waves.iter().rposition(|w| !w.failed.is_empty()).map_or(1, |i| i as u32 + 1);
            (wave, format!("{total} failed, over its budget of {}", self.plan.max_failures))
        })
    }

    fn names(list: &[&JobInstance]) -> Vec<String> {
        list.iter().map(|j| short(j)).collect()
    }

    fn all(&self, pick: for<'w> fn(&'w Wave<'a>) -> &'w [&'a JobInstance]) -> Vec<String> {
        self.waves.iter().flat_map(|w| Self::names(pick(w))).collect()
    }

    /// The pause of a rollout whose budget is spent (`check`: `None`) or whose checks between
    /// waves failed (`check`: the instance that ran them): its reason, and the timeline entry
    /// listing the hosts done, failed, running and untouched.
    pub(crate) fn paused(
        &self,
        op: &str,
        actor: &str,
        wave: u32,
        why: &str,
        check: Option<&str>,
    ) -> (String, TimelineEntry) {
        let (done, failed, running, untouched) =
            (self.all(|w| &w.done), self.all(|w| &w.failed), self.all(|w| &w.running), self.all(|w| &w.untouched));
        let (when, what) = match check {
            None => ("in", "retry or skip the failed hosts, roll back, or cancel".to_string()),
            Some(id) => ("after", format!("retry {id} once fixed, skip it by a patch, roll back, or cancel")),
        };
        let reason = format!(
            "rollout of {} paused {when} wave {wave} of {}: {why}; failed: {}; {} done, {} running, {} untouched; {what}",
            self.plan.job,
            self.waves.len(),
            if failed.is_empty() { "none".to_string() } else { failed.join(", ") },
            done.len(),
            running.len(),
            untouched.len(),
        );
        let data = json!({
            "job": self.plan.job, "wave": wave, "budget": self.plan.max_failures, "check": check,
            "done": done, "failed": failed, "running": running, "untouched": untouched,
        });
        let e = entry(op, actor, "rollout_paused", reason.clone(), data);
        (reason, e)
    }

    /// Where wave `k` stands now.
    pub(crate) fn progress(&self, k: u32) -> WaveProgress {
        let w = &self.waves[k as usize - 1];
        WaveProgress {
            job: self.plan.job.clone(),
            wave: k,
            waves: self.waves.len() as u32,
            size: w.size(),
            done: w.done.len(),
            failed: w.failed.len(),
            running: w.running.len(),
            budget_left: self.plan.max_failures.saturating_sub(self.failed()),
        }
    }

    /// The entry of wave `k` starting.
    pub(crate) fn wave_started(&self, op: &str, actor: &str, k: u32) -> TimelineEntry {
        let w = &self.waves[k as usize - 1];
        let names = Self::names(&w.untouched);
        let reason = format!(
            "{} wave {k} of {}: {} instance(s) ({})",
            self.plan.job,
            self.waves.len(),
            w.size(),
            abbreviate(&names)
        );
        let data = json!({"job": self.plan.job, "wave": k, "hosts": names, "progress": self.progress(k)});
        entry(op, actor, "wave_started", reason, data)
    }

    /// The entry of wave `k` finished, with the budget left.
    pub(crate) fn wave_finished(&self, op: &str, actor: &str, k: u32) -> TimelineEntry {
        let w = &self.waves[k as usize - 1];
        let failed = Self::names(&w.failed);
        let total = self.failed();
        let left = self.plan.max_failures.saturating_sub(total);
        // What comes before the next wave: the pause, then the checks.
        let mut next = Vec::new();
        if (k as usize) < self.waves.len() {
            next.extend(self.plan.pause_between.as_ref().map(|p| format!("a pause of {p}")));
            next.extend(self.checks.iter().filter(|(w, _, _)| *w == k).map(|(_, j, _)| j.id.clone()));
        }
        let reason = format!(
            "{} wave {k} of {} finished: {} done, {} failed{}; budget left {left} of {}{}",
            self.plan.job,
            self.waves.len(),
            w.done.len(),
            failed.len(),
            if failed.is_empty() { String::new() } else { format!(" ({})", abbreviate(&failed)) },
            self.plan.max_failures,
            if next.is_empty() { String::new() } else { format!("; next: {}", next.join(", then ")) },
        );
        let data = json!({
            "job": self.plan.job, "wave": k, "done": w.done.len(), "failed": failed,
            "failed_total": total, "budget": self.plan.max_failures, "progress": self.progress(k),
        });
        entry(op, actor, "wave_finished", reason, data)
    }
}

/// `worker-3` for `upgrade@worker-3`: the host's name.
fn short(j: &JobInstance) -> String {
    j.id.split_once('@').map_or(j.id.as_str(), |(_, r)| r).to_string()
}

fn abbreviate(items: &[String]) -> String {
    if items.len() <= 5 {
        items.join(", ")
    } else {
        format!("{}, ... ({} in all)", items[..5].join(", "), items.len())
    }
}
