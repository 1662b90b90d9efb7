//! Plan patches on the lab cluster's plan: any patch text is either refused with findings or
//! applied into a plan that passes the plan's own checks (the edit path validates ids,
//! dependencies and cycles) and that the reviewer can read; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opsgraph_core::model::Document;

fuzz_target!(|data: &[u8]| {
    let lab = opsgraph_fuzz::lab();
    for doc in opsgraph_fuzz::documents_in(data, "patch.yaml") {
        let Document::PlanPatch(patch) = doc else { continue };
        match opsgraph_core::plan::patch::apply_patch(&lab.plan, &lab.pack, &patch) {
            Ok(patched) => {
                assert_ne!(patched.plan.revision.hash, "", "an applied patch stamps its revision");
                let _ = opsgraph_core::plan::patch::review(&patched.plan, &lab.pack);
                let _ = opsgraph_core::plan::render::text(&patched.plan);
            }
            Err(findings) => assert!(!findings.is_empty(), "a refusal says why"),
        }
    }
});
