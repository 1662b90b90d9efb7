//! A scenario pack: a directory with `pack.yaml` (the `scenario_pack` manifest), documents, and
//! `scripts/`. This module checks the references between its documents.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    Artifact, Document, Editable, Evidence, Job, JobEntry, PatchChange, PlanTemplate, Provider, Remedy, Risk,
    ScenarioPack, ScopeSpec, StageSpec,
};

use crate::pack::diag::{self, did_you_mean, Code, Diagnostic};
use crate::pack::lint;
use crate::pack::shape::{pos_at, PathSeg};
use crate::pack::{parse_file, Located, Pos};

/// One file of a pack directory: its path relative to the pack root, and its text.
#[derive(Debug, Clone)]
pub struct PackFile {
    pub path: String,
    pub text: String,
}

/// A pack whose documents and references were checked.
#[derive(Debug, Clone)]
pub struct Pack {
    /// Where it was loaded from, as the caller named it.
    pub root: String,
    /// `sha256:<hex>` over its files ([`crate::pack::content_digest`]), set by the loader that read
    /// them; empty when the pack was not read from files (tests, benchmarks).
    pub digest: String,
    pub manifest: ScenarioPack,
    pub templates: Vec<PlanTemplate>,
    pub jobs: BTreeMap<String, Job>,
    pub evidence: BTreeMap<String, Evidence>,
    pub artifacts: BTreeMap<String, Artifact>,
    pub remedies: Vec<Remedy>,
    pub providers: Vec<Provider>,
}

impl Pack {
    /// A pack of one template `<id>.run` (action `run`) with every job in one stage `all`, made in
    /// code rather than read from files (fixtures, benchmarks).
    pub fn one_stage(
        root: &str,
        id: &str,
        resource_type: &str,
        scopes: BTreeMap<String, ScopeSpec>,
        jobs: Vec<Job>,
    ) -> Pack {
        let template = PlanTemplate {
            id: format!("{id}.run"),
            action: "run".into(),
            title: None,
            description: None,
            parameters: BTreeMap::new(),
            scopes,
            stages: vec![StageSpec {
                id: "all".into(),
                name: "All".into(),
                jobs: jobs.iter().map(|j| j.id.clone()).collect(),
            }],
            jobs: jobs.iter().map(|j| JobEntry::Ref(j.id.clone())).collect(),
            gates: vec![],
            requires: None,
            risk: None,
            provides: vec![],
            removes_resource: false,
            removes_targets: false,
            refuse: Vec::new(),
        };
        Pack {
            root: root.into(),
            digest: String::new(),
            manifest: ScenarioPack {
                id: id.into(),
                version: "1.0.0".into(),
                title: None,
                description: None,
                resource_types: vec![resource_type.into()],
                actions: vec!["run".into()],
                requires: vec![],
                provides: vec![],
                plan_templates: vec![],
                editable: Editable::default(),
                risk: Risk::default(),
                libraries: vec![],
                resources: vec![],
            },
            templates: vec![template],
            jobs: jobs.into_iter().map(|j| (j.id.clone(), j)).collect(),
            evidence: BTreeMap::new(),
            artifacts: BTreeMap::new(),
            remedies: vec![],
            providers: vec![],
        }
    }

    /// The paths of its library scripts (`OPSGRAPH_LIB`), below its root.
    pub fn library_paths(&self) -> Vec<String> {
        self.manifest.libraries.iter().map(|l| join(&self.root, l.trim_start_matches("./"))).collect()
    }

    pub fn id(&self) -> &str {
        &self.manifest.id
    }

    /// `id@version`, as plans record it.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.manifest.id, self.manifest.version)
    }

    /// The template for an action.
    pub fn template_for(&self, action: &str) -> Option<&PlanTemplate> {
        self.templates.iter().find(|t| t.action == action)
    }

    /// A job by id: an inline job of `template`, else the pack's library.
    pub fn job<'a>(&'a self, template: &'a PlanTemplate, id: &str) -> Option<&'a Job> {
        template
            .jobs
            .iter()
            .find_map(|e| match e {
                JobEntry::Inline(job) if job.id == id => Some(&**job),
                _ => None,
            })
            .or_else(|| self.jobs.get(id))
    }

    /// Every job `template` can name, indexed once: [`Pack::job`] scans the template's inline
    /// jobs, which is quadratic when a loop looks up each job of a template with thousands.
    pub fn job_index<'a>(&'a self, template: &'a PlanTemplate) -> JobIndex<'a> {
        let mut inline = std::collections::HashMap::new();
        for e in &template.jobs {
            if let JobEntry::Inline(job) = e {
                // The first inline job of an id wins, as in `job`.
                inline.entry(job.id.as_str()).or_insert(&**job);
            }
        }
        JobIndex { inline, library: &self.jobs }
    }
}

/// The jobs a template can name: its inline jobs shadow the pack's library ([`Pack::job_index`]).
#[derive(Debug, Clone)]
pub struct JobIndex<'a> {
    inline: std::collections::HashMap<&'a str, &'a Job>,
    library: &'a BTreeMap<String, Job>,
}

impl<'a> JobIndex<'a> {
    pub fn get(&self, id: &str) -> Option<&'a Job> {
        self.inline.get(id).copied().or_else(|| self.library.get(id))
    }
}

/// Parses every YAML file of a pack and checks its references. `files` holds the YAML files
/// (`.yaml`, `.yml`), and may hold other text files (scripts), which are not parsed but linted
/// when an evidence command names them; `all_paths` every file of the directory (relative), so
/// that scripts can be checked.
pub fn check_pack(root: &str, files: &[PackFile], all_paths: &BTreeSet<String>) -> (Option<Pack>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let mut docs: Vec<Located> = Vec::new();
    for f in files.iter().filter(|f| is_yaml(&f.path)) {
        let parsed = parse_file(&join(root, &f.path), &f.text);
        diags.extend(parsed.diagnostics);
        docs.extend(parsed.docs);
    }
    let manifest_file = join(root, "pack.yaml");
    let manifests: Vec<&Located> = docs.iter().filter(|d| matches!(d.doc, Document::ScenarioPack(_))).collect();
    let manifest = match manifests.as_slice() {
        [one] if one.file == manifest_file => one,
        [] | [_] => {
            diags.push(
                Diagnostic::error(Pos { line: 1, col: 1 }, Code::Pack, "a pack needs its manifest in pack.yaml")
                    .in_file(&manifest_file)
                    .expected("a `scenario_pack:` document in pack.yaml"),
            );
            diag::sort(&mut diags);
            return (None, diags);
        }
        [_, second, ..] => {
            diags.push(
                Diagnostic::error(second.pos, Code::Duplicate, "a pack has one scenario_pack").in_file(&second.file),
            );
            diag::sort(&mut diags);
            return (None, diags);
        }
    };
    let Document::ScenarioPack(manifest_doc) = &manifest.doc else { unreachable!("filtered above") };

    let mut cx = Cx { diags: &mut diags, ids: BTreeMap::new() };
    let mut pack = Pack {
        root: root.to_string(),
        digest: String::new(),
        manifest: manifest_doc.clone(),
        templates: Vec::new(),
        jobs: BTreeMap::new(),
        evidence: BTreeMap::new(),
        artifacts: BTreeMap::new(),
        remedies: Vec::new(),
        providers: Vec::new(),
    };
    let mut template_docs = Vec::new();
    let mut job_docs = Vec::new();
    let mut remedy_docs = Vec::new();
    for d in &docs {
        match &d.doc {
            Document::PlanTemplate(t) => {
                cx.unique("plan_template", &t.id, d, &[PathSeg::Key("id")]);
                pack.templates.push(t.clone());
                template_docs.push(d);
            }
            Document::Job(j) => {
                cx.unique("job", &j.id, d, &[PathSeg::Key("id")]);
                pack.jobs.insert(j.id.clone(), j.clone());
                job_docs.push(d);
            }
            Document::Evidence(list) => {
                for (i, e) in list.iter().enumerate() {
                    let path = if matches!(d.node.kind, crate::pack::yaml::NodeKind::Seq(_)) {
                        vec![PathSeg::Index(i), PathSeg::Key("id")]
                    } else {
                        vec![PathSeg::Key("id")]
                    };
                    cx.unique("evidence", &e.id, d, &path);
                    let at = pos_at(&d.node, &[&path[..path.len() - 1], &[PathSeg::Key("command")]].concat());
                    lint_evidence(cx.diags, e, &d.file, at, root, files);
                    pack.evidence.insert(e.id.clone(), e.clone());
                }
            }
            Document::Artifact(a) => {
                cx.unique("artifact", &a.id, d, &[PathSeg::Key("id")]);
                pack.artifacts.insert(a.id.clone(), a.clone());
            }
            Document::Remedy(r) => {
                cx.unique("remedy", &r.id, d, &[PathSeg::Key("id")]);
                pack.remedies.push(r.clone());
                remedy_docs.push(d);
            }
            Document::Provider(p) => {
                cx.unique("provider", &p.id, d, &[PathSeg::Key("id")]);
                pack.providers.push(p.clone());
            }
            Document::ScenarioPack(_) => {}
            other => cx.diags.push(
                Diagnostic::error(d.pos, Code::Pack, format!("a pack does not hold `{}` documents", other.kind()))
                    .in_file(&d.file)
                    .expected("scenario_pack, plan_template, job, evidence, artifact, remedy, provider")
                    .hint("inventories, policies and intents are passed with --inventory, --policy and -f"),
            ),
        }
    }

    check_resources(&mut cx, &pack, manifest);
    // Manifest -> libraries <- scripts.
    let here = |p: &str| join(root, p);
    crate::pack::libraries::check(manifest, &pack.manifest.libraries, files, all_paths, here, cx.diags);

    // Manifest -> templates.
    for (i, r) in pack.manifest.plan_templates.iter().enumerate() {
        let at = |seg| pos_at(&manifest.node, &[PathSeg::Key("plan_templates"), PathSeg::Index(i), PathSeg::Key(seg)]);
        let Some(t) = pack.templates.iter().find(|t| t.id == r.id) else {
            let known = pack.templates.iter().map(|t| t.id.as_str());
            cx.unknown(&manifest.file, at("id"), "plan template", &r.id, known);
            continue;
        };
        if let Some(entry) = &r.entrypoint {
            if !t.jobs.iter().any(|j| j.id() == entry) {
                cx.unknown(&manifest.file, at("entrypoint"), "entrypoint job", entry, t.jobs.iter().map(JobEntry::id));
            }
        }
        if let Some(action) = &r.action {
            if *action != t.action {
                cx.diags.push(
                    Diagnostic::error(
                        at("action"),
                        Code::BadValue,
                        format!("template `{}` implements `{}`, not `{action}`", t.id, t.action),
                    )
                    .in_file(&manifest.file),
                );
            }
        }
    }
    for d in &template_docs {
        let Document::PlanTemplate(t) = &d.doc else {
            continue;
        };
        if !pack.manifest.plan_templates.iter().any(|r| r.id == t.id) {
            cx.diags.push(
                Diagnostic::warning(
                    d.pos,
                    Code::Pack,
                    format!("plan template `{}` is not listed in the manifest", t.id),
                )
                .in_file(&d.file)
                .hint(format!("add `- id: {}` to plan_templates in pack.yaml", t.id)),
            );
        }
        if !pack.manifest.actions.contains(&t.action) {
            cx.diags.push(
                Diagnostic::error(
                    pos_at(&d.node, &[PathSeg::Key("action")]),
                    Code::UnknownRef,
                    format!("action `{}` is not among the pack's actions", t.action),
                )
                .in_file(&d.file)
                .expected(format!("one of {}", pack.manifest.actions.join(", "))),
            );
        }
    }
    for action in &pack.manifest.actions {
        if pack.template_for(action).is_none() {
            cx.diags.push(
                Diagnostic::warning(
                    pos_at(&manifest.node, &[PathSeg::Key("actions")]),
                    Code::Pack,
                    format!("action `{action}` has no plan template yet; intents for it cannot be planned"),
                )
                .in_file(&manifest.file),
            );
        }
    }

    // Templates -> jobs, stages, gates, scopes.
    for d in &template_docs {
        let Document::PlanTemplate(t) = &d.doc else {
            continue;
        };
        let mut ids = BTreeSet::new();
        for (i, entry) in t.jobs.iter().enumerate() {
            let at = pos_at(&d.node, &[PathSeg::Key("jobs"), PathSeg::Index(i)]);
            if !ids.insert(entry.id()) {
                cx.diags.push(
                    Diagnostic::error(at, Code::Duplicate, format!("job `{}` appears twice", entry.id()))
                        .in_file(&d.file),
                );
            }
            match entry {
                JobEntry::Ref(id) if !pack.jobs.contains_key(id) => {
                    cx.unknown(&d.file, at, "job", id, pack.jobs.keys().map(String::as_str))
                }
                JobEntry::Ref(_) => {}
                JobEntry::Inline(job) => {
                    let inline_node = d.node.get("jobs").and_then(|n| match &n.kind {
                        crate::pack::yaml::NodeKind::Seq(items) => items.get(i),
                        _ => None,
                    });
                    if let Some(node) = inline_node {
                        let located = Located {
                            file: d.file.clone(),
                            pos: node.pos,
                            doc: Document::Job((**job).clone()),
                            node: node.clone(),
                        };
                        check_job(&mut cx, &pack, job, &located, all_paths);
                    }
                }
            }
        }
        let mut staged: BTreeMap<&str, &str> = BTreeMap::new();
        for (si, stage) in t.stages.iter().enumerate() {
            for (ji, job) in stage.jobs.iter().enumerate() {
                let at = pos_at(
                    &d.node,
                    &[PathSeg::Key("stages"), PathSeg::Index(si), PathSeg::Key("jobs"), PathSeg::Index(ji)],
                );
                if !ids.contains(job.as_str()) {
                    cx.unknown(&d.file, at, "job of this template", job, ids.iter().copied());
                } else if let Some(other) = staged.insert(job, &stage.id) {
                    cx.diags.push(
                        Diagnostic::error(
                            at,
                            Code::Duplicate,
                            format!("job `{job}` is in stage `{other}` and in stage `{}`", stage.id),
                        )
                        .in_file(&d.file),
                    );
                }
            }
        }
        for id in &ids {
            if !staged.contains_key(id) && pack.job(t, id).is_some() {
                let i = t.jobs.iter().position(|j| j.id() == *id).unwrap_or(0);
                cx.diags.push(
                    Diagnostic::error(
                        pos_at(&d.node, &[PathSeg::Key("jobs"), PathSeg::Index(i)]),
                        Code::Pack,
                        format!("job `{id}` is in no stage"),
                    )
                    .in_file(&d.file)
                    .hint("every job belongs to one stage: people see stages, the protocol runs jobs"),
                );
            }
        }
        for (gi, gate) in t.gates.iter().enumerate() {
            for (bi, before) in gate.before.iter().enumerate() {
                if !ids.contains(before.as_str()) {
                    let at = pos_at(
                        &d.node,
                        &[PathSeg::Key("gates"), PathSeg::Index(gi), PathSeg::Key("before"), PathSeg::Index(bi)],
                    );
                    cx.unknown(&d.file, at, "job of this template", before, ids.iter().copied());
                }
            }
        }
        for (i, entry) in t.jobs.iter().enumerate() {
            let Some(job) = pack.job(t, entry.id()) else {
                continue;
            };
            let at = pos_at(&d.node, &[PathSeg::Key("jobs"), PathSeg::Index(i)]);
            if let Some(target) = job.scope.as_ref().and_then(|s| s.target.as_ref()) {
                if !t.scopes.contains_key(target) {
                    cx.diags.push(
                        Diagnostic::error(
                            at,
                            Code::UnknownRef,
                            format!("job `{}` fans out over scope `{target}`, which template `{}` lacks", job.id, t.id),
                        )
                        .in_file(&d.file)
                        .expected(format!("one of {}", t.scopes.keys().cloned().collect::<Vec<_>>().join(", "))),
                    );
                }
            }
            for after in &job.after {
                if !ids.contains(after.as_str()) {
                    cx.diags.push(
                        Diagnostic::error(
                            at,
                            Code::UnknownRef,
                            format!("job `{}` runs after `{after}`, which template `{}` lacks", job.id, t.id),
                        )
                        .in_file(&d.file),
                    );
                }
            }
        }
    }

    for d in &job_docs {
        let Document::Job(job) = &d.doc else { continue };
        check_job(&mut cx, &pack, job, d, all_paths);
    }

    for d in &remedy_docs {
        let Document::Remedy(r) = &d.doc else {
            continue;
        };
        for (i, sel) in r.applies_to.selectors().iter().enumerate() {
            let crate::model::JobSelector::Job(job) = sel else { continue };
            if !pack.jobs.contains_key(job) && !pack.templates.iter().any(|t| t.jobs.iter().any(|e| e.id() == job)) {
                cx.unknown(
                    &d.file,
                    pos_at(&d.node, &[PathSeg::Key("applies_to"), PathSeg::Index(i)]),
                    "job",
                    job,
                    pack.jobs.keys().map(String::as_str),
                );
            }
        }
        for (i, pattern) in r.signature.output_matches.iter().enumerate() {
            if let Err(e) = crate::pack::remedy::compile(pattern) {
                let at =
                    pos_at(&d.node, &[PathSeg::Key("signature"), PathSeg::Key("output_matches"), PathSeg::Index(i)]);
                let first = e.to_string().lines().last().unwrap_or_default().trim().to_string();
                cx.diags.push(
                    Diagnostic::error(
                        at,
                        Code::BadValue,
                        format!("remedy `{}`: invalid regular expression ({first})", r.id),
                    )
                    .in_file(&d.file),
                );
            }
        }
        for (ci, change) in r.plan_patch.iter().flat_map(|p| p.changes.iter()).enumerate() {
            let at = pos_at(&d.node, &[PathSeg::Key("plan_patch"), PathSeg::Key("changes"), PathSeg::Index(ci)]);
            // `$job`: the failed job, whichever it is.
            let known = |id: &str| {
                id == "$job"
                    || pack.jobs.contains_key(id)
                    || pack.templates.iter().any(|t| t.jobs.iter().any(|e| e.id() == id))
            };
            let refs: Vec<&str> = match change {
                PatchChange::InsertAfter { anchor, jobs } | PatchChange::InsertBefore { anchor, jobs } => {
                    for j in jobs {
                        if !pack.jobs.contains_key(j) {
                            cx.diags.push(
                                Diagnostic::error(
                                    at,
                                    Code::UnknownRef,
                                    format!(
                                        "remedy `{}` inserts job `{j}`, which is not in the pack's job library",
                                        r.id
                                    ),
                                )
                                .in_file(&d.file)
                                .hint(format!("add a `job:` document with id `{j}`")),
                            );
                        }
                    }
                    vec![anchor.as_str()]
                }
                PatchChange::Retry { job, .. } | PatchChange::Skip { job, .. } => {
                    vec![job.as_str()]
                }
                PatchChange::SetParameters { job, .. } => job.iter().map(String::as_str).collect(),
                PatchChange::AddGate(g) => g.before.iter().map(String::as_str).collect(),
            };
            for id in refs {
                if !known(id) {
                    cx.unknown(&d.file, at, "job", id, pack.jobs.keys().map(String::as_str));
                }
            }
        }
    }

    for p in &pack.providers {
        if p.create.as_ref().is_some_and(|c| c.pack == pack.manifest.id && !pack.manifest.actions.contains(&c.action)) {
            let c = p.create.as_ref().map(|c| c.action.clone()).unwrap_or_default();
            cx.diags.push(
                Diagnostic::error(
                    manifest.pos,
                    Code::UnknownRef,
                    format!("provider `{}` is created by action `{c}`, which the pack lacks", p.id),
                )
                .in_file(&manifest.file),
            );
        }
    }

    // What a pack provides may name the artifact holding its credentials: it must be declared.
    let provisions =
        std::iter::once((*manifest, &manifest_doc.provides)).chain(docs.iter().filter_map(|d| match &d.doc {
            Document::PlanTemplate(t) => Some((d, &t.provides)),
            _ => None,
        }));
    for (d, provides) in provisions {
        for (i, p) in provides.iter().enumerate() {
            let Some(a) = p.credentials.as_ref().filter(|a| !pack.artifacts.contains_key(*a)) else { continue };
            let at = pos_at(&d.node, &[PathSeg::Key("provides"), PathSeg::Index(i), PathSeg::Key("credentials")]);
            diags.push(
                Diagnostic::error(
                    at,
                    Code::UnknownRef,
                    format!("unknown artifact `{a}` for the credentials of {}", p.capability),
                )
                .in_file(&d.file)
                .expected("an artifact declared in this pack, produced by one of its jobs"),
            );
        }
    }
    // A parameter naming an artifact of an earlier operation names one this pack declares.
    for d in &docs {
        let Document::PlanTemplate(t) = &d.doc else { continue };
        for (name, spec) in &t.parameters {
            let Some(a) = spec.artifact.as_ref().filter(|a| !pack.artifacts.contains_key(*a)) else { continue };
            let at = pos_at(&d.node, &[PathSeg::Key("parameters"), PathSeg::Key(name), PathSeg::Key("artifact")]);
            diags.push(
                Diagnostic::error(at, Code::UnknownRef, format!("unknown artifact `{a}` for parameter {name}"))
                    .in_file(&d.file)
                    .expected("an artifact declared in this pack, produced by one of its jobs"),
            );
        }
    }
    diag::sort(&mut diags);
    let ok = !diags.iter().any(Diagnostic::is_error);
    (ok.then_some(pack), diags)
}

fn check_job(cx: &mut Cx<'_>, pack: &Pack, job: &Job, d: &Located, all_paths: &BTreeSet<String>) {
    for (i, e) in job.outputs.evidence.iter().enumerate() {
        if !pack.evidence.contains_key(e) {
            let at = pos_at(&d.node, &[PathSeg::Key("outputs"), PathSeg::Key("evidence"), PathSeg::Index(i)]);
            cx.unknown(&d.file, at, "evidence check", e, pack.evidence.keys().map(String::as_str));
        }
    }
    let artifact_refs = job
        .outputs
        .artifacts
        .iter()
        .enumerate()
        .map(|(i, a)| (a, vec![PathSeg::Key("outputs"), PathSeg::Key("artifacts"), PathSeg::Index(i)]))
        .chain(job.inputs.requires.artifacts.iter().enumerate().map(|(i, a)| {
            (a, vec![PathSeg::Key("inputs"), PathSeg::Key("requires"), PathSeg::Key("artifacts"), PathSeg::Index(i)])
        }));
    for (a, path) in artifact_refs {
        if !pack.artifacts.contains_key(a) {
            let at = pos_at(&d.node, &path);
            let mut diag = Diagnostic::error(at, Code::UnknownRef, format!("unknown artifact `{a}`"))
                .in_file(&d.file)
                .expected("an artifact declared in this pack, with its sensitivity");
            diag = match did_you_mean(a, pack.artifacts.keys().map(String::as_str)) {
                Some(close) => diag.hint(format!("did you mean `{close}`?")),
                None => diag.hint(format!("add `artifact: {{id: {a}, type: ..., sensitivity: internal}}`")),
            };
            cx.diags.push(diag);
        }
    }
    if !job.outputs.provides.capabilities.is_empty() && job.outputs.evidence.is_empty() {
        cx.diags.push(
            Diagnostic::warning(
                d.pos,
                Code::Pack,
                format!("job `{}` provides a capability but declares no evidence", job.id),
            )
            .in_file(&d.file)
            .hint("evidence decides success: add a check under outputs.evidence"),
        );
    }
    if let Some(script) = job.run.as_ref().and_then(|r| r.script.as_ref()) {
        let normal = script.trim_start_matches("./");
        if normal.starts_with('/') || normal.split('/').any(|s| s == "..") {
            cx.diags.push(
                Diagnostic::error(
                    pos_at(&d.node, &[PathSeg::Key("run"), PathSeg::Key("script")]),
                    Code::BadValue,
                    format!("script `{script}` is outside the pack"),
                )
                .in_file(&d.file)
                .expected("a path inside the pack directory, such as scripts/install.sh"),
            );
        } else if !all_paths.contains(normal) {
            cx.diags.push(
                Diagnostic::error(
                    pos_at(&d.node, &[PathSeg::Key("run"), PathSeg::Key("script")]),
                    Code::UnknownRef,
                    format!("script `{script}` does not exist"),
                )
                .in_file(&d.file)
                .expected(format!("a file under {}", cx_root(pack))),
            );
        }
    }
    if let Some(rb) = job.controls.rollback.as_ref().and_then(|r| r.job.as_ref()) {
        if !pack.jobs.contains_key(rb) {
            let at = pos_at(&d.node, &[PathSeg::Key("controls"), PathSeg::Key("rollback"), PathSeg::Key("job")]);
            cx.unknown(&d.file, at, "rollback job", rb, pack.jobs.keys().map(String::as_str));
        }
    }
}

/// The lint warnings of one evidence check ([`crate::pack::lint`]), at its command; and of every
/// script of the pack its command names, at their place in the script.
fn lint_evidence(diags: &mut Vec<Diagnostic>, e: &Evidence, file: &str, at: Pos, root: &str, files: &[PackFile]) {
    for f in lint::evidence(e) {
        diags.push(
            Diagnostic::warning(at, f.code, format!("evidence `{}`: {}", e.id, f.message)).in_file(file).hint(f.hint),
        );
    }
    let Some(command) = &e.command else { return };
    let command = command.to_string();
    for script in files.iter().filter(|f| !is_yaml(&f.path) && command.contains(f.path.as_str())) {
        for f in lint::shell(&script.text) {
            diags.push(
                Diagnostic::warning(
                    lint::line_col(&script.text, f.offset),
                    f.code,
                    format!("evidence `{}` runs this script: {}", e.id, f.message),
                )
                .in_file(&join(root, &script.path))
                .hint(f.hint),
            );
        }
    }
}

/// Manifest -> resource verification: a managed type, a job of the pack, its evidence; observed
/// checks must capture something.
fn check_resources(cx: &mut Cx<'_>, pack: &Pack, manifest: &Located) {
    for (i, r) in pack.manifest.resources.iter().enumerate() {
        let at = |key: &'static str, j: Option<usize>| {
            let mut path = vec![PathSeg::Key("resources"), PathSeg::Index(i), PathSeg::Key(key)];
            path.extend(j.map(PathSeg::Index));
            pos_at(&manifest.node, &path)
        };
        if !pack.manifest.resource_types.contains(&r.type_) {
            let known = pack.manifest.resource_types.iter().map(String::as_str);
            cx.unknown(&manifest.file, at("type", None), "resource type", &r.type_, known);
        }
        let jobs = || pack.jobs.keys().map(String::as_str);
        for on in &r.on {
            if !pack.jobs.contains_key(on) && !pack.templates.iter().any(|t| t.jobs.iter().any(|e| e.id() == *on)) {
                cx.unknown(&manifest.file, at("on", None), "job", on, jobs());
            }
        }
        for (key, list) in [("verify", &r.verify), ("observe", &r.observe)] {
            for (j, id) in list.iter().enumerate() {
                match pack.evidence.get(id) {
                    None => cx.unknown(
                        &manifest.file,
                        at(key, Some(j)),
                        "evidence",
                        id,
                        pack.evidence.keys().map(String::as_str),
                    ),
                    Some(e) if key == "observe" && e.capture.is_empty() => cx.diags.push(
                        Diagnostic::error(
                            at(key, Some(j)),
                            Code::BadValue,
                            format!("evidence `{id}` captures nothing"),
                        )
                        .in_file(&manifest.file)
                        .expected("an evidence check with `capture:` (name -> regular expression)"),
                    ),
                    Some(_) => {}
                }
            }
        }
        if r.verify.is_empty() && r.observe.is_empty() {
            cx.diags.push(
                Diagnostic::error(
                    at("type", None),
                    Code::MissingKey,
                    format!("resource `{}` verifies nothing", r.type_),
                )
                .in_file(&manifest.file)
                .expected("`verify:` or `observe:` evidence ids"),
            );
        }
    }
}

fn is_yaml(path: &str) -> bool {
    path.ends_with(".yaml") || path.ends_with(".yml")
}

fn cx_root(pack: &Pack) -> &str {
    &pack.root
}

struct Cx<'a> {
    diags: &'a mut Vec<Diagnostic>,
    ids: BTreeMap<(&'static str, String), (String, Pos)>,
}

impl Cx<'_> {
    fn unique(&mut self, kind: &'static str, id: &str, d: &Located, path: &[PathSeg<'_>]) {
        let at = pos_at(&d.node, path);
        if let Some((file, pos)) = self.ids.get(&(kind, id.to_string())) {
            self.diags.push(
                Diagnostic::error(at, Code::Duplicate, format!("{kind} `{id}` is declared twice"))
                    .in_file(&d.file)
                    .hint(format!("first declared at {file}:{}:{}", pos.line, pos.col)),
            );
        } else {
            self.ids.insert((kind, id.to_string()), (d.file.clone(), at));
        }
    }

    fn unknown<'b>(&mut self, file: &str, at: Pos, what: &str, id: &str, known: impl Iterator<Item = &'b str>) {
        let known: Vec<&str> = known.collect();
        let mut diag = Diagnostic::error(at, Code::UnknownRef, format!("unknown {what} `{id}`")).in_file(file);
        if let Some(close) = did_you_mean(id, known.iter().copied()) {
            diag = diag.hint(format!("did you mean `{close}`?"));
        } else if !known.is_empty() && known.len() <= 12 {
            diag = diag.expected(format!("one of {}", known.join(", ")));
        }
        self.diags.push(diag);
    }
}

fn join(root: &str, path: &str) -> String {
    if root.is_empty() || root == "." {
        path.to_string()
    } else {
        format!("{}/{}", root.trim_end_matches('/'), path)
    }
}
