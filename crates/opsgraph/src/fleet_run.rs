//! Operations run for real on the fleet's hosts (docs/fleet.md): `opsgraph demo --real` (the
//! demo's operation, PostgreSQL from the bundled pack) and `opsgraph pack test DIR --fleet` (a
//! pack's templates on fleet hosts, then every evidence check again, as molecule runs a role).
//! Both need root: without it they say so and exit 2, having changed nothing.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use opsgraph_core::pack::Diagnostic;
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

/// `demo --real`: a fleet (built, or the healthy one reused), PostgreSQL installed with the bundled
/// pack through the demo's path and live view: on one host alone, or with two or more hosts a
/// primary on the first and a streaming replica on each other. The fleet stays up.
pub fn demo(
    data_dir: &Path,
    base: Option<&Path>,
    hosts: usize,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
    if let Some(code) = needs_root(err)? {
        return Ok(code);
    }
    let fleet_dir = data_dir.join("fleet");
    let dir = crate::demo_cmd::run_dir(base, "opsgraph-demo");
    prepare(&dir)?;
    let what = if hosts > 1 { "a primary and streaming replicas" } else { "a real Debian 12 host" };
    writeln!(out, "opsgraph demo --real: PostgreSQL on {what} of a fleet of {hosts}, over SSH")?;
    writeln!(out, "data directory: {}", dir.display())?;
    let (state, existed) = fleet_up(&fleet_dir, hosts, err)?;
    let host = &state.hosts[0];
    let replicas: Vec<&opsgraph_fleet::HostState> = state.hosts.iter().skip(1).take(hosts.saturating_sub(1)).collect();
    writeln!(
        out,
        "fleet of {} hosts {} in {}\n",
        state.hosts.len(),
        if existed { "was already up" } else { "is up" },
        state.dir.display()
    )?;
    // The passwords: made here, kept in files only this user reads, never printed.
    let password = random_hex()?;
    let password_file = dir.join("db-password");
    write_private(&password_file, &format!("{password}\n"))?;
    let net = format!("{}.0/24", opsgraph_fleet::NET);
    let mut parameters = json!({
        "source": "debian", "database": "demo", "owner": "demo_app", "db_password": password,
        "listen_addresses": "*", "client_cidr": net,
    });
    let (action, desired, first_job) = if replicas.is_empty() {
        ("install", format!("PostgreSQL 15 from Debian's archive on {}", host.name), "install-postgresql-packages")
    } else {
        let replication = random_hex()?;
        write_private(&dir.join("replication-password"), &format!("{replication}\n"))?;
        parameters["primary_host"] = json!(host.address);
        parameters["replica_cidr"] = json!(net);
        parameters["replication_password"] = json!(replication);
        let names: Vec<&str> = replicas.iter().map(|h| h.name.as_str()).collect();
        (
            "install_replicated",
            format!("PostgreSQL 15: the primary on {}, streaming replicas on {}", host.name, names.join(", ")),
            "install-postgresql-packages, install-replica-packages",
        )
    };
    let mut targets = json!({"target_nodes": [format!("compute_node/{}", host.name)]});
    if !replicas.is_empty() {
        targets["replica_nodes"] =
            json!(replicas.iter().map(|h| format!("compute_node/{}", h.name)).collect::<Vec<_>>());
    }
    let intent = json!({"intent": {
        "target_resource_type": "postgresql.instance",
        "action": action,
        "name": "demo-db",
        "environment": "dev",
        "desired_result": desired,
        "parameters": parameters,
        "targets": targets,
    }});
    let intent_file = dir.join("intent.yaml");
    write_private(&intent_file, &crate::render::to_yaml(&intent, 0))?;
    // Root over SSH on a real host is not for one person alone: a reviewed plan patch puts an
    // SRE's approval before the first job, which the demo's second person gives.
    let patch = dir.join("approval.yaml");
    std::fs::write(
        &patch,
        format!(
            "plan_patch:\n  reason: root on a real host needs an SRE's approval\n  changes:\n    \
         - add_gate: {{id: approve-real-host, type: approval, reason: the jobs run as root over SSH on a real host, \
         options: [approve, cancel operation], required_roles: [sre], before: [{first_job}]}}\n"
        ),
    )?;
    let root = dir.join("bundled");
    load::materialize(&root)?;
    let loaded = plan_cmd::load_inputs(
        &Source::Disk(intent_file),
        load::packs(&[Source::Disk(root.join("packs"))]),
        &[Source::Disk(opsgraph_fleet::inventory_path(&state.dir))],
    );
    let loaded = plan_cmd::Loaded { patch: Some(crate::ops_cmd::patch_file(&patch.display().to_string())?), ..loaded };
    let Some((code, id)) = crate::demo_cmd::operate(&dir, &loaded, out, err)? else { return Ok(1) };
    writeln!(out, "\nExplore: opsgraph --data-dir {} describe operation {id}", dir.display())?;
    writeln!(
        out,
        "Connect: PGPASSWORD=\"$(cat {})\" psql -h {} -U demo_app demo",
        password_file.display(),
        host.address
    )?;
    for r in &replicas {
        writeln!(
            out,
            "Replica: PGPASSWORD=\"$(cat {})\" psql -h {} -U demo_app demo   (read-only, streaming from {})",
            password_file.display(),
            r.address,
            host.name
        )?;
    }
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

/// 24 hex digits from the kernel's random source: a password made for the demo.
fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 12];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `pack test --fleet` is told.
pub struct PackTest<'a> {
    pub dirs: &'a [String],
    pub hosts: Option<usize>,
    pub keep: bool,
    /// `k=v` parameters for every template; `{address:SCOPE}`… placeholders in the values.
    pub sets: &'a [String],
    /// Only these templates (empty: every runnable one).
    pub templates: &'a [String],
}

/// A `--set` value with its host placeholders filled from the hosts each scope got:
/// `{address:SCOPE}` the first host's address, `{addresses:SCOPE}` every address joined with
/// `,`, `{members:SCOPE}` `name=address` pairs joined with `,`. Anything else in braces stays.
fn fill_hosts(value: &str, hosts: &BTreeMap<String, Vec<(String, String)>>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let Some(end) = tail.find('}') else {
            rest = tail;
            break;
        };
        let inner = &tail[1..end];
        let filled = match inner.split_once(':') {
            Some((kind @ ("address" | "addresses" | "members"), scope)) => {
                let Some(list) = hosts.get(scope) else {
                    let known: Vec<&str> = hosts.keys().map(String::as_str).collect();
                    return Err(format!(
                        "{{{inner}}}: no scope `{scope}` (the template's scopes and targets: {})",
                        known.join(", ")
                    ));
                };
                let items: Vec<String> = match kind {
                    "address" => list.iter().take(1).map(|(_, a)| a.clone()).collect(),
                    "addresses" => list.iter().map(|(_, a)| a.clone()).collect(),
                    _ => list.iter().map(|(n, a)| format!("{n}={a}")).collect(),
                };
                items.join(",")
            }
            _ => tail[..=end].to_owned(),
        };
        out.push_str(&filled);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A template a fleet can run: every scope is of compute nodes; each intent target its scopes
/// read (`from: targets.NAME`) gets its own hosts.
struct Runnable<'a> {
    pack: &'a opsgraph_core::pack::Pack,
    template: &'a opsgraph_core::model::PlanTemplate,
    /// Intent target and how many hosts (the most any scope reading it alone needs, at least
    /// one), `target_nodes` first.
    targets: Vec<(String, usize)>,
    parameters: Map<String, Value>,
}

impl Runnable<'_> {
    /// The hosts behind each name a placeholder may use: every target, and every scope (the
    /// union of the targets it reads; a scope that names none reads them all).
    fn hosts_by_name(
        &self,
        given: &BTreeMap<String, Vec<(String, String)>>,
    ) -> BTreeMap<String, Vec<(String, String)>> {
        let mut named = given.clone();
        for (scope, spec) in &self.template.scopes {
            let keys: Vec<&str> = spec.from.iter().filter_map(|f| f.strip_prefix("targets.")).collect();
            let hosts = given
                .iter()
                .filter(|(k, _)| keys.is_empty() || keys.contains(&k.as_str()))
                .flat_map(|(_, h)| h.iter().cloned())
                .collect();
            named.insert(scope.clone(), hosts);
        }
        named
    }
}

fn runnable<'a>(
    pack: &'a opsgraph_core::pack::Pack,
    template: &'a opsgraph_core::model::PlanTemplate,
    sets: &Map<String, Value>,
) -> Result<Option<Runnable<'a>>, String> {
    if template.scopes.is_empty() || template.scopes.values().any(|s| s.resource_type != "compute_node") {
        return Ok(None);
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for spec in template.scopes.values() {
        let keys: Vec<&str> = spec.from.iter().filter_map(|f| f.strip_prefix("targets.")).collect();
        let min = if keys.len() == 1 { spec.min.unwrap_or(1).max(1) as usize } else { 1 };
        for k in keys {
            let n = counts.entry(k.to_owned()).or_insert(1);
            *n = (*n).max(min);
        }
    }
    if counts.is_empty() {
        counts.insert("target_nodes".to_owned(), 1);
    }
    let mut targets: Vec<(String, usize)> = counts.into_iter().collect();
    targets.sort_by_key(|(n, _)| n != "target_nodes");
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
    Ok(Some(Runnable { pack, template, targets, parameters }))
}

/// `pack test DIR... --fleet`: each runnable template applied on fleet hosts, then applied again
/// (every job's evidence checked first: a passing check leaves the job alone, a failing one runs
/// it again — not idempotent); a table of job@host results and check@host verdicts; 1 on any
/// failure.
pub fn pack_test(
    args: &PackTest<'_>,
    data_dir: &Path,
    out: &mut (dyn Write + Send),
    err: &mut dyn Write,
) -> anyhow::Result<u8> {
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
    let known: Vec<&str> = packs.iter().flat_map(|p| p.templates.iter().map(|t| t.id.as_str())).collect();
    if let Some(unknown) = args.templates.iter().find(|t| !known.contains(&t.as_str())) {
        writeln!(err, "error[pack_test_unknown_template]: no template {unknown}; the packs have {}", known.join(", "))?;
        return Ok(1);
    }
    let mut runs = Vec::new();
    for pack in &packs {
        for template in &pack.templates {
            if !args.templates.is_empty() && !args.templates.contains(&template.id) {
                continue;
            }
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
    // Placeholders naming a scope the template does not have are refused before any host is built.
    for r in &runs {
        let given = r.targets.iter().map(|(t, _)| (t.clone(), vec![(String::new(), String::new())])).collect();
        let names = r.hosts_by_name(&given);
        if let Some(e) = r.parameters.values().filter_map(Value::as_str).find_map(|v| fill_hosts(v, &names).err()) {
            writeln!(err, "error[pack_test_bad_set]: template {}: {e}", r.template.id)?;
            return Ok(1);
        }
    }
    let needed = runs.iter().map(|r| r.targets.iter().map(|(_, n)| n).sum::<usize>()).max().unwrap_or(1);
    let hosts = args.hosts.unwrap_or(needed);
    if hosts < needed {
        writeln!(err, "error[pack_test_too_few_hosts]: a template needs {needed} hosts, --hosts is {hosts}")?;
        return Ok(1);
    }
    let fleet_dir = data_dir.join("fleet");
    let (state, existed) = fleet_up(&fleet_dir, hosts, err)?;
    let _down = Down { dir: &state.dir, keep: args.keep || existed };
    let base = crate::demo_cmd::run_dir(Some(data_dir), "opsgraph-pack-test");
    let mut table: Vec<(String, bool)> = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let dir = base.join(format!("{}-{}", i + 1, r.template.id));
        prepare(&dir)?;
        let mut next = state.hosts.iter();
        let mut targets = Map::new();
        let mut given = BTreeMap::new();
        for (target, n) in &r.targets {
            let hosts: Vec<&opsgraph_fleet::HostState> = next.by_ref().take(*n).collect();
            let ids: Vec<Value> = hosts.iter().map(|h| Value::from(format!("compute_node/{}", h.name))).collect();
            targets.insert(target.clone(), Value::from(ids));
            given.insert(target.clone(), hosts.iter().map(|h| (h.name.clone(), h.address.clone())).collect());
        }
        let names = r.hosts_by_name(&given);
        let mut parameters = r.parameters.clone();
        for value in parameters.values_mut() {
            if let Value::String(text) = value {
                match fill_hosts(text, &names) {
                    Ok(filled) => *text = filled,
                    Err(e) => {
                        writeln!(err, "error[pack_test_bad_set]: template {}: {e}", r.template.id)?;
                        return Ok(1);
                    }
                }
            }
        }
        let intent = json!({"intent": {
            "target_resource_type": r.pack.manifest.resource_types.first().cloned().unwrap_or_default(),
            "action": r.template.action,
            "name": format!("pack-test-{}", r.template.action.replace('_', "-")),
            "environment": "dev",
            "desired_result": format!("template {} on fleet hosts", r.template.id),
            "parameters": parameters,
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
        let Some((code, first)) = crate::demo_cmd::operate(&dir, &load(), out, err)? else {
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
        let second = match crate::demo_cmd::operate(&dir, &load(), out, err) {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    fn check(value: &str, want: &str) {
        let hosts: BTreeMap<String, Vec<(String, String)>> = BTreeMap::from([
            ("target_nodes".to_owned(), vec![("fleet-1".to_owned(), "10.213.0.11".to_owned())]),
            (
                "members".to_owned(),
                vec![
                    ("fleet-2".to_owned(), "10.213.0.12".to_owned()),
                    ("fleet-3".to_owned(), "10.213.0.13".to_owned()),
                ],
            ),
        ]);
        let got = super::fill_hosts(value, &hosts).unwrap_or_else(|e| format!("error: {e}"));
        assert_eq!(got, want, "{value}");
    }

    #[test]
    fn set_values_get_the_hosts_of_their_scope() {
        check("{address:target_nodes}", "10.213.0.11");
        check("{addresses:members}", "10.213.0.12,10.213.0.13");
        check("{address:members}", "10.213.0.12");
        check("{members:members}", "fleet-2=10.213.0.12,fleet-3=10.213.0.13");
        check("host={address:target_nodes}:5432 {x} {", "host=10.213.0.11:5432 {x} {");
        check("plain", "plain");
        check(
            "{address:workers}",
            "error: {address:workers}: no scope `workers` (the template's scopes and targets: members, target_nodes)",
        );
    }
}
