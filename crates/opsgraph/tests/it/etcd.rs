//! The etcd pack: its plan over three hosts (a real multi-host DAG: certificates -> members ->
//! cluster health), and its certificate scripts run for real with openssl on this machine.

use std::path::Path;
use std::process::Command;

use expect_test::expect;

use crate::support::{opsgraph, path, temp_dir};

#[test]
fn etcd_plan_preview_over_three_hosts() {
    let run = opsgraph(&[
        "plan",
        "-f",
        "{root}/examples/etcd/intent.yaml",
        "--inventory",
        "{root}/examples/etcd/inventory.yaml",
        "--packs",
        "{root}/packs/etcd",
    ]);
    expect![[r#"
        exit: 0
        --- stdout
        Plan etcd.create (etcd@1.0.0) for: create_cluster etcd.cluster config-store in dev
        Revision 1 sha256:0bf8a759d8ae   Risk: medium

        Capabilities
          linux.host @ members           bind           compute_node/etcd-1, compute_node/etcd-2, compute_node/etcd-3
          ssh.access @ members           bind           compute_node/etcd-1, compute_node/etcd-2, compute_node/etcd-3
          package.manager.apt @ members  bind           compute_node/etcd-1, compute_node/etcd-2, compute_node/etcd-3

        Stages
          1. Certificates       issue-etcd-ca; issue-member-certificate @ etcd-1, etcd-2, etcd-3
          2. Members            install-etcd-member @ etcd-1, etcd-2, etcd-3; configure-etcd-member @ etcd-1, etcd-2, etcd-3; start-etcd-member @ etcd-1, etcd-2, etcd-3
          3. Cluster health     verify-etcd-cluster @ etcd-1, etcd-2, etcd-3

        16 jobs, 0 gates. Nothing has run. Status: ready to apply.
    "#]].assert_eq(&run.render());
    let run = opsgraph(&[
        "plan",
        "-f",
        "{root}/examples/etcd/intent.yaml",
        "--inventory",
        "{root}/examples/etcd/inventory.yaml",
        "--packs",
        "{root}/packs/etcd",
        "-o",
        "json",
    ]);
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
        install-etcd-member@etcd-1 <- issue-etcd-ca, issue-member-certificate@etcd-1
        install-etcd-member@etcd-2 <- issue-etcd-ca, issue-member-certificate@etcd-2
        install-etcd-member@etcd-3 <- issue-etcd-ca, issue-member-certificate@etcd-3
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

/// Runs a pack script as the runtime does (`sh -eu`), with only `env`.
fn script(name: &str, env: &[(&str, String)]) -> std::process::Output {
    Command::new("/bin/sh")
        .arg("-eu")
        .arg(path(&format!("packs/etcd/scripts/{name}")))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
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
