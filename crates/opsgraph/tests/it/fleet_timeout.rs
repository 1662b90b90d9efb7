//! A job over SSH that times out or is cancelled stops on a real Debian host (docs/reliability.md):
//! the fleet's `apt-get update` that hung, timed out, and kept the apt lock so that the retry
//! failed on it. Here the hung command holds a lock with `flock` as apt does; after the timeout
//! the lock is free and the command's pid is gone on the host. A cancelled command that ignores
//! SIGTERM is killed. Through the SSH executor, multiplexed, as the runtime uses it.

use std::time::Duration;

use opsgraph_exec::{Cancel, Executor, Outcome, Program, Spec, SshExecutor};

use crate::fleet::{claim, machine, Fleet};
use crate::support::temp_dir;

fn shell(line: &str) -> Spec {
    Spec::new(Program::Shell(line.to_owned()))
}

/// The sentence of the remote stop with the group id replaced by `N`.
fn stop(run: &opsgraph_exec::Run) -> String {
    let text = run.remote_stop.clone().unwrap_or_default();
    regex::Regex::new(r"group \d+").unwrap().replace(&text, "group N").into_owned()
}

#[test]
fn fleet_ssh_timeout_and_cancel_stop_the_remote_command() {
    let Some(_one) = claim("fleet_ssh_timeout_and_cancel_stop_the_remote_command") else { return };
    let tmp = temp_dir(&[]);
    let dir = tmp.join("fleet");
    let before = machine();
    {
        let _fleet = Fleet::up(&dir, 1);
        let host = opsgraph_fleet::status(&dir).unwrap().unwrap().0.hosts[0].clone();
        let exec = SshExecutor {
            host: host.address.clone(),
            port: 22,
            user: Some("root".into()),
            key: Some(dir.join("id_ed25519")),
            known_hosts: Some(dir.join("known_hosts")),
            control_dir: Some(tmp.join("ctl")),
        };
        let run = |spec: &Spec| exec.run(spec, &Cancel::new());
        let lock_free = || run(&shell("flock -n /root/apt.lock true")).outcome;
        assert_eq!(lock_free(), Outcome::Exited { code: 0 });

        // The hung command: holds the lock, runs 600 s, times out after 2 s.
        let mut hung = shell("echo $$ > /root/hung.pid; exec flock /root/apt.lock sleep 600");
        hung.timeout = Some(Duration::from_secs(2));
        let r = run(&hung);
        assert_eq!(r.outcome, Outcome::TimedOut { after: Duration::from_secs(2), killed: false }, "{r:?}");
        assert_eq!(stop(&r), format!("the remote process group N on {} was terminated (SIGTERM)", host.address));
        // The retry's view: the lock is free, and the command's pid is gone.
        assert_eq!(lock_free(), Outcome::Exited { code: 0 }, "the timed-out command still holds the lock");
        let gone = run(&shell("! kill -0 \"$(cat /root/hung.pid)\" 2>/dev/null"));
        assert_eq!(gone.outcome, Outcome::Exited { code: 0 }, "the timed-out command still runs on the host");

        // Cancelled, ignoring SIGTERM: killed after the grace.
        let cancel = Cancel::new();
        let mut stubborn = shell("trap '' TERM; echo $$ > /root/stubborn.pid; flock /root/apt.lock sleep 600");
        stubborn.grace = Duration::from_millis(500);
        let r = std::thread::scope(|s| {
            let c = cancel.clone();
            s.spawn(move || {
                std::thread::sleep(Duration::from_secs(2));
                c.cancel();
            });
            exec.run(&stubborn, &cancel)
        });
        assert_eq!(r.outcome, Outcome::Cancelled, "{r:?}");
        assert_eq!(
            stop(&r),
            format!("the remote process group N on {} was killed (SIGKILL after SIGTERM and the grace)", host.address)
        );
        assert_eq!(lock_free(), Outcome::Exited { code: 0 }, "the cancelled command still holds the lock");
        let gone = run(&shell("! kill -0 \"$(cat /root/stubborn.pid)\" 2>/dev/null"));
        assert_eq!(gone.outcome, Outcome::Exited { code: 0 }, "the cancelled command still runs on the host");
        exec.close();
    }
    assert_eq!(machine(), before, "the fleet left something behind");
}
