//! The protocol's vocabulary (protocol-v0 §2): every object a user writes or the control plane
//! records, as plain data.
//!
//! Architecture invariant: this module does no IO and has no behaviour beyond small, total helpers.
//! The shapes here are what `pack` produces after validation; they derive serde so the
//! store can keep them as JSON columns, and every format is guarded by snapshot tests.

mod documents;
mod ids;
mod operation;
mod packs;
mod repair;
mod world;

pub use documents::*;
pub use ids::{is_capability_key, is_id, is_resource_id};
pub use operation::{JobState, Operation, OperationState, OperationStateKind};
pub use packs::*;
pub use repair::*;
pub use world::*;

/// A free-form attribute or parameter map. Ordered, so that hashes and renderings are stable.
pub type Attributes = std::collections::BTreeMap<String, serde_json::Value>;
