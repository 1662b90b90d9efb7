//! Command-line parsing and the commands. Each command writes to the `out`/`err` it is given, so
//! tests run it in-process and compare text.

use std::io::Write;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use opsgraph_pack::Diagnostic;

use crate::load::{self, Source};

#[derive(Debug, Parser)]
#[command(name = "opsgraph", version, about = "A control plane for infrastructure operations", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A preview a person reads.
    Text,
    /// JSON for machines.
    Json,
    /// Graphviz.
    Dot,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check each document's own shape: every problem, with file:line:column.
    Validate {
        #[arg(required = true)]
        files: Vec<String>,
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
    /// Preview the bundled example operation (runs nothing yet: see the README).
    Demo,
}

#[derive(Debug, Subcommand)]
pub enum PackCommand {
    /// Check a pack directory (or a directory of packs) and the references inside it.
    Validate {
        #[arg(required = true)]
        dirs: Vec<String>,
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
}

/// Runs a command; the exit code is 0 for success, 1 when the input has problems.
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    match cli.command {
        Command::Validate { files } => {
            let sources: Vec<Source> = files.iter().map(|f| Source::parse(f)).collect();
            let (docs, diags) = load::documents(&sources);
            let n = docs.len();
            report(err, &diags)?;
            if diags.iter().any(Diagnostic::is_error) {
                return Ok(1);
            }
            writeln!(
                out,
                "ok: {n} document{} valid",
                if n == 1 { "" } else { "s" }
            )?;
            Ok(0)
        }
        Command::Schema { markdown: true, .. } => {
            write!(out, "{}", opsgraph_pack::markdown_reference())?;
            Ok(0)
        }
        Command::Schema {
            kind,
            markdown: false,
        } => {
            let schema = opsgraph_pack::json_schema(kind.as_deref()).with_context(|| {
                format!(
                    "unknown kind `{}`; expected one of {}",
                    kind.clone().unwrap_or_default(),
                    opsgraph_pack::kinds().collect::<Vec<_>>().join(", ")
                )
            })?;
            writeln!(out, "{}", serde_json::to_string_pretty(&schema)?)?;
            Ok(0)
        }
        Command::Pack {
            command: PackCommand::Validate { dirs },
        } => {
            let sources: Vec<Source> = dirs.iter().map(|d| Source::parse(d)).collect();
            let (packs, diags) = load::packs(&sources);
            report(err, &diags)?;
            if diags.iter().any(Diagnostic::is_error) {
                return Ok(1);
            }
            for p in &packs {
                writeln!(
                    out,
                    "ok: pack {}@{} ({} templates, {} jobs, {} evidence checks, {} artifacts, {} remedies)",
                    p.manifest.id,
                    p.manifest.version,
                    p.templates.len(),
                    p.jobs.len(),
                    p.evidence.len(),
                    p.artifacts.len(),
                    p.remedies.len()
                )?;
            }
            Ok(0)
        }
        Command::Plan(args) => crate::plan_cmd::plan(&args, out, err),
        Command::Demo => crate::plan_cmd::demo(out, err),
    }
}

/// Prints diagnostics and a summary line.
pub fn report(err: &mut dyn Write, diags: &[Diagnostic]) -> std::io::Result<()> {
    for d in diags {
        writeln!(err, "{d}")?;
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    if errors + warnings > 0 {
        let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        writeln!(
            err,
            "{}, {}",
            plural(errors, "error"),
            plural(warnings, "warning")
        )?;
    }
    Ok(())
}
