//! The one integration-test binary: every feature has a `check(input, expect)` helper and its
//! expectations are snapshots (`UPDATE_EXPECT=1 cargo test` rewrites them).

mod agent;
mod ai;
mod artifact_params;
mod bundled;
mod crash;
mod day2;
mod documents;
mod edge;
mod etcd;
mod evidence;
mod faults;
mod fleet;
mod fleet_agent;
mod fleet_demo;
mod fleet_faults;
mod fleet_kubernetes;
mod fleet_packs;
mod fleet_postgresql;
mod fleet_postgresql_day2;
mod foureyes;
mod gates;
mod intervene;
mod k8s_network;
mod lab;
mod limits;
mod local_audit;
mod manage;
mod orphans;
mod packs;
mod patch;
mod preview;
#[path = "../../../opsgraph-core/tests/core/preview_text.rs"]
mod preview_text;
mod remedies;
mod remote;
mod replicas;
mod runtime;
mod secrets;
mod server;
mod server_stream;
mod shellcheck;
mod subop;
mod support;
mod tidy;
mod ui;
