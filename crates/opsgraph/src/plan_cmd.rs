//! `opsgraph plan` and `opsgraph demo`: load the world, build the plan, print the preview.

use std::io::Write;

use opsgraph_model::Intent;
use opsgraph_pack::{Code, Diagnostic, Pos};
use opsgraph_plan::{render, Input, Inventory, Plan};

use crate::cli::{report, Output, PlanArgs};
use crate::load::{self, Source};

/// The loaded inputs of a plan, or the diagnostics that stop it.
pub struct Loaded {
    pub intent: Intent,
    pub packs: Vec<opsgraph_pack::Pack>,
    pub world: load::World,
    pub diagnostics: Vec<Diagnostic>,
}

/// Loads packs, world documents and the intent. The intent file may hold other documents too:
/// every document is routed by its kind.
pub fn load_inputs(intent: &Source, packs: &[Source], world: &[Source]) -> Loaded {
    let (packs, mut diags) = load::packs(packs);
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
    Loaded {
        intent,
        packs,
        world,
        diagnostics: diags,
    }
}

/// Builds the plan from loaded inputs.
pub fn build(loaded: &Loaded) -> Result<Plan, Vec<opsgraph_plan::Error>> {
    let inventory = Inventory::new(&loaded.world.resources);
    opsgraph_plan::build(&Input {
        intent: &loaded.intent,
        packs: &loaded.packs,
        inventory: &inventory,
        providers: &loaded.world.providers,
        policy: &loaded.world.policy,
    })
}

pub fn plan(args: &PlanArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let packs: Vec<Source> = if args.packs.is_empty() {
        vec![Source::parse("bundled:packs")]
    } else {
        args.packs.iter().map(|p| Source::parse(p)).collect()
    };
    let world: Vec<Source> = args
        .inventory
        .iter()
        .chain(&args.policy)
        .map(|p| Source::parse(p))
        .collect();
    let loaded = load_inputs(&Source::parse(&args.intent), &packs, &world);
    preview(&loaded, args.output, out, err)
}

fn preview(
    loaded: &Loaded,
    output: Output,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    report(err, &loaded.diagnostics)?;
    if loaded.diagnostics.iter().any(Diagnostic::is_error) {
        return Ok(1);
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
            return Ok(1);
        }
    };
    match output {
        Output::Text => write!(out, "{}", render::text(&plan))?,
        Output::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&render::json(&plan))?
        )?,
        Output::Dot => write!(out, "{}", render::dot(&plan))?,
    }
    Ok(if plan.is_blocked() { 1 } else { 0 })
}

/// The README's main command. Until the durable runtime lands (issue [B]) it previews the
/// bundled example operation and says plainly that nothing ran.
pub fn demo(out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let world = [
        Source::parse("bundled:examples/inventory"),
        Source::parse("bundled:examples/providers.yaml"),
        Source::parse("bundled:examples/policy.yaml"),
    ];
    writeln!(
        out,
        "opsgraph demo: install Tempo in prod, from the bundled packs and example world\n"
    )?;
    let loaded = load_inputs(
        &Source::parse("bundled:examples/intents/tempo-prod.yaml"),
        &[Source::parse("bundled:packs")],
        &world,
    );
    let code = preview(&loaded, Output::Text, out, err)?;
    writeln!(
        out,
        "\nThis is a preview only: the durable runtime that applies plans is not built yet, so the demo\nstops here and nothing was executed. Try `opsgraph plan -f examples/intents/tempo-dev.yaml\n--inventory examples/inventory --policy examples/policy.yaml --policy examples/providers.yaml`."
    )?;
    Ok(code)
}
