//! `pack install`, `pack list`, `pack show`, `pack remove`: the installed-pack registry.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context as _};
use opsgraph_core::pack::{short_digest, split_pack_ref, Pack};
use serde_json::{json, Value};

use crate::catalogue;
use crate::load::{self, Source};
use crate::ops_cmd::open_store;
use crate::registry::{self, Installation};
use crate::render::{print, to_yaml};

pub fn install(data_dir: &Path, path: &Path, replace: bool, actor: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let done = audited(data_dir, actor, registry::install(data_dir, path, replace, actor)?, json!({}))?;
    print_installation(&installation_json(&done), out)?;
    Ok(0)
}

/// `pack install NAME[@VERSION] --from URL`: fetched from a catalogue, verified (sha256, a
/// signature by a trusted key, the pack the entry names; `catalogue.rs`), then installed as an
/// archive is. A refusal is `error[CODE]: …` with exit status 1, and installs nothing.
pub fn install_from(
    data_dir: &Path,
    from: &str,
    reference: &str,
    trusted: &[String],
    replace: bool,
    actor: &str,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let keys = catalogue::trusted_keys(data_dir, trusted)?;
    let v = catalogue::fetch_verified(from, reference, &keys)?;
    let done = registry::install_archive(data_dir, &v.archive, &v.source, replace, actor)?;
    let detail = json!({"catalogue": from, "sha256": catalogue::sha256_hex(&v.archive), "signed_by": v.signer});
    let done = audited(data_dir, actor, done, detail)?;
    print_installation(&installation_json(&done), out)?;
    Ok(0)
}

/// Commits the `pack.install` audit row of an install that happened (the row the server writes,
/// with `extra` added to its detail). An install of identical content changed nothing and writes
/// none. When the row cannot be written, a fresh install is taken back, so nothing stays
/// installed without its row; a replacement cannot be (the old files are gone).
fn audited(data_dir: &Path, actor: &str, done: Installation, extra: Value) -> anyhow::Result<Installation> {
    let (result, r, previous) = match &done {
        Installation::Installed(r) => ("installed", r, None),
        Installation::Replaced { record, previous } => ("replaced", record, Some(previous.clone())),
        Installation::AlreadyInstalled(_) => return Ok(done),
    };
    let reference = format!("{}@{}", r.id, r.version);
    let mut detail = json!({"result": result, "digest": r.digest, "previous": previous, "source": r.source});
    if let (Some(d), Value::Object(extra)) = (detail.as_object_mut(), extra) {
        d.extend(extra);
    }
    let row = opsgraph_runtime::audit::record(actor, "pack.install", &reference, None, None, detail);
    let written = open_store(data_dir).and_then(|mut s| Ok(s.commit(&[opsgraph_store::Write::Audit(row)])?));
    if let Err(e) = written {
        if result == "installed" {
            registry::remove(data_dir, &r.id, &r.version).with_context(|| {
                format!("pack {reference} was installed without its audit row and could not be taken back")
            })?;
            return Err(e.context(format!("pack {reference} not installed: its audit row could not be written")));
        }
        return Err(e.context(format!("pack {reference} was replaced, but its audit row could not be written")));
    }
    Ok(done)
}

/// What an install did, as `POST /api/v1/packs` answers it.
pub fn installation_json(i: &Installation) -> Value {
    let (result, r, previous) = match i {
        Installation::Installed(r) => ("installed", r, None),
        Installation::Replaced { record, previous } => ("replaced", record, Some(previous.clone())),
        Installation::AlreadyInstalled(r) => ("unchanged", r, None),
    };
    json!({
        "result": result, "id": r.id, "version": r.version, "reference": format!("{}@{}", r.id, r.version),
        "digest": r.digest, "previous": previous, "source": r.source,
    })
}

/// The line `pack install` prints, locally and through a server.
pub fn print_installation(v: &Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let s = |k: &str| v[k].as_str().unwrap_or("-").to_string();
    let (reference, digest, source) = (s("reference"), s("digest"), s("source"));
    match v["result"].as_str() {
        Some("replaced") => writeln!(out, "replaced pack {reference}: {} -> {digest} from {source}", s("previous"))?,
        Some("unchanged") => {
            writeln!(out, "pack {reference} {digest} is already installed with this content; nothing to do")?
        }
        _ => writeln!(out, "installed pack {reference} {digest} from {source}")?,
    }
    Ok(())
}

pub fn list(data_dir: &Path, output: &str, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let (rows, problems) = rows(data_dir)?;
    print_rows(rows, &problems, output, out, err)
}

/// Prints `pack list` rows (full digests; shortened for text) and the problems; 1 when there are
/// problems. Shared by the local command and the one through a server.
pub fn print_rows(
    mut rows: Vec<Value>,
    problems: &[String],
    output: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    for p in problems {
        writeln!(err, "{p}")?;
    }
    if output == "text" {
        for r in &mut rows {
            if let Some(d) = r["digest"].as_str() {
                r["digest"] = json!(short_digest(d));
            }
        }
    }
    print(&Value::Array(rows), output, out)?;
    Ok(if problems.is_empty() { 0 } else { 1 })
}

/// The rows of `pack list` (bundled and installed packs, full digests) and the problems of
/// installed packs that do not load.
pub fn rows(data_dir: &Path) -> anyhow::Result<(Vec<Value>, Vec<String>)> {
    let (bundled, _) = load::packs(&[Source::parse("bundled:packs")]);
    let installed = registry::installed(data_dir)?;
    let mut rows = Vec::new();
    let digest = |d: &str| d.to_string();
    for p in &bundled {
        let replaced = installed.iter().any(|i| i.pack.as_ref().is_some_and(|x| x.reference() == p.reference()));
        rows.push(json!({
            "id": p.manifest.id, "version": p.manifest.version, "digest": digest(&p.digest),
            "source": "bundled", "installed_at": null,
            "status": if replaced { "replaced by installed" } else { "bundled" },
        }));
    }
    let mut problems = Vec::new();
    for i in &installed {
        let status = if i.problems.is_empty() { "installed" } else { "INVALID" };
        problems.extend(i.problems.iter().map(ToString::to_string));
        let r = i.record.as_ref();
        rows.push(json!({
            "id": i.id, "version": i.version,
            "digest": i.pack.as_ref().map(|p| digest(&p.digest)).or_else(|| r.map(|r| digest(&r.digest))),
            "source": r.map(|r| r.source.clone()), "installed_at": r.map(|r| r.installed_at.clone()),
            "status": status,
        }));
    }
    rows.sort_by(|a, b| {
        let key = |v: &Value| v["id"].as_str().unwrap_or_default().to_string();
        key(a).cmp(&key(b)).then_with(|| {
            opsgraph_core::pack::compare_versions(
                a["version"].as_str().unwrap_or(""),
                b["version"].as_str().unwrap_or(""),
            )
        })
    });
    Ok((rows, problems))
}

/// The pack `reference` names among the packs commands use (bundled and installed).
pub(crate) fn find<'a>(packs: &'a [Pack], reference: &str) -> anyhow::Result<&'a Pack> {
    let (id, version) = split_pack_ref(reference);
    let mut same: Vec<&Pack> = packs.iter().filter(|p| p.manifest.id == id).collect();
    same.sort_by(|a, b| opsgraph_core::pack::compare_versions(&a.manifest.version, &b.manifest.version));
    let found = match version {
        Some(v) => same.iter().find(|p| p.manifest.version == v).copied(),
        None => same.last().copied(),
    };
    found.with_context(|| {
        let known: Vec<String> = packs.iter().map(Pack::reference).collect();
        format!("no pack `{reference}` (known: {})", known.join(", "))
    })
}

pub fn show(
    data_dir: &Path,
    reference: &str,
    output: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let (packs, diags) = crate::ops_cmd::load_packs(&[], data_dir, false)?;
    for d in diags.iter().filter(|d| d.is_error()) {
        writeln!(err, "{d}")?;
    }
    let p = find(&packs, reference)?;
    let record = registry::installed(data_dir)?
        .into_iter()
        .find(|i| i.pack.as_ref().is_some_and(|x| x.reference() == p.reference() && x.digest == p.digest))
        .and_then(|i| i.record);
    let value = describe(p, record.as_ref());
    match output {
        "json" => writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?,
        "yaml" => write!(out, "{}", to_yaml(&value, 0))?,
        _ => text(&value, out)?,
    }
    Ok(0)
}

/// Everything a reviewer needs to see before a pack runs: what each job executes, in full.
fn describe(p: &Pack, record: Option<&registry::Record>) -> Value {
    let m = &p.manifest;
    let script_text = |script: &str| load::pack_file(&p.root, script).map(|b| String::from_utf8_lossy(&b).into_owned());
    let mut jobs: Vec<(&String, &opsgraph_core::model::Job)> = p.jobs.iter().collect();
    let inline: Vec<&opsgraph_core::model::Job> = p
        .templates
        .iter()
        .flat_map(|t| &t.jobs)
        .filter_map(|e| match e {
            opsgraph_core::model::JobEntry::Inline(j) => Some(&**j),
            _ => None,
        })
        .collect();
    jobs.extend(inline.iter().map(|j| (&j.id, *j)));
    json!({
        "id": m.id,
        "version": m.version,
        "digest": p.digest,
        "title": m.title,
        "source": match record {
            Some(r) => json!({"installed_from": r.source, "installed_at": r.installed_at, "installed_by": r.installed_by}),
            None => json!({"loaded_from": p.root}),
        },
        "resource_types": m.resource_types,
        "actions": m.actions,
        "risk": m.risk.default_level,
        "templates": p.templates.iter().map(|t| json!({
            "id": t.id, "action": t.action,
            "jobs": t.jobs.iter().map(|j| j.id().to_string()).collect::<Vec<_>>(),
            "gates": t.gates.iter().map(|g| g.id.clone()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "jobs": jobs.iter().map(|(id, j)| {
            let run = j.run.as_ref();
            let script = run.and_then(|r| r.script.clone());
            json!({
                "id": id,
                "executor": run.and_then(|r| r.executor).map(|e| serde_json::to_value(e).unwrap_or(Value::Null)),
                "command": run.and_then(|r| r.command.as_ref()).map(ToString::to_string),
                "script": script,
                "script_text": script.as_deref().and_then(script_text),
                "url": run.and_then(|r| r.url.clone()),
                "env": run.map(|r| r.env.clone()).unwrap_or_default(),
                "destructive": j.controls.destructive,
            })
        }).collect::<Vec<_>>(),
        "evidence": p.evidence.values().map(|e| json!({
            "id": e.id, "source": e.source,
            "checks": e.command.as_ref().map(ToString::to_string)
                .or_else(|| e.url.clone())
                .or_else(|| e.path.clone())
                .or_else(|| e.host.as_ref().map(|h| format!("{h}:{}", e.port.unwrap_or(0)))),
        })).collect::<Vec<_>>(),
        "artifacts": p.artifacts.values().map(|a| json!({
            "id": a.id, "type": a.type_, "sensitivity": a.sensitivity,
        })).collect::<Vec<_>>(),
        "remedies": p.remedies.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        "providers": p.providers.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
    })
}

fn text(v: &Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let list = |v: &Value| v.as_array().map(|a| a.iter().map(s).collect::<Vec<_>>().join(", ")).unwrap_or_default();
    writeln!(out, "pack {}@{} {}", s(&v["id"]), s(&v["version"]), s(&v["digest"]))?;
    if !v["title"].is_null() {
        writeln!(out, "title: {}", s(&v["title"]))?;
    }
    match v["source"].get("installed_from") {
        Some(from) => writeln!(
            out,
            "installed from {} at {} by {}",
            s(from),
            s(&v["source"]["installed_at"]),
            s(&v["source"]["installed_by"])
        )?,
        None => writeln!(out, "loaded from {}", s(&v["source"]["loaded_from"]))?,
    }
    writeln!(
        out,
        "resource types: {}; actions: {}; risk: {}",
        list(&v["resource_types"]),
        list(&v["actions"]),
        s(&v["risk"])
    )?;
    writeln!(out, "\ntemplates:")?;
    for t in v["templates"].as_array().into_iter().flatten() {
        writeln!(out, "  {} (action {}): jobs {}", s(&t["id"]), s(&t["action"]), list(&t["jobs"]))?;
        if t["gates"].as_array().is_some_and(|g| !g.is_empty()) {
            writeln!(out, "    gates: {}", list(&t["gates"]))?;
        }
    }
    writeln!(out, "\njobs and what they run:")?;
    for j in v["jobs"].as_array().into_iter().flatten() {
        let executor = if j["executor"].is_null() { String::new() } else { format!(" [{}]", s(&j["executor"])) };
        let destructive = if j["destructive"] == Value::Bool(true) { " (destructive)" } else { "" };
        let what = if !j["command"].is_null() {
            format!("command: {}", s(&j["command"]))
        } else if !j["script"].is_null() {
            format!("script: {}", s(&j["script"]))
        } else if !j["url"].is_null() {
            format!("http: {}", s(&j["url"]))
        } else {
            "nothing".into()
        };
        writeln!(out, "  {}{executor}{destructive}: {what}", s(&j["id"]))?;
        if let Some(env) = j["env"].as_object().filter(|e| !e.is_empty()) {
            for (k, x) in env {
                writeln!(out, "    env {k}={}", s(x))?;
            }
        }
        if let Some(text) = j["script_text"].as_str() {
            for line in text.lines() {
                writeln!(out, "    | {line}")?;
            }
        }
    }
    writeln!(out, "\nevidence:")?;
    for e in v["evidence"].as_array().into_iter().flatten() {
        writeln!(out, "  {} ({}): {}", s(&e["id"]), s(&e["source"]), s(&e["checks"]))?;
    }
    writeln!(out, "\nartifacts:")?;
    for a in v["artifacts"].as_array().into_iter().flatten() {
        writeln!(out, "  {} ({}): {}", s(&a["id"]), s(&a["type"]), s(&a["sensitivity"]))?;
    }
    for key in ["remedies", "providers"] {
        if v[key].as_array().is_some_and(|a| !a.is_empty()) {
            writeln!(out, "\n{key}: {}", list(&v[key]))?;
        }
    }
    Ok(())
}

pub fn remove(data_dir: &Path, reference: &str, actor: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let (id, Some(version)) = split_pack_ref(reference) else {
        bail!("name the version to remove: opsgraph pack remove {reference}@VERSION");
    };
    let installed = registry::installed(data_dir)?;
    let Some(entry) = installed.iter().find(|i| i.id == id && i.version == version) else {
        let bundled = load::packs(&[Source::parse("bundled:packs")]).0;
        if bundled.iter().any(|p| p.reference() == reference) {
            bail!("pack {reference} is bundled with this binary, not installed: it cannot be removed");
        }
        bail!("pack {reference} is not installed in {}", registry::root(data_dir).display());
    };
    // An unfinished operation that ran this version still needs its files.
    let digest = entry.record.as_ref().map(|r| r.digest.clone());
    if data_dir.join("opsgraph.db").exists() {
        let store = open_store(data_dir)?;
        if let Some(op) = opsgraph_runtime::manage::operation_using_pack(&store, reference, digest.as_deref())? {
            bail!(
                "pack {reference} is in use by operation {} ({}): wait for it to finish or cancel it",
                op.id,
                opsgraph_core::plan::lifecycle::state_name(op.state.kind())
            );
        }
    }
    registry::remove(data_dir, id, version)?;
    // Its audit row, as the server writes it: after the files are gone (they cannot come back).
    let row = opsgraph_runtime::audit::record(actor, "pack.remove", reference, None, None, json!({"digest": digest}));
    open_store(data_dir)
        .and_then(|mut s| Ok(s.commit(&[opsgraph_store::Write::Audit(row)])?))
        .with_context(|| format!("pack {reference} was removed, but its audit row could not be written"))?;
    writeln!(out, "removed pack {reference}")?;
    Ok(0)
}
