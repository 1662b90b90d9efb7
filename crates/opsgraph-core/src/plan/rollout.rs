//! Fleet rollouts ([P]): a fanned-out job's `controls.rollout` policy turned into counts for one
//! plan — the waves its instances fall in (in the scope's order), the limit in flight, the
//! failure budgets — which the runtime enforces (`opsgraph_runtime::decide`). Pure; below
//! `types.rs` (the plan carries [`RolloutPlan`]s), so it imports nothing of `plan`.

use serde::{Deserialize, Serialize};

use crate::model::{Amount, Rollout, VerifyBetween};

/// One job's rollout in a plan, in counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RolloutPlan {
    pub job: String,
    /// The waves, first to last: how many instances each holds and the failures it tolerates.
    pub waves: Vec<WavePlan>,
    /// At most this many of the job's instances run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// Failed instances tolerated over the whole rollout; one more pauses the operation.
    pub max_failures: usize,
    /// Between the end of a wave and the start of the next (`10m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_between: Option<String>,
    /// The canary gate after the first wave, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_gate: Option<String>,
    /// Whose policy it is: `the pack`, `the intent`, `the operations policy of prod`.
    #[serde(default)]
    pub from: String,
    /// The checks between waves: after wave k (and the pause), the job instance
    /// `verify-<job>-wave-<k>` runs them, and wave k+1 waits for it to pass. `None` when the
    /// policy says `none`, or there is nothing to check or only one wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<WaveChecks>,
}

/// What a rollout checks between waves, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaveChecks {
    pub on: VerifyBetween,
    /// The rolled-out job's evidence, checked again on every host done so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// The resource type's verification (`resources:` of the pack): on the hosts done so far, or
    /// with `on: resource` on every host of the rollout not failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource: Vec<String>,
}

/// The checks between two waves, as a job instance carries them: after wave `wave` of `job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaveRef {
    pub job: String,
    pub wave: u32,
}

/// The id of the job instance that checks wave `wave` of `job`: `verify-upgrade-wave-2`.
pub fn check_id(job: &str, wave: u32) -> String {
    format!("verify-{job}-wave-{wave}")
}

/// One wave of a rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WavePlan {
    pub size: usize,
    /// Failed instances tolerated within this wave (the overall budget still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<usize>,
}

/// The sizes of the waves of `n` instances: each wave's amount of `n` (percentages rounded up,
/// at least 1), the last amount repeated until every instance has a wave, the last wave cut to
/// what is left. No waves given: one wave of all.
pub fn wave_sizes(waves: &[Amount], n: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = n;
    let mut i = 0;
    while left > 0 {
        let amount = waves.get(i).or(waves.last()).map_or(left, |a| a.of_up(n, 1));
        let size = amount.min(left);
        sizes.push(size);
        left -= size;
        i += 1;
    }
    sizes
}

/// The rollout of a job with `n` instances, or `None` when its policy is only an order
/// (`parallel`, `one_at_a_time`: no waves, limits or budgets to enforce). `evidence` and
/// `resource` are the checks there are to run between its waves (the job's evidence, its
/// resource type's verification).
pub fn plan_rollout(
    job: &str,
    policy: &Rollout,
    n: usize,
    from: String,
    evidence: &[String],
    resource: &[String],
) -> Option<RolloutPlan> {
    if !policy.is_fleet() || n == 0 {
        return None;
    }
    let waves = wave_sizes(&policy.waves, n)
        .into_iter()
        .map(|size| WavePlan { size, max_failures: policy.max_failures_per_wave.map(|a| a.of_down(size)) })
        .collect::<Vec<_>>();
    let canary = policy.canary_gate && waves.len() > 1;
    let on = policy.verify_between_waves.unwrap_or_default();
    let checks = (on != VerifyBetween::None && waves.len() > 1 && !(evidence.is_empty() && resource.is_empty()))
        .then(|| WaveChecks { on, evidence: evidence.to_vec(), resource: resource.to_vec() });
    Some(RolloutPlan {
        job: job.to_string(),
        waves,
        max_in_flight: policy.max_in_flight.map(|a| a.of_up(n, 1)),
        max_failures: policy.max_failures.map_or(0, |a| a.of_down(n)),
        pause_between: policy.pause_between.clone(),
        canary_gate: canary.then(|| format!("canary-{job}")),
        from,
        checks,
    })
}

impl RolloutPlan {
    /// The wave (1-based) of the instance at `index` in the scope's order.
    pub fn wave_of(&self, index: usize) -> u32 {
        let mut end = 0;
        for (k, w) in self.waves.iter().enumerate() {
            end += w.size;
            if index < end {
                return k as u32 + 1;
            }
        }
        self.waves.len() as u32
    }

    /// `1 + 10 + 50 + 139 of 200 (budget 5, 2 per wave, 10 at once)`, for previews.
    pub fn summary(&self) -> String {
        let sizes: Vec<String> = self.waves.iter().map(|w| w.size.to_string()).collect();
        let total: usize = self.waves.iter().map(|w| w.size).sum();
        let mut extra = vec![format!("budget {}", self.max_failures)];
        let per_wave: Vec<String> = self.waves.iter().filter_map(|w| w.max_failures.map(|m| m.to_string())).collect();
        if !per_wave.is_empty() {
            extra.push(format!("per wave {}", per_wave.join("/")));
        }
        if let Some(m) = self.max_in_flight {
            extra.push(format!("{m} at once"));
        }
        if let Some(p) = &self.pause_between {
            extra.push(format!("{p} between waves"));
        }
        if let Some(g) = &self.canary_gate {
            extra.push(format!("gate {g} after wave 1"));
        }
        if let Some(c) = &self.checks {
            extra.push(format!("checks between waves on {}", c.on_words()));
        }
        extra.push(format!("from {}", self.from));
        format!("{} waves: {} of {total} ({})", self.waves.len(), sizes.join(" + "), extra.join(", "))
    }
}

impl RolloutPlan {
    /// The job instances that check between waves: one after each wave but the last.
    pub fn check_instances(&self) -> Vec<(u32, String)> {
        match &self.checks {
            Some(_) => (1..self.waves.len() as u32).map(|k| (k, check_id(&self.job, k))).collect(),
            None => Vec::new(),
        }
    }
}

impl WaveChecks {
    /// `the hosts done`, `the whole resource`: where they run, in words.
    pub fn on_words(&self) -> &'static str {
        match self.on {
            VerifyBetween::Resource => "the hosts done and the whole resource",
            _ => "the hosts done",
        }
    }

    /// `fleet_version_ok; resource: node_ready` for previews.
    pub fn list(&self) -> String {
        let mut parts = Vec::new();
        if !self.evidence.is_empty() {
            parts.push(self.evidence.join(", "));
        }
        if !self.resource.is_empty() {
            parts.push(format!("resource: {}", self.resource.join(", ")));
        }
        parts.join("; ")
    }
}

/// Where one wave of a rollout stands, as the timeline records it (`data.progress` of the wave
/// entries and of the rolled-out instances' job entries): what the CLI's live view and the web
/// UI show as the run goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaveProgress {
    pub job: String,
    pub wave: u32,
    pub waves: u32,
    /// Instances in the wave.
    pub size: usize,
    pub done: usize,
    pub failed: usize,
    pub running: usize,
    /// Failures the whole rollout still tolerates (`max_failures` less those so far).
    pub budget_left: usize,
}

impl std::fmt::Display for WaveProgress {
    /// `wave 2/4: 12/50 done, 1 failed, budget 1 left`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wave {}/{}: {}/{} done, {} failed, budget {} left",
            self.wave, self.waves, self.done, self.size, self.failed, self.budget_left
        )
    }
}
