//! What the server was started with: packs, providers, policies (read-only).

use std::path::Path;

use opsgraph_api::{PackList, PackSummary, TemplateRef};
use opsgraph_core::pack::Pack;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};

/// Script text larger than this is not inlined (`script_text` is then absent).
const SCRIPT_BYTES: u64 = 256 * 1024;

fn summary(p: &Pack) -> PackSummary {
    PackSummary {
        id: p.id().to_string(),
        version: p.manifest.version.clone(),
        reference: p.reference(),
        title: p.manifest.title.clone(),
        digest: p.digest.clone(),
        resource_types: p.manifest.resource_types.clone(),
        actions: p.manifest.actions.clone(),
        templates: p.templates.iter().map(|t| TemplateRef { id: t.id.clone(), action: t.action.clone() }).collect(),
        jobs: p.jobs.keys().cloned().collect(),
    }
}

/// A job as declared, with the text of the script it runs when it runs one of the pack's.
fn job(root: &str, v: Value) -> Value {
    let mut v = v;
    if let Some(script) = v["run"]["script"].as_str() {
        let path = Path::new(root).join(script);
        let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= SCRIPT_BYTES);
        if let Some(text) = small.then(|| std::fs::read_to_string(&path).ok()).flatten() {
            v["script_text"] = json!(text);
        }
    }
    v
}

/// Everything a pack declares. Defaults of secret parameters are not shown.
fn detail(p: &Pack) -> Value {
    let mut templates = json!(p.templates);
    for t in templates.as_array_mut().into_iter().flatten() {
        for (_, spec) in t["parameters"].as_object_mut().into_iter().flatten() {
            if spec["secret"] == json!(true) && spec.get("default").is_some() {
                spec["default"] = json!("(secret)");
            }
        }
        for entry in t["jobs"].as_array_mut().into_iter().flatten() {
            if entry.get("run").is_some() {
                *entry = job(&p.root, entry.take());
            }
        }
    }
    let jobs: serde_json::Map<String, Value> =
        p.jobs.iter().map(|(id, j)| (id.clone(), job(&p.root, json!(j)))).collect();
    let mut v = json!(summary(p));
    v["manifest"] = json!(p.manifest);
    v["templates"] = templates;
    v["jobs"] = Value::Object(jobs);
    v["evidence"] = json!(p.evidence);
    v["artifacts"] = json!(p.artifacts);
    v["remedies"] = json!(p.remedies);
    v["providers"] = json!(p.providers);
    v
}

pub(crate) fn packs(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let packs = ctx.state.world().packs.iter().map(summary).collect();
    Reply::ok(json!(PackList { packs, registry: crate::manage::registry_rows(ctx)? }))
}

/// `{id}` is a pack id (every loaded version, highest last as loaded) or `id@version`.
pub(crate) fn pack(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let wanted = ctx.param("id");
    let found: Vec<Value> =
        ctx.state.world().packs.iter().filter(|p| p.id() == wanted || p.reference() == wanted).map(detail).collect();
    if found.is_empty() {
        return Err(ApiError::not_found("no_pack", format!("no pack `{wanted}` is loaded; see /api/v1/packs")));
    }
    Reply::ok(json!({ "id": wanted, "versions": found }))
}

pub(crate) fn providers(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let w = ctx.state.world();
    let mut list: Vec<Value> = w
        .providers
        .iter()
        .map(|p| {
            let mut v = json!(p);
            v["source"] = json!("world");
            v
        })
        .collect();
    for pack in &w.packs {
        for p in &pack.providers {
            let mut v = json!(p);
            v["source"] = json!(format!("pack:{}", pack.reference()));
            list.push(v);
        }
    }
    Reply::ok(json!({ "providers": list }))
}

pub(crate) fn policies(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let w = ctx.state.world();
    Reply::ok(json!({ "capability_policy": w.policy, "operations_policy": w.operations }))
}
