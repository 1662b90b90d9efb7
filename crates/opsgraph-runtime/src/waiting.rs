//! Which of a plan's jobs may be ready, kept as the driver commits job records, so that looking
//! for ready jobs does not scan every pending job of the plan at each decision (on a chain of N
//! jobs that scan was O(N) per job, O(N²) per drive).
//!
//! The candidates are a superset of the ready jobs: every job not done whose dependencies on
//! other jobs of the plan are all done (a dependency on a gate, a retry's backoff, a rollout's
//! wave are still decided by `decide`'s filter), and every check between waves (which waits for
//! its hosts otherwise). `decide` applies the same filter to the candidates, in plan order, that
//! it applied to the whole plan: the same jobs start.

use std::collections::{BTreeSet, HashMap};

use opsgraph_core::plan::JobInstance;
use opsgraph_store::JobRecord;

/// The plan's jobs by what they wait for.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    /// Index in the plan of each job.
    position: HashMap<String, usize>,
    /// For each job (by index), the jobs that depend on it.
    dependents: Vec<Vec<usize>>,
    /// For each job, how many of the plan's jobs it depends on are not done.
    unmet: Vec<usize>,
    /// Jobs that may be ready, by index (so in plan order).
    candidates: BTreeSet<usize>,
}

fn done(jobs: &HashMap<String, JobRecord>, id: &str) -> bool {
    jobs.get(id).is_some_and(|j| j.state.is_done())
}

impl Waiting {
    /// The index of `plan` over the job records `jobs`.
    pub(crate) fn new(plan: &[JobInstance], jobs: &HashMap<String, JobRecord>) -> Waiting {
        let position: HashMap<String, usize> = plan.iter().enumerate().map(|(i, j)| (j.id.clone(), i)).collect();
        let mut dependents = vec![Vec::new(); plan.len()];
        let mut unmet = vec![0; plan.len()];
        let mut candidates = BTreeSet::new();
        for (i, j) in plan.iter().enumerate() {
            for d in &j.depends_on {
                // A gate, or a job the plan does not have: `decide` looks at it each time.
                let Some(&k) = position.get(d) else { continue };
                dependents[k].push(i);
                unmet[i] += usize::from(!done(jobs, d));
            }
            if !done(jobs, &j.id) && (unmet[i] == 0 || j.verifies.is_some()) {
                candidates.insert(i);
            }
        }
        Waiting { position, dependents, unmet, candidates }
    }

    /// The jobs that may be ready, from index `from` on, in plan order.
    pub(crate) fn candidates(&self, from: usize) -> impl Iterator<Item = usize> + '_ {
        self.candidates.range(from..).copied()
    }

    /// `record` is about to replace the record of its job in `jobs` (the driver's copy).
    pub(crate) fn update(&mut self, plan: &[JobInstance], jobs: &HashMap<String, JobRecord>, record: &JobRecord) {
        let Some(&i) = self.position.get(&record.id) else { return };
        let was = done(jobs, &record.id);
        let is = record.state.is_done();
        if is {
            self.candidates.remove(&i);
        } else if self.unmet[i] == 0 || plan[i].verifies.is_some() {
            self.candidates.insert(i);
        }
        if was == is {
            return;
        }
        for &k in &self.dependents[i] {
            if is {
                self.unmet[k] -= 1;
                if self.unmet[k] == 0 && !done(jobs, &plan[k].id) {
                    self.candidates.insert(k);
                }
            } else {
                // Stays a candidate if it was one: a superset is enough.
                self.unmet[k] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::instance;
    use opsgraph_store::JobState;

    fn record(id: &str, state: JobState) -> JobRecord {
        JobRecord {
            operation: "op".into(),
            id: id.into(),
            state,
            attempts: 0,
            outcome: serde_json::Value::Null,
            updated_at: String::new(),
        }
    }

    /// Jobs, then records committed one after another: the candidates after each.
    fn check(plan: &[(&str, &[&str])], steps: &[(&str, JobState)], expect: &str) {
        let plan: Vec<JobInstance> = plan.iter().map(|(id, deps)| instance(id, deps)).collect();
        let mut jobs: HashMap<String, JobRecord> =
            plan.iter().map(|j| (j.id.clone(), record(&j.id, JobState::Pending))).collect();
        let mut w = Waiting::new(&plan, &jobs);
        let names = |w: &Waiting| match w.candidates(0).map(|i| plan[i].id.as_str()).collect::<Vec<_>>() {
            none if none.is_empty() => "none".to_string(),
            some => some.join(" "),
        };
        let mut lines = vec![format!("start: {}", names(&w))];
        for (id, state) in steps {
            let r = record(id, *state);
            w.update(&plan, &jobs, &r);
            jobs.insert(r.id.clone(), r);
            lines.push(format!("{id} {}: {}", state.as_str(), names(&w)));
            // The kept index is the one built from the records now, or a superset of it.
            let fresh = Waiting::new(&plan, &jobs);
            assert!(fresh.candidates.is_subset(&w.candidates), "{lines:?}");
        }
        assert_eq!(lines.join("\n"), expect.trim());
    }

    #[test]
    fn a_chain_has_one_candidate_at_a_time() {
        check(
            &[("a", &[]), ("b", &["a"]), ("c", &["b"])],
            &[("a", JobState::Running), ("a", JobState::Succeeded), ("b", JobState::Succeeded)],
            "
start: a
a running: a
a succeeded: b
b succeeded: c",
        );
    }

    #[test]
    fn a_gate_or_an_unknown_dependency_is_left_to_decide() {
        check(
            &[("a", &["gate-1"]), ("b", &["a", "nowhere"]), ("c", &["a", "b"])],
            &[("a", JobState::Succeeded), ("b", JobState::Failed), ("b", JobState::Pending), ("b", JobState::Skipped)],
            "
start: a
a succeeded: b
b failed: b
b pending: b
b skipped: c",
        );
    }

    #[test]
    fn a_job_done_again_undone_keeps_its_dependents_waiting() {
        check(
            &[("a", &[]), ("b", &["a"])],
            &[
                ("a", JobState::Succeeded),
                ("a", JobState::Pending),
                ("b", JobState::Succeeded),
                ("a", JobState::Succeeded),
            ],
            "
start: a
a succeeded: b
a pending: a b
b succeeded: a
a succeeded: none",
        );
    }
}
