//! Operations run for real on the fleet's hosts (docs/fleet.md): `opsgraph demo --real` (the
//! demo's operation, PostgreSQL from the bundled pack) and `opsgraph pack test DIR --fleet` (a
//! pack's templates on fleet hosts, then every evidence check again, as molecule runs a role).
//! Both need root: without it they say so and exit 2, having changed nothing.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use opsgraph_pack::Diagnostic;
use serde_json::{json, Map, Value};

use crate::load::{self, Source};
use crate::plan_cmd;

/// Refuses without root: 2, as `lab fleet` does.
fn needs_root(err: &mut dyn Write) -> anyhow::Result<Option<u8>> {
    if opsgraph_fleet::can_run() {
        return Ok(None);
    }
    writeln!(err, "error[fleet_needs_root]: {}", opsgraph_fleet::Error::NotRoot)?;
    Ok(Some(2))
}

/// A fleet with at least `hosts` hosts in `dir`: the healthy one already up (then `true`), else
/// one built now. The caller decides whether to bring it down.
fn fleet_up(dir: &Path, hosts: usize, err: &mut dyn Write) -> anyhow::Result<(opsgraph_fleet::State, bool)> {
    if let Some((state, health)) = opsgraph_fleet::status(dir)? {
        if health.iter().all(|h| h.healthy()) && state.hosts.len() >= hosts {
            writeln!(err, "using the healthy fleet of {} hosts already up in {}", state.hosts.len(), dir.display())?;
            return Ok((state, true));
        }
    }
    let opts = opsgraph_fleet::Options {
        dir: dir.to_path_buf(),
        hosts,
        cache: crate::fleet_cmd::default_cache(),
        environment: "dev".into(),
    };
    let s = opsgraph_fleet::up(&opts, err).map_err(|e| anyhow::anyhow!("error[{}]: {e}", e.code()))?;
    Ok((s.state, s.existed))
}

/// Brings the fleet down when dropped, unless told to keep it (`--keep`, or it was up before).
struct Down<'a> {
    dir: &'a Path,
    keep: bool,
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if !self.keep {
            let mut log = std::io::stderr();
            if let Err(e) = opsgraph_fleet::down(self.dir, &mut log) {
                let _ = writeln!(log, "error[{}]: fleet down failed: {e}", e.code());
            }
        }
    }
}

/// A data directory for one run: the local users the demo's four eyes need.
fn prepare(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("config.yaml"),
        "# Local users and their roles.\nusers:\n  demo: [operator, sre, platform_admin]\n",
    )?;
    Ok(())
}

/// Writes a file only this user reads (intents may hold secrets).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("write {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// `demo --real`: a fleet (built, or the healthy one reused), PostgreSQL installed on its first
/// host with the bundled pack through the demo's path and live view. The fleet stays up.
pub fn demo(
    data_dir: &Path,
    base: Option<&Path>,
    hosts: usize,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    if let Some(code) = needs_root(err)? {
        return Ok(code);
    }
    let fleet_dir = data_dir.join("fleet");
    let dir = plan_cmd::run_dir(base, "opsgraph-demo");
    prepare(&dir)?;
    writeln!(out, "opsgraph demo --real: PostgreSQL on a real Debian 12 host of a fleet of {hosts}, over SSH")?;
    writeln!(out, "data directory: {}", dir.display())?;
    let (state, existed) = fleet_up(&fleet_dir, hosts, err)?;
    let host = &state.hosts[0];
    writeln!(
        out,
        "fleet of {} hosts {} in {}\n",
        state.hosts.len(),
        if existed { "was already up" } else { "is up" },
        state.dir.display()
    )?;
    // The owner's password: made here, kept in a file only this user reads, never printed.
    let mut bytes = [0u8; 12];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    let password: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let password_file = dir.join("db-password");
    write_private(&password_file, &format!("{password}\n"))?;
    let intent = json!({"intent": {
        "target_resource_type": "postgresql.instance",
        "action": "install",
        "name": "demo-db",
        "environment": "dev",
        "desired_result": format!("PostgreSQL 15 from Debian's archive on {}", host.name),
        "parameters": {
            "source": "debian", "database": "demo", "owner": "demo_app", "db_password": password,
            "listen_addresses": "*", "client_cidr": format!("{}.0/24", opsgraph_fleet::NET),
        },
        "targets": {"target_nodes": [format!("compute_node/{}", host.name)]},
    }});
    let intent_file = dir.join("intent.yaml");
    write_private(&intent_file, &crate::render::to_yaml(&intent, 0))?;
    // Root over SSH on a real host is not for one person alone: a reviewed plan patch puts an
    // SRE's approval before the first job, which the demo's second person gives.
    let patch = dir.join("approval.yaml");
    std::fs::write(
        &patch,
        "plan_patch:\n  reason: root on a real host needs an SRE's approval\n  changes:\n    \
         - add_gate: {id: approve-real-host, type: approval, reason: the jobs run as root over SSH on a real host, \
         options: [approve, cancel operation], required_roles: [sre], before: [install-postgresql-packages]}\n",
    )?;
    let root = dir.join("bundled");
    load::materialize(&root)?;
    let loaded = plan_cmd::load_inputs(
        &Source::Disk(intent_file),
        load::packs(&[Source::Disk(root.join("packs"))]),
        &[Source::Disk(opsgraph_fleet::inventory_path(&state.dir))],
    );
    let loaded = plan_cmd::Loaded { patch: Some(crate::ops_cmd::patch_file(&patch.display().to_string())?), ..loaded };
    let Some((code, id)) = plan_cmd::operate(&dir, &loaded, out, err)? else { return Ok(1) };
    writeln!(out, "\nExplore: opsgraph --data-dir {} describe operation {id}", dir.display())?;
    writeln!(
        out,
        "Connect: PGPASSWORD=\"$(cat {})\" psql -h {} -U demo_app demo",
        password_file.display(),
        host.address
    )?;
    writeln!(
        out,
        "SSH:     ssh -i {} -o UserKnownHostsFile={} root@{}",
        state.dir.join("id_ed25519").display(),
        state.dir.join("known_hosts").display(),
        host.address
    )?;
    writeln!(
        out,
        "The fleet stays up to explore. Tear it down with: opsgraph lab fleet down --dir {}",
        state.dir.display()
    )?;
    Ok(code)
}

/// What `pack test --fleet` is told.
pub struct PackTest<'a> {
    pub dirs: &'a [String],
    pub hosts: Option<usize>,
    pub keep: bool,
    /// `k=v` parameters for every template.
    pub sets: &'a [String],
}

/// A template a fleet can run: every scope is of compute nodes; each gets its own hosts.
struct Runnable<'a> {
    pack: &'a opsgraph_pack::Pack,
    template: &'a opsgraph_model::PlanTemplate,
    /// Scope name and how many hosts, `target_nodes` first.
    scopes: Vec<(String, usize)>,
    parameters: Map<String, Value>,
}

fn runnable<'a>(
    pack: &'a opsgraph_pack::Pack,
    template: &'a opsgraph_model::PlanTemplate,
    sets: &Map<String, Value>,
) -> Result<Option<Runnable<'a>>, String> {
    if template.scopes.is_empty() || template.scopes.values().any(|s| s.resource_type != "compute_node") {
        return Ok(None);
    }
    let mut scopes: Vec<(String, usize)> =
        template.scopes.iter().map(|(n, s)| (n.clone(), s.min.unwrap_or(1).max(1) as usize)).collect();
    scopes.sort_by_key(|(n, _)| n != "target_nodes");
    let mut parameters = Map::new();
    let mut missing = Vec::new();
    for (name, spec) in &template.parameters {
        match (sets.get(name), &spec.default) {
            (Some(v), _) => {
                parameters.insert(name.clone(), v.clone());
            }
            (None, Some(d)) => {
                parameters.insert(name.clone(), d.clone());
            }
            (None, None) if spec.required => missing.push(name.as_str()),
            (None, None) => {}
        }
    }
    if !missing.is_empty() {
        return Err(format!(
            "template {} of pack {} needs {}: give them with --set NAME=VALUE",
            template.id,
            pack.reference(),
            missing.join(", ")
        ));
    }
    Ok(Some(Runnable { pack, template, scopes, parameters }))
}

/// `pack test DIR... --fleet`: each runnable template applied on fleet hosts, then applied again
/// (every job's evidence checked first: a passing check leaves the job alone, a failing one runs
/// it again — not idempotent); a table of job@host results and check@host verdicts; 1 on any
/// failure.
pub fn pack_test(args: &PackTest<'_>, data_dir: &Path, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    if let Some(code) = needs_root(err)? {
        return Ok(code);
    }
    let sources: Vec<Source> = args.dirs.iter().map(|d| Source::parse(d)).collect();
    let (packs, diags) = load::packs(&sources);
    crate::render::report(err, &diags)?;
    if diags.iter().any(Diagnostic::is_error) {
        return Ok(1);
    }
    let mut sets = Map::new();
    for s in args.sets {
        let Some((k, v)) = s.split_once('=') else {
            writeln!(err, "error[pack_test_bad_set]: --set {s}: expected NAME=VALUE")?;
            return Ok(1);
        };
        // A number stays a number (port: 5433), like the same value in an intent file.
        let value = v.parse::<i64>().map(Value::from).unwrap_or_else(|_| Value::from(v));
        sets.insert(k.to_owned(), value);
    }
    let mut runs = Vec::new();
    for pack in &packs {
        for template in &pack.templates {
            match runnable(pack, template, &sets) {
                Ok(Some(r)) => runs.push(r),
                Ok(None) => writeln!(err, "skipped template {}: a scope is not of compute nodes", template.id)?,
                Err(e) => {
                    writeln!(err, "error[pack_test_parameter_missing]: {e}")?;
                    return Ok(1);
                }
            }
        }
    }
    if runs.is_empty() {
        writeln!(
            err,
            "error[pack_test_nothing_to_run]: no template of {} targets compute nodes",
            args.dirs.join(", ")
        )?;
        return Ok(1);
    }
    let needed = runs.iter().map(|r| r.scopes.iter().map(|(_, n)| n).sum::<usize>()).max().unwrap_or(1);
    let hosts = args.hosts.unwrap_or(needed);
    if hosts < needed {
        writeln!(err, "error[pack_test_too_few_hosts]: a template needs {needed} hosts, --hosts is {hosts}")?;
        return Ok(1);
    }
    let fleet_dir = data_dir.join("fleet");
    let (state, existed) = fleet_up(&fleet_dir, hosts, err)?;
    let _down = Down { dir: &state.dir, keep: args.keep || existed };
    let base = plan_cmd::run_dir(Some(data_dir), "opsgraph-pack-test");
    let mut table: Vec<(String, bool)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let dir = base.join(format!("{}-{}", i + 1, r.template.id));
        prepare(&dir)?;
        let mut next = state.hosts.iter();
        let mut targets = Map::new();
        for (scope, n) in &r.scopes {
            let ids: Vec<Value> =
                next.by_ref().take(*n).map(|h| Value::from(format!("compute_node/{}", h.name))).collect();
            targets.insert(scope.clone(), Value::from(ids));
        }
        let intent = json!({"intent": {
            "target_resource_type": r.pack.manifest.resource_types.first().cloned().unwrap_or_default(),
            "action": r.template.action,
            "name": format!("pack-test-{}", r.template.action.replace('_', "-")),
            "environment": "dev",
            "desired_result": format!("template {} on fleet hosts", r.template.id),
            "parameters": r.parameters,
            "targets": targets,
        }});
        let intent_file = dir.join("intent.yaml");
        write_private(&intent_file, &crate::render::to_yaml(&intent, 0))?;
        let load = || {
            plan_cmd::load_inputs(
                &Source::Disk(intent_file.clone()),
                load::packs(&sources),
                &[Source::Disk(opsgraph_fleet::inventory_path(&state.dir))],
            )
        };
        writeln!(out, "== template {} of pack {}: apply", r.template.id, r.pack.reference())?;
        let Some((code, first)) = plan_cmd::operate(&dir, &load(), out, err)? else {
            table.push((format!("template {}: the plan cannot be built", r.template.id), false));
            continue;
        };
        let store = crate::ops_cmd::open_store(&dir)?;
        for j in store.jobs(&first)? {
            let ok = j.state.as_str() == "succeeded";
            let outcome = j.outcome["failure"].as_str().or(j.outcome["outcome"].as_str()).unwrap_or("").to_owned();
            table.push((format!("job    {:<44} {:<10} {outcome}", j.id, j.state.as_str()), ok));
        }
        if code != 0 {
            // Checking again what did not converge proves nothing: the jobs' failures say why.
            continue;
        }
        writeln!(out, "\n== template {}: apply again, every evidence check first", r.template.id)?;
        let second = match plan_cmd::operate(&dir, &load(), out, err) {
            Ok(Some((_, id))) => id,
            Ok(None) => {
                table.push((format!("template {}: the plan cannot be built again", r.template.id), false));
                continue;
            }
            Err(e) => {
                table.push((format!("template {}: applying again failed: {e}", r.template.id), false));
                continue;
            }
        };
        for e in store.evidence(&second)? {
            let check = format!("{}@{}", e.check, e.job.rsplit('@').next().unwrap_or(""));
            let verdict = if e.passed { "pass".to_owned() } else { format!("fail: observed {}", e.observed) };
            table.push((format!("check  {check:<44} {verdict}"), e.passed));
        }
        for j in store.jobs(&second)? {
            let outcome = j.outcome["outcome"].as_str().unwrap_or("");
            if !outcome.contains("evidence") {
                table.push((format!("again  {:<44} ran again ({outcome}): not idempotent", j.id), false));
            }
        }
    }
    writeln!(out, "\nPack test on the fleet:")?;
    for (line, ok) in &table {
        writeln!(out, "  {} {line}", if *ok { "ok  " } else { "FAIL" })?;
    }
    let failures = table.iter().filter(|(_, ok)| !ok).count();
    writeln!(out, "{} of {} passed", table.len() - failures, table.len())?;
    if args.keep || existed {
        writeln!(out, "The fleet stays up. Tear it down with: opsgraph lab fleet down --dir {}", state.dir.display())?;
    }
    Ok(if failures == 0 { 0 } else { 1 })
}
