//! Processes on this machine.

use std::process::Command;

use crate::spec::DEFAULT_PATH;
use crate::{process, Cancel, Executor, Program, Run, Spec};

/// Runs programs on this machine: argv exec'd directly, scripts with `sh -eu`, shell lines with
/// `sh -c`; each run in a new process group.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn run(&self, spec: &Spec, cancel: &Cancel) -> Run {
        if let Some(error) = spec.env_error() {
            return Run::could_not_start(error);
        }
        let (mut cmd, what) = match &spec.program {
            Program::Argv(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return Run::could_not_start("the command is empty");
                };
                let mut cmd = Command::new(program);
                cmd.args(args);
                (cmd, format!("`{program}`"))
            }
            Program::Script { path, args } => {
                let resolved = match &spec.workdir {
                    Some(dir) if path.is_relative() => dir.join(path),
                    _ => path.clone(),
                };
                if !resolved.is_file() {
                    return Run::could_not_start(format!("script {} not found", resolved.display()));
                }
                let mut cmd = Command::new("/bin/sh");
                cmd.arg("-eu").arg(path).args(args);
                (cmd, format!("script {}", path.display()))
            }
            Program::Shell(line) => {
                let mut cmd = Command::new("/bin/sh");
                cmd.arg("-c").arg(line);
                (cmd, "/bin/sh".to_owned())
            }
            Program::Http { .. } => {
                return Run::could_not_start("the local executor runs processes, not http requests")
            }
        };
        if let Some(dir) = &spec.workdir {
            if !dir.is_dir() {
                return Run::could_not_start(format!("working directory {} does not exist", dir.display()));
            }
            cmd.current_dir(dir);
        }
        if !spec.inherit_env {
            cmd.env_clear();
            if !spec.env.contains_key("PATH") {
                cmd.env("PATH", DEFAULT_PATH);
            }
        }
        cmd.envs(&spec.env);
        process::run(cmd, &what, spec, cancel)
    }

    fn is_local(&self) -> bool {
        true
    }
}
