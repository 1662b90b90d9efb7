//! The pure core of Opsgraph: the protocol's vocabulary (`model`), documents and packs read from
//! YAML and checked (`pack`), and resolution, planning, plan edits and patches and both
//! lifecycles (`plan`). The first half of the formula, as functions of their inputs:
//!
//!     Intent + Capability Requirements + Policies -> Resolved Capability Graph -> Editable DAG Plan
//!
//! Architecture invariant: no IO (no filesystem, processes, network or async runtime;
//! `tests/it/tidy.rs` holds it so). Callers hand in texts and documents; a preview is a function
//! of its inputs. The modules import downwards: `plan` -> `pack` -> `model`.

pub mod model;
pub mod pack;
pub mod plan;
