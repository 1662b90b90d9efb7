//! The kubernetes pack's prepare-network script, run for real as root in fresh mount, network
//! and UTS namespaces (as a fleet host has them): its files land on tmpfs mounts, its sysctls in
//! a new network namespace. Where /proc/sys can be written it succeeds and the pack's evidence
//! holds; with /proc/sys read-only it fails saying what to do on the machine.

use std::process::Command;

use expect_test::expect;

use crate::support::{path, temp_dir};

/// Runs prepare-network.sh inside `unshare`, after `setup` (shell run in the namespaces first),
/// then prints what the evidence reads. None when namespaces are not available here.
fn run_in_namespaces(setup: &str) -> Option<String> {
    let dir = temp_dir(&[
        ("node_inventory", "NODE_NAME=probe-1\n"),
        ("credentials_report", "STATUS=ok\n"),
        ("fstab", "# no swap here\n"),
    ]);
    let d = dir.path().display().to_string();
    let runner = format!(
        r#"set -eu
hostname probe-1
# The machine's systemd and D-Bus out of reach: systemctl must not mask the machine's units.
mount -t tmpfs none /run
mount -t tmpfs none /etc/sysctl.d
mkdir -p /etc/modules-load.d && mount -t tmpfs none /etc/modules-load.d
mount --bind {d}/fstab /etc/fstab
{setup}
status=0
OPSGRAPH_ARTIFACT_NODE_INVENTORY={d}/node_inventory OPSGRAPH_ARTIFACT_CREDENTIALS_REPORT={d}/credentials_report \
  OPSGRAPH_LIB={lib} sh -eu {script} 2>{d}/stderr || status=$?
echo "exit $status"
grep -E 'ERROR|prepare-network\[[^]]*\]: ok' {d}/stderr | sed 's/^prepare-network\[[^]]*\]: //' || true
echo "ip_forward $(sysctl -n net.ipv4.ip_forward)"
echo "bridge-nf-call-iptables $(sysctl -n net.bridge.bridge-nf-call-iptables)"
echo "modules-load.d: $(cat /etc/modules-load.d/kubernetes.conf | grep -v '^#' | tr '\n' ' ')"
"#,
        script = path("packs/kubernetes/scripts/prepare-network.sh"),
        // The pack's library, where the runtime puts it for a job run here.
        lib = path("packs/kubernetes/scripts/lib"),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--net", "--uts", "--propagation", "private", "--", "/bin/sh", "-c", &runner])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("skipped: cannot run in new namespaces here: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let container = Command::new("systemd-detect-virt").arg("--container").output().ok();
    let container = container.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
    Some(String::from_utf8_lossy(&out.stdout).replace(&format!("a {container} container"), "a $CONTAINER container"))
}

#[test]
fn prepare_network_in_a_hosts_own_namespaces() {
    // Swap, kernel modules and non-namespaced sysctls are the machine's: the script must find
    // nothing of them to change, or it would change this machine.
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false);
    let bridge = std::path::Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists();
    let overlay = std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\toverlay"));
    let no_swap = std::fs::read_to_string("/proc/swaps").is_ok_and(|s| s.lines().count() <= 1);
    if !(root && bridge && overlay && no_swap) {
        eprintln!(
            "skipped: needs root, br_netfilter and overlay in the kernel, and no swap (root: {root}, bridge: {bridge}, overlay: {overlay}, no swap: {no_swap})"
        );
        return;
    }
    // A fresh network namespace starts with ip_forward 0: the script sets it, and the bridge
    // sysctls, and writes the files that make them last.
    let Some(ok) = run_in_namespaces("") else { return };
    expect![[r#"
        exit 0
        ok
        ip_forward 1
        bridge-nf-call-iptables 1
        modules-load.d: overlay br_netfilter 
    "#]]
    .assert_eq(&ok);
    // /proc/sys read-only, as some container hosts have it: ip_forward cannot be set, and the
    // script says where to set it instead of going on.
    let Some(refused) = run_in_namespaces("mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys")
    else {
        return;
    };
    expect![[r#"
        exit 1
        ERROR: cannot set net.ipv4.ip_forward to 1 (this node is a $CONTAINER container: the kernel is the machine's, so set it on the machine that runs it)
        ip_forward 0
        bridge-nf-call-iptables 1
        modules-load.d: overlay br_netfilter 
    "#]].assert_eq(&refused);
}
