//! The commands that change operations — `gate answer`, `pause`, `resume`, `cancel`, `retry`,
//! `patch`, `intervene`, `diagnose --propose` — and how a run is followed to its end, written
//! once over a `Control`: the local client (`client.rs`, which drives the run itself) or
//! `opsgraph serve` (`remote.rs`, which watches the server drive it). One implementation and one
//! renderer, so local and remote output are the same bytes by construction.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::bail;
use opsgraph_api::views::exit_code;
use opsgraph_api::{last_seq, root_of, Control, OperationView, PatchReply, PatchRequest};
use opsgraph_core::model::{Intervention, OperationStateKind};

use crate::render::{document, live, print_finish, Output};

/// What a control command asks of a client: the same for the local and the HTTP one (`user` is
/// the local `--as`; a server knows its caller from the token).
#[derive(Clone)]
pub enum Action<'a> {
    Answer { gate: &'a str, operation: Option<&'a str>, option: &'a str, user: &'a str, value: Option<&'a str> },
    Pause(&'a str),
    Resume(&'a str),
    Cancel(&'a str),
    Retry(&'a str, Vec<String>),
}

/// The format machines read (`json`, `yaml`), or `None` for text.
fn machine(output: Output) -> anyhow::Result<Option<&'static str>> {
    match output {
        Output::Text => Ok(None),
        Output::Json => Ok(Some("json")),
        Output::Yaml => Ok(Some("yaml")),
        Output::Dot => bail!("only `plan` draws dot"),
    }
}

/// `gate answer`, `pause`, `resume`, `cancel`, `retry`; then (unless `--no-wait`, and except after
/// a pause or a cancel) the run followed to where it stops. A gate's answer follows the operation
/// at the top of its chain of parents: a child operation is driven by its parent.
pub fn act(
    ctl: &mut dyn Control,
    action: &Action<'_>,
    wait: bool,
    output: Output,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u8> {
    let format = machine(output)?;
    let (id, followed) = match action {
        Action::Answer { operation: Some(id), .. } => (id.to_string(), root_of(ctl.as_client(), id)?),
        Action::Answer { gate, operation: None, .. } => {
            let id = opsgraph_api::find_gate(ctl.as_client(), gate)?;
            let root = root_of(ctl.as_client(), &id)?;
            (id, root)
        }
        Action::Pause(id) | Action::Resume(id) | Action::Cancel(id) | Action::Retry(id, _) => {
            (id.to_string(), id.to_string())
        }
    };
    let follows = wait && !matches!(action, Action::Pause(_) | Action::Cancel(_));
    // Followed from before the change, so what it commits shows too.
    let after = if follows { Some(last_seq(ctl.as_client(), &followed)?) } else { None };
    let mut sink = std::io::sink();
    let text: &mut dyn Write = if format.is_none() { out } else { &mut sink };
    match action {
        Action::Answer { gate, option, user, value, .. } => {
            let reply = ctl.answer(&id, gate, option, value.map(opsgraph_api::gate_value), user)?;
            writeln!(text, "gate {gate} of {id}: {option} (by {})", reply.answered_by)?;
        }
        Action::Pause(_) => {
            ctl.pause(&id)?;
            writeln!(text, "{id}: paused; running jobs finish, no new job starts")?;
        }
        Action::Resume(_) => {
            ctl.resume(&id)?;
        }
        Action::Cancel(_) => {
            ctl.cancel(&id)?;
            writeln!(text, "{id}: cancelled")?;
        }
        Action::Retry(_, jobs) => {
            ctl.retry(&id, jobs)?;
        }
    }
    finish_run(ctl, &followed, after, format, out)
}

/// How `apply` prints: text (`None`: preview, confirmation, live view) or, with `--yes` only, a
/// document once the run stops.
fn apply_format(output: Output, yes: bool) -> anyhow::Result<Option<&'static str>> {
    match output {
        Output::Json | Output::Yaml if !yes => bail!("`apply -o json|yaml` prints no preview to confirm: add --yes"),
        Output::Dot => bail!("`apply` has no dot output; `opsgraph plan -o dot` draws the plan"),
        other => machine(other),
    }
}

/// An operation just created (by `apply`, `rollback`), followed from its first entry to where it
/// stops.
pub fn run_created(
    ctl: &mut dyn Control,
    id: &str,
    format: Option<&str>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u8> {
    if format.is_none() {
        writeln!(out)?;
    }
    finish_run(ctl, id, Some(0), format, out)
}

/// The job instances of an operation's plan, each with its stage's name (the live view's prefix).
fn stages_of(view: &OperationView) -> BTreeMap<String, String> {
    view.stages.iter().flat_map(|s| s.jobs.iter().map(|j| (j.clone(), s.name.clone()))).collect()
}

/// After a change: follows the run from `after` (none: not at all) with the live view, then
/// prints how it ended — for machines (`format`), silently, then the operation's document.
pub fn finish_run(
    ctl: &mut dyn Control,
    id: &str,
    after: Option<i64>,
    format: Option<&str>,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u8> {
    let view = match (after, format) {
        (Some(after), Some(_)) => {
            // The whole document, timeline included, once the run stopped.
            ctl.follow(id, after, &mut |_| {})?;
            ctl.operation(id)?
        }
        (Some(after), None) => {
            let stages = stages_of(&ctl.operation(id)?);
            let mut view = live(out, stages);
            ctl.follow(id, after, &mut view)?
        }
        (None, Some(_)) => ctl.operation(id)?,
        (None, None) => return Ok(0),
    };
    if let Some(format) = format {
        document(&serde_json::to_value(&view)?, format, out)?;
        return Ok(exit_code(view.summary.state));
    }
    let resource = match view.summary.resource.as_deref() {
        Some(r) => ctl.resource(r).ok().map(|r| r.resource),
        None => None,
    };
    print_finish(&view, resource.as_ref(), out)
}

/// The patch `patch` names: a `plan_patch` file (checked here, so both clients refuse a bad one
/// with the same diagnostics) or a remedy of the operation's pack.
pub fn patch_request(file: Option<&str>, remedy: Option<&str>) -> anyhow::Result<PatchRequest> {
    match (file, remedy) {
        (Some(file), _) => {
            let patch = crate::load::patch_file(file)?;
            Ok(PatchRequest::Document { patch, text: crate::load::document_text(file)? })
        }
        (None, Some(id)) => Ok(PatchRequest::Remedy(id.to_string())),
        (None, None) => bail!("name a patch: -f PATCH.yaml or --remedy ID"),
    }
}

/// `patch OP -f PATCH | --remedy ID`, and `diagnose --propose`: the proposal, its review, and the
/// run followed on when it was applied at once.
pub fn patch(
    ctl: &mut dyn Control,
    op: &str,
    request: &PatchRequest,
    wait: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u8> {
    let after = last_seq(ctl.as_client(), op)?;
    let reply = ctl.propose(op, request)?;
    print_patch(op, &reply, out)?;
    if reply.gate.is_some() || !wait {
        return Ok(0);
    }
    finish_run(ctl, op, Some(after), None, out)
}

/// A proposed patch: its diff, the reviewer's findings, and the gate it waits at.
fn print_patch(op: &str, reply: &PatchReply, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(out, "patch {} of {op}:", reply.patch)?;
    write!(out, "{}", reply.diff_text)?;
    crate::render::print_findings(&reply.findings, out)?;
    if let Some(g) = &reply.gate {
        writeln!(
            out,
            "waiting for approval at {g}: opsgraph gate answer {g} --operation {op} --option 'approve patch' --as USER"
        )?;
    }
    Ok(())
}

/// `intervene OP ...`: record, verify, and follow the run on when verified.
pub fn intervene(
    ctl: &mut dyn Control,
    op: &str,
    iv: &Intervention,
    wait: bool,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u8> {
    let after = last_seq(ctl.as_client(), op)?;
    let reply = ctl.intervene(op, iv)?;
    let code = crate::render::print_intervention(&reply, &iv.note, out)?;
    match reply.state {
        OperationStateKind::Running if wait => finish_run(ctl, op, Some(after), None, out),
        _ => Ok(code),
    }
}

/// `diagnose OP [--propose]` with the rules analyzer: what it finds, and the patch of the remedy
/// it matched, proposed by the analyzer.
pub fn diagnose(
    ctl: &mut dyn Control,
    op: &str,
    propose: bool,
    wait: bool,
    output: Output,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<u8> {
    let found = crate::query_cmd::diagnose(ctl.as_client(), op, output, out)?;
    if !propose {
        return Ok(0);
    }
    if !found.iter().any(|d| d.remedy.is_some()) {
        writeln!(out, "nothing to propose: no remedy matches")?;
        return Ok(1);
    }
    patch(ctl, op, &PatchRequest::Analyzer, wait, out)
}

/// Where `apply` gets its preview and creates the operation: this machine (the plan built here
/// from `--packs` and the inventory) or a server (its preview of the intent). The flow around
/// them — confirmation, refusals, the run followed — is [`apply`]'s, the same for both.
pub trait Applier {
    /// Writes the preview to `out` (problems to `err`): `None` when no plan could be built, else
    /// whether it is blocked.
    fn preview(&mut self, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<Option<bool>>;
    /// Before the question: false when the plan may not run (said why on `err`).
    fn may_run(&mut self, _err: &mut dyn Write) -> anyhow::Result<bool> {
        Ok(true)
    }
    /// After a person said yes: false when the plan to run is no longer the one shown.
    fn still_shown(&mut self, _err: &mut dyn Write) -> anyhow::Result<bool> {
        Ok(true)
    }
    /// Creates the operation; its id, and the client that follows its run.
    fn create(self: Box<Self>) -> anyhow::Result<(String, Box<dyn Control>)>;
}

/// `apply -f INTENT`: the preview, refusals, a person's confirmation (unless `--yes`), then the
/// run followed to where it stops.
pub fn apply<'a>(
    mut applier: Box<dyn Applier + 'a>,
    output: Output,
    yes: bool,
    input: &mut dyn std::io::BufRead,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    let format = apply_format(output, yes)?;
    let mut sink = std::io::sink();
    let shown: &mut dyn Write = if format.is_some() { &mut sink } else { out };
    match applier.preview(shown, err)? {
        None => return Ok(1),
        Some(true) => {
            writeln!(err, "nothing applied: a requirement cannot be met")?;
            return Ok(1);
        }
        Some(false) => {}
    }
    if !applier.may_run(err)? {
        return Ok(1);
    }
    // Without `--yes`, a person says yes to the plan shown, and it is still the plan.
    let agreed = yes
        || (crate::render::confirmed("Apply this plan?", "not applied", input, out, err)?
            && applier.still_shown(err)?);
    if !agreed {
        return Ok(1);
    }
    let (id, mut ctl) = applier.create()?;
    run_created(&mut *ctl, &id, format, out)
}
