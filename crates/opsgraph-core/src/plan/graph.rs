//! The job-level graph of a plan, for people and tests: instances collapsed to their job, and
//! the transitive reduction a drawing shows.

use std::collections::{BTreeSet, HashMap};

use super::Plan;

/// The job-level graph (instances collapsed to their job), for people and tests; a DAG.
pub fn job_edges(plan: &Plan) -> BTreeSet<(String, String)> {
    let job_of: HashMap<&str, &str> = plan.jobs.iter().map(|j| (j.id.as_str(), j.job.as_str())).collect();
    let mut edges = BTreeSet::new();
    for j in &plan.jobs {
        for d in &j.depends_on {
            // A rolling job's instances wait for each other: no edge from a job to itself.
            if let Some(from) = job_of.get(d.as_str()).filter(|from| **from != j.job) {
                edges.insert((from.to_string(), j.job.clone()));
            }
        }
    }
    edges
}

/// The transitive reduction of a DAG's edge set: the edges no longer path implies.
pub fn transitive_reduction(edges: &BTreeSet<(String, String)>) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (a, b) in edges {
        // Is b reachable from a without the direct edge?
        let mut stack: Vec<&str> = edges.iter().filter(|(x, y)| x == a && y != b).map(|(_, y)| y.as_str()).collect();
        let mut seen = BTreeSet::new();
        let mut implied = false;
        while let Some(n) = stack.pop() {
            if n == b {
                implied = true;
                break;
            }
            if seen.insert(n) {
                stack.extend(edges.iter().filter(|(x, _)| x == n).map(|(_, y)| y.as_str()));
            }
        }
        if !implied {
            out.insert((a.clone(), b.clone()));
        }
    }
    out
}
