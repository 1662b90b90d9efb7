use crate::fleet::{claim, machine, Fleet};
use crate::fleet_agent::{intent, ledger, pack};
use crate::support::{opsgraph, temp_dir, Run, TempDir};

fn inside(dir: &std::path::Path, i: usize, script: &str) {
    let (state, _) = opsgraph_fleet::status(dir).unwrap().unwrap();
    let o = opsgraph_fleet::exec(&state.hosts[i], &["sh", "-c", script]).output().unwrap();
    assert!(o.status.success(), "{script}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Four fleet hosts and the ledger pack's one job with `controls`, an intent over all four whose
/// job writes `kib` KiB; taken down by `retry_completes`.
struct Rollout {
    tmp: TempDir,
    dir: std::path::PathBuf,
    fleet: Fleet,
    before: String,
}

impl Rollout {
    fn up(controls: &str, kib: &str) -> Rollout {
        let files = pack(1, &|_| format!("controls: {{rollout: {controls}}}, "));
        let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let tmp = temp_dir(&refs);
        let dir = tmp.join("fleet");
        let before = machine();
        let fleet = Fleet::up(&dir, 4);
        std::fs::write(tmp.join("intent.yaml"), intent(&["fleet-1", "fleet-2", "fleet-3", "fleet-4"], "0", kib))
            .unwrap();
        Rollout { tmp, dir, fleet, before }
    }

    /// `opsgraph` on the rollout's data directory, with its packs and the fleet's inventory.
    fn args(&self, command: &[&str]) -> Vec<String> {
        let (d, p, inv) = (self.tmp.join("data"), self.tmp.join("packs"), self.dir.join("inventory"));
        let mut args = vec!["--data-dir".to_string(), d.display().to_string()];
        args.extend(command.iter().map(|a| a.to_string()));
        args.extend(["--packs".to_string(), p.display().to_string(), "--inventory".to_string()]);
        args.push(inv.display().to_string());
        args
    }

    fn apply_args(&self) -> Vec<String> {
        let f = self.tmp.join("intent.yaml").display().to_string();
        let mut args = self.args(&["apply", "-f", &f]);
        args.push("--yes".into());
        args
    }

    /// How many times host `i`'s job ran to the end.
    fn runs(&self, i: usize) -> usize {
        ledger(&self.dir, i).iter().filter(|l| l.ends_with(" done")).count()
    }

    /// `retry` of the paused operation `end` (apply's last line) runs the rollout to the end,
    /// every host once; the fleet goes down and leaves the machine as it found it.
    fn retry_completes(self, end: &str) {
        let id = end.trim_start_matches("Operation ").split(':').next().unwrap().to_string();
        let retry = run(&self.args(&["retry", &id]));
        assert_eq!(retry.code, 0, "{}", retry.render());
        assert!(retry.out.contains(&format!("Operation {id}: completed")), "{}", retry.render());
        assert_eq!([self.runs(0), self.runs(1), self.runs(2), self.runs(3)], [1, 1, 1, 1]);
        drop(self.fleet);
        assert_eq!(machine(), self.before, "down leaves the machine as it found it");
    }
}

fn run(args: &[String]) -> Run {
    opsgraph(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn a_rollout_on_real_hosts_pauses_at_the_failed_host_and_finishes_after_a_retry() {
    let Some(_one) = claim("a_rollout_on_real_hosts_pauses_at_the_failed_host_and_finishes_after_a_retry") else {
        return;
    };
    let rollout = Rollout::up("{waves: [1, 1, 100%], max_failures: 0}", "200");
    let dir = rollout.dir.clone();
    inside(&dir, 1, "mkdir -p /var/lib/fleet-data && mount -t tmpfs -o size=100k tmpfs /var/lib/fleet-data");
    let apply = run(&rollout.apply_args());
    let end = apply.out.lines().find(|l| l.starts_with("Operation ")).unwrap_or_default().to_string();
    assert!(
        end.contains(": paused: rollout of j0 paused in wave 2 of 3: 1 failed, over its budget of 0; failed: fleet-2; 1 done, 0 running, 2 untouched"),
        "{}",
        apply.render()
    );
    assert!(apply.out.contains("wave_started: j0 wave 2 of 3: 1 instance(s) (fleet-2)"), "{}", apply.render());
    let runs = |i: usize| rollout.runs(i);
    assert_eq!([runs(0), runs(1), runs(2), runs(3)], [1, 0, 0, 0], "only fleet-1 ran to the end");
    assert!(ledger(&dir, 2).is_empty() && ledger(&dir, 3).is_empty(), "wave 3 untouched");

    // The disk grown, the failed host is retried and the rollout runs to the end.
    inside(&dir, 1, "mount -o remount,size=1m /var/lib/fleet-data");
    rollout.retry_completes(&end);
}

/// Checks between waves on real hosts: fleet-1 (wave 1) runs its job and passes its evidence,
/// then, during the pause between waves, loses what the evidence looks at (its ledger mark is
/// removed, as a host that degrades after its upgrade). The checks after wave 1 find it: `apply`
/// stops with the operation paused naming the check and host, nothing of wave 2 ran; the mark
/// back, `retry` runs the checks again and the rollout finishes.
#[test]
fn checks_between_waves_on_real_hosts_pause_the_rollout_at_a_host_that_degraded_after_its_job() {
    let Some(_one) =
        claim("checks_between_waves_on_real_hosts_pause_the_rollout_at_a_host_that_degraded_after_its_job")
    else {
        return;
    };
    let rollout = Rollout::up("{waves: [1, 1, 100%], pause_between: 8s}", "4");
    let dir = rollout.dir.clone();
    let args = rollout.apply_args();
    let apply = std::thread::spawn(move || run(&args));
    // Wave 1 done on fleet-1: its mark goes while the rollout waits the pause between waves.
    let runs = |i: usize| rollout.runs(i);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while runs(0) == 0 {
        assert!(std::time::Instant::now() < deadline, "fleet-1 never ran");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    inside(&dir, 0, "mkdir -p /root/kept && mv /var/lib/fleet-ledger/op-* /root/kept/");
    let apply = apply.join().unwrap();
    let end = apply.out.lines().find(|l| l.starts_with("Operation ")).unwrap_or_default().to_string();
    assert!(
        end.contains(": paused: rollout of j0 paused after wave 1 of 3: verify-j0-wave-1 failed: check ")
            && end.contains("@fleet-1 failed"),
        "{}",
        apply.render()
    );
    assert!(apply.out.contains("next: a pause of 8s, then verify-j0-wave-1"), "{}", apply.render());
    assert_eq!([runs(0), runs(1), runs(2), runs(3)], [1, 0, 0, 0], "nothing of wave 2 ran");

    // The mark back, the checks run again and pass: the rollout runs to the end.
    inside(&dir, 0, "mv /root/kept/op-* /var/lib/fleet-ledger/");
    rollout.retry_completes(&end);
}
