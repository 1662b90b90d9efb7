//! The dispatcher: each parsed command (`args.rs`) to the function that runs it. Each command
//! writes to the `out`/`err` it is given, so tests run it in-process and compare text.

use std::io::Write;

use anyhow::{bail, Context as _};
use opsgraph_core::pack::Diagnostic;

pub use crate::args::*;
use crate::client::Local;
use crate::load::{self, Source};
pub use crate::render::report;

/// Runs a command; the exit code is 0 for success, 1 when the input has problems.
pub fn run(
    cli: Cli,
    input: &mut dyn std::io::BufRead,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    use crate::control_cmd::{self as run, Action};
    use crate::ops_cmd::{self, Control};
    let data_dir = cli.data_dir.clone().unwrap_or_else(ops_cmd::default_data_dir);
    ops_cmd::use_database(&data_dir, cli.database.clone());
    let control = |world: &WorldArgs| Control {
        data_dir: data_dir.clone(),
        packs: &[],
        world: world.inventory.clone(),
        wait: !world.no_wait,
        output: world.output,
        concurrency: cli.concurrency,
    };
    // A failure file is diagnosed here, without an operation (and without a server).
    if let Command::Diagnose { operation, propose, ai, world } = &cli.command {
        if crate::remedy_cmd::is_failure_file(operation) {
            if *propose || ai != "rules" {
                // Bad input (exit 2), said as JSON too when JSON was asked for.
                let message = "`diagnose FILE` uses the rules analyzer and proposes nothing: --propose and --ai need an operation";
                if matches!(world.output, crate::render::Output::Json) {
                    let v = serde_json::json!({"outcome": "bad_input", "file": operation,
                        "error": {"code": "bad_arguments", "message": message, "diagnostics": []}});
                    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
                } else {
                    writeln!(err, "error: {message}")?;
                }
                return Ok(2);
            }
            return crate::remedy_cmd::diagnose_file(operation, &world.packs, &data_dir, world.output, out, err);
        }
    }
    if let Command::Agent { resources, token, work_dir, parallel, max_tasks } = &cli.command {
        let Some(server) = cli.server.clone().or_else(|| std::env::var("OPSGRAPH_SERVER").ok()) else {
            bail!("`opsgraph agent` needs --server URL (or OPSGRAPH_SERVER)");
        };
        let args = crate::agent_cmd::AgentArgs {
            server,
            token: crate::agent_cmd::token(token.as_deref(), cli.token_file.as_deref())?,
            resources: resources.clone(),
            work_dir: work_dir.clone().unwrap_or_else(|| data_dir.join("agent")),
            parallel: (*parallel).into(),
            max_tasks: *max_tasks,
            wait: std::time::Duration::from_secs(20),
        };
        return crate::agent_cmd::run(args, out);
    }
    // With a server, the commands that read or change operations go through its API: the same
    // commands (`query_cmd`, `control_cmd`) over its client. What only a server does, or only
    // this machine, is told apart here.
    let mut remote = crate::remote::Remote::from_env(cli.server.as_deref(), cli.token_file.as_deref())?;
    if let (Some(_), Command::Apply { plan, yes, plan_hash: None }) = (&remote, &cli.command) {
        if plan.patch.is_none() {
            let applier = crate::remote::RemoteApply::new(remote.take().expect("a server"), &plan.intent)?;
            return run::apply(Box::new(applier), plan.output, *yes, input, out, err);
        }
    }
    if let Some(remote) = remote.as_mut() {
        match &cli.command {
            Command::Plan(p) | Command::Apply { plan: p, .. } if p.patch.is_some() => {
                bail!("--patch customises a plan locally: run it without --server, or patch the operation")
            }
            Command::Plan(p) => return remote.plan(&p.intent, p.output, out),
            Command::Apply { plan_hash: Some(_), .. } => {
                bail!("--plan-hash checks a local preview: run it without --server")
            }
            Command::Patch { dry_run: true, .. } => bail!("`patch --dry-run` reviews locally: run it without --server"),
            Command::Diagnose { operation, propose, ai, .. } if ai != "rules" => {
                return remote.diagnose_ai(operation, *propose, out)
            }
            Command::Token { command: TokenCommand::Create { name, roles } } => {
                return remote.token_create(name, roles, out)
            }
            Command::Token { command: TokenCommand::List } => return remote.token_list(out),
            Command::Token { command: TokenCommand::Revoke { id } } => return remote.token_revoke(id, out),
            Command::Pack { command: PackCommand::Install { path, replace, from: None, .. } } => {
                return remote.pack_install(path, *replace, out)
            }
            Command::Pack { command: PackCommand::Install { path, replace, from: Some(from), trusted_keys } } => {
                // The server fetches and verifies against its own trusted keys.
                if !trusted_keys.is_empty() {
                    bail!("with --server the server's trusted keys decide (`trusted_keys:` in its config.yaml): drop --trusted-key");
                }
                return remote.pack_install_from(from, &path.to_string_lossy(), *replace, out);
            }
            Command::Pack { command: PackCommand::Remove { pack } } => return remote.pack_remove(pack, out),
            Command::Pack { command: PackCommand::List { output } } => return remote.pack_list(output, out, err),
            Command::Resource { command: ResourceCommand::Apply { file } } => {
                return remote.resource_apply(file, out, err)
            }
            Command::Resource { command: ResourceCommand::Delete { id } } => return remote.resource_delete(id, out),
            // Documents, schemas, `pack validate|show`, the demo, secrets and serve act on this
            // machine; reads and changes of operations go on below, over the server's client.
            _ => {}
        }
    }
    // The client that reads: the server's, else the data directory's store.
    let reader = |run: &mut dyn FnMut(&dyn opsgraph_api::Client) -> anyhow::Result<u8>| -> anyhow::Result<u8> {
        match &remote {
            Some(r) => run(r),
            None => {
                let store = ops_cmd::open_store(&data_dir)?;
                run(&Local::new(&*store, &data_dir))
            }
        }
    };
    match cli.command {
        Command::Get { what, operation, output, state, resource, pack, environment } => {
            let query = opsgraph_api::OperationQuery::new(state, resource, pack, environment)
                .map_err(|e| anyhow::anyhow!("--{}: {}", e.parameter, e.message))?;
            reader(&mut |c| crate::query_cmd::get(c, &what, operation.as_deref(), &query, &output, out))
        }
        Command::Describe { what, id, output } => {
            reader(&mut |c| crate::query_cmd::describe(c, &what, &id, &output, out))
        }
        Command::Logs { operation, job, output, follow: false } => {
            reader(&mut |c| crate::query_cmd::logs(c, &operation, job.as_deref(), output, out))
        }
        Command::Logs { operation, job, output, follow: true } => {
            if output != crate::render::Output::Text {
                bail!("`logs --follow` prints text");
            }
            let job = job.context("`logs --follow` needs JOB: the id of one job instance (as `get jobs` lists)")?;
            reader(&mut |c| crate::query_cmd::follow_log(c, &operation, &job, out))
        }
        Command::Audit { actor, operation, resource, since, output } => {
            // The server checks and converts `since` the same way (`GET /api/v1/audit`).
            let since = match since {
                None => None,
                Some(s) => Some(
                    opsgraph_store::normalize_time(&s)
                        .with_context(|| format!("--since {s}: an RFC 3339 time is expected (2026-12-01T00:00:00Z)"))?,
                ),
            };
            let filter = opsgraph_store::AuditFilter { actor, operation, resource, since };
            reader(&mut |c| crate::query_cmd::audit(c, &filter, &output, out))
        }
        Command::Gate { command: GateCommand::Answer { gate, operation, option, user, value, world } } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            let action = Action::Answer {
                gate: &gate,
                operation: operation.as_deref(),
                option: &option,
                user: &user,
                value: value.as_deref(),
            };
            let mut ctl = controller(remote, &c, &ops_cmd::local_actor(None))?;
            run::act(&mut *ctl, &action, c.wait, c.output, out)
        }
        Command::Pause { operation, output } => {
            let world = WorldArgs { packs: vec![], inventory: vec![], no_wait: true, output };
            let mut ctl = controller(remote, &control(&world), &ops_cmd::local_actor(None))?;
            run::act(&mut *ctl, &Action::Pause(&operation), false, output, out)
        }
        Command::Resume { operation, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            let mut ctl = controller(remote, &c, &ops_cmd::local_actor(None))?;
            run::act(&mut *ctl, &Action::Resume(&operation), c.wait, c.output, out)
        }
        Command::Cancel { operation, output } => {
            let world = WorldArgs { packs: vec![], inventory: vec![], no_wait: true, output };
            let mut ctl = controller(remote, &control(&world), &ops_cmd::local_actor(None))?;
            run::act(&mut *ctl, &Action::Cancel(&operation), false, output, out)
        }
        Command::Retry { operation, job, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            let mut ctl = controller(remote, &c, &ops_cmd::local_actor(None))?;
            run::act(&mut *ctl, &Action::Retry(&operation, job.into_iter().collect()), c.wait, c.output, out)
        }
        Command::Patch { operation, file, remedy, user, dry_run, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            let request = run::patch_request(file.as_deref(), remedy.as_deref())?;
            if dry_run {
                return ops_cmd::patch_dry_run(&c, &operation, &request, out);
            }
            let mut ctl = controller(remote, &c, &ops_cmd::local_actor(user.as_deref()))?;
            run::patch(&mut *ctl, &operation, &request, c.wait, out)
        }
        Command::Diagnose { operation, propose, ai, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            if ai == "openai" {
                return ops_cmd::diagnose_openai(&c, &operation, propose, out);
            }
            let mut ctl = controller(remote, &c, &ops_cmd::local_actor(None))?;
            run::diagnose(&mut *ctl, &operation, propose, c.wait, world.output, out)
        }
        Command::Intervene { operation, file, stage, job, note, verify, user, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            let iv = match file {
                Some(f) => ops_cmd::intervention_file(&f)?,
                None => opsgraph_core::model::Intervention {
                    type_: opsgraph_core::model::InterventionType::ManuallyFixed,
                    operation: Some(operation.clone()),
                    target_stage: stage,
                    target_job: job,
                    actor: user.clone(),
                    note: note.unwrap_or_default(),
                    requires_verification: verify,
                },
            };
            let actor = ops_cmd::local_actor(user.as_deref().or(iv.actor.as_deref()));
            let mut ctl = controller(remote, &c, &actor)?;
            run::intervene(&mut *ctl, &operation, &iv, c.wait, out)
        }
        Command::Verify { resource, user, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            let mut ctl = controller(remote, &c, &ops_cmd::local_actor(user.as_deref()))?;
            crate::verify_cmd::verify(&mut *ctl, &resource, world.output, out)
        }
        Command::Rollback { operation, yes, world } => {
            let c = Control { packs: &world.packs, ..control(&world) };
            ops_cmd::rollback(&c, &operation, yes, input, out, err)
        }
        Command::Apply { plan, yes, plan_hash } => {
            let output = plan.output;
            let actor = ops_cmd::local_actor(None);
            let args = ops_cmd::ApplyArgs {
                intent: &plan.intent,
                packs: &plan.packs,
                world: plan.inventory.iter().chain(&plan.policy).cloned().collect(),
                data_dir,
                yes,
                actor,
                output,
                concurrency: cli.concurrency,
                patch: plan.patch.as_deref(),
                plan_hash: plan_hash.as_deref(),
            };
            ops_cmd::apply(&args, input, out, err)
        }
        Command::Validate { files, packs } => {
            let sources: Vec<Source> = files.iter().map(|f| Source::parse(f)).collect();
            let (docs, mut diags) = load::documents(&sources);
            diags.extend(crate::plan_cmd::check_intents(&docs, &packs, &data_dir)?);
            let n = docs.len();
            report(err, &diags)?;
            if diags.iter().any(Diagnostic::is_error) {
                return Ok(1);
            }
            writeln!(out, "ok: {n} document{} valid", if n == 1 { "" } else { "s" })?;
            Ok(0)
        }
        Command::Schema { markdown: true, .. } => {
            write!(out, "{}", opsgraph_core::pack::markdown_reference())?;
            Ok(0)
        }
        Command::Schema { kind: Some(k), markdown: false } if k == "diagnosis" => {
            writeln!(out, "{}", serde_json::to_string_pretty(&crate::remedy_cmd::diagnosis_schema())?)?;
            Ok(0)
        }
        Command::Schema { kind, markdown: false } => {
            let schema = opsgraph_core::pack::json_schema(kind.as_deref()).with_context(|| {
                format!(
                    "unknown kind `{}`; expected one of {}",
                    kind.clone().unwrap_or_default(),
                    opsgraph_core::pack::kinds().collect::<Vec<_>>().join(", ")
                )
            })?;
            writeln!(out, "{}", serde_json::to_string_pretty(&schema)?)?;
            Ok(0)
        }
        Command::Pack { command: PackCommand::Validate { dirs } } => {
            let sources: Vec<Source> = dirs.iter().map(|d| Source::parse(d)).collect();
            let (packs, diags) = load::packs(&sources);
            report(err, &diags)?;
            if diags.iter().any(Diagnostic::is_error) {
                return Ok(1);
            }
            for p in &packs {
                writeln!(
                    out,
                    "ok: pack {}@{} {} ({} templates, {} jobs, {} evidence checks, {} artifacts, {} remedies)",
                    p.manifest.id,
                    p.manifest.version,
                    p.digest,
                    p.templates.len(),
                    p.jobs.len(),
                    p.evidence.len(),
                    p.artifacts.len(),
                    p.remedies.len()
                )?;
            }
            Ok(0)
        }
        Command::Pack { command: PackCommand::Test { dirs, fleet: false, .. } } => {
            crate::remedy_cmd::pack_test(&dirs, out, err)
        }
        Command::Pack { command: PackCommand::Test { dirs, fleet: true, hosts, keep, sets, templates } } => {
            let args = crate::fleet_run::PackTest { dirs: &dirs, hosts, keep, sets: &sets, templates: &templates };
            crate::fleet_run::pack_test(&args, &data_dir, out, err)
        }
        Command::Pack { command: PackCommand::Install { path, replace, from: None, .. } } => {
            let actor = ops_cmd::local_actor(None);
            crate::pack_cmd::install(&data_dir, &path, replace, &actor, out)
        }
        Command::Pack { command: PackCommand::Install { path, replace, from: Some(from), trusted_keys } } => {
            let actor = ops_cmd::local_actor(None);
            let reference = path.to_string_lossy();
            let done = crate::pack_cmd::install_from(&data_dir, &from, &reference, &trusted_keys, replace, &actor, out);
            crate::catalogue::report(done, err)
        }
        Command::Pack { command: PackCommand::Search { term, from, output } } => {
            crate::catalogue::report(crate::catalogue::search(&from, term.as_deref(), &output, out), err)
        }
        Command::Pack { command: PackCommand::Index { dir } } => crate::catalogue::index(&dir, out),
        Command::Pack { command: PackCommand::List { output } } => crate::pack_cmd::list(&data_dir, &output, out, err),
        Command::Pack { command: PackCommand::Show { pack, output } } => {
            crate::pack_cmd::show(&data_dir, &pack, &output, out, err)
        }
        Command::Pack { command: PackCommand::Remove { pack } } => {
            crate::pack_cmd::remove(&data_dir, &pack, &ops_cmd::local_actor(None), out)
        }
        Command::Plan(args) => crate::plan_cmd::plan(&args, &data_dir, out, err),
        Command::Demo { real: true, hosts, .. } => {
            crate::fleet_run::demo(&data_dir, cli.data_dir.as_deref(), hosts, out, err)
        }
        Command::Demo { keep, .. } => crate::demo_cmd::demo(cli.data_dir.as_deref(), keep, out, err),
        Command::Lab { command: LabCommand::Fleet { command } } => crate::fleet_cmd::run(&data_dir, command, out, err),
        Command::Secrets { command } => ops_cmd::secrets(&data_dir, &command, out),
        Command::Serve { listen, packs, inventory, agents } => {
            crate::serve_cmd::serve(&data_dir, listen, &packs, &inventory, &agents, cli.concurrency, out)
        }
        Command::Agent { .. } => unreachable!("handled above"),
        Command::Resource { command } => {
            let actor = ops_cmd::local_actor(None);
            match command {
                ResourceCommand::Apply { file } => crate::resource_cmd::apply(&data_dir, &file, &actor, out, err),
                ResourceCommand::Delete { id } => crate::resource_cmd::delete(&data_dir, &id, &actor, out),
            }
        }
        Command::Token { command: TokenCommand::Create { name, roles } } => {
            crate::serve_cmd::token_create(&data_dir, &name, &roles, out)
        }
        Command::Token { command: TokenCommand::List } => crate::serve_cmd::token_list(&data_dir, out),
        Command::Token { command: TokenCommand::Revoke { id } } => crate::serve_cmd::token_revoke(&data_dir, &id, out),
    }
}

/// The client that changes operations: the server's, else a runtime over the data directory
/// acting as `actor`.
fn controller(
    remote: Option<crate::remote::Remote>,
    c: &crate::ops_cmd::Control<'_>,
    actor: &str,
) -> anyhow::Result<Box<dyn opsgraph_api::Control>> {
    Ok(match remote {
        Some(r) => Box::new(r),
        None => Box::new(c.client(actor)?),
    })
}
