//! (Measurement, `OPSGRAPH_STREAM_STAGES=1`) where an event's delivery time goes on the server:
//! commit (`at`) → the hub's read, the hub's read → the stream's task, the task → the body's
//! poll (and the entries per broadcast). Histograms of 0.1 ms buckets up to 1 s, written to
//! stderr when the last stream ends (`apiload` prints them). Off, each costs one load of a flag.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const BUCKETS: usize = 10_000;
static ON: OnceLock<bool> = OnceLock::new();
static H: [[AtomicU64; BUCKETS]; 4] = [const { [const { AtomicU64::new(0) }; BUCKETS] }; 4];
const NAMES: [&str; 4] = ["commit->hub read", "hub read->task", "task->body poll", "hub msg entries"];

pub(crate) fn on() -> bool {
    *ON.get_or_init(|| std::env::var_os("OPSGRAPH_STREAM_STAGES").is_some())
}

pub(crate) fn record(stage: usize, ms: f64, weight: u64) {
    if !on() {
        return;
    }
    let b = ((ms * 10.0).max(0.0) as usize).min(BUCKETS - 1);
    H[stage][b].fetch_add(weight, Ordering::Relaxed);
}

pub(crate) fn dump() {
    if !on() {
        return;
    }
    for (k, h) in H.iter().enumerate() {
        let counts: Vec<u64> = h.iter().map(|c| c.swap(0, Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let q = |p: f64| {
            let want = (total as f64 * p).ceil() as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= want.max(1) {
                    return i as f64 / 10.0;
                }
            }
            f64::NAN
        };
        eprintln!(
            "stream stages: {}: n {total}, p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
            NAMES[k],
            q(0.5),
            q(0.9),
            q(0.99),
            q(1.0)
        );
    }
}
