//! The core's tests, data-driven (`check(input, expect)` with snapshots): the operation
//! lifecycle, capability resolution and plan building, built from fixtures (`builders.rs`). They
//! compile the core alone — no runtime, store or server — and run in well under a second.

mod builders;
mod day2;
mod lifecycle;
mod plan;
mod policy_rules;
mod preview_text;
mod refuse;
mod resolve;
mod rollout;
