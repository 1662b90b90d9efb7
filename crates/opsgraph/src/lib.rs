//! The `opsgraph` binary: the command line over the library crates.
//!
//! This crate is the imperative shell: it reads files, picks implementations and prints. The
//! decisions live in `opsgraph-core` (documents, packs, resolution and plans).

mod agent_client;
pub mod agent_cmd;
mod agent_side;
pub mod args;
pub mod catalogue;
pub mod cli;
pub mod client;
pub mod control_cmd;
pub mod demo_cmd;
pub mod fleet_cmd;
pub mod fleet_light_cmd;
pub mod fleet_run;
pub mod follower;
pub mod lab;
pub mod load;
pub mod ops_cmd;
pub mod pack_cmd;
pub mod plan_cmd;
pub mod query_cmd;
pub mod registry;
pub mod remedy_cmd;
pub mod remote;
mod remote_follow;
pub mod render;
pub mod resource_cmd;
pub mod serve_cmd;
pub mod storage;
pub mod verify_cmd;
