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
    /// What the store recorded about the resource the intent names ([I]: a day-2 action plans
    /// against it).
    pub recorded: Option<opsgraph_core::plan::Recorded>,
    /// The roles of the local user ([O]: policy rules match on them): `config.yaml`'s `users:`
    /// for `$USER` (`apply --as`), none without it.
    pub roles: Vec<String>,
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
            Intent::default()
        }
    };
    Loaded { intent, packs, world, diagnostics: diags, patch: None, recorded: None, roles: Vec::new() }
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
    let url = crate::storage::database_url(data_dir);
    let exists = opsgraph_store::is_postgres(&url)
        || std::path::Path::new(url.strip_prefix("sqlite://").unwrap_or(&url)).exists();
    if exists {
        let store = crate::storage::open_store(data_dir)?;
        loaded.world.resources = opsgraph_runtime::manage::world_resources(&loaded.world.resources, &*store)?;
        loaded.recorded = opsgraph_runtime::manage::recorded(&loaded.intent, &*store)?;
    }
    loaded.roles = local_roles(data_dir, &crate::client::local_actor(None));
    Ok(loaded)
}

/// The roles of a local actor (`user:NAME`) from the data directory's `config.yaml`; none when
/// it has no such file or user (a plan is then made for someone without roles).
pub fn local_roles(data_dir: &std::path::Path, actor: &str) -> Vec<String> {
    let user = actor.strip_prefix("user:").unwrap_or(actor);
    crate::client::roles_of(data_dir, user).unwrap_or_default()
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
        recorded: loaded.recorded.as_ref(),
        roles: &loaded.roles,
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
    let packs = crate::registry::load_packs(&args.packs, data_dir, false)?;
    let world: Vec<Source> = args.inventory.iter().chain(&args.policy).map(|p| Source::parse(p)).collect();
    let mut loaded = assemble(&Source::parse(&args.intent), packs, &world, data_dir)?;
    loaded.patch = args.patch.as_deref().map(crate::load::patch_file).transpose()?;
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

/// `validate`'s check of intents: each intent's parameters against the template it picks, as
/// `plan` checks them (`check_intent_parameters`), each problem at its value's file:line:column
/// (P003). An intent no loaded pack or template takes is a warning: its parameters are not
/// checked (`plan` would refuse it with P001/P002). Packs are loaded only when there are intents.
pub fn check_intents(
    docs: &[opsgraph_core::pack::Located],
    packs: &[String],
    data_dir: &std::path::Path,
) -> anyhow::Result<Vec<Diagnostic>> {
    use opsgraph_core::model::Document;
    use opsgraph_core::pack::shape::{pos_at, PathSeg};
    let intents: Vec<_> = docs
        .iter()
        .filter_map(|d| match &d.doc {
            Document::Intent(i) => Some((d, i)),
            _ => None,
        })
        .collect();
    if intents.is_empty() {
        return Ok(Vec::new());
    }
    let (loaded, mut diags) = crate::registry::load_packs(packs, data_dir, false)?;
    diags.retain(Diagnostic::is_error);
    for (d, intent) in intents {
        match opsgraph_core::plan::check_intent_parameters(&loaded, intent) {
            Ok(errors) => {
                let start = diags.len();
                for e in errors {
                    let path: Vec<PathSeg<'_>> = match e.parameter() {
                        Some(name) => vec![PathSeg::Key("parameters"), PathSeg::Key(name)],
                        None => vec![PathSeg::Key("parameters")],
                    };
                    let code = if e.parameter().is_some() { Code::Parameter } else { Code::Limit };
                    diags.push(Diagnostic::error(pos_at(&d.node, &path), code, e.to_string()).in_file(&d.file));
                }
                diags[start..].sort_by_key(|d| (d.pos.line, d.pos.col));
            }
            Err(e) => diags.push(
                Diagnostic::warning(d.pos, Code::UnknownRef, format!("parameters not checked: {} ({})", e, e.code()))
                    .hint("name the pack directory with --packs, or install the pack")
                    .in_file(&d.file),
            ),
        }
    }
    Ok(diags)
}
