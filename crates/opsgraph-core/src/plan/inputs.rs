//! The digest of what a plan is built from, beyond its intent: so a plan's hash changes whenever
//! any input changes, and a preview confirmed later can be told stale ([`check_preview`]).

use serde::Serialize;

use crate::plan::types::{sha256_json, Input, Plan};
use crate::plan::Error;

/// Every input of a plan but the intent (which the plan holds whole): the loaded packs
/// (`id@version` and content digest, each one: another version could be picked), the world's
/// resources and providers (by id, whatever their order in the files), the capability policy
/// and the operations policy.
pub(crate) fn digest(input: &Input<'_>) -> String {
    #[derive(Serialize)]
    struct Inputs<'a> {
        packs: Vec<(String, &'a str)>,
        resources: Vec<&'a crate::model::Resource>,
        providers: Vec<&'a crate::model::Provider>,
        policy: &'a crate::model::CapabilityPolicy,
        operations: &'a crate::model::OperationsPolicy,
    }
    let mut packs: Vec<(String, &str)> = input.packs.iter().map(|p| (p.reference(), p.digest.as_str())).collect();
    packs.sort();
    let mut resources: Vec<&crate::model::Resource> = input.inventory.resources().iter().collect();
    resources.sort_by(|a, b| a.id.cmp(&b.id));
    let mut providers: Vec<&crate::model::Provider> = input.providers.iter().collect();
    providers.sort_by(|a, b| a.id.cmp(&b.id));
    sha256_json(&Inputs { packs, resources, providers, policy: input.policy, operations: input.operations })
}

/// Refuses a plan whose hash is not the one a person previewed (`P011`): one of its inputs
/// changed between the preview and the confirmation.
/// The previewed hash may be the short form the text preview shows (`sha256:` and at least 12
/// hex digits).
pub fn check_preview(previewed: &str, plan: &Plan) -> Result<(), Error> {
    let previewed = previewed.trim();
    if previewed.len() >= "sha256:".len() + 12 && plan.revision.hash.starts_with(previewed) {
        return Ok(());
    }
    Err(Error::StalePreview { previewed: previewed.to_string(), now: plan.revision.hash.clone() })
}
