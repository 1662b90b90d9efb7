//! Templating: any intent (parameters, targets, constraints) against the lab cluster's pack and
//! inventory is either planned — parameters typed, scopes filled, jobs fanned out — and
//! rendered, or refused with errors; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opsgraph_core::model::Document;

fuzz_target!(|data: &[u8]| {
    let lab = opsgraph_fuzz::lab();
    for doc in opsgraph_fuzz::documents_in(data, "intent.yaml") {
        let Document::Intent(intent) = doc else { continue };
        match opsgraph_fuzz::build(&lab.pack, &lab.resources, &intent) {
            Ok(plan) => {
                let _ = opsgraph_core::plan::render::text(&plan);
                let _ = opsgraph_core::plan::render::json(&plan, std::slice::from_ref(&lab.pack));
                let _ = opsgraph_core::plan::render::dot(&plan);
            }
            Err(errors) => assert!(!errors.is_empty(), "a refusal says why"),
        }
    }
});
