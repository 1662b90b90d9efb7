//! Fleet rollouts at run time ([P]), pure: where each rollout of the plan stands (per wave:
//! instances done, failed, running, untouched), which wave may start, whether a failure budget
//! is spent, and the timeline entries of a wave's start, end and a rollout's pause. `decide.rs`
//! asks it; nothing here reads the store.

use std::collections::HashMap;

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

/// Every rollout of the plan, as `stand_of` (an instance's standing) says; instances in plan order.
pub(crate) fn standings<'a>(
    rollouts: &'a [RolloutPlan],
    plan: &'a [JobInstance],
    stand_of: impl Fn(&JobInstance) -> Stand,
    in_flight: impl Fn(&str) -> bool,
) -> Vec<Standing<'a>> {
    let mut out: Vec<Standing<'a>> = rollouts
        .iter()
        .map(|r| Standing { plan: r, waves: vec![Wave::default(); r.waves.len()], in_flight: 0 })
        .collect();
    let index: HashMap<&str, usize> = rollouts.iter().enumerate().map(|(i, r)| (r.job.as_str(), i)).collect();
    for j in plan {
        let (Some(k), Some(&i)) = (j.wave, index.get(j.job.as_str())) else { continue };
        let st = &mut out[i];
        let Some(w) = st.waves.get_mut(k as usize - 1) else { continue };
        if in_flight(&j.id) {
            st.in_flight += 1;
        }
        match stand_of(j) {
            Stand::Done => w.done.push(j),
            Stand::Failed => w.failed.push(j),
            Stand::Running => w.running.push(j),
            Stand::Untouched => w.untouched.push(j),
        }
    }
    out
}

impl<'a> Standing<'a> {
    /// The first wave not finished (1-based); past the last when all are.
    pub(crate) fn open_wave(&self) -> u32 {
        self.waves.iter().position(|w| !w.settled()).map_or(self.waves.len() as u32 + 1, |i| i as u32 + 1)
    }

    /// May an instance of wave `k` start now (earlier waves finished, a slot free)?
    pub(crate) fn may_start(&self, k: u32, chosen: usize) -> bool {
        k <= self.open_wave() && self.plan.max_in_flight.is_none_or(|m| self.in_flight + chosen < m)
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

    /// The pause of a rollout whose budget is spent: its reason, and the timeline entry listing
    /// the hosts done, failed, running and untouched.
    pub(crate) fn paused(&self, op: &str, actor: &str, wave: u32, why: &str) -> (String, TimelineEntry) {
        let (done, failed, running, untouched) =
            (self.all(|w| &w.done), self.all(|w| &w.failed), self.all(|w| &w.running), self.all(|w| &w.untouched));
        let reason = format!(
            "rollout of {} paused in wave {wave} of {}: {why}; failed: {}; {} done, {} running, {} untouched; \
             retry or skip the failed hosts, roll back, or cancel",
            self.plan.job,
            self.waves.len(),
            failed.join(", "),
            done.len(),
            running.len(),
            untouched.len(),
        );
        let data = json!({
            "job": self.plan.job, "wave": wave, "budget": self.plan.max_failures,
            "done": done, "failed": failed, "running": running, "untouched": untouched,
        });
        let e = entry(op, actor, "rollout_paused", reason.clone(), data);
        (reason, e)
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
        entry(op, actor, "wave_started", reason, json!({"job": self.plan.job, "wave": k, "hosts": names}))
    }

    /// The entry of wave `k` finished, with the budget left.
    pub(crate) fn wave_finished(&self, op: &str, actor: &str, k: u32) -> TimelineEntry {
        let w = &self.waves[k as usize - 1];
        let failed = Self::names(&w.failed);
        let total = self.failed();
        let left = self.plan.max_failures.saturating_sub(total);
        let reason = format!(
            "{} wave {k} of {} finished: {} done, {} failed{}; budget left {left} of {}",
            self.plan.job,
            self.waves.len(),
            w.done.len(),
            failed.len(),
            if failed.is_empty() { String::new() } else { format!(" ({})", abbreviate(&failed)) },
            self.plan.max_failures,
        );
        let data = json!({
            "job": self.plan.job, "wave": k, "done": w.done.len(), "failed": failed,
            "failed_total": total, "budget": self.plan.max_failures,
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
