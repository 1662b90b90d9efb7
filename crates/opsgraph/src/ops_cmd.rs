//! The local halves of commands that run operations: `apply` (the preview built here), `patch
//! --dry-run`, `rollback`, `diagnose --ai openai`, `secrets`, and the runtime the local client
//! changes operations through (the changes themselves are `control_cmd`'s, for both clients).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use opsgraph_runtime::Runtime;
use serde_json::Value;

pub use crate::client::{local_actor, roles_of};
pub use crate::control_cmd::Action;
use crate::load::{self, Source};
use crate::plan_cmd;

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

pub use crate::client::drive;

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
pub(crate) fn runtime(
    data_dir: &Path,
    packs: &[String],
    world: &[String],
    concurrency: Option<u16>,
) -> anyhow::Result<Runtime> {
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
    rt.plan_world = Some(opsgraph_runtime::PlanWorld {
        providers: world.providers,
        policy: world.policy,
        operations: world.operations,
    });
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

/// `apply` on this machine: the plan built here from the packs and inventory, as `plan` builds it.
pub fn apply(
    args: &ApplyArgs<'_>,
    input: &mut dyn BufRead,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let (output, yes) = (args.output, args.yes);
    // The guardian of the jobs this command starts (`opsgraph_exec::start_guardian`) starts
    // beside the loading, the preview and the store's creation, instead of before the first job.
    if yes {
        std::thread::spawn(|| {
            let _ = opsgraph_exec::start_guardian();
        });
    }
    let applier = LocalApply { loaded: LocalApply::assemble(args)?, args, plan: None };
    crate::control_cmd::apply(Box::new(applier), output, yes, input, out, err)
}

/// The local half of `apply`.
struct LocalApply<'a, 'b> {
    args: &'a ApplyArgs<'b>,
    loaded: plan_cmd::Loaded,
    /// The plan previewed.
    plan: Option<opsgraph_core::plan::Plan>,
}

impl LocalApply<'_, '_> {
    /// The world as `plan` sees it (one function for both).
    fn assemble(args: &ApplyArgs<'_>) -> anyhow::Result<plan_cmd::Loaded> {
        let world: Vec<Source> = args.world.iter().map(|p| Source::parse(p)).collect();
        let packs = load_packs(args.packs, &args.data_dir, true)?;
        let mut loaded = plan_cmd::assemble(&Source::parse(args.intent), packs, &world, &args.data_dir)?;
        loaded.patch = args.patch.map(patch_file).transpose()?;
        loaded.roles = plan_cmd::local_roles(&args.data_dir, &args.actor);
        Ok(loaded)
    }
}

impl crate::control_cmd::Applier for LocalApply<'_, '_> {
    fn preview(&mut self, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<Option<bool>> {
        self.plan = plan_cmd::preview_to(&self.loaded, crate::render::Output::Text, out, err)?;
        Ok(self.plan.as_ref().map(|p| p.is_blocked()))
    }

    /// Preview = run: the plan that runs is the plan a person saw (`--plan-hash`), or nothing runs.
    fn may_run(&mut self, err: &mut dyn Write) -> anyhow::Result<bool> {
        let (Some(previewed), Some(plan)) = (self.args.plan_hash, &self.plan) else { return Ok(true) };
        if let Err(e) = opsgraph_core::plan::check_preview(previewed, plan) {
            writeln!(err, "error[{}]: {e}", e.code())?;
            return Ok(false);
        }
        Ok(true)
    }

    /// The world may have changed while the question was open: built again, the plan must be
    /// the one shown.
    fn still_shown(&mut self, err: &mut dyn Write) -> anyhow::Result<bool> {
        let Some(plan) = &self.plan else { return Ok(false) };
        let again = LocalApply::assemble(self.args)?;
        let rebuilt =
            plan_cmd::preview_to(&again, crate::render::Output::Text, &mut std::io::sink(), &mut std::io::sink())?;
        let check = match &rebuilt {
            Some(now) => opsgraph_core::plan::check_preview(&plan.revision.hash, now),
            None => Err(opsgraph_core::plan::Error::StalePreview {
                previewed: plan.revision.hash.clone(),
                now: "not buildable".into(),
            }),
        };
        if let Err(e) = check {
            writeln!(err, "error[{}]: {e}", e.code())?;
            return Ok(false);
        }
        self.plan = rebuilt;
        self.loaded = again;
        Ok(true)
    }

    fn create(self: Box<Self>) -> anyhow::Result<(String, Box<dyn opsgraph_api::Control>)> {
        let (args, loaded) = (self.args, self.loaded);
        let plan = self.plan.context("nothing was previewed")?;
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
        let mut audit = vec![opsgraph_runtime::audit::create(&args.actor, &id, &plan, None)];
        audit.extend(opsgraph_runtime::audit::customizations(&args.actor, &id, &plan));
        rt.attach(audit);
        // Driven at once (`run_created`), and nothing of it is printed before the drive's first
        // commit: its creation is made durable by the drive (one `fsync` fewer before the first
        // job, issue [N] 5).
        let durable = opsgraph_runtime::Durable::ByItsDrive;
        let id = rt.create_durable(&id, &plan, &args.actor, durable, &mut |_| {})?;
        Ok((id, Box::new(crate::client::LocalControl::new(rt, &args.actor))))
    }
}

/// Drives an operation with the live view, then prints how it ended; the runtime back.
pub fn drive_and_finish(rt: Runtime, id: &str, out: &mut (dyn Write + Send)) -> anyhow::Result<(u8, Runtime)> {
    let after = opsgraph_api::last_seq(&crate::client::Local::of(&rt), id)?;
    let mut ctl = crate::client::LocalControl::new(rt, &local_actor(None));
    let code = crate::control_cmd::finish_run(&mut ctl, id, Some(after), None, out)?;
    Ok((code, ctl.rt))
}

pub struct Control<'a> {
    pub data_dir: PathBuf,
    pub packs: &'a [String],
    pub world: Vec<String>,
    pub wait: bool,
    pub output: crate::render::Output,
    pub concurrency: Option<u16>,
}

impl Control<'_> {
    /// The local client that changes operations, acting as `actor`.
    pub fn client(&self, actor: &str) -> anyhow::Result<crate::client::LocalControl> {
        Ok(crate::client::LocalControl::new(runtime(&self.data_dir, self.packs, &self.world, self.concurrency)?, actor))
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

/// `patch OP ... --dry-run`: the review alone, here, against the operation's plan; nothing
/// changes.
pub fn patch_dry_run(
    c: &Control<'_>,
    operation: &str,
    request: &opsgraph_api::PatchRequest,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let op = rt.store().operation(operation)?.with_context(|| format!("no operation `{operation}`"))?;
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
    let patch = match request {
        opsgraph_api::PatchRequest::Document { patch, .. } => patch.clone(),
        opsgraph_api::PatchRequest::Remedy(id) => rt.remedy_patch(operation, id)?,
        opsgraph_api::PatchRequest::Analyzer => rt.analyzer_patch(operation)?,
    };
    match opsgraph_core::plan::patch::apply_patch(&plan, pack, &patch) {
        Ok(p) => {
            write!(out, "{}", p.diff.text())?;
            crate::render::print_findings(&p.findings, out)?;
            writeln!(out, "(dry run: nothing changed)")?;
            Ok(0)
        }
        Err(findings) => {
            crate::render::print_findings(&findings, out)?;
            Ok(1)
        }
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

/// `rollback OP`: preview the plan that undoes it, confirm, run it as a new operation.
pub fn rollback(
    c: &Control<'_>,
    op: &str,
    yes: bool,
    input: &mut dyn BufRead,
    out: &mut (dyn Write + Send),
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
    let id = rt.start_rollback(op, &rb, &actor)?;
    let mut ctl = crate::client::LocalControl::new(rt, &actor);
    crate::control_cmd::run_created(&mut ctl, &id, None, out)
}

/// The AI analyzer's endpoint: `ai:` of `DATA_DIR/config.yaml`, read by the runtime's one
/// parser, as the server reads it.
pub fn ai_endpoint(data_dir: &Path) -> anyhow::Result<opsgraph_runtime::ai::Endpoint> {
    let path = data_dir.join("config.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let docs = opsgraph_core::pack::yaml::parse_stream(&text)
        .map_err(|e| anyhow::anyhow!("{}:{}: {}", path.display(), e.pos.line, e.message))?;
    let config = docs.first().map(opsgraph_core::pack::shape::to_json).unwrap_or(Value::Null);
    opsgraph_runtime::ai::Endpoint::from_config(&config)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        .with_context(|| format!("the openai analyzer is configured in {} (`ai: {{url, model}}`)", path.display()))
}

/// `diagnose OP --ai openai [--propose]`: the endpoint's answer, checked, its patch reviewed
/// (and with `--propose`, proposed); refusals recorded (`opsgraph_runtime::ai`).
pub fn diagnose_openai(c: &Control<'_>, op: &str, propose: bool, out: &mut (dyn Write + Send)) -> anyhow::Result<u8> {
    use opsgraph_runtime::Error;
    let mut rt = runtime(&c.data_dir, c.packs, &c.world, c.concurrency)?;
    let endpoint = ai_endpoint(&c.data_dir)?;
    let after = opsgraph_api::last_seq(&crate::client::Local::of(&rt), op)?;
    let asked = if propose {
        rt.ai_answer(op, &endpoint).and_then(|a| rt.ai_propose(op, &a).map(|p| (a, None, p)))
    } else {
        rt.ai_diagnose(op, &endpoint).map(|d| (d.answer, d.review, None))
    };
    let (answer, review, proposal) = match asked {
        Ok(found) => found,
        Err(Error::Ai { code: "ai_answer_refused", message }) => {
            writeln!(out, "{message}")?;
            return Ok(1);
        }
        Err(Error::PatchRefused(findings)) => {
            writeln!(out, "the proposed patch is refused (out of policy):\n{findings}")?;
            return Ok(1);
        }
        Err(e) => return Err(e.into()),
    };
    writeln!(out, "Diagnosis (openai analyzer, confidence {:.1})", answer.confidence)?;
    writeln!(out, "  {}", answer.summary)?;
    writeln!(out, "  cause: {}", answer.cause)?;
    writeln!(out, "  based on: {}", answer.evidence.join("; "))?;
    if let Some(r) = &answer.remedy {
        writeln!(out, "  remedy: {r} ({})", if answer.from_library { "library" } else { "pack" })?;
    }
    match review {
        Some(Ok(findings)) => {
            writeln!(out, "Its patch passes the review (propose it with --propose):")?;
            crate::render::print_findings(&findings, out)?;
        }
        Some(Err(findings)) => {
            writeln!(out, "Its patch is refused by the review (out of policy):")?;
            crate::render::print_findings(&findings, out)?;
            return Ok(1);
        }
        None => {}
    }
    let Some(p) = proposal else { return Ok(0) };
    writeln!(out, "patch {} proposed by {}:", p.patch, opsgraph_runtime::ANALYZER_AUTHOR)?;
    write!(out, "{}", p.diff.text())?;
    if let Some(g) = &p.gate {
        writeln!(
            out,
            "waiting for approval at {g}: opsgraph gate answer {g} --operation {op} --option 'approve patch' --as USER"
        )?;
        return Ok(0);
    }
    // Within the AI policy: applied without a person; the run goes on.
    writeln!(out, "applied without approval: every change is within ai_policy")?;
    if c.wait {
        let mut ctl = crate::client::LocalControl::new(rt, &local_actor(None));
        return crate::control_cmd::finish_run(&mut ctl, op, Some(after), None, out);
    }
    Ok(0)
}
