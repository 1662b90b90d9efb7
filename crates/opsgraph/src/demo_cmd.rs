//! `opsgraph demo` (the lab run) and `operate`, the path an intent takes from preview to a
//! finished operation that `demo --real` and `pack test --fleet` share.

use std::io::Write;

use crate::load::{self, Source};
use crate::plan_cmd::{load_inputs, preview_to, Loaded};
use crate::render::Output;

/// The README's main command: a fresh data directory, the bundled lab packs and inventory, and
/// one whole operation — preview, a gate answered by the demo's user, the live run, evidence,
/// the resource it produced.
pub fn demo(
    data_dir: Option<&std::path::Path>,
    keep: bool,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let dir = run_dir(data_dir, "opsgraph-demo");
    let result = demo_in(&dir, out, err);
    // The lab nodes' processes belong to the demo: stopped whatever happened, unless kept.
    let lab = dir.join("lab");
    if keep {
        writeln!(out, "The lab nodes are directories under {} with real background processes;", lab.display())?;
        writeln!(out, "stop them with: pkill -f '{}'", lab.display())?;
    } else {
        let stopped = crate::lab::stop_processes(&lab);
        writeln!(out, "Stopped the lab nodes' {stopped} background processes (--keep leaves them running).")?;
    }
    result
}

/// A fresh directory `PREFIX-MILLIS` under `base` (the temporary directory when none).
pub fn run_dir(base: Option<&std::path::Path>, prefix: &str) -> std::path::PathBuf {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    let base = base.map(std::path::Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
    base.join(format!("{prefix}-{stamp}"))
}

fn demo_in(dir: &std::path::Path, out: &mut (dyn Write + Send), err: &mut dyn Write) -> anyhow::Result<u8> {
    let dir = dir.to_path_buf();
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("config.yaml"),
        "# Local users and their roles.\nusers:\n  demo: [operator, sre, platform_admin]\n",
    )?;
    let root = dir.join("bundled");
    load::materialize(&root)?;
    writeln!(out, "opsgraph demo: create a lab Kubernetes-style cluster of 3 nodes, following the protocol's DAG")?;
    writeln!(out, "data directory: {}\n", dir.display())?;
    let loaded = load_inputs(
        &Source::Disk(root.join("examples/lab/intents/lab-create-cluster.yaml")),
        load::packs(&[Source::Disk(root.join("packs"))]),
        &[Source::Disk(root.join("examples/lab/inventory"))],
    );
    let Some((code, id)) = operate(&dir, &loaded, out, err)? else { return Ok(1) };
    writeln!(out, "\nExplore: opsgraph --data-dir {} describe operation {id}", dir.display())?;
    Ok(code)
}

/// One whole operation in `dir`, the demo's way: the preview, the operation created by
/// user:demo, each gate answered by a second person (user:demo-sre), the live run, the evidence
/// recorded. `None` when the plan cannot be built (the reason is printed). Shared by `demo`,
/// `demo --real` and `pack test --fleet`.
pub fn operate(
    dir: &std::path::Path,
    loaded: &Loaded,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<Option<(u8, String)>> {
    use crate::ops_cmd;
    use opsgraph_core::model::OperationState;
    let dir = dir.to_path_buf();
    let Some(plan) = preview_to(loaded, Output::Text, out, err)? else { return Ok(None) };
    let store = ops_cmd::open_store(&dir)?;
    let mut rt = opsgraph_runtime::Runtime::new(
        Box::new(store),
        loaded.packs.clone(),
        loaded.world.resources.clone(),
        dir.clone(),
    );
    rt.blobs = crate::storage::blobs(&dir)?;
    writeln!(out, "\nApplying as user demo.")?;
    let mut lines: Vec<String> = Vec::new();
    let id = rt.create(&plan, "user:demo", &mut |e| {
        lines.push(format!(
            "{}  operation {} -> {}: {}",
            e.at.get(11..19).unwrap_or(""),
            e.from.clone().unwrap_or_default(),
            e.to.clone().unwrap_or_default(),
            e.reason
        ))
    })?;
    for l in lines.iter().filter(|l| !l.contains("operation  -> ")) {
        writeln!(out, "{l}")?;
    }
    // Each gate is answered by a second person when the operation waits at it: at creation (a
    // gate before everything), or paused in the middle (a gate a patch put before a later job).
    let mut code = 1;
    for round in 0..16 {
        let op = rt.store().operation(&id)?.ok_or_else(|| anyhow::anyhow!("operation {id} vanished"))?;
        let waiting: Vec<String> = match &op.state {
            OperationState::WaitingForApproval { gates } | OperationState::WaitingForInput { gates } => gates.clone(),
            OperationState::Paused { .. } => {
                rt.store().gates(&id)?.into_iter().filter(|g| g.answer.is_none()).map(|g| g.id).collect()
            }
            _ => Vec::new(),
        };
        if waiting.is_empty() && round > 0 {
            break;
        }
        for gate in waiting {
            let g = rt
                .store()
                .gates(&id)?
                .into_iter()
                .find(|x| x.id == gate)
                .ok_or_else(|| anyhow::anyhow!("gate {gate} vanished"))?;
            let option = g.options.first().cloned().unwrap_or_else(|| "approve".into());
            // Four eyes: the demo's operation is created by user:demo and approved by another
            // person, as it must be.
            let answer = opsgraph_runtime::GateAnswer {
                option: option.clone(),
                actor: "user:demo-sre".into(),
                role: "sre".into(),
                value: None,
            };
            match rt.answer_gate(&id, &gate, &answer) {
                // A gate that opens later (a destructive or canary gate): answered when it does.
                Err(opsgraph_runtime::Error::GateNotOpen { .. }) => continue,
                other => other?,
            };
            writeln!(out, "gate {gate}: {} -> demo answers `{option}` as user:demo-sre (sre)", g.reason)?;
        }
        if let Some(OperationState::Paused { .. }) = rt.store().operation(&id)?.map(|o| o.state) {
            rt.resume(&id, "user:demo-sre")?;
        }
        (code, rt) = ops_cmd::drive_and_finish(rt, &id, out)?;
    }
    writeln!(out, "\nEvidence recorded:")?;
    for e in rt.store().evidence(&id)? {
        writeln!(
            out,
            "  {:<6} {:<30} {:<26} expected {}, observed {}",
            if e.passed { "pass" } else { "FAIL" },
            e.job,
            e.check,
            e.expected,
            e.observed
        )?;
    }
    Ok(Some((code, id)))
}
