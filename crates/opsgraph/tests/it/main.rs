//! The one integration-test binary: every feature has a `check(input, expect)` helper and its
//! expectations are snapshots (`UPDATE_EXPECT=1 cargo test` rewrites them).

mod agent;
mod ai;
mod builders;
mod bundled;
mod crash;
mod documents;
mod faults;
mod gates;
mod intervene;
mod lab;
mod lifecycle;
mod limits;
mod local_audit;
mod manage;
mod orphans;
mod packs;
mod patch;
mod plan;
mod preview;
mod remedies;
mod remote;
mod replicas;
mod resolve;
mod runtime;
mod secrets;
mod server;
mod server_stream;
mod subop;
mod support;
mod tidy;
mod ui;
