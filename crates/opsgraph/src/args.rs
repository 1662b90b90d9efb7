//! The command line as types (`clap`): what each command takes. Below every command module,
//! so a command names its arguments without importing the dispatcher (`cli.rs`).

use clap::{Parser, Subcommand};

pub use crate::render::Output;

#[derive(Debug, Parser)]
#[command(name = "opsgraph", version, about = "A control plane for infrastructure operations", long_about = None)]
pub struct Cli {
    /// Where operations are stored [default: $OPSGRAPH_DATA_DIR, else ~/.local/share/opsgraph].
    #[arg(long, global = true)]
    pub data_dir: Option<std::path::PathBuf>,
    /// How many jobs of one operation run at once when this command drives it [default: 8].
    #[arg(long, global = true, env = "OPSGRAPH_CONCURRENCY", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub concurrency: Option<u16>,
    /// Talk to `opsgraph serve` at this URL instead of the data directory [env: OPSGRAPH_SERVER];
    /// the token comes from OPSGRAPH_TOKEN (or OPSGRAPH_TOKEN_FILE).
    #[arg(long, global = true)]
    pub server: Option<String>,
    /// A file holding the API token (instead of OPSGRAPH_TOKEN).
    #[arg(long, global = true)]
    pub token_file: Option<std::path::PathBuf>,
    /// The store: `postgres://user@host:port/db` for PostgreSQL (shared by server replicas), or a
    /// SQLite file path [default: DATA_DIR/opsgraph.db].
    #[arg(long, global = true, env = "OPSGRAPH_DATABASE")]
    pub database: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check each document's own shape, and each intent's parameters against the template it
    /// picks (as `plan` does): every problem, with file:line:column.
    Validate {
        #[arg(required = true)]
        files: Vec<String>,
        /// A pack directory or a directory of packs for the intents; the bundled and installed
        /// packs by default.
        #[arg(long = "packs")]
        packs: Vec<String>,
    },
    /// Print JSON Schema for a document kind (or for any document), for editors.
    Schema {
        /// resource, provider, capability_policy, intent, scenario_pack, plan_template, job,
        /// evidence, artifact, gate, intervention, plan_patch, remedy, requires.
        kind: Option<String>,
        /// Print the Markdown reference of every kind instead.
        #[arg(long, conflicts_with = "kind")]
        markdown: bool,
    },
    /// Scenario packs.
    Pack {
        #[command(subcommand)]
        command: PackCommand,
    },
    /// Preview the plan for an intent: resolved capabilities, stages, jobs, gates, risk.
    Plan(PlanArgs),
    /// Preview a plan, confirm, and run it with a live view of stages and jobs.
    Apply {
        #[command(flatten)]
        plan: PlanArgs,
        /// Apply without asking.
        #[arg(long)]
        yes: bool,
        /// Apply only the plan a preview showed (`opsgraph plan`'s `Revision N sha256:…`, at least
        /// 12 hex digits): refused with P011 when anything it was built from changed since.
        #[arg(long = "plan-hash")]
        plan_hash: Option<String>,
    },
    /// List operations, resources, or the jobs of an operation.
    Get {
        /// operations | resources | jobs
        what: String,
        /// The operation, for `jobs`.
        operation: Option<String>,
        #[arg(short = 'o', long = "output", default_value = "text")]
        output: String,
        /// Operations in this state only (`failed`, `running`, `waiting_for_approval`, …).
        #[arg(long)]
        state: Option<String>,
        /// Operations that changed this resource only.
        #[arg(long)]
        resource: Option<String>,
        /// Operations of this pack only: `id` (any version) or `id@version`.
        #[arg(long)]
        pack: Option<String>,
        /// Operations whose intent names this environment only.
        #[arg(long)]
        environment: Option<String>,
    },
    /// Everything about an operation or a resource: the full chain of reasons.
    Describe {
        /// operation | resource
        what: String,
        id: String,
        #[arg(short = 'o', long = "output", default_value = "yaml")]
        output: String,
    },
    /// The captured output of an operation's jobs.
    Logs {
        operation: String,
        job: Option<String>,
        /// `text`, or `json` / `yaml`: a list of `{job, attempt, output}`.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Print JOB's output as it arrives (its live log), until its last attempt has ended.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// Gates.
    Gate {
        #[command(subcommand)]
        command: GateCommand,
    },
    /// Stop starting new jobs; running ones finish.
    Pause {
        operation: String,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Continue a paused operation.
    Resume {
        operation: String,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// Cancel an operation: running jobs are stopped.
    Cancel {
        operation: String,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Run failed jobs again (all of them, or the one named).
    Retry {
        operation: String,
        job: Option<String>,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// Run the bundled lab scenario end to end in a fresh data directory. The lab nodes'
    /// background processes are stopped when it ends, unless --keep.
    Demo {
        /// Leave the lab nodes' processes running (to explore the cluster afterwards).
        #[arg(long)]
        keep: bool,
        /// Real hosts instead (root): a fleet (built, or the healthy one reused) and PostgreSQL
        /// installed with the bundled pack: the primary on its first host and a streaming replica
        /// on each other (one host: PostgreSQL alone). The fleet stays up.
        #[arg(long, conflicts_with = "keep")]
        real: bool,
        /// The fleet's size with --real.
        #[arg(long, default_value_t = 3, requires = "real")]
        hosts: usize,
    },
    /// Labs on this machine: `lab fleet` builds real Debian hosts (root; docs/fleet.md).
    Lab {
        #[command(subcommand)]
        command: LabCommand,
    },
    /// The master key that seals secrets at rest.
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
    /// Serve the REST API under /api/v1 (the admin token is printed at first start).
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8437")]
        listen: std::net::SocketAddr,
        /// Pack directories (default `bundled:packs`).
        #[arg(long = "packs")]
        packs: Vec<String>,
        /// Inventory, provider and policy files or directories plans are made in.
        #[arg(long = "inventory")]
        inventory: Vec<String>,
        #[command(flatten)]
        agents: AgentTimes,
    },
    /// Run as a remote agent: pull the jobs of resources served by agents, run them here, report.
    ///
    /// Needs `--server` and a token of the `agent` role whose name is the resources'
    /// `access.agent` (`--token`, OPSGRAPH_TOKEN or `--token-file`).
    Agent {
        /// A resource this agent serves (repeatable); every resource naming the token when none.
        #[arg(long = "resource")]
        resources: Vec<String>,
        /// The agent's token (OPSGRAPH_TOKEN or --token-file keep it out of the process list).
        #[arg(long)]
        token: Option<String>,
        /// Where tasks run, a private directory each [default: DATA_DIR/agent].
        #[arg(long)]
        work_dir: Option<std::path::PathBuf>,
        /// Tasks run at once.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
        parallel: u16,
        /// Stop after this many tasks (for benchmarks and tests).
        #[arg(long)]
        max_tasks: Option<u64>,
    },
    /// Propose a plan patch for a failed or paused operation.
    ///
    /// Reviewed, then applied (or waiting for its approval), and the run goes on from where it
    /// stopped.
    Patch {
        operation: String,
        /// A `plan_patch` document.
        #[arg(short = 'f', long = "file", conflicts_with = "remedy", required_unless_present = "remedy")]
        file: Option<String>,
        /// The patch of one of the pack's remedies (`registry-unreachable`).
        #[arg(long)]
        remedy: Option<String>,
        /// Who proposes it (default: $USER).
        #[arg(long = "as")]
        user: Option<String>,
        /// Review and show the diff only; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// Undo an operation's completed jobs as a new operation.
    ///
    /// In reverse order, previewed and gated like any plan. A failed or paused operation is
    /// cancelled first.
    Rollback {
        operation: String,
        /// Roll back without asking.
        #[arg(long)]
        yes: bool,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// Diagnose a failed operation (or a `failure` document) against its pack's remedies.
    ///
    /// The offline rules analyzer, or `--ai openai`. With --propose, the patch found is proposed
    /// as `ai-agent:planner` and waits for a person's approval. Exit 1 when no remedy applies.
    Diagnose {
        /// An operation id, or a file holding a `failure` document.
        operation: String,
        #[arg(long)]
        propose: bool,
        /// `rules` (the pack's remedies, offline) or `openai` (the endpoint of config.yaml `ai:`).
        #[arg(long, default_value = "rules", value_parser = ["rules", "openai"])]
        ai: String,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// Record a manual fix of a failed operation and verify it.
    ///
    /// The evidence named runs on the failed jobs' targets; the run goes on when it passes, and
    /// stays failed (with the evidence) when it does not.
    Intervene {
        operation: String,
        /// An `intervention` document (instead of the flags below).
        #[arg(short = 'f', long = "file")]
        file: Option<String>,
        /// The stage that was fixed (its id or name).
        #[arg(long)]
        stage: Option<String>,
        /// The job that was fixed (`join-workers` or `join-workers@worker-3`).
        #[arg(long)]
        job: Option<String>,
        /// What was done.
        #[arg(long, required_unless_present = "file")]
        note: Option<String>,
        /// Evidence checks that prove the fix, comma-separated.
        #[arg(long, value_delimiter = ',')]
        verify: Vec<String>,
        #[arg(long = "as")]
        user: Option<String>,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// Verify a resource now by its pack's checks, and record what they found.
    ///
    /// The checks its pack declares (`resources:` in pack.yaml) run where the resource's last
    /// completed operation ran them. All pass: `running`; any fails: `degraded`, with the checks
    /// as the reason. `opsgraph serve` does the same on schedule. Exit 1 when a check failed.
    Verify {
        /// The resource id (`etcd.cluster/config-store`).
        resource: String,
        #[arg(long = "as")]
        user: Option<String>,
        #[command(flatten)]
        world: WorldArgs,
    },
    /// The audit log: every change, who made it, when.
    Audit {
        #[arg(long)]
        actor: Option<String>,
        #[arg(long)]
        operation: Option<String>,
        #[arg(long)]
        resource: Option<String>,
        /// RFC 3339 time (2026-12-01T00:00:00Z).
        #[arg(long)]
        since: Option<String>,
        #[arg(short = 'o', long = "output", default_value = "text")]
        output: String,
    },
    /// Resources stored by hand, which later plans see.
    ///
    /// In the data directory's resources table, or the server's with --server.
    Resource {
        #[command(subcommand)]
        command: ResourceCommand,
    },
    /// API tokens of the local data directory.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// A fleet of real Debian 12 hosts (systemd, sshd, apt through a cache) on this machine.
    Fleet {
        #[command(subcommand)]
        command: FleetCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Build N hosts and write their inventory (an existing healthy fleet is reported).
    Up {
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=200))]
        hosts: u16,
        #[command(flatten)]
        fleet: FleetArgs,
        /// The `environment` of the inventory's resources.
        #[arg(long, default_value = "dev")]
        environment: String,
        /// Where the root filesystem and the package cache are kept
        /// [default: $XDG_CACHE_HOME/opsgraph, else ~/.cache/opsgraph].
        #[arg(long)]
        cache: Option<std::path::PathBuf>,
    },
    /// The hosts, their addresses and health (systemd running? sshd answering?).
    Status {
        #[command(flatten)]
        fleet: FleetArgs,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Stop the hosts and remove everything the fleet made.
    Down {
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Bring a host back with the same disk (after its machine died, or to power-cycle it).
    Restart {
        /// The host (`fleet-2`).
        host: String,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Install `opsgraph agent` on a host as a systemd unit; its inventory entry then says
    /// `access: {agent: NAME}`, so its jobs go through the agent, not SSH.
    Agent {
        /// The host (`fleet-2`).
        host: String,
        /// The server, on the bridge (`opsgraph serve --listen 10.213.0.1:PORT`).
        #[arg(long)]
        server: String,
        /// A token of the `agent` role; copied into the host, mode 0600.
        #[arg(long)]
        token_file: std::path::PathBuf,
        /// The agent's name: the token's name.
        #[arg(long)]
        name: String,
        /// A resource the agent serves (repeatable); every resource naming it when none.
        #[arg(long = "resource")]
        resources: Vec<String>,
        /// The binary to copy in [default: this one].
        #[arg(long)]
        binary: Option<std::path::PathBuf>,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Light hosts for fan-out at scale: a network namespace and one sshd each, no systemd.
    Light {
        #[command(subcommand)]
        command: LightCommand,
    },
}

/// `lab fleet light`: light hosts, a network namespace and one sshd each (docs/fleet.md).
#[derive(Debug, Subcommand)]
pub enum LightCommand {
    /// Build N light hosts and write their inventories (opsgraph and Ansible).
    Up {
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
        count: u16,
        #[command(flatten)]
        light: LightArgs,
        /// The `environment` of the inventory's resources.
        #[arg(long, default_value = "dev")]
        environment: String,
    },
    /// The hosts, their addresses, whether sshd answers, and its memory.
    Status {
        #[command(flatten)]
        light: LightArgs,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Stop the hosts and remove everything `light up` made.
    Down {
        #[command(flatten)]
        light: LightArgs,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct LightArgs {
    /// The light hosts' directory: state, keys, inventories, hosts [default: DATA_DIR/light].
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// The fleet directory: state, keys, inventory, hosts [default: DATA_DIR/fleet].
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ResourceCommand {
    /// Store one `resource` document (insert or replace); refused while an unfinished operation
    /// targets the resource.
    Apply {
        #[arg(short = 'f', long = "file")]
        file: String,
    },
    /// Delete a stored resource; refused while an unfinished operation targets it.
    Delete { id: String },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; it is printed once and only its hash is kept.
    Create {
        #[arg(long)]
        name: String,
        /// A role (repeat for several): viewer, operator, sre, platform_admin, or a custom role.
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
    },
    /// List tokens (never their secret).
    List,
    /// Revoke a token by id.
    Revoke { id: String },
}

#[derive(Debug, clap::Args)]
pub struct WorldArgs {
    /// Pack directories (default `bundled:packs`).
    #[arg(long = "packs")]
    pub packs: Vec<String>,
    /// Inventory files or directories (for executors to reach resources).
    #[arg(long = "inventory")]
    pub inventory: Vec<String>,
    /// Return at once instead of driving the operation on.
    #[arg(long)]
    pub no_wait: bool,
    /// `text`: what happens, live. `json` / `yaml`: the operation once it stops, as `describe`
    /// shows it.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

/// The times of remote agents' work (`opsgraph serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct AgentTimes {
    /// How long an agent's claim lasts without a heartbeat; then the task is recovered
    /// (evidence first).
    #[arg(long, env = "OPSGRAPH_AGENT_LEASE", default_value = "30s", value_parser = duration)]
    pub agent_lease: std::time::Duration,
    /// How long a job for an agent-served resource waits to be claimed before it fails.
    #[arg(long, env = "OPSGRAPH_AGENT_CLAIM_TIMEOUT", default_value = "60s", value_parser = duration)]
    pub agent_claim_timeout: std::time::Duration,
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    opsgraph_exec::parse_duration(s).map_err(|e| e.to_string())
}

#[derive(Debug, Subcommand)]
pub enum GateCommand {
    /// Answer an open gate.
    Answer {
        gate: String,
        /// The operation (needed when the gate id is open in several).
        #[arg(long)]
        operation: Option<String>,
        #[arg(long)]
        option: String,
        /// The user answering; their roles come from `<data-dir>/config.yaml`.
        #[arg(long = "as")]
        user: String,
        /// A typed value, for missing-input gates (JSON, or taken as a string).
        #[arg(long)]
        value: Option<String>,
        #[command(flatten)]
        world: WorldArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Make a new master key, seal every secret of the data directory again under it, retire the
    /// old one (`DATA_DIR/master.key`).
    Rotate,
    /// Seal again under the active key whatever an older key sealed (after putting a new key
    /// first in `OPSGRAPH_MASTER_KEY`).
    Reseal,
}

#[derive(Debug, Subcommand)]
pub enum PackCommand {
    /// Check a pack directory (or a directory of packs) and the references inside it.
    Validate {
        #[arg(required = true)]
        dirs: Vec<String>,
    },
    /// Run every remedy's examples through the matcher `diagnose` uses (exit 1 on any failure,
    /// and for a remedy without a `matches` example).
    Test {
        #[arg(required = true)]
        dirs: Vec<String>,
        /// Run the templates that target compute nodes for real on fleet hosts (root), then
        /// every evidence check again; the fleet is brought down after, unless --keep or it was
        /// up already (docs/fleet.md).
        #[arg(long)]
        fleet: bool,
        /// The fleet's size [default: the most hosts a template needs].
        #[arg(long, requires = "fleet")]
        hosts: Option<usize>,
        /// Leave the fleet up.
        #[arg(long, requires = "fleet")]
        keep: bool,
        /// A template parameter, NAME=VALUE (repeatable): required parameters without a default
        /// must be given. In VALUE, `{address:SCOPE}`, `{addresses:SCOPE}` and `{members:SCOPE}`
        /// become the first address, every address, and `name=address` pairs of the hosts the
        /// scope gets.
        #[arg(long = "set", value_name = "NAME=VALUE", requires = "fleet")]
        sets: Vec<String>,
        /// Only this template (repeatable) [default: every template that targets compute nodes].
        #[arg(long = "template", value_name = "ID", requires = "fleet")]
        templates: Vec<String>,
    },
    /// Install a pack from a directory or a .tar.gz into the data directory, pinned by digest;
    /// with --from, NAME[@VERSION] from a pack catalogue, signed by a trusted key.
    Install {
        /// A pack directory or .tar.gz; with --from, `NAME` (the highest version) or `NAME@VERSION`.
        path: std::path::PathBuf,
        /// Replace an installed pack of the same id@version whose content differs.
        #[arg(long)]
        replace: bool,
        /// A pack catalogue: an http(s):// URL, a file:// URL or a directory holding index.json
        /// (or the index file itself).
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        /// A minisign public key (its base64 line, or a minisign.pub file) the pack may be signed
        /// with, besides config.yaml's `trusted_keys:` (repeatable).
        #[arg(long = "trusted-key", value_name = "KEY", requires = "from")]
        trusted_keys: Vec<String>,
    },
    /// The packs of a catalogue whose name or description holds TERM (every pack without TERM).
    Search {
        term: Option<String>,
        /// The pack catalogue, as `pack install --from` takes it.
        #[arg(long, value_name = "URL")]
        from: String,
        #[arg(short = 'o', long = "output", default_value = "text")]
        output: String,
    },
    /// Print the index.json of a catalogue directory from the pack archives under it (and the
    /// .minisig signature beside each).
    Index { dir: std::path::PathBuf },
    /// The packs commands use: bundled and installed, with their digests.
    List {
        #[arg(short = 'o', long = "output", default_value = "text")]
        output: String,
    },
    /// What a pack would do: templates, jobs with the commands and scripts they run, evidence,
    /// artifacts.
    Show {
        /// `id` (the highest version) or `id@version`.
        pack: String,
        #[arg(short = 'o', long = "output", default_value = "text")]
        output: String,
    },
    /// Remove an installed pack version (refused while an unfinished operation ran it).
    Remove {
        /// `id@version`.
        pack: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The intent file.
    #[arg(short = 'f', long = "file")]
    pub intent: String,
    /// A pack directory or a directory of packs; `bundled:packs` by default.
    #[arg(long = "packs")]
    pub packs: Vec<String>,
    /// A file or directory of resources, providers and policies.
    #[arg(long = "inventory")]
    pub inventory: Vec<String>,
    /// A file or directory of capability policies (and providers).
    #[arg(long = "policy")]
    pub policy: Vec<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// A `plan_patch` that customises the plan before it runs (reviewed like any patch).
    #[arg(long = "patch")]
    pub patch: Option<String>,
}
