//! The etcd pack: its plan over three hosts (a real multi-host DAG: certificates -> members ->
//! cluster health), and its certificate scripts run for real with openssl on this machine.

use std::path::Path;
use std::process::Command;

use expect_test::expect;

use crate::support::{opsgraph, path, temp_dir};

#[test]
fn etcd_plan_preview_over_three_hosts() {
    // `opsgraph plan` of the etcd example, with `extra` arguments.
    let plan = |extra: &[&str]| {
        let example = ["-f", "{root}/examples/etcd/intent.yaml", "--inventory", "{root}/examples/etcd/inventory.yaml"];
        opsgraph(&[&["plan"], &example[..], &["--packs", "{root}/packs/etcd"], extra].concat())
    };
    let run = plan(&[]);
    expect![[r#"
        exit: 0
        --- stdout
        Plan etcd.create (etcd@1.2.0) for: create_cluster etcd.cluster config-store in dev
        Revision 1 sha256:a324cf47b5d7   Risk: medium

        Capabilities
          linux.host @ members           bind           compute_node/etcd-1, compute_node/etcd-2, compute_node/etcd-3
          ssh.access @ members           bind           compute_node/etcd-1, compute_node/etcd-2, compute_node/etcd-3
          package.manager.apt @ members  bind           compute_node/etcd-1, compute_node/etcd-2, compute_node/etcd-3

        Stages
          1. Certificates       issue-etcd-ca; issue-member-certificate @ etcd-1, etcd-2, etcd-3; check-etcd-ca @ etcd-1, etcd-2, etcd-3
          2. Members            install-etcd-member @ etcd-1, etcd-2, etcd-3; configure-etcd-member @ etcd-1, etcd-2, etcd-3; start-etcd-member @ etcd-1, etcd-2, etcd-3
          3. Cluster health     verify-etcd-cluster @ etcd-1, etcd-2, etcd-3

        19 jobs, 0 gates. Nothing has run. Status: ready to apply.
    "#]].assert_eq(&run.render());
    let run = plan(&["-o", "json"]);
    let plan: serde_json::Value = serde_json::from_str(&run.out).unwrap();
    let edges: String = plan["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let deps: Vec<&str> = j["depends_on"].as_array().unwrap().iter().filter_map(|d| d.as_str()).collect();
            format!("{} <- {}\n", j["id"].as_str().unwrap(), deps.join(", "))
        })
        .collect();
    expect![[r#"
        issue-etcd-ca <- 
        issue-member-certificate@etcd-1 <- issue-etcd-ca
        issue-member-certificate@etcd-2 <- issue-etcd-ca
        issue-member-certificate@etcd-3 <- issue-etcd-ca
        check-etcd-ca@etcd-1 <- issue-etcd-ca
        check-etcd-ca@etcd-2 <- issue-etcd-ca
        check-etcd-ca@etcd-3 <- issue-etcd-ca
        install-etcd-member@etcd-1 <- issue-etcd-ca, issue-member-certificate@etcd-1, check-etcd-ca@etcd-1
        install-etcd-member@etcd-2 <- issue-etcd-ca, issue-member-certificate@etcd-2, check-etcd-ca@etcd-2
        install-etcd-member@etcd-3 <- issue-etcd-ca, issue-member-certificate@etcd-3, check-etcd-ca@etcd-3
        configure-etcd-member@etcd-1 <- install-etcd-member@etcd-1
        configure-etcd-member@etcd-2 <- install-etcd-member@etcd-2
        configure-etcd-member@etcd-3 <- install-etcd-member@etcd-3
        start-etcd-member@etcd-1 <- configure-etcd-member@etcd-1
        start-etcd-member@etcd-2 <- configure-etcd-member@etcd-2
        start-etcd-member@etcd-3 <- configure-etcd-member@etcd-3
        verify-etcd-cluster@etcd-1 <- start-etcd-member@etcd-1, start-etcd-member@etcd-2, start-etcd-member@etcd-3
        verify-etcd-cluster@etcd-2 <- start-etcd-member@etcd-1, start-etcd-member@etcd-2, start-etcd-member@etcd-3
        verify-etcd-cluster@etcd-3 <- start-etcd-member@etcd-1, start-etcd-member@etcd-2, start-etcd-member@etcd-3
    "#]]
    .assert_eq(&edges);
}

/// The day-2 templates' plans (examples/etcd/day2, planned from what each intent gives, as with no
/// record): jobs, gates and the job-level graph. The scale actions check every member before
/// anything changes; the destructive ones wait at their gate.
#[test]
fn etcd_day2_plans() {
    let mut report = String::new();
    for name in ["backup", "add-member", "remove-member", "restore", "upgrade", "uninstall"] {
        let run = opsgraph(&[
            "plan",
            "-f",
            &format!("{{root}}/examples/etcd/day2/{name}.yaml"),
            "--inventory",
            "{root}/examples/etcd/inventory.yaml",
            "--packs",
            "{root}/packs/etcd",
            "-o",
            "json",
        ]);
        assert_eq!(run.code, 0, "{}", run.render());
        let plan: serde_json::Value = serde_json::from_str(&run.out).unwrap();
        let gates: Vec<&str> = plan["gates"].as_array().unwrap().iter().filter_map(|g| g["id"].as_str()).collect();
        report.push_str(&format!(
            "{name}: {} {} jobs, gates [{}], {}\n",
            plan["template"].as_str().unwrap(),
            plan["jobs"].as_array().unwrap().len(),
            gates.join(", "),
            plan["status"].as_str().unwrap()
        ));
        for j in plan["jobs"].as_array().unwrap() {
            let deps: Vec<&str> = j["depends_on"].as_array().unwrap().iter().filter_map(|d| d.as_str()).collect();
            report.push_str(&format!("  {} <- {}\n", j["id"].as_str().unwrap(), deps.join(", ")));
        }
    }
    expect![[r#"
        backup: etcd.backup 1 jobs, gates [], ready
          backup-etcd@etcd-1 <- 
        add-member: etcd.add_member 11 jobs, gates [], ready
          check-etcd-add@etcd-1 <- 
          check-etcd-add@etcd-2 <- 
          check-etcd-add@etcd-3 <- 
          check-etcd-add@etcd-4 <- 
          issue-joining-certificate@etcd-4 <- check-etcd-add@etcd-1, check-etcd-add@etcd-2, check-etcd-add@etcd-3, check-etcd-add@etcd-4
          install-joining-member@etcd-4 <- issue-joining-certificate@etcd-4
          join-etcd-member@etcd-4 <- install-joining-member@etcd-4
          verify-etcd-cluster@etcd-1 <- join-etcd-member@etcd-4
          verify-etcd-cluster@etcd-2 <- join-etcd-member@etcd-4
          verify-etcd-cluster@etcd-3 <- join-etcd-member@etcd-4
          verify-etcd-cluster@etcd-4 <- join-etcd-member@etcd-4
        remove-member: etcd.remove_member 7 jobs, gates [confirm-remove-etcd-member], waiting_for_gates
          check-etcd-remove@etcd-1 <- 
          check-etcd-remove@etcd-2 <- 
          check-etcd-remove@etcd-3 <- 
          remove-etcd-member@etcd-4 <- check-etcd-remove@etcd-1, check-etcd-remove@etcd-2, check-etcd-remove@etcd-3, confirm-remove-etcd-member
          verify-etcd-cluster@etcd-1 <- remove-etcd-member@etcd-4
          verify-etcd-cluster@etcd-2 <- remove-etcd-member@etcd-4
          verify-etcd-cluster@etcd-3 <- remove-etcd-member@etcd-4
        restore: etcd.restore 9 jobs, gates [confirm-restore-etcd-member], waiting_for_gates
          restore-etcd-member@etcd-1 <- confirm-restore-etcd-member
          restore-etcd-member@etcd-2 <- confirm-restore-etcd-member
          restore-etcd-member@etcd-3 <- confirm-restore-etcd-member
          start-restored-member@etcd-1 <- restore-etcd-member@etcd-1, restore-etcd-member@etcd-2, restore-etcd-member@etcd-3
          start-restored-member@etcd-2 <- restore-etcd-member@etcd-1, restore-etcd-member@etcd-2, restore-etcd-member@etcd-3
          start-restored-member@etcd-3 <- restore-etcd-member@etcd-1, restore-etcd-member@etcd-2, restore-etcd-member@etcd-3
          verify-etcd-cluster@etcd-1 <- start-restored-member@etcd-1, start-restored-member@etcd-2, start-restored-member@etcd-3
          verify-etcd-cluster@etcd-2 <- start-restored-member@etcd-1, start-restored-member@etcd-2, start-restored-member@etcd-3
          verify-etcd-cluster@etcd-3 <- start-restored-member@etcd-1, start-restored-member@etcd-2, start-restored-member@etcd-3
        upgrade: etcd.upgrade 6 jobs, gates [], ready
          upgrade-etcd-member@etcd-1 <- 
          upgrade-etcd-member@etcd-2 <- upgrade-etcd-member@etcd-1
          upgrade-etcd-member@etcd-3 <- upgrade-etcd-member@etcd-2
          verify-etcd-cluster@etcd-1 <- upgrade-etcd-member@etcd-1, upgrade-etcd-member@etcd-2, upgrade-etcd-member@etcd-3
          verify-etcd-cluster@etcd-2 <- upgrade-etcd-member@etcd-1, upgrade-etcd-member@etcd-2, upgrade-etcd-member@etcd-3
          verify-etcd-cluster@etcd-3 <- upgrade-etcd-member@etcd-1, upgrade-etcd-member@etcd-2, upgrade-etcd-member@etcd-3
        uninstall: etcd.uninstall 3 jobs, gates [confirm-uninstall-etcd-member], waiting_for_gates
          uninstall-etcd-member@etcd-1 <- confirm-uninstall-etcd-member
          uninstall-etcd-member@etcd-2 <- confirm-uninstall-etcd-member
          uninstall-etcd-member@etcd-3 <- confirm-uninstall-etcd-member
    "#]].assert_eq(&report);
}

/// Runs a pack script as the runtime does (`sh -eu`), with only `env`.
fn script(name: &str, env: &[(&str, String)]) -> std::process::Output {
    Command::new("/bin/sh")
        .arg("-eu")
        .arg(path(&format!("packs/etcd/scripts/{name}")))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("OPSGRAPH_LIB", path("packs/etcd/scripts/lib"))
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .output()
        .unwrap()
}

fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl").args(args).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn etcd_certificates_are_issued_by_its_scripts() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    let dir = temp_dir(&[("ca/.keep", ""), ("m2/.keep", "")]);
    let ca = dir.path().join("ca");
    let out = script(
        "issue-ca.sh",
        &[("OPSGRAPH_OUT", ca.display().to_string()), ("OPSGRAPH_PARAM_CLUSTER_NAME", "config-store".into())],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let member = |name: &str, out_dir: &Path, addresses: &str| {
        script(
            "issue-member-certificate.sh",
            &[
                ("OPSGRAPH_OUT", out_dir.display().to_string()),
                ("OPSGRAPH_TARGET_NAME", name.into()),
                ("OPSGRAPH_PARAM_MEMBER_ADDRESSES", addresses.into()),
                ("OPSGRAPH_ARTIFACT_ETCD_CA_CERT", ca.join("etcd_ca_cert").display().to_string()),
                ("OPSGRAPH_ARTIFACT_ETCD_CA_KEY", ca.join("etcd_ca_key").display().to_string()),
            ],
        )
    };
    let m2 = dir.path().join("m2");
    let addresses = "etcd-1=10.0.3.11,etcd-2=10.0.3.12,etcd-3=10.0.3.13";
    let out = member("etcd-2", &m2, addresses);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cert = m2.join("etcd_member_cert").display().to_string();
    let ca_cert = ca.join("etcd_ca_cert").display().to_string();
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt as _;
        format!("{:o}", std::fs::metadata(p).unwrap().permissions().mode() & 0o777)
    };
    let report = format!(
        "stdout: {}verify: {}subject: {}{}key modes: ca {} member {}\n",
        String::from_utf8_lossy(&out.stdout),
        openssl(&["verify", "-CAfile", &ca_cert, &cert]).replace(&cert, "$CERT"),
        openssl(&["x509", "-in", &cert, "-noout", "-subject"]),
        openssl(&["x509", "-in", &cert, "-noout", "-ext", "subjectAltName,extendedKeyUsage"]),
        mode(&ca.join("etcd_ca_key")),
        mode(&m2.join("etcd_member_key")),
    );
    expect![[r#"
        stdout: issued the certificate of member etcd-2 (10.0.3.12) for 825 days
        verify: $CERT: OK
        subject: subject=CN = etcd-2
        X509v3 Extended Key Usage: 
            TLS Web Server Authentication, TLS Web Client Authentication
        X509v3 Subject Alternative Name: 
            DNS:etcd-2, DNS:localhost, IP Address:10.0.3.12, IP Address:127.0.0.1
        key modes: ca 600 member 600
    "#]]
    .assert_eq(&report);
    // Bad input: a member without an address, a malformed list. Nothing is written.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut refusals = String::new();
    for (name, list) in [("etcd-4", addresses), ("etcd-1", "etcd-1=10.0.3.11;etcd-2=10.0.3.12"), ("etcd-1", "")] {
        let out = member(name, &empty, list);
        refusals.push_str(&format!("{} {}", out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr)));
    }
    expect![[r#"
        1 member etcd-4 has no address in member_addresses
        2 member_addresses: bad address in 'etcd-1=10.0.3.11;etcd-2=10.0.3.12'
        2 member_addresses is empty: give name=IPv4 for every member
    "#]]
    .assert_eq(&refusals);
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

/// etcd processes killed when the test ends, however it ends.
struct Members(Vec<std::process::Child>);

impl Drop for Members {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A directory on PATH holding `etcd` and `etcdctl` (Debian's etcd-server and etcd-client), or
/// the one OPSGRAPH_ETCD_BIN names.
fn etcd_bin() -> Option<std::path::PathBuf> {
    let dirs = std::env::var("OPSGRAPH_ETCD_BIN").into_iter().chain(std::env::var("PATH").ok());
    dirs.flat_map(|d| d.split(':').map(std::path::PathBuf::from).collect::<Vec<_>>())
        .find(|d| d.join("etcd").is_file() && d.join("etcdctl").is_file())
}

/// The pack's certificates, its configure script and its evidence, on a real 3-member etcd
/// cluster of this machine (three loopback addresses): `endpoint health --cluster` and the
/// member list pass, and fail once a member is killed. Paths under /etc and /var are moved into
/// a temporary directory; the script text is otherwise the pack's.
#[test]
fn etcd_cluster_from_the_packs_certificates_configuration_and_evidence() {
    let Some(bin) = etcd_bin() else {
        eprintln!("skipped: no etcd and etcdctl on PATH or in OPSGRAPH_ETCD_BIN (.ci/run unpacks Debian's etcd-server and etcd-client)");
        return;
    };
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    // Addresses of this process only (127.P.Q.11-13), so parallel runs do not meet.
    let pid = std::process::id();
    let net = format!("127.{}.{}", (pid >> 8) % 200 + 20, pid % 250 + 1);
    let addresses: String = (1..=3).map(|i| format!("etcd-{i}={net}.1{i}")).collect::<Vec<_>>().join(",");
    let dir = temp_dir(&[("ca/.keep", "")]);
    let root = dir.path();
    let ca = root.join("ca");
    let out = script("issue-ca.sh", &[("OPSGRAPH_OUT", ca.display().to_string())]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The configuration is written by the pack library's write_etcd_config.
    let lib = std::fs::read_to_string(path("packs/etcd/scripts/lib/etcd-lib.sh")).unwrap();
    let mut members = Members(Vec::new());
    for i in 1..=3 {
        let m = root.join(format!("m{i}"));
        for sub in ["out", "pki", "default", "var/lib/opsgraph", "lib"] {
            std::fs::create_dir_all(m.join(sub)).unwrap();
        }
        let name = format!("etcd-{i}");
        let out = script(
            "issue-member-certificate.sh",
            &[
                ("OPSGRAPH_OUT", m.join("out").display().to_string()),
                ("OPSGRAPH_TARGET_NAME", name.clone()),
                ("OPSGRAPH_PARAM_MEMBER_ADDRESSES", addresses.clone()),
                ("OPSGRAPH_ARTIFACT_ETCD_CA_CERT", ca.join("etcd_ca_cert").display().to_string()),
                ("OPSGRAPH_ARTIFACT_ETCD_CA_KEY", ca.join("etcd_ca_key").display().to_string()),
            ],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::copy(ca.join("etcd_ca_cert"), m.join("pki/ca.crt")).unwrap();
        std::fs::copy(m.join("out/etcd_member_cert"), m.join("pki/member.crt")).unwrap();
        std::fs::copy(m.join("out/etcd_member_key"), m.join("pki/member.key")).unwrap();
        let moved = lib
            .replace("/etc/default/etcd", &m.join("default/etcd").display().to_string())
            .replace("/etc/etcd/pki", &m.join("pki").display().to_string())
            .replace("/var/lib/", &format!("{}/var/lib/", m.display()));
        std::fs::write(m.join("lib/etcd-lib.sh"), moved).unwrap();
        let out = Command::new("/bin/sh")
            .arg("-eu")
            .arg(path("packs/etcd/scripts/configure-etcd.sh"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("OPSGRAPH_LIB", m.join("lib"))
            .env("OPSGRAPH_TARGET_NAME", &name)
            .env("OPSGRAPH_PARAM_MEMBER_ADDRESSES", &addresses)
            .env("OPSGRAPH_PARAM_CLUSTER_NAME", "probe")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        // etcd.service reads the file as its environment; on one machine only one member can
        // also listen on 127.0.0.1:2379, so the others listen on their own address only.
        let config = std::fs::read_to_string(m.join("default/etcd")).unwrap();
        let mut etcd = Command::new(bin.join("etcd"));
        etcd.env_clear()
            .current_dir(&m)
            .stdout(std::fs::File::create(m.join("log")).unwrap())
            .stderr(std::fs::File::create(m.join("log.err")).unwrap());
        for line in config.lines().filter(|l| !l.starts_with('#')) {
            let (k, v) = line.split_once('=').unwrap();
            etcd.env(k, v);
        }
        etcd.env("ETCD_LISTEN_CLIENT_URLS", format!("https://{net}.1{i}:2379"));
        members.0.push(etcd.spawn().unwrap());
    }
    // The pack's evidence checks, as a member's job sees them (member 1's files and address).
    let (packs, _) = opsgraph::load::packs(&[opsgraph::load::Source::parse(&path("packs/etcd"))]);
    let pack = &packs[0];
    let m1 = root.join("m1");
    let check = |id: &str, retries: u32| {
        let mut ev = pack.evidence[id].clone();
        let cmd = ev.command.as_ref().unwrap().to_string();
        let cmd = cmd
            .replace("/etc/etcd/pki", &m1.join("pki").display().to_string())
            .replace("https://127.0.0.1:2379", &format!("https://{net}.11:2379"));
        ev.command = Some(opsgraph_core::model::Command::Line(cmd));
        ev.retries = Some(retries);
        let env: std::collections::BTreeMap<String, String> = [
            ("PATH".to_owned(), format!("{}:/usr/bin:/bin", bin.display())),
            ("OPSGRAPH_PARAM_MEMBER_ADDRESSES".to_owned(), addresses.clone()),
        ]
        .into();
        opsgraph_exec::check_evidence(&ev, &opsgraph_exec::LocalExecutor, &env, &opsgraph_exec::Cancel::new())
    };
    let healthy = check("etcd_cluster_healthy", 20);
    let started = check("etcd_members_started", 5);
    let mut report = format!(
        "etcd_cluster_healthy: {}\netcd_members_started: {} ({})\n",
        healthy.passed,
        started.passed,
        started.observed.trim()
    );
    assert!(healthy.passed, "{healthy:?}\n{}", std::fs::read_to_string(m1.join("log.err")).unwrap_or_default());
    assert!(started.passed, "{started:?}");
    // add_member's and remove_member's check (check-etcd-scale.sh) from member 1, against
    // memberships after the change; its paths moved as the library's are.
    let scale = std::fs::read_to_string(path("packs/etcd/scripts/check-etcd-scale.sh"))
        .unwrap()
        .replace("/etc/default/etcd", &m1.join("default/etcd").display().to_string())
        .replace("/var/lib/", &format!("{}/var/lib/", m1.display()))
        .replace("https://127.0.0.1:2379", &format!("https://{net}.11:2379"));
    std::fs::write(m1.join("check-etcd-scale.sh"), scale).unwrap();
    let scale = |job: &str, list: &str| {
        let list = list.replace("NET", &net);
        let out = Command::new("/bin/sh")
            .arg("-eu")
            .arg(m1.join("check-etcd-scale.sh"))
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("OPSGRAPH_LIB", m1.join("lib"))
            .env("OPSGRAPH_JOB_ID", format!("{job}@etcd-1"))
            .env("OPSGRAPH_TARGET_NAME", "etcd-1")
            .env("OPSGRAPH_PARAM_CLUSTER_NAME", "probe")
            .env("OPSGRAPH_PARAM_MEMBER_ADDRESSES", &list)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).replace(&net, "NET");
        format!(
            "{job} [{}]: {} {}\n",
            list.replace(&net, "NET"),
            out.status.code().unwrap_or(-1),
            err.lines().last().unwrap_or("")
        )
    };
    let (m2, m3) = ("etcd-2=NET.12", "etcd-3=NET.13");
    let cases = [
        ("check-etcd-add", format!("etcd-1=NET.11,{m2},{m3},etcd-4=NET.14")),
        ("check-etcd-add", format!("etcd-1=NET.11,{m2},{m3},etcd-4=NET.14,etcd-5=NET.15")),
        ("check-etcd-add", format!("etcd-1=NET.11,{m2},etcd-4=NET.14")),
        ("check-etcd-remove", format!("etcd-1=NET.11,{m2}")),
        ("check-etcd-remove", "etcd-1=NET.11".to_owned()),
        ("check-etcd-remove", format!("etcd-1=NET.11,{m2},{m3}")),
    ];
    for (job, list) in &cases {
        report.push_str(&scale(job, list));
    }
    let mut third = members.0.pop().unwrap();
    third.kill().unwrap();
    third.wait().unwrap();
    let down = check("etcd_cluster_healthy", 0);
    report.push_str(&format!("after killing etcd-3: etcd_cluster_healthy: {} ({})\n", down.passed, down.observed));
    // With etcd-3 down: no member is added; etcd-3 itself may leave (etcd-1 and etcd-2 are a
    // quorum of 3), etcd-2 may not (etcd-1 alone would stay healthy).
    report.push_str(&scale("check-etcd-add", &format!("etcd-1=NET.11,{m2},{m3},etcd-4=NET.14")));
    report.push_str(&scale("check-etcd-remove", &format!("etcd-1=NET.11,{m3}")));
    report.push_str(&scale("check-etcd-remove", &format!("etcd-1=NET.11,{m2}")));
    expect![[r#"
        etcd_cluster_healthy: true
        etcd_members_started: true (exit code 0; 3 started)
        check-etcd-add [etcd-1=NET.11,etcd-2=NET.12,etcd-3=NET.13,etcd-4=NET.14]: 0 check-etcd-scale[etcd-1]: ok: all 3 members healthy; etcd-4 may join (quorum 2 -> 3)
        check-etcd-add [etcd-1=NET.11,etcd-2=NET.12,etcd-3=NET.13,etcd-4=NET.14,etcd-5=NET.15]: 1 check-etcd-scale[etcd-1]: ERROR: member_addresses names etcd-4 etcd-5 as new: add one member at a time
        check-etcd-add [etcd-1=NET.11,etcd-2=NET.12,etcd-4=NET.14]: 1 check-etcd-scale[etcd-1]: ERROR: members not in member_addresses: etcd-3 (add one member at a time, keeping the others)
        check-etcd-remove [etcd-1=NET.11,etcd-2=NET.12]: 0 check-etcd-scale[etcd-1]: ok: etcd-3 may leave; 2 healthy members stay (quorum 2 -> 2)
        check-etcd-remove [etcd-1=NET.11]: 1 check-etcd-scale[etcd-1]: ERROR: etcd-2 etcd-3 would leave: remove one member at a time
        check-etcd-remove [etcd-1=NET.11,etcd-2=NET.12,etcd-3=NET.13]: 1 check-etcd-scale[etcd-1]: ERROR: every member is in member_addresses: nothing to remove
        after killing etcd-3: etcd_cluster_healthy: false (exit code 1)
        check-etcd-add [etcd-1=NET.11,etcd-2=NET.12,etcd-3=NET.13,etcd-4=NET.14]: 1 check-etcd-scale[etcd-1]: ERROR: the cluster is not healthy; refusing to add a member: https://NET.13:2379 unhealthy
        check-etcd-remove [etcd-1=NET.11,etcd-3=NET.13]: 1 check-etcd-scale[etcd-1]: ERROR: only 1 of the members that stay are healthy; removing etcd-2 needs 2 (a quorum of 3): refusing
        check-etcd-remove [etcd-1=NET.11,etcd-2=NET.12]: 0 check-etcd-scale[etcd-1]: ok: etcd-3 may leave; 2 healthy members stay (quorum 2 -> 2)
    "#]]
    .assert_eq(&report);
}

/// Applying create_cluster again: issue-etcd-ca keeps the CA an intent names (ca_cert and
/// ca_key, an earlier operation's artifacts) once it proves the key is the certificate's and the
/// certificate a self-signed CA, and refuses anything else, writing nothing.
#[test]
fn etcd_ca_named_again_is_checked_and_kept() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    let dir = temp_dir(&[("ca/.keep", ""), ("other/.keep", ""), ("m1/.keep", "")]);
    let file = |sub: &str, name: &str| dir.path().join(sub).join(name).display().to_string();
    for sub in ["ca", "other"] {
        let out = script("issue-ca.sh", &[("OPSGRAPH_OUT", dir.path().join(sub).display().to_string())]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let out = script(
        "issue-member-certificate.sh",
        &[
            ("OPSGRAPH_OUT", dir.path().join("m1").display().to_string()),
            ("OPSGRAPH_TARGET_NAME", "etcd-1".into()),
            ("OPSGRAPH_PARAM_MEMBER_ADDRESSES", "etcd-1=10.0.3.11".into()),
            ("OPSGRAPH_ARTIFACT_ETCD_CA_CERT", file("ca", "etcd_ca_cert")),
            ("OPSGRAPH_ARTIFACT_ETCD_CA_KEY", file("ca", "etcd_ca_key")),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // issue-etcd-ca given (ca_cert's file, ca_key's file), as the runtime hands artifact parameters.
    let again = |name: &str, cert: Option<String>, key: Option<String>| {
        let out_dir = dir.path().join(name);
        std::fs::create_dir_all(&out_dir).unwrap();
        let mut env = vec![("OPSGRAPH_OUT", out_dir.display().to_string())];
        if let Some(cert) = cert {
            env.push(("OPSGRAPH_PARAM_CA_CERT", "op-create1/etcd_ca_cert".into()));
            env.push(("OPSGRAPH_ARTIFACT_ETCD_CA_CERT", cert));
        }
        if let Some(key) = key {
            env.push(("OPSGRAPH_PARAM_CA_KEY", "op-create1/etcd_ca_key".into()));
            env.push(("OPSGRAPH_ARTIFACT_ETCD_CA_KEY", key));
        }
        let out = script("issue-ca.sh", &env);
        let written: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        format!(
            "{name}: exit {} {}{}written {written:?}\n",
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let report = [
        again("kept", Some(file("ca", "etcd_ca_cert")), Some(file("ca", "etcd_ca_key"))),
        again("other-key", Some(file("ca", "etcd_ca_cert")), Some(file("other", "etcd_ca_key"))),
        again("member-cert", Some(file("m1", "etcd_member_cert")), Some(file("m1", "etcd_member_key"))),
        again("cert-only", Some(file("ca", "etcd_ca_cert")), None),
        again("key-only", None, Some(file("ca", "etcd_ca_key"))),
        again("not-pem", Some(file("ca", "etcd_ca_key")), Some(file("ca", "etcd_ca_key"))),
    ]
    .concat();
    expect![[r#"
        kept: exit 0 kept the CA of cluster etcd from op-create1
        written ["etcd_ca_cert", "etcd_ca_key"]
        other-key: exit 1 ca_key (op-create1/etcd_ca_key) is not the key of ca_cert (op-create1/etcd_ca_cert)
        written []
        member-cert: exit 1 ca_cert (op-create1/etcd_ca_cert) is not a self-signed CA certificate that is valid now
        written []
        cert-only: exit 2 give both ca_cert and ca_key (the CA of the operation that created the cluster), or neither
        written []
        key-only: exit 2 give both ca_cert and ca_key (the CA of the operation that created the cluster), or neither
        written []
        not-pem: exit 1 ca_cert (op-create1/etcd_ca_cert) is not a PEM certificate
        written []
    "#]]
    .assert_eq(&report);
    for name in ["etcd_ca_cert", "etcd_ca_key"] {
        assert_eq!(std::fs::read(file("kept", name)).unwrap(), std::fs::read(file("ca", name)).unwrap(), "{name}");
    }
}

/// check-etcd-ca on a member (its /etc/etcd/pki moved into a temporary directory): it passes where
/// the member holds no CA or this operation's, and refuses another, naming the operation whose CA
/// the member holds (install-etcd-member's ca.operation) and the parameters to give.
#[test]
fn etcd_member_holding_another_ca_refuses_the_new_one() {
    let dir = temp_dir(&[("ca.pem", "-----BEGIN CERTIFICATE-----\nnew\n-----END CERTIFICATE-----\n")]);
    let pki = dir.path().join("pki");
    let text = std::fs::read_to_string(path("packs/etcd/scripts/check-etcd-ca.sh"))
        .unwrap()
        .replace("/etc/etcd/pki", &pki.display().to_string());
    let check_script = dir.path().join("check-etcd-ca.sh");
    std::fs::write(&check_script, text).unwrap();
    let new_ca = dir.path().join("ca.pem").display().to_string();
    let check = |case: &str, held: Option<&str>, operation: Option<&str>| {
        let _ = std::fs::remove_dir_all(&pki);
        std::fs::create_dir_all(&pki).unwrap();
        if let Some(held) = held {
            std::fs::write(pki.join("ca.crt"), held).unwrap();
        }
        if let Some(op) = operation {
            std::fs::write(pki.join("ca.operation"), format!("{op}\n")).unwrap();
        }
        let out = Command::new("/bin/sh")
            .arg("-eu")
            .arg(&check_script)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("OPSGRAPH_LIB", path("packs/etcd/scripts/lib"))
            .env("OPSGRAPH_TARGET_NAME", "etcd-2")
            .env("OPSGRAPH_ARTIFACT_ETCD_CA_CERT", &new_ca)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).replace(&pki.display().to_string(), "$PKI");
        format!("{case}: exit {}\n{stderr}", out.status.code().unwrap_or(-1))
    };
    let new = std::fs::read_to_string(&new_ca).unwrap();
    let old = "-----BEGIN CERTIFICATE-----\nold\n-----END CERTIFICATE-----\n";
    let report = [
        check("none", None, None),
        check("same", Some(&new), Some("op-abc")),
        check("other", Some(old), Some("op-abc")),
        check("other, unrecorded", Some(old), None),
        check("other, recorded badly", Some(old), Some("op-abc; rm -rf /")),
    ]
    .concat();
    expect![[r#"
        none: exit 0
        check-etcd-ca[etcd-2]: etcd-2 holds no CA certificate yet: this operation's will be installed
        same: exit 0
        check-etcd-ca[etcd-2]: etcd-2 holds this operation's CA certificate already
        other: exit 1
        check-etcd-ca[etcd-2]: ERROR: etcd-2 holds another CA certificate ($PKI/ca.crt, sha256 64ab829fc93fd33a...) than this operation's (sha256 c19eb8fce97e0c68...): installing it would cut the member off from its peers and clients
        check-etcd-ca[etcd-2]: to apply create_cluster again, give the cluster's CA in the intent's parameters: ca_cert: op-abc/etcd_ca_cert and ca_key: op-abc/etcd_ca_key
        check-etcd-ca[etcd-2]: to make a new cluster on this host instead, uninstall the old one with purge: true first
        other, unrecorded: exit 1
        check-etcd-ca[etcd-2]: ERROR: etcd-2 holds another CA certificate ($PKI/ca.crt, sha256 64ab829fc93fd33a...) than this operation's (sha256 c19eb8fce97e0c68...): installing it would cut the member off from its peers and clients
        check-etcd-ca[etcd-2]: to apply create_cluster again, give the cluster's CA in the intent's parameters: ca_cert: <operation>/etcd_ca_cert and ca_key: <operation>/etcd_ca_key, of the operation that created the cluster (opsgraph describe resource)
        check-etcd-ca[etcd-2]: to make a new cluster on this host instead, uninstall the old one with purge: true first
        other, recorded badly: exit 1
        check-etcd-ca[etcd-2]: ERROR: etcd-2 holds another CA certificate ($PKI/ca.crt, sha256 64ab829fc93fd33a...) than this operation's (sha256 c19eb8fce97e0c68...): installing it would cut the member off from its peers and clients
        check-etcd-ca[etcd-2]: to apply create_cluster again, give the cluster's CA in the intent's parameters: ca_cert: <operation>/etcd_ca_cert and ca_key: <operation>/etcd_ca_key, of the operation that created the cluster (opsgraph describe resource)
        check-etcd-ca[etcd-2]: to make a new cluster on this host instead, uninstall the old one with purge: true first
    "#]]
    .assert_eq(&report);
    // Nothing was changed on the member.
    assert_eq!(std::fs::read_to_string(pki.join("ca.crt")).unwrap(), old);
}
