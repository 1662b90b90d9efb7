//! A pack's library scripts: the files its manifest lists under `libraries:`, each directly in
//! `scripts/lib/`. The runtime stages them beside a job's script wherever it runs (locally, over
//! SSH, on an agent) in the directory `OPSGRAPH_LIB` names, so scripts source them with
//! `. "$OPSGRAPH_LIB/NAME.sh"`. This module checks both ends of that reference: every listed
//! library exists where it must, and every `$OPSGRAPH_LIB/NAME` a script names is listed.

use std::collections::{BTreeMap, BTreeSet};

use crate::pack::diag::{did_you_mean, Code, Diagnostic};
use crate::pack::lint::line_col;
use crate::pack::shape::{pos_at, PathSeg};
use crate::pack::{Located, PackFile};

/// The directory, inside a pack, that holds its libraries.
pub const LIBRARY_DIR: &str = "scripts/lib/";

/// The variable naming the directory the libraries are staged in.
pub const LIBRARY_ENV: &str = "OPSGRAPH_LIB";

/// Checks the manifest's `libraries` against the pack's files, and the references of its scripts
/// (`files` that are not YAML) against the libraries. `join` makes a path relative to the pack
/// root a file name for diagnostics.
pub(crate) fn check(
    manifest: &Located,
    libraries: &[String],
    files: &[PackFile],
    all_paths: &BTreeSet<String>,
    join: impl Fn(&str) -> String,
    diags: &mut Vec<Diagnostic>,
) {
    let present: Vec<&str> = all_paths.iter().filter_map(|p| p.strip_prefix(LIBRARY_DIR)).collect();
    let mut declared: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, library) in libraries.iter().enumerate() {
        let at = pos_at(&manifest.node, &[PathSeg::Key("libraries"), PathSeg::Index(i)]);
        let normal = library.trim_start_matches("./");
        let name = normal.strip_prefix(LIBRARY_DIR).unwrap_or_default();
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            diags.push(
                Diagnostic::error(at, Code::BadValue, format!("library `{library}` is not a file of {LIBRARY_DIR}"))
                    .in_file(&manifest.file)
                    .expected(format!("a path such as {LIBRARY_DIR}common.sh")),
            );
        } else if !all_paths.contains(normal) {
            let mut diag = Diagnostic::error(at, Code::UnknownRef, format!("library `{library}` does not exist"))
                .in_file(&manifest.file)
                .expected(format!("a file of {}", join(LIBRARY_DIR)));
            if let Some(close) = did_you_mean(name, present.iter().copied()) {
                diag = diag.hint(format!("did you mean `{LIBRARY_DIR}{close}`?"));
            }
            diags.push(diag);
        } else if declared.insert(name, i).is_some() {
            diags.push(
                Diagnostic::error(at, Code::Duplicate, format!("library `{library}` is listed twice"))
                    .in_file(&manifest.file),
            );
        }
    }
    for script in files.iter().filter(|f| f.path.starts_with("scripts/")) {
        for (offset, name) in references(&script.text) {
            if declared.contains_key(name) {
                continue;
            }
            let mut diag = Diagnostic::error(
                line_col(&script.text, offset),
                Code::UnknownRef,
                format!("`${LIBRARY_ENV}/{name}` is not a library of this pack"),
            )
            .in_file(&join(&script.path));
            diag = match did_you_mean(name, declared.keys().copied()) {
                Some(close) => diag.hint(format!("did you mean `{close}`?")),
                None => diag.hint(format!("list `{LIBRARY_DIR}{name}` under `libraries:` in pack.yaml")),
            };
            diags.push(diag);
        }
    }
}

/// The `$OPSGRAPH_LIB/NAME` (or `${OPSGRAPH_LIB}/NAME`) references of a script outside comment
/// lines: the byte offset of each and the name.
fn references(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if !line.trim_start().starts_with('#') {
            for form in [format!("${LIBRARY_ENV}/"), format!("${{{LIBRARY_ENV}}}/")] {
                for (at, _) in line.match_indices(&form) {
                    let rest = &line[at + form.len()..];
                    let end = rest.find(|c: char| c.is_whitespace() || "\"';)|&<>`$".contains(c)).unwrap_or(rest.len());
                    out.push((start + at, &rest[..end]));
                }
            }
        }
        start += line.len();
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::*;

    fn check_case(manifest: &str, scripts: &[(&str, &str)], expect: Expect) {
        let parsed = crate::pack::parse_file("p/pack.yaml", manifest);
        let located = parsed.docs.into_iter().next().expect("a manifest");
        let crate::model::Document::ScenarioPack(m) = &located.doc else { panic!("not a manifest") };
        let files: Vec<PackFile> =
            scripts.iter().map(|(p, t)| PackFile { path: (*p).to_string(), text: (*t).to_string() }).collect();
        let all: BTreeSet<String> = files.iter().map(|f| f.path.clone()).collect();
        let mut diags = Vec::new();
        check(&located, &m.libraries, &files, &all, |p| format!("p/{p}"), &mut diags);
        let text: Vec<String> = diags.iter().map(ToString::to_string).collect();
        expect.assert_eq(&text.join("\n"));
    }

    const MANIFEST: &str = "scenario_pack:\n  id: p\n  version: 1.0.0\n  libraries:\n";

    #[test]
    fn libraries_and_their_references() {
        // Listed, present and sourced: nothing to say.
        check_case(
            &format!("{MANIFEST}    - scripts/lib/common.sh\n"),
            &[
                ("scripts/lib/common.sh", "log() { :; }\n"),
                ("scripts/a.sh", "# . \"$OPSGRAPH_LIB/gone.sh\" in a comment\n. \"$OPSGRAPH_LIB/common.sh\"\n"),
            ],
            expect![""],
        );
        // Outside scripts/lib, missing (with a close name), listed twice.
        check_case(
            &format!("{MANIFEST}    - scripts/common.sh\n    - scripts/lib/comon.sh\n    - ./scripts/lib/common.sh\n    - scripts/lib/common.sh\n"),
            &[("scripts/lib/common.sh", "")],
            expect![[r#"
                p/pack.yaml:5:7: error[E006]: library `scripts/common.sh` is not a file of scripts/lib/
                  = expected: a path such as scripts/lib/common.sh
                p/pack.yaml:6:7: error[E009]: library `scripts/lib/comon.sh` does not exist
                  = expected: a file of p/scripts/lib/
                  = hint: did you mean `scripts/lib/common.sh`?
                p/pack.yaml:8:7: error[E008]: library `scripts/lib/common.sh` is listed twice"#]],
        );
        // A script sourcing what is not listed: at its line and column, in either spelling.
        check_case(
            &format!("{MANIFEST}    - scripts/lib/common.sh\n"),
            &[
                ("scripts/lib/common.sh", ""),
                ("scripts/lib/other.sh", ""),
                ("scripts/a.sh", "set -eu\n  . \"${OPSGRAPH_LIB}/comon.sh\"; . \"$OPSGRAPH_LIB/other.sh\"\n"),
            ],
            expect![[r#"
                p/scripts/a.sh:2:6: error[E009]: `$OPSGRAPH_LIB/comon.sh` is not a library of this pack
                  = hint: did you mean `common.sh`?
                p/scripts/a.sh:2:36: error[E009]: `$OPSGRAPH_LIB/other.sh` is not a library of this pack
                  = hint: list `scripts/lib/other.sh` under `libraries:` in pack.yaml"#]],
        );
    }
}
