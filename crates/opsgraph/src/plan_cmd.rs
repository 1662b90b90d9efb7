//! `opsgraph plan` and `opsgraph demo`: load the world, build the plan, print the preview.

use std::io::Write;

use opsgraph_core::model::Intent;
use opsgraph_core::pack::{Code, Diagnostic, Pos};
use opsgraph_core::plan::{render, Input, Inventory, Plan};

use crate::args::PlanArgs;
use crate::load::{self, Source};
use crate::render::{report, Output};

/// The loaded inputs of a plan, or the diagnostics that stop it.
pub struct Loaded {
    pub intent: Intent,
    pub packs: Vec<opsgraph_core::pack::Pack>,
    pub world: load::World,
    pub diagnostics: Vec<Diagnostic>,
    /// A plan patch that customises the preview before anything runs (`--patch`).
    pub patch: Option<opsgraph_core::model::PlanPatch>,
}

/// Loads world documents and the intent, next to packs already loaded. The intent file may hold
/// other documents too: every document is routed by its kind.
pub fn load_inputs(
    intent: &Source,
    packs: (Vec<opsgraph_core::pack::Pack>, Vec<Diagnostic>),
    world: &[Source],
) -> Loaded {
    let (packs, mut diags) = packs;
    let mut sources = world.to_vec();
    sources.push(intent.clone());
    let (docs, d) = load::documents(&sources);
    diags.extend(d);
    let intent_file = intent.display();
    let mut world = load::world(docs, &mut diags);
    let mut intents: Vec<Intent> = Vec::new();
    world.intents.retain(|(file, i)| {
        if *file == intent_file {
            intents.push(i.clone());
            false
        } else {
            true
        }
    });
    let intent = match intents.len() {
        1 => intents.remove(0),
        n => {
            if !diags.iter().any(|d| d.is_error() && d.file == intent_file) {
                diags.push(
                    Diagnostic::error(
                        Pos { line: 1, col: 1 },
                        Code::Pack,
                        format!("expected one `intent:` document, found {n}"),
                    )
                    .in_file(&intent_file),
                );
            }
            Intent {
                id: None,
                target_resource_type: String::new(),
                action: String::new(),
                pack: None,
                name: None,
                environment: None,
                desired_result: None,
                parameters: Default::default(),
                constraints: Default::default(),
                targets: Default::default(),
                requires: Vec::new(),
            }
        }
    };
    Loaded { intent, packs, world, diagnostics: diags, patch: None }
}

/// The world a local plan is built from, the one function `plan` and `apply` share: the
/// documents given (inventory, policies, the intent) plus the resources earlier operations
/// recorded in the data directory's store; a document given on the command line wins for a
/// resource it also describes. Reads the store only when it exists: `plan` writes nothing.
pub fn assemble(
    intent: &Source,
    packs: (Vec<opsgraph_core::pack::Pack>, Vec<Diagnostic>),
    world: &[Source],
    data_dir: &std::path::Path,
) -> anyhow::Result<Loaded> {
    let mut loaded = load_inputs(intent, packs, world);
    let url = crate::ops_cmd::database_url(data_dir);
    let exists = opsgraph_store::is_postgres(&url)
        || std::path::Path::new(url.strip_prefix("sqlite://").unwrap_or(&url)).exists();
    if exists {
        let store = crate::ops_cmd::open_store(data_dir)?;
        loaded.world.resources = opsgraph_runtime::manage::world_resources(&loaded.world.resources, &*store)?;
    }
    Ok(loaded)
}

/// Builds the plan from loaded inputs.
pub fn build(loaded: &Loaded) -> Result<Plan, Vec<opsgraph_core::plan::Error>> {
    let inventory = Inventory::new(&loaded.world.resources);
    opsgraph_core::plan::build(&Input {
        intent: &loaded.intent,
        packs: &loaded.packs,
        inventory: &inventory,
        providers: &loaded.world.providers,
        policy: &loaded.world.policy,
        operations: &loaded.world.operations,
    })
}

/// `plan`: nothing runs and nothing is written; the installed packs of `data_dir` and the
/// resources its store records are read ([`assemble`]).
pub fn plan(
    args: &PlanArgs,
    data_dir: &std::path::Path,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let packs = crate::ops_cmd::load_packs(&args.packs, data_dir, false)?;
    let world: Vec<Source> = args.inventory.iter().chain(&args.policy).map(|p| Source::parse(p)).collect();
    let mut loaded = assemble(&Source::parse(&args.intent), packs, &world, data_dir)?;
    loaded.patch = args.patch.as_deref().map(crate::ops_cmd::patch_file).transpose()?;
    preview(&loaded, args.output, out, err)
}

fn preview(loaded: &Loaded, output: Output, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    Ok(match preview_to(loaded, output, out, err)? {
        Some(plan) if !plan.is_blocked() => 0,
        _ => 1,
    })
}

/// Prints the diagnostics or the preview; the plan when it could be built.
pub fn preview_to(
    loaded: &Loaded,
    output: Output,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<Option<Plan>> {
    report(err, &loaded.diagnostics)?;
    if loaded.diagnostics.iter().any(Diagnostic::is_error) {
        return Ok(None);
    }
    let plan = match build(loaded) {
        Ok(plan) => plan,
        Err(errors) => {
            for e in &errors {
                writeln!(err, "error[{}]: {e}", e.code())?;
            }
            writeln!(
                err,
                "the plan cannot be built: {} error{}",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            )?;
            return Ok(None);
        }
    };
    // A patch to the preview: reviewed like any other; refused, nothing is previewed.
    let mut diff = None;
    let plan = match &loaded.patch {
        None => plan,
        Some(patch) => {
            let pack = loaded
                .packs
                .iter()
                .find(|p| p.reference() == plan.pack)
                .expect("the plan's pack is among the loaded ones");
            match opsgraph_core::plan::patch::apply_patch(&plan, pack, patch) {
                Ok(p) => {
                    diff = Some((p.diff, p.findings));
                    p.plan
                }
                Err(findings) => {
                    for f in &findings {
                        writeln!(err, "{:?} {}: {}", f.severity, f.code, f.message)?;
                    }
                    writeln!(err, "the patch is refused: the plan is not previewed")?;
                    return Ok(None);
                }
            }
        }
    };
    if let (Output::Text, Some((d, findings))) = (output, &diff) {
        writeln!(out, "Patched before the run:")?;
        write!(out, "{}", d.text())?;
        for f in findings {
            writeln!(out, "{:?} {}: {}", f.severity, f.code, f.message)?;
        }
        writeln!(out)?;
    }
    match output {
        Output::Text => write!(out, "{}", render::text(&plan))?,
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&render::json(&plan, &loaded.packs))?)?,
        Output::Yaml => write!(out, "{}", crate::render::to_yaml(&render::json(&plan, &loaded.packs), 0))?,
        Output::Dot => write!(out, "{}", render::dot(&plan))?,
    }
    Ok(Some(plan))
}

/// The README's main command: a fresh data directory, the bundled lab packs and inventory, and
/// one whole operation — preview, a gate answered by the demo's user, the live run, evidence,
/// the resource it produced.
pub fn demo(
    data_dir: Option<&std::path::Path>,
    keep: bool,
    out: &mut dyn Write,
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

fn demo_in(dir: &std::path::Path, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
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
    out: &mut dyn Write,
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
            writeln!(out, "gate {gate}: {} -> demo answers `{option}` as user:demo-sre (sre)", g.reason)?;
            let answer =
                opsgraph_runtime::GateAnswer { option, actor: "user:demo-sre".into(), role: "sre".into(), value: None };
            rt.answer_gate(&id, &gate, &answer, &mut |_| {})?;
        }
        if let Some(OperationState::Paused { .. }) = rt.store().operation(&id)?.map(|o| o.state) {
            rt.resume(&id, "user:demo-sre", &mut |_| {})?;
        }
        code = ops_cmd::drive_and_finish(&mut rt, &id, out)?;
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
