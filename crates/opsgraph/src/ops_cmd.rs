//! Commands that run and inspect operations: `apply`, `get`, `describe`, `logs`, `gate answer`,
//! `pause`, `resume`, `cancel`, `retry`, and the running half of `demo`.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use opsgraph_api::views::exit_code;
use opsgraph_core::model::OperationState;
use opsgraph_core::plan::lifecycle::state_name;
use opsgraph_runtime::Runtime;
use opsgraph_store::{OperationFilter, Store};
use serde_json::{json, Value};

pub use crate::client::{local_actor, roles_of, Action};
use crate::load::{self, Source};
use crate::plan_cmd;
use crate::render::{live, print_finish, stage_of};

/// Where operations are stored: `--data-dir`, `$OPSGRAPH_DATA_DIR`, else
/// `$XDG_DATA_HOME/opsgraph` or `~/.local/share/opsgraph`.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("OPSGRAPH_DATA_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(d).join("opsgraph");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/share/opsgraph"),
        None => PathBuf::from(".opsgraph"),
    }
}

pub use crate::load::patch_file;
pub use crate::registry::{load_packs, pack_sources};
pub use crate::storage::{database_url, durability, open_store, use_database};

/// Drives an operation under its lease, so that no server replica (or other CLI) drives it at
/// the same time; refused while another holds it.
pub fn drive(rt: &mut Runtime, id: &str, progress: opsgraph_runtime::Progress<'_>) -> anyhow::Result<OperationState> {
    let data_dir = rt.data_dir().to_path_buf();
    let open = crate::storage::opener(&data_dir);
    let keeper = opsgraph_runtime::lease::Keeper::new(
        opsgraph_runtime::lease::LeaseConfig::from_env(),
        Box::new(move || open()),
    );
    Ok(rt.drive_leased(id, &keeper, progress)?)
}

pub struct ApplyArgs<'a> {
    pub intent: &'a str,
    pub packs: &'a [String],
    pub world: Vec<String>,
    pub data_dir: PathBuf,
    pub yes: bool,
    pub actor: String,
    /// `text`: preview, confirmation and live view. `json` / `yaml`: no preview and no live view
    /// (needs `--yes`); the operation as `describe operation` shows it, once it stops.
    pub output: crate::render::Output,
    pub concurrency: Option<u16>,
    /// `--patch FILE`: a plan patch applied to the preview before anything runs.
    pub patch: Option<&'a str>,
    /// `--plan-hash HASH`: the hash of the plan a person previewed; another plan is refused.
    pub plan_hash: Option<&'a str>,
}

/// A runtime over the data directory, with packs and the inventory given on the command line.
fn runtime(data_dir: &Path, packs: &[String], world: &[String], concurrency: Option<u16>) -> anyhow::Result<Runtime> {
    let world_sources: Vec<Source> = world.iter().map(|p| Source::parse(p)).collect();
    let (packs, diags) = load_packs(packs, data_dir, true)?;
    if diags.iter().any(|d| d.is_error()) {
        let text: Vec<String> = diags.iter().map(ToString::to_string).collect();
        bail!("the packs have problems:\n{}", text.join("\n"));
    }
    let (docs, mut diags) = load::documents(&world_sources);
    let world = load::world(docs, &mut diags);
    let store = open_store(data_dir)?;
    let mut rt = Runtime::new(Box::new(store), packs, world.resources, data_dir.to_path_buf());
    rt.agents = Some(crate::agent_cmd::local_agents(data_dir));
    rt.blobs = crate::storage::blobs(data_dir)?;
    if let Some(n) = concurrency {
        rt.set_concurrency(n.into());
    }
    rt.rules = patch_rules(data_dir)?;
    Ok(rt)
}

/// Four eyes from `DATA_DIR/config.yaml` (`allow_self_approval`, `ai_policy.auto_apply`,
/// `patch_policy.safe_changes`), read by the runtime's one parser, as the server reads them.
pub fn patch_rules(data_dir: &Path) -> anyhow::Result<opsgraph_runtime::PatchRules> {
    let path = data_dir.join("config.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(Default::default()) };
    let docs = opsgraph_core::pack::yaml::parse_stream(&text)
        .map_err(|e| anyhow::anyhow!("{}:{}: {}", path.display(), e.pos.line, e.message))?;
    let config = docs.first().map(opsgraph_core::pack::shape::to_json).unwrap_or(Value::Null);
    opsgraph_runtime::PatchRules::from_config(&config).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

pub fn apply(
    args: &ApplyArgs<'_>,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let world: Vec<Source> = args.world.iter().map(|p| Source::parse(p)).collect();
    // The world as `plan` sees it (one function for both), assembled again at confirmation.
    let assemble = || -> anyhow::Result<plan_cmd::Loaded> {
        let packs = load_packs(args.packs, &args.data_dir, true)?;
        let mut loaded = plan_cmd::assemble(&Source::parse(args.intent), packs, &world, &args.data_dir)?;
        loaded.patch = args.patch.map(patch_file).transpose()?;
        Ok(loaded)
    };
    let mut loaded = assemble()?;
    use crate::render::Output;
    let machine = match args.output {
        Output::Text => false,
        Output::Json | Output::Yaml if args.yes => true,
        Output::Json | Output::Yaml => bail!("`apply -o json|yaml` prints no preview to confirm: add --yes"),
        Output::Dot => bail!("`apply` has no dot output; `opsgraph plan -o dot` draws the plan"),
    };
    let mut sink = std::io::sink();
    let preview: &mut dyn Write = if machine { &mut sink } else { out };
    let plan = match plan_cmd::preview_to(&loaded, Output::Text, preview, err)? {
        Some(plan) => plan,
        None => return Ok(1),
    };
    if plan.is_blocked() {
        writeln!(err, "nothing applied: a requirement cannot be met")?;
        return Ok(1);
    }
    // Preview = run: the plan that runs is the plan a person saw, or nothing runs.
    if let Some(previewed) = args.plan_hash {
        if let Err(e) = opsgraph_core::plan::check_preview(previewed, &plan) {
            writeln!(err, "error[{}]: {e}", e.code())?;
            return Ok(1);
        }
    }
    let mut plan = plan;
    if !args.yes {
        if !crate::render::confirmed("Apply this plan?", "not applied", input, out, err)? {
            return Ok(1);
        }
        // The world may have changed while the question was open: built again, the plan must
        // be the one shown.
        let again = assemble()?;
        let mut sink = std::io::sink();
        let rebuilt = plan_cmd::preview_to(&again, Output::Text, &mut sink, &mut std::io::sink())?;
        let check = match &rebuilt {
            Some(now) => opsgraph_core::plan::check_preview(&plan.revision.hash, now),
            None => Err(opsgraph_core::plan::Error::StalePreview {
                previewed: plan.revision.hash.clone(),
                now: "not buildable".into(),
            }),
        };
        if let Err(e) = check {
            writeln!(err, "error[{}]: {e}", e.code())?;
            return Ok(1);
        }
        plan = rebuilt.unwrap_or(plan);
        loaded = again;
    }
    let store = open_store(&args.data_dir)?;
    let mut rt =
        Runtime::new(Box::new(store), loaded.packs.clone(), loaded.world.resources.clone(), args.data_dir.clone());
    rt.agents = Some(crate::agent_cmd::local_agents(&args.data_dir));
    rt.blobs = crate::storage::blobs(&args.data_dir)?;
    if let Some(n) = args.concurrency {
        rt.set_concurrency(n.into());
    }
    // The same audit row as the server's, in the operation's own transaction.
    let id = opsgraph_runtime::new_operation_id();
    rt.attach(vec![opsgraph_runtime::audit::create(&args.actor, &id, &plan, None)]);
    if machine {
        let id = rt.create_as(&id, &plan, &args.actor, &mut |_| {})?;
        let state = drive(&mut rt, &id, &mut |_| {})?;
        describe_to(rt.store(), "operation", &id, if args.output == Output::Json { "json" } else { "yaml" }, out)?;
        return Ok(exit_code(state.kind()));
    }
    writeln!(out)?;
    let stages = stage_of(&plan);
    let id = {
        let mut view = live(out, stages.clone());
        let id = rt.create_as(&id, &plan, &args.actor, &mut view)?;
        drive(&mut rt, &id, &mut view)?;
        id
    };
    finish(&rt, &id, out)
}

/// The end of a run: outcome, evidence, resource, and what to do next.
fn finish(rt: &Runtime, id: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let store = rt.store();
    let op = store.operation(id)?.with_context(|| format!("no operation {id}"))?;
    let view = opsgraph_api::views::operation(store, &op)?;
    let resource = op.resource.as_deref().and_then(|r| store.resource(r).ok().flatten()).map(|r| r.doc);
    print_finish(&view, resource.as_ref(), out)
}

/// `describe operation|resource ID`: the full chain of reasons.
pub fn describe(data_dir: &Path, what: &str, id: &str, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let store = open_store(data_dir)?;
    describe_to(&store, what, id, output, out)
}

fn describe_to(store: &dyn Store, what: &str, id: &str, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let value = match what {
        "operation" | "op" => {
            // The same document the API serves (`GET /api/v1/operations/{id}`).
            return crate::query_cmd::describe_operation(
                &crate::client::Local::new(store, &PathBuf::new()),
                id,
                output,
                out,
            );
        }
        "resource" => {
            let r = store.resource(id)?.with_context(|| format!("no resource `{id}` recorded by an operation"))?;
            let ops: Vec<Value> = store
                .operations(&OperationFilter { state: None, resource: Some(id.to_string()) })?
                .iter()
                .map(|o| json!({"id": o.id, "state": state_name(o.state.kind()), "detail": opsgraph_api::views::detail(&o.state), "at": o.updated_at}))
                .collect();
            json!({"resource": r.doc, "last_operation": r.last_operation, "operations": ops})
        }
        other => bail!("cannot describe `{other}`: expected operation or resource"),
    };
    crate::render::document(&value, output, out)?;
    Ok(0)
}

/// Drives an operation with the live view, then prints how it ended.
pub fn drive_and_finish(rt: &mut Runtime, id: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    drive_on(rt, id, out)
}

/// After a control command: drive the operation on, with the live view, until it waits again.
fn drive_on(rt: &mut Runtime, id: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let (_, plan) = {
        let op = rt.store().operation(id)?.with_context(|| format!("no operation `{id}`"))?;
        let plan: opsgraph_core::plan::Plan =
            serde_json::from_value(rt.store().plan(&op.plan_revision)?.unwrap_or(Value::Null))?;
        (op, plan)
    };
    {
        let mut view = live(out, stage_of(&plan));
        drive(rt, id, &mut view)?;
    }
    finish(rt, id, out)
}

pub struct Control<'a> {
    pub data_dir: PathBuf,
    pub packs: &'a [String],
    pub world: Vec<String>,
    pub wait: bool,
    pub output: crate::render::Output,
    pub concurrency: Option<u16>,
}

pub fn control(c: &Control<'_>, action: Action<'_>, out: &mut dyn Write) -> anyhow::Result<u8> {
    use crate::render::Output;
    let format = match c.output {
        Output::Text => None,
        Output::Json => Some("json"),
        Output::Yaml => Some("yaml"),
        Output::Dot => bail!("only `plan` draws dot"),
    };
    let Some(format) = format else { return control_text(c, action, out) };
    // For machines: act (and drive on, unless --no-wait) silently, then print the operation.
    let mut sink = std::io::sink();
    control_text(c, action.clone(), &mut sink)?;
    let id = action.operation_hint();
    let store = open_store(&c.data_dir)?;
    let id = match id {
        Some(id) => id.to_string(),
        None => match &action {
            Action::Answer { gate, .. } => answered_gate_operation(&store, gate)?,
            _ => unreachable!("every other action names its operation"),
        },
    };
    let root = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?.root_of(&id)?;
    describe_to(&store, "operation", &root, format, out)?;
    let state = store.operation(&root)?.map(|o| o.state);
    Ok(state.map_or(0, |s| exit_code(s.kind())))
}

/// The operation whose gate `gate` was answered last.
fn answered_gate_operation(store: &dyn Store, gate: &str) -> anyhow::Result<String> {
    let mut found: Option<(String, String)> = None;
    for op in store.operations(&OperationFilter::default())? {
        for g in store.gates(&op.id)?.into_iter().filter(|g| g.id == gate) {
            if let Some(at) = g.answered_at {
                if found.as_ref().is_none_or(|(_, t)| at > *t) {
                    found = Some((op.id.clone(), at));
                }
            }
        }
    }
    found.map(|(id, _)| id).with_context(|| format!("no answered gate `{gate}`"))
}

fn control_text(c: &Control<'_>, action: Action<'_>, out: &mut dyn Write) -> anyhow::Result<u8> {
    use opsgraph_api::Control as _;
    let mut ctl =
        crate::client::LocalControl::new(runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?, &local_actor(None));
    let id = match action {
        Action::Answer { gate, operation, option, user, value } => {
            let id = match operation {
                Some(id) => id.to_string(),
                None => opsgraph_api::find_gate(&ctl, gate)?,
            };
            ctl.answer(&id, gate, option, value.map(opsgraph_api::gate_value), user)?;
            writeln!(out, "gate {gate} of {id}: {option} (by {user})")?;
            // A child operation is driven by its parent.
            ctl.rt.root_of(&id)?
        }
        Action::Pause(id) => {
            ctl.pause(id)?;
            writeln!(out, "{id}: paused; running jobs finish, no new job starts")?;
            return Ok(0);
        }
        Action::Resume(id) => {
            ctl.resume(id)?;
            id.to_string()
        }
        Action::Cancel(id) => {
            ctl.cancel(id)?;
            writeln!(out, "{id}: cancelled")?;
            return Ok(0);
        }
        Action::Retry(id, jobs) => {
            ctl.retry(id, &jobs)?;
            id.to_string()
        }
    };
    let mut rt = ctl.rt;
    if c.wait {
        drive_on(&mut rt, &id, out)
    } else {
        Ok(0)
    }
}

/// `secrets rotate|reseal`.
pub fn secrets(data_dir: &Path, command: &crate::args::SecretsCommand, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut rt = Runtime::new(Box::new(open_store(data_dir)?), vec![], vec![], data_dir.to_path_buf());
    rt.blobs = crate::storage::blobs(data_dir)?;
    match command {
        crate::args::SecretsCommand::Rotate => {
            let r = rt.rotate_master_key()?;
            writeln!(
                out,
                "master key rotated: active {}, retired {}; {} sealed value{} moved to the new key",
                r.active,
                r.retired,
                r.resealed,
                if r.resealed == 1 { "" } else { "s" }
            )?;
        }
        crate::args::SecretsCommand::Reseal => {
            let n = rt.reseal_all()?;
            writeln!(out, "{n} sealed value{} moved to the active key", if n == 1 { "" } else { "s" })?;
        }
    }
    Ok(0)
}

pub struct PatchArgs<'a> {
    pub operation: &'a str,
    pub file: Option<&'a str>,
    pub remedy: Option<&'a str>,
    pub user: Option<&'a str>,
    pub dry_run: bool,
}

/// `patch OP -f PATCH | --remedy ID`: review, then apply or wait for approval, then drive on.
pub fn patch(c: &Control<'_>, args: &PatchArgs<'_>, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let op = rt.store().operation(args.operation)?.with_context(|| format!("no operation `{}`", args.operation))?;
    let plan: opsgraph_core::plan::Plan =
        serde_json::from_value(rt.store().plan(&op.plan_revision)?.unwrap_or(Value::Null))
            .context("the operation's plan cannot be read")?;
    let pack_id = plan.pack.split('@').next().unwrap_or_default().to_string();
    let (packs, _) = load_packs(c.packs, &c.data_dir, true)?;
    let pack = packs
        .iter()
        .find(|p| format!("{}@{}", p.manifest.id, p.manifest.version) == plan.pack)
        .or_else(|| packs.iter().find(|p| p.manifest.id == pack_id))
        .with_context(|| format!("the pack {} of this operation is not loaded", plan.pack))?;
    let patch = match (args.file, args.remedy) {
        (Some(file), _) => document_of(file, "plan_patch", |d| match d {
            opsgraph_core::model::Document::PlanPatch(p) => Some(p),
            _ => None,
        })?,
        (None, Some(id)) => {
            pack.remedies.iter().find(|r| r.id == id).map(|r| r.plan_patch.clone()).with_context(|| {
                let known: Vec<&str> = pack.remedies.iter().map(|r| r.id.as_str()).collect();
                format!("pack {} has no remedy `{id}` (remedies: {})", plan.pack, known.join(", "))
            })?
        }
        (None, None) => bail!("name a patch: -f PATCH.yaml or --remedy ID"),
    };
    let author = local_actor(args.user);
    if args.dry_run {
        return match opsgraph_core::plan::patch::apply_patch(&plan, pack, &patch) {
            Ok(p) => {
                write!(out, "{}", p.diff.text())?;
                for f in &p.findings {
                    writeln!(out, "{:?} {}: {}", f.severity, f.code, f.message)?;
                }
                writeln!(out, "(dry run: nothing changed)")?;
                Ok(0)
            }
            Err(findings) => {
                for f in &findings {
                    writeln!(out, "{:?} {}: {}", f.severity, f.code, f.message)?;
                }
                Ok(1)
            }
        };
    }
    let op = rt.store().operation(args.operation)?.with_context(|| format!("no operation `{}`", args.operation))?;
    rt.attach(vec![opsgraph_runtime::audit::control(&author, "operation.patch", &op, json!({"reason": patch.reason}))]);
    let proposal = rt.propose_patch(args.operation, &patch, &author, &mut |_| {})?;
    writeln!(out, "patch {} of {}:", proposal.patch, args.operation)?;
    write!(out, "{}", proposal.diff.text())?;
    for f in &proposal.findings {
        writeln!(out, "{:?} {}: {}", f.severity, f.code, f.message)?;
    }
    if let Some(g) = &proposal.gate {
        writeln!(
            out,
            "waiting for approval at {g}: opsgraph gate answer {g} --operation {} --option 'approve patch' --as USER",
            args.operation
        )?;
        return Ok(0);
    }
    if c.wait {
        drive_on(&mut rt, args.operation, out)
    } else {
        Ok(0)
    }
}

/// The `intervention` document of a file.
pub fn intervention_file(file: &str) -> anyhow::Result<opsgraph_core::model::Intervention> {
    document_of(file, "intervention", |d| match d {
        opsgraph_core::model::Document::Intervention(i) => Some(i),
        _ => None,
    })
}

/// The first document of `file` that `pick` takes (a `kind` document); the file's errors, if
/// it has any.
fn document_of<T>(
    file: &str,
    kind: &str,
    pick: impl Fn(opsgraph_core::model::Document) -> Option<T>,
) -> anyhow::Result<T> {
    let (docs, diags) = load::documents(&[Source::parse(file)]);
    if diags.iter().any(|d| d.is_error()) {
        let text: Vec<String> = diags.iter().map(ToString::to_string).collect();
        bail!("{}", text.join("\n"));
    }
    docs.into_iter().find_map(|d| pick(d.doc)).with_context(|| format!("{file} holds no {kind} document"))
}

/// `intervene OP ...`: record, verify, and drive on when verified.
pub fn intervene(
    c: &Control<'_>,
    op: &str,
    iv: &opsgraph_core::model::Intervention,
    user: Option<&str>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    use opsgraph_api::Control as _;
    let rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let mut ctl = crate::client::LocalControl::new(rt, &local_actor(user.or(iv.actor.as_deref())));
    let reply = ctl.intervene(op, iv)?;
    let code = crate::render::print_intervention(&reply, &iv.note, out)?;
    match reply.state {
        opsgraph_core::model::OperationStateKind::Running if c.wait => drive_on(&mut ctl.rt, op, out),
        _ => Ok(code),
    }
}

/// `diagnose OP [--propose]`: what the rules analyzer finds, and the patch it would propose.
pub fn diagnose(
    c: &Control<'_>,
    op: &str,
    propose: bool,
    output: crate::render::Output,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let mut rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let found = crate::query_cmd::diagnose(&crate::client::Local::of(&rt), op, output, out)?;
    if !propose {
        return Ok(0);
    }
    // The first remedy found, as the pack holds it (the patch the analyzer matched).
    let Some(patch) = found.iter().find_map(|d| d.remedy.as_deref()).map(|r| rt.remedy_patch(op, r)).transpose()?
    else {
        writeln!(out, "nothing to propose: no remedy matches")?;
        return Ok(1);
    };
    let proposal = rt.propose_patch(op, &patch, "ai-agent:planner", &mut |_| {})?;
    writeln!(out, "patch {} proposed by ai-agent:planner:", proposal.patch)?;
    write!(out, "{}", proposal.diff.text())?;
    if let Some(g) = &proposal.gate {
        writeln!(
            out,
            "waiting for approval at {g}: opsgraph gate answer {g} --operation {op} --option 'approve patch' --as USER"
        )?;
    }
    Ok(0)
}

/// `rollback OP`: preview the plan that undoes it, confirm, run it as a new operation.
pub fn rollback(
    c: &Control<'_>,
    op: &str,
    yes: bool,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let mut rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let rb = rt.rollback_plan(op)?;
    write!(out, "{}", opsgraph_core::plan::render::text(&rb.plan))?;
    for u in &rb.unsupported {
        writeln!(out, "cannot undo: {u}")?;
    }
    for p in &rb.partial {
        writeln!(out, "only partly undone: {p}")?;
    }
    if rb.plan.jobs.is_empty() {
        writeln!(err, "nothing to roll back: no completed job of {op} can be undone")?;
        return Ok(1);
    }
    if !yes
        && !crate::render::confirmed(&format!("Roll back {op} with this plan?"), "not rolled back", input, out, err)?
    {
        return Ok(1);
    }
    let actor = local_actor(None);
    writeln!(out)?;
    let id = {
        let mut view = live(out, stage_of(&rb.plan));
        let id = rt.start_rollback(op, &rb, &actor, &mut view)?;
        drive(&mut rt, &id, &mut view)?;
        id
    };
    finish(&rt, &id, out)
}

/// `diagnose OP --ai openai [--propose]`: the endpoint's answer, checked; refusals recorded.
pub fn diagnose_openai(c: &Control<'_>, op: &str, propose: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let context = rt.failure_context(op)?;
    let provider = crate::ai::OpenAi::from_config(&c.data_dir)?;
    let analyzer = "ai-agent:analyzer";
    let answer = match provider.diagnose(&context)? {
        Ok(a) => a,
        Err(reason) => {
            rt.note(op, analyzer, "ai_answer_refused", &reason, json!({"provider": "openai"}))?;
            writeln!(out, "the analyzer's answer is refused: {reason}")?;
            return Ok(1);
        }
    };
    rt.note(op, analyzer, "ai_diagnosis", &answer.summary, json!({"provider": "openai", "answer": answer.raw}))?;
    writeln!(out, "Diagnosis (openai analyzer, confidence {:.1})", answer.confidence)?;
    writeln!(out, "  {}", answer.summary)?;
    writeln!(out, "  cause: {}", answer.cause)?;
    writeln!(out, "  based on: {}", answer.evidence.join("; "))?;
    if let Some(r) = &answer.remedy {
        writeln!(out, "  remedy: {r}")?;
    }
    let Some(patch) = answer.plan_patch.filter(|_| propose) else {
        return Ok(0);
    };
    match rt.propose_patch(op, &patch, "ai-agent:planner", &mut |_| {}) {
        Ok(p) => {
            writeln!(out, "patch {} proposed by ai-agent:planner:", p.patch)?;
            write!(out, "{}", p.diff.text())?;
            if let Some(g) = &p.gate {
                writeln!(out, "waiting for approval at {g}: opsgraph gate answer {g} --operation {op} --option 'approve patch' --as USER")?;
                return Ok(0);
            }
            // Within the AI policy: applied without a person; the run goes on.
            writeln!(out, "applied without approval: every change is within ai_policy")?;
            if c.wait {
                return drive_on(&mut rt, op, out);
            }
            Ok(0)
        }
        Err(opsgraph_runtime::Error::PatchRefused(findings)) => {
            rt.note(op, "ai-agent:planner", "ai_patch_refused", &findings, json!({"provider": "openai"}))?;
            writeln!(out, "the proposed patch is refused (out of policy):\n{findings}")?;
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}
