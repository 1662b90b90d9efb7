//! `resource apply -f FILE` and `resource delete ID`: resources stored by hand in the data
//! directory's resources table (or the server's, with `--server`), which later plans use.

use std::io::Write;
use std::path::Path;

use anyhow::bail;
use opsgraph_core::model::{Document, Resource};
use serde_json::Value;

use crate::ops_cmd::open_store;

/// The one `resource` document of a file, checked like `opsgraph validate` checks it. Problems
/// are printed to `err`; `None` then.
pub fn read(file: &str, err: &mut dyn Write) -> anyhow::Result<Option<(Resource, String)>> {
    let text = crate::load::read_document(file)?;
    let parsed = opsgraph_core::pack::parse_file(file, &text);
    if parsed.has_errors() {
        crate::render::report(err, &parsed.diagnostics)?;
        return Ok(None);
    }
    let mut docs = parsed.docs.into_iter().map(|d| d.doc);
    match (docs.next(), docs.next()) {
        (Some(Document::Resource(r)), None) => Ok(Some((r, text))),
        _ => bail!("{file}: expected exactly one `resource` document"),
    }
}

/// The line both `resource apply` paths print, from `{id, result}`.
pub fn print_applied(v: &Value, out: &mut dyn Write) -> anyhow::Result<()> {
    let id = v["id"].as_str().unwrap_or("-");
    match v["result"].as_str() {
        Some("unchanged") => writeln!(out, "resource {id} unchanged; nothing to do")?,
        Some(result) => writeln!(out, "resource {id} {result}")?,
        None => writeln!(out, "resource {id}: {v}")?,
    }
    Ok(())
}

pub fn apply(data_dir: &Path, file: &str, actor: &str, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let Some((resource, _)) = read(file, err)? else { return Ok(1) };
    let mut store = open_store(data_dir)?;
    let result = opsgraph_runtime::manage::apply_resource(&mut store, &resource, actor)?;
    print_applied(&serde_json::json!({"id": resource.id, "result": result.as_str()}), out)?;
    Ok(0)
}

pub fn delete(data_dir: &Path, id: &str, actor: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut store = open_store(data_dir)?;
    if !opsgraph_runtime::manage::delete_resource(&mut store, id, actor)? {
        bail!("no resource `{id}` is stored in {}", data_dir.display());
    }
    writeln!(out, "resource {id} deleted")?;
    Ok(0)
}
