use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = opsgraph::cli::Cli::parse();
    // Not locked for the whole run either: a run's live view prints from the follower's thread
    // while this thread drives (`opsgraph::follower`).
    let mut out = std::io::stdout();
    // Not locked for the whole run: `serve` logs to standard error from other threads.
    let mut err = std::io::stderr();
    let mut input = std::io::stdin().lock();
    match opsgraph::cli::run(cli, &mut input, &mut out, &mut err) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            use std::io::Write as _;
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(1)
        }
    }
}
