//! The documents users write (documents.md): [`Document`], one variant per kind. The kinds live
//! in `world.rs` (resources, providers, policies, intents), `packs.rs` (packs, templates, jobs,
//! evidence, artifacts) and `repair.rs` (gates, interventions, patches, remedies, failures).
//!
//! Field names follow the YAML exactly. Alternative short forms (`- kubernetes.cluster` for a
//! requirement, a job id for an inline job) are normalised by `pack` before these types
//! see them, so each type here has exactly one shape.

use serde::{Deserialize, Serialize};

use crate::model::packs::{Artifact, Evidence, Job, PlanTemplate, ScenarioPack};
use crate::model::repair::{Failure, Gate, Intervention, PlanPatch, Remedy};
use crate::model::world::{CapabilityPolicy, Intent, OperationsPolicy, Provider, Requirement, Resource};

/// One YAML document, by kind. The root key of the document names the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Document {
    Resource(Resource),
    Provider(Provider),
    CapabilityPolicy(CapabilityPolicy),
    OperationsPolicy(OperationsPolicy),
    Intent(Intent),
    ScenarioPack(ScenarioPack),
    PlanTemplate(PlanTemplate),
    Job(Job),
    Evidence(Vec<Evidence>),
    Artifact(Artifact),
    Gate(Gate),
    Intervention(Intervention),
    PlanPatch(PlanPatch),
    Remedy(Remedy),
    Failure(Failure),
    /// The seed's §5 fragment: a bare `requires:` list.
    Requires(Vec<Requirement>),
}

impl Document {
    pub fn kind(&self) -> &'static str {
        match self {
            Document::Resource(_) => "resource",
            Document::Provider(_) => "provider",
            Document::CapabilityPolicy(_) => "capability_policy",
            Document::OperationsPolicy(_) => "operations_policy",
            Document::Intent(_) => "intent",
            Document::ScenarioPack(_) => "scenario_pack",
            Document::PlanTemplate(_) => "plan_template",
            Document::Job(_) => "job",
            Document::Evidence(_) => "evidence",
            Document::Artifact(_) => "artifact",
            Document::Gate(_) => "gate",
            Document::Intervention(_) => "intervention",
            Document::PlanPatch(_) => "plan_patch",
            Document::Remedy(_) => "remedy",
            Document::Failure(_) => "failure",
            Document::Requires(_) => "requires",
        }
    }
}
