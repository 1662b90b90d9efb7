//! Pack catalogues ([O] 5): `pack search` and `pack install NAME[@VERSION] --from URL` against a
//! static catalogue served on loopback by a bare HTTP server; packs signed with minisign keys and
//! verified against the trusted keys before anything is written. Every refusal has its code, and
//! leaves the registry and the audit log as they were.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use expect_test::{expect, Expect};
use serde_json::Value;

use crate::packs::{hello, tar_gz};
use crate::support::{opsgraph, temp_dir, Run, TempDir};

/// A static file server on 127.0.0.1: GET of a file under `root`, else 404. Stops when dropped.
struct Serve {
    base: String,
    stop: Arc<AtomicBool>,
}

impl Serve {
    fn start(root: &Path) -> Serve {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let (root, flag) = (root.to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                // The rest of the head.
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).map_or(true, |n| n == 0) || line == "\r\n" {
                        break;
                    }
                }
                let path = request.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
                let file = (!path.contains("..")).then(|| root.join(&path)).filter(|p| p.is_file());
                let _ = match file.and_then(|f| std::fs::read(f).ok()) {
                    Some(body) => {
                        let head =
                            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                        conn.write_all(head.as_bytes()).and_then(|_| conn.write_all(&body))
                    }
                    None => conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
                };
            }
        });
        Serve { base, stop }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.base.trim_start_matches("http://"));
    }
}

/// A signing key: minisign's, as `minisign -G` makes it (without a password).
struct Key {
    pk: minisign::PublicKey,
    sk: minisign::SecretKey,
}

impl Key {
    fn new() -> Key {
        let minisign::KeyPair { pk, sk } = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
        Key { pk, sk }
    }

    /// The public key's base64 line, as `trusted_keys:` and `--trusted-key` take it.
    fn public(&self) -> String {
        self.pk.to_base64()
    }

    fn id(&self) -> String {
        format!("{:016X}", u64::from_le_bytes(self.pk.keynum().try_into().unwrap()))
    }

    /// A `.minisig` of `bytes`, as `minisign -S` writes it.
    fn sign(&self, bytes: &[u8]) -> String {
        minisign::sign(Some(&self.pk), &self.sk, std::io::Cursor::new(bytes), None, None).unwrap().to_string()
    }
}

/// A catalogue directory `cat/` with hello 1.0.0 and 1.1.0 signed by `key`, its index written by
/// `pack index`, served over HTTP; `data/` the data directory.
struct Ws {
    dir: TempDir,
    key: Key,
    serve: Serve,
}

impl Ws {
    fn new() -> Ws {
        let dir = temp_dir(&[]);
        let key = Key::new();
        for version in ["1.0.0", "1.1.0"] {
            let mut files = hello(version, false);
            files[0].1.push_str(&format!("  title: Says hello ({version})\n"));
            let archive = tar_gz(&files, Some("hello"));
            write(&dir.join(&format!("cat/hello/hello-{version}.tar.gz")), &archive);
            write(&dir.join(&format!("cat/hello/hello-{version}.tar.gz.minisig")), key.sign(&archive).as_bytes());
        }
        let serve = Serve::start(&dir.join("cat"));
        let ws = Ws { dir, key, serve };
        ws.reindex();
        ws
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// `index.json` from `pack index`.
    fn reindex(&self) {
        let run = opsgraph(&["pack", "index", &self.path("cat").display().to_string()]);
        assert_eq!(run.code, 0, "{}", run.render());
        write(&self.path("cat/index.json"), run.out.as_bytes());
    }

    fn index(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path("cat/index.json")).unwrap()).unwrap()
    }

    fn set_index(&self, index: &Value) {
        write(&self.path("cat/index.json"), serde_json::to_string_pretty(index).unwrap().as_bytes());
    }

    fn run(&self, args: &[&str]) -> Run {
        let data = self.path("data").display().to_string();
        let mut all = vec!["--data-dir", data.as_str()];
        all.extend_from_slice(args);
        opsgraph(&all)
    }

    /// `pack install REFERENCE --from <served> [extra]`'s arguments.
    fn install_args<'a>(&'a self, reference: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["pack", "install", reference, "--from", &self.serve.base];
        args.extend_from_slice(extra);
        args
    }

    fn install(&self, reference: &str, extra: &[&str]) -> Run {
        self.run(&self.install_args(reference, extra))
    }

    /// Output with the server's address, the key ids and hex digests replaced.
    fn clean(&self, text: &str) -> String {
        let hex = regex::Regex::new("[0-9a-f]{64}").unwrap();
        let text = text.replace(&self.serve.base, "URL").replace(&self.key.id(), "KEY");
        hex.replace_all(&text, "HEX").to_string()
    }

    /// Installed packs (`id@version`) and `pack.install` audit rows.
    fn state(&self) -> (Vec<String>, usize) {
        let list: Value = serde_json::from_str(&self.run(&["pack", "list", "-o", "json"]).out).unwrap();
        let installed = list
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] != "bundled")
            .map(|r| format!("{}@{}", r["id"].as_str().unwrap(), r["version"].as_str().unwrap()))
            .collect();
        let audit = self.run(&["audit", "-o", "json"]);
        let rows: Value = serde_json::from_str(&audit.out).unwrap_or(Value::Array(vec![]));
        let n = rows.as_array().map_or(0, |r| r.iter().filter(|r| r["action"] == "pack.install").count());
        (installed, n)
    }

    /// A refused install (exit 1, nothing on standard output), nothing installed or audited:
    /// its error, cleaned.
    fn refused(&self, reference: &str, extra: &[&str]) -> String {
        self.refused_run(&self.install_args(reference, extra))
    }

    /// The same for a run of `opsgraph ARGS` that installs.
    fn refused_run(&self, args: &[&str]) -> String {
        let before = self.state();
        let run = self.run(args);
        assert_eq!((run.code, run.out.as_str()), (1, ""), "{}", run.render());
        assert_eq!(self.state(), before, "a refusal changed nothing");
        self.clean(&run.err)
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn search_lists_the_packs_of_a_catalogue() {
    let ws = Ws::new();
    let check = |args: &[&str], expect: Expect| {
        let mut all = vec!["pack", "search"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--from", &ws.serve.base]);
        expect.assert_eq(&ws.clean(&ws.run(&all).render()));
    };
    check(
        &[],
        expect![[r#"
            exit: 0
            --- stdout
            hello@1.0.0  Says hello (1.0.0)
            hello@1.1.0  Says hello (1.1.0)
        "#]],
    );
    check(
        &["1.1"],
        expect![[r#"
            exit: 0
            --- stdout
            hello@1.1.0  Says hello (1.1.0)
        "#]],
    );
    check(
        &["tempo"],
        expect![[r#"
            exit: 0
            --- stdout
            no pack in URL/index.json matches
        "#]],
    );
    // The index `pack index` wrote: paths, sha256, signature, the pinned content digest.
    let entry = &ws.index()["packs"][1];
    expect![[r#"
        {
          "name": "hello",
          "version": "1.1.0",
          "description": "Says hello (1.1.0)",
          "tarball": "hello/hello-1.1.0.tar.gz",
          "sha256": "HEX",
          "signature": "hello/hello-1.1.0.tar.gz.minisig",
          "digest": "sha256:HEX"
        }"#]]
    .assert_eq(&ws.clean(&serde_json::to_string_pretty(entry).unwrap()));
    // Credentials in the URL would be recorded: refused, and not echoed.
    let run = ws.run(&["pack", "search", "--from", &ws.serve.base.replace("http://", "http://u:secret@")]);
    expect![[r#"
        exit: 1
        --- stderr
        error[catalogue_invalid]: a catalogue URL with credentials, a query or a fragment is refused: it is recorded in the install record and the audit log; serve the catalogue without them
    "#]]
    .assert_eq(&ws.clean(&run.render()));
    // A catalogue that is not there.
    let run = ws.run(&["pack", "search", "--from", &format!("{}/nowhere/", ws.serve.base)]);
    expect![[r#"
        exit: 1
        --- stderr
        error[catalogue_fetch_failed]: URL/nowhere/index.json: HTTP 404 Not Found
    "#]]
    .assert_eq(&ws.clean(&run.render()));
}

#[test]
fn a_signed_pack_installs_from_http_and_is_audited() {
    let ws = Ws::new();
    let key = ws.key.public();
    let run = ws.install("hello", &["--trusted-key", &key]);
    expect![[r#"
        exit: 0
        --- stdout
        installed pack hello@1.1.0 sha256:HEX from URL/hello/hello-1.1.0.tar.gz (catalogue URL/index.json, signed by key KEY)
    "#]]
    .assert_eq(&ws.clean(&run.render()));
    // The pack's own digest is what the catalogue pinned, and what `pack list` verifies.
    let list: Value = serde_json::from_str(&ws.run(&["pack", "list", "-o", "json"]).out).unwrap();
    let row = list.as_array().unwrap().iter().find(|r| r["id"] == "hello").unwrap();
    assert_eq!(row["digest"], ws.index()["packs"][1]["digest"]);
    assert_eq!(row["status"], "installed");
    // The audit row: who, what, from where, signed by which key.
    let store = opsgraph::ops_cmd::open_store(&ws.path("data")).unwrap();
    let rows: Vec<_> = store
        .audit(&opsgraph_store::AuditFilter::default())
        .unwrap()
        .into_iter()
        .filter(|r| r.action == "pack.install")
        .collect();
    drop(store);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].target, "hello@1.1.0");
    assert_eq!(rows[0].detail["signed_by"], ws.key.id().as_str());
    assert_eq!(rows[0].detail["sha256"], ws.index()["packs"][1]["sha256"]);
    assert_eq!(rows[0].detail["result"], "installed");
    assert_eq!(rows[0].detail["catalogue"], ws.serve.base.as_str());
    // Again: the same content, nothing to do, no row.
    let again = ws.install("hello@1.1.0", &["--trusted-key", &key]);
    assert!(again.out.contains("is already installed with this content"), "{}", again.render());
    assert_eq!(ws.state(), (vec!["hello@1.1.0".to_string()], 1));

    // A key in config.yaml, an older version by name, from a directory and a file:// URL.
    write(&ws.path("data/config.yaml"), format!("trusted_keys:\n  - {key}\n").as_bytes());
    let cat = ws.path("cat").display().to_string();
    let run = ws.run(&["pack", "install", "hello@1.0.0", "--from", &cat]);
    assert_eq!(run.code, 0, "{}", run.render());
    assert!(run.out.starts_with("installed pack hello@1.0.0 sha256:"), "{}", run.render());
    ws.run(&["pack", "remove", "hello@1.0.0"]);
    let run = ws.run(&["pack", "install", "hello@1.0.0", "--from", &format!("file://{cat}/index.json")]);
    assert_eq!(run.code, 0, "{}", run.render());
    assert_eq!(ws.state(), (vec!["hello@1.0.0".to_string(), "hello@1.1.0".to_string()], 3));
    let audit: Value = serde_json::from_str(&ws.run(&["audit", "-o", "json"]).out).unwrap();
    assert!(audit.as_array().unwrap().iter().any(|r| r["action"] == "pack.remove" && r["target"] == "hello@1.0.0"));
}

#[test]
fn unsigned_tampered_and_untrusted_packs_are_refused() {
    let ws = Ws::new();
    let key = ws.key.public();
    let trusted = ["--trusted-key", key.as_str()];
    // The errors of the refusals below, in order.
    let mut refusals = Vec::new();

    // No key trusted: deny by default, before anything is fetched.
    refusals.push(ws.refused("hello", &[]));
    // Signed by a key that is not trusted.
    let other = Key::new();
    refusals.push(ws.refused("hello", &["--trusted-key", &other.public()]).replace(&other.id(), "OTHER"));
    refusals.push(ws.refused("hello", &["--trusted-key", "RWQnot-a-key"]));
    // Not in the catalogue; a 404 of the catalogue and of an archive.
    refusals.push(ws.refused("hello@9.9.9", &trusted));
    let missing = format!("{}/missing", ws.serve.base);
    refusals.push(ws.refused_run(&["pack", "install", "hello", "--from", &missing, "--trusted-key", &key]));
    let good = std::fs::read(ws.path("cat/hello/hello-1.1.0.tar.gz")).unwrap();
    std::fs::remove_file(ws.path("cat/hello/hello-1.1.0.tar.gz")).unwrap();
    refusals.push(ws.refused("hello", &trusted));

    // Tampered: one byte of the archive changed; then the index's sha256 changed with it.
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz"), &bad);
    refusals.push(ws.refused("hello", &trusted));
    let mut index = ws.index();
    index["packs"][1]["sha256"] = opsgraph::catalogue::sha256_hex(&bad).into();
    ws.set_index(&index);
    refusals.push(ws.refused("hello", &trusted));
    // Another pack re-signed under the entry's name: the signature holds, the pack is not it.
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz"), &good);
    let older = std::fs::read(ws.path("cat/hello/hello-1.0.0.tar.gz")).unwrap();
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz"), &older);
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz.minisig"), ws.key.sign(&older).as_bytes());
    index["packs"][1]["sha256"] = opsgraph::catalogue::sha256_hex(&older).into();
    ws.set_index(&index);
    refusals.push(ws.refused("hello", &trusted));
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz"), &good);
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz.minisig"), ws.key.sign(&good).as_bytes());
    ws.reindex();

    // Unsigned: no signature in the entry; a signature the server does not have; not a signature.
    let mut index = ws.index();
    index["packs"][1].as_object_mut().unwrap().remove("signature");
    ws.set_index(&index);
    refusals.push(ws.refused("hello", &trusted));
    std::fs::remove_file(ws.path("cat/hello/hello-1.1.0.tar.gz.minisig")).unwrap();
    ws.reindex();
    index["packs"][1]["signature"] = "hello/hello-1.1.0.tar.gz.minisig".into();
    ws.set_index(&index);
    refusals.push(ws.refused("hello", &trusted));
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz.minisig"), b"untrusted comment: x\nnot base64\n");
    refusals.push(ws.refused("hello", &trusted));
    // A path that leaves the catalogue.
    index["packs"][1]["tarball"] = "../../etc/passwd".into();
    ws.set_index(&index);
    refusals.push(ws.refused("hello", &trusted));
    expect![[r#"
        error[no_trusted_keys]: no trusted keys: packs from a catalogue are installed only when signed by a key you trust; add its minisign public key to `trusted_keys:` in DATA_DIR/config.yaml or pass --trusted-key
        error[pack_untrusted_key]: hello@1.1.0 is signed by key KEY, which is not trusted (trusted: OTHER); nothing installed
        error[bad_trusted_key]: --trusted-key: `RWQnot-a-key` is not a minisign public key: Invalid encoding in minisign data
        error[pack_not_in_catalogue]: no pack `hello@9.9.9` in the catalogue URL/index.json (versions of hello there: 1.0.0, 1.1.0)
        error[catalogue_fetch_failed]: URL/missing/index.json: HTTP 404 Not Found
        error[catalogue_fetch_failed]: URL/hello/hello-1.1.0.tar.gz: HTTP 404 Not Found
        error[pack_digest_mismatch]: URL/hello/hello-1.1.0.tar.gz: sha256 HEX, but the catalogue says HEX for hello@1.1.0; nothing installed
        error[pack_bad_signature]: URL/hello/hello-1.1.0.tar.gz.minisig: the signature of key KEY does not match URL/hello/hello-1.1.0.tar.gz (The signature verification failed); nothing installed
        error[pack_mismatch]: URL/hello/hello-1.1.0.tar.gz holds pack hello@1.0.0, not hello@1.1.0 as the catalogue says; nothing installed
        error[pack_unsigned]: hello@1.1.0 in URL/index.json has no signature; nothing installed
        error[pack_unsigned]: hello@1.1.0: its signature cannot be had (URL/hello/hello-1.1.0.tar.gz.minisig: HTTP 404 Not Found); nothing installed
        error[pack_bad_signature]: URL/hello/hello-1.1.0.tar.gz.minisig: not a minisign signature (Invalid encoding in minisign data); nothing installed
        error[catalogue_invalid]: `../../etc/passwd`: a catalogue entry names a relative path inside the catalogue (letters, digits, `._-+@/`, no `..`)
    "#]]
    .assert_eq(&refusals.concat());
    // After all that, the good pack installs.
    write(&ws.path("cat/hello/hello-1.1.0.tar.gz.minisig"), ws.key.sign(&good).as_bytes());
    ws.reindex();
    let run = ws.install("hello", &trusted);
    assert_eq!(run.code, 0, "{}", run.render());
    assert_eq!(ws.state(), (vec!["hello@1.1.0".to_string()], 1));
}

/// Through a server: the server fetches over http(s) and verifies against its own trusted keys
/// (`POST /api/v1/packs/catalogue`), refuses with the same codes, and audits an install.
#[test]
fn through_a_server_the_server_verifies_with_its_keys() {
    let ws = Ws::new();
    let api = crate::manage::api();
    let token = ws.path("admin.token");
    write(&token, api.token("admin", &["platform_admin"]).as_bytes());
    let server = crate::serve::Server::start(&api);
    let install = |args: &[&str]| {
        let run = server.opsgraph(&token, &[&["pack", "install"], args].concat());
        ws.clean(&run.render())
    };
    let server_config = api.dir.join("data/config.yaml");
    // The server trusts no key yet; the client's keys do not count.
    expect![[r#"
        exit: 1
        --- stderr
        error: the server refused (422 no_trusted_keys): this server trusts no key: packs from a catalogue are installed only when signed by a key it trusts; add the publisher's minisign public key to `trusted_keys:` in the server's config.yaml
    "#]]
    .assert_eq(&install(&["hello", "--from", &ws.serve.base]));
    let r = install(&["hello", "--from", &ws.serve.base, "--trusted-key", &ws.key.public()]);
    assert!(r.contains("drop --trusted-key"), "{r}");
    let other = Key::new();
    write(&server_config, format!("trusted_keys: [{}]\n", other.public()).as_bytes());
    let r = install(&["hello", "--from", &ws.serve.base]);
    assert!(r.contains("(422 pack_untrusted_key): hello@1.1.0 is signed by key KEY"), "{r}");
    // A server reads no file of its own machine for a client; a 404 is a bad gateway.
    let cat = ws.path("cat").display().to_string();
    expect![[r#"
        exit: 1
        --- stderr
        error: the server refused (422 catalogue_invalid): `CAT`: a server fetches catalogues over http:// or https:// only
    "#]]
    .assert_eq(&install(&["hello", "--from", &cat]).replace(&cat, "CAT"));
    let r = install(&["hello", "--from", &format!("{}/missing", ws.serve.base)]);
    assert!(r.contains("(502 catalogue_fetch_failed): URL/missing/index.json: HTTP 404 Not Found"), "{r}");
    assert!(!api.audit().iter().any(|a| a.contains("pack.install")), "{:?}", api.audit());

    write(&server_config, format!("trusted_keys: [{}, {}]\n", other.public(), ws.key.public()).as_bytes());
    expect![[r#"
        exit: 0
        --- stdout
        installed pack hello@1.1.0 sha256:HEX from URL/hello/hello-1.1.0.tar.gz (catalogue URL/index.json, signed by key KEY)
    "#]]
    .assert_eq(&install(&["hello", "--from", &ws.serve.base]));
    assert_eq!(
        api.audit().into_iter().filter(|a| a.contains("pack.install")).collect::<Vec<_>>(),
        ["user:admin pack.install hello@1.1.0"]
    );
    let store = api.state.store().unwrap();
    let row = store.audit(&Default::default()).unwrap().into_iter().find(|a| a.action == "pack.install").unwrap();
    assert_eq!(row.detail["signed_by"], ws.key.id().as_str());
    let listed = server.opsgraph(&token, &["pack", "list"]);
    assert!(listed.out.lines().any(|l| l.starts_with("hello ") && l.contains("installed")), "{}", listed.render());
}
