//! The remedy library: cross-cutting remedies that ship with Opsgraph and apply to every pack
//! (apt locks and keys, DNS, disk, memory, permissions, ports, SSH, certificates, registries,
//! Helm, PostgreSQL, etcd, MinIO). Their YAML lives in `crates/opsgraph-core/remedies/` and is
//! embedded at build time (no IO); `remedy::best_match` tries a pack's remedies first,
//! then these. A library remedy's patch may only retry or skip the failed job (`$job`) or set
//! parameters: it knows no pack's job library, so the fix jobs are the packs' own remedies.

use std::sync::OnceLock;

use crate::model::{Document, PatchChange, Remedy};
use crate::pack::Diagnostic;

/// The library remedy that recognises instructions addressed to a reader of the log (a prompt
/// injection): it wins over every other remedy and proposes nothing.
pub const GUARD: &str = "log-quotes-instructions";

/// The library's files: their path in the repository and their text.
pub const FILES: &[(&str, &str)] = &[
    ("crates/opsgraph-core/remedies/system.yaml", include_str!("../../remedies/system.yaml")),
    ("crates/opsgraph-core/remedies/services.yaml", include_str!("../../remedies/services.yaml")),
];

/// The library's remedies, in file order (parsed once; a document with problems is left out,
/// and [`check`] reports it).
pub fn remedies() -> &'static [Remedy] {
    static LIBRARY: OnceLock<Vec<Remedy>> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        FILES
            .iter()
            .flat_map(|(file, text)| super::parse_file(file, text).docs)
            .filter_map(|d| match d.doc {
                Document::Remedy(r) => Some(r),
                _ => None,
            })
            .collect()
    })
}

/// Every problem of the library: document problems, other kinds than `remedy`, duplicate ids,
/// invalid patterns, patches that name a job other than `$job` or insert jobs.
pub fn check() -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for (file, text) in FILES {
        let parsed = super::parse_file(file, text);
        problems.extend(parsed.diagnostics.iter().filter(|d| d.is_error()).map(Diagnostic::to_string));
        for d in parsed.docs {
            let Document::Remedy(r) = d.doc else {
                problems.push(format!("{file}:{}: only `remedy` documents belong in the library", d.pos.line));
                continue;
            };
            if !ids.insert(r.id.clone()) {
                problems.push(format!("{file}: remedy `{}` is defined twice", r.id));
            }
            for p in &r.signature.output_matches {
                if let Err(e) = regex::RegexBuilder::new(p).case_insensitive(true).build() {
                    problems.push(format!("{file}: remedy `{}`: invalid pattern: {e}", r.id));
                }
            }
            for change in r.plan_patch.iter().flat_map(|p| &p.changes) {
                let ok = match change {
                    PatchChange::Retry { job, .. } | PatchChange::Skip { job, .. } => job == "$job",
                    PatchChange::SetParameters { job, .. } => job.as_deref().is_none_or(|j| j == "$job"),
                    _ => false,
                };
                if !ok {
                    problems.push(format!(
                        "{file}: remedy `{}`: a library patch may only retry or skip `$job` or set parameters",
                        r.id
                    ));
                }
            }
        }
    }
    problems
}
