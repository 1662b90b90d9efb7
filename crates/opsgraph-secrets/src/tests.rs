use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use expect_test::{expect, Expect};
use zeroize::Zeroizing;

use super::*;

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("opsgraph-secrets-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn key_file(&self) -> PathBuf {
        self.0.join(KEY_FILE)
    }

    /// `e` as text, with this directory shown as `$DIR`.
    fn show(&self, e: &Error) -> String {
        e.to_string().replace(&self.0.display().to_string(), "$DIR")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key(byte: u8) -> MasterKey {
    MasterKey::from_bytes(Zeroizing::new([byte; 32]))
}

fn ring(active: u8, retired: &[u8]) -> Keyring {
    Keyring::new(key(active), retired.iter().map(|&b| key(b)).collect()).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn write_key_file(dir: &TempDir, text: &str, mode: u32) {
    std::fs::write(dir.key_file(), text).unwrap();
    std::fs::set_permissions(dir.key_file(), std::fs::Permissions::from_mode(mode)).unwrap();
}

// --- Secret ---

#[test]
fn secrets_and_keys_never_print_their_value() {
    let secret = Secret::from("hunter2hunter2");
    let keyring = ring(1, &[2]);
    let text = format!("{secret:?} | {secret} | {:?} | {keyring:?}", key(1));
    expect!["Secret(**redacted**, 14 bytes) | Secret(**redacted**, 14 bytes) | MasterKey(b1cc2566, **redacted**) | Keyring { active: KeyId(b1cc2566), retired: [KeyId(acd39d70)] }"]
        .assert_eq(&text);
    assert!(!text.contains("hunter2"));
    assert_eq!(secret.expose(), b"hunter2hunter2");
    assert_eq!(secret.expose_str(), Ok("hunter2hunter2"));
    assert_eq!((secret.len(), secret.is_empty()), (14, false));
}

// --- Sealing ---

#[test]
fn sealed_values_open_with_their_aad() {
    let keyring = ring(1, &[]);
    let big: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    for plaintext in [&b""[..], b"x", b"kubeconfig: token=abc", &big] {
        let aad = b"artifact:sha256:0011";
        let sealed = keyring.seal(plaintext, aad).unwrap();
        assert_eq!(sealed.len(), plaintext.len() + SEALED_OVERHEAD);
        assert_eq!(keyring.open(&sealed, aad).unwrap().expose(), plaintext);
        let again = keyring.seal(plaintext, aad).unwrap();
        assert_ne!(sealed, again, "every seal draws a new nonce");
        if plaintext.len() >= 4 {
            assert!(!sealed.windows(plaintext.len()).any(|w| w == plaintext));
        }
    }
}

#[test]
fn the_sealed_header_names_format_and_key() {
    let keyring = ring(1, &[]);
    let sealed = keyring.seal(b"secret", b"param:op-1/password").unwrap();
    let header: String = sealed[..7].iter().map(|b| format!("{b:02x}")).collect();
    expect!["6f6701b1cc2566"].assert_eq(&header);
    assert_eq!(sealed_key_id(&sealed).unwrap(), keyring.active_id());
    assert_eq!(keyring.active_id().to_string(), "b1cc2566");
    assert_eq!("b1cc2566".parse::<KeyId>().unwrap(), keyring.active_id());
    assert!("b1cc256".parse::<KeyId>().is_err());
}

#[test]
fn a_sealed_value_moved_to_another_row_does_not_open() {
    let keyring = ring(1, &[]);
    let sealed = keyring.seal(b"s3cret-password", b"param:op-1/password").unwrap();
    let err = keyring.open(&sealed, b"param:op-2/password").unwrap_err();
    expect!["a secret sealed with key b1cc2566 does not authenticate: it was altered, it belongs to another row (associated data differs), or another key with the same id sealed it"]
        .assert_eq(&err.to_string());
    assert!(keyring.open(&sealed, b"").is_err());
    assert!(keyring.open(&sealed, b"param:op-1/password\0").is_err());
}

#[test]
fn every_changed_truncated_or_extended_byte_is_refused() {
    let keyring = ring(1, &[2]);
    let aad = b"artifact:sha256:ab";
    let sealed = keyring.seal(b"hunter22", aad).unwrap();
    // Which error each byte position gives when flipped, as runs of positions.
    let mut runs: Vec<(usize, usize, String)> = Vec::new();
    for i in 0..sealed.len() {
        for flip in [0x01u8, 0x80] {
            let mut bad = sealed.clone();
            bad[i] ^= flip;
            let err = keyring.open(&bad, aad).unwrap_err();
            let kind = format!("{err:?}").split([' ', '(']).next().unwrap().to_string();
            match runs.last_mut() {
                Some(run) if run.2 == kind && run.1 + 1 >= i => run.1 = i,
                _ => runs.push((i, i, kind)),
            }
        }
    }
    let summary: String = runs.iter().map(|(a, b, kind)| format!("{a}..={b}: {kind}\n")).collect();
    expect![[r#"
        0..=1: Malformed
        2..=2: UnsupportedVersion
        3..=6: UnknownKey
        7..=54: Inauthentic
    "#]]
    .assert_eq(&summary);
    for len in 0..sealed.len() {
        assert!(keyring.open(&sealed[..len], aad).is_err(), "truncated to {len}");
    }
    let mut longer = sealed.clone();
    longer.push(0);
    assert!(keyring.open(&longer, aad).is_err());
    assert_eq!(keyring.open(&sealed, aad).unwrap().expose(), b"hunter22");
}

#[test]
fn another_key_does_not_open() {
    let sealed = ring(1, &[]).seal(b"hunter22", b"a").unwrap();
    let err = ring(2, &[3]).open(&sealed, b"a").unwrap_err();
    expect!["sealed with key b1cc2566, which is not in the keyring (known: acd39d70, 66c99c6b); was it retired before every row was resealed?"]
        .assert_eq(&err.to_string());
    // A header naming a key the keyring holds does not help: the header is authenticated and the
    // key is wrong.
    let mut relabelled = sealed.clone();
    relabelled[3..7].copy_from_slice(&key(2).id().0);
    assert!(matches!(ring(2, &[]).open(&relabelled, b"a"), Err(Error::Inauthentic { .. })));
    assert!(matches!(Keyring::new(key(1), vec![key(1)]), Err(Error::DuplicateKey(_))));
}

// --- Keys from the environment ---

fn check_env(value: &str, expect: Expect) {
    let shown = match Keyring::from_env_value(value) {
        Ok(keyring) => format!("ok: {:?}", keyring.ids()),
        Err(e) => {
            let text = e.to_string();
            if value.len() >= 8 {
                assert!(!text.contains(value), "{text}");
            }
            format!("error: {text}")
        }
    };
    expect.assert_eq(&shown);
}

#[test]
fn env_keys_are_32_bytes_of_base64_or_hex() {
    let b64 = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    let hex = "0202020202020202020202020202020202020202020202020202020202020202";
    check_env(b64, expect!["ok: [KeyId(b1cc2566)]"]);
    check_env(b64.trim_end_matches('='), expect!["ok: [KeyId(b1cc2566)]"]);
    check_env(&format!(" {b64}\n"), expect!["ok: [KeyId(b1cc2566)]"]);
    check_env(hex, expect!["ok: [KeyId(acd39d70)]"]);
    check_env(&hex.to_uppercase(), expect!["ok: [KeyId(acd39d70)]"]);
    check_env(&format!("{hex},{b64}"), expect!["ok: [KeyId(acd39d70), KeyId(b1cc2566)]"]);
    check_env(
        "AQEBAQEBAQEBAQEBAQEBAQ==",
        expect!["error: OPSGRAPH_MASTER_KEY: the key decodes to 16 bytes; a master key is 32 bytes (`openssl rand -base64 32`)"],
    );
    check_env(
        &hex[..62],
        expect!["error: OPSGRAPH_MASTER_KEY: the key is neither 64 hex digits nor base64 (62 characters); generate one with `openssl rand -base64 32`"],
    );
    check_env(
        "correct horse battery staple",
        expect!["error: OPSGRAPH_MASTER_KEY: the key is neither 64 hex digits nor base64 (28 characters); generate one with `openssl rand -base64 32`"],
    );
    check_env("", expect!["error: OPSGRAPH_MASTER_KEY: the key is empty"]);
    check_env(&format!("{b64},"), expect!["error: OPSGRAPH_MASTER_KEY: key #2 is empty"]);
    check_env(&format!("{b64},{b64}"), expect!["error: two master keys have the id b1cc2566"]);
}

// --- The key file ---

#[test]
fn the_key_file_is_created_0600_at_first_start_and_read_after() {
    let dir = TempDir::new();
    let (first, source) = Keyring::open_or_create(&dir.0).unwrap();
    assert_eq!(source, KeySource::Created(dir.key_file()));
    assert_eq!(mode(&dir.key_file()), 0o600);
    let sealed = first.seal(b"join-token-123", b"artifact:x").unwrap();

    let (second, source) = Keyring::open_or_create(&dir.0).unwrap();
    assert_eq!(source, KeySource::File(dir.key_file()));
    assert_eq!(second.ids(), first.ids());
    assert_eq!(second.open(&sealed, b"artifact:x").unwrap().expose(), b"join-token-123");

    let text = std::fs::read_to_string(dir.key_file()).unwrap();
    let shape: Vec<String> = text
        .lines()
        .map(|l| if l.starts_with('#') { l.to_string() } else { l.replace(&first.active_id().to_string(), "<id>") })
        .map(|l| {
            l.split(' ').map(|w| if w.len() == 44 { "<44 base64 chars>" } else { w }).collect::<Vec<_>>().join(" ")
        })
        .collect();
    expect![[r#"
        # Opsgraph master keys. Anyone with this file and the database reads every secret: keep it 0600
        # and out of the database's backups. `active` seals; `retired` keys only open older secrets.
        active <id> <44 base64 chars>"#]]
    .assert_eq(&shape.join("\n"));
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, [KEY_FILE], "no temporary or lock file is left behind");
}

#[test]
fn processes_starting_together_agree_on_one_key() {
    let dir = TempDir::new();
    let results: Vec<(Vec<KeyId>, KeySource)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6).map(|_| s.spawn(|| Keyring::open_or_create(&dir.0).unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).map(|(k, source)| (k.ids(), source)).collect()
    });
    assert!(results.iter().all(|(ids, _)| ids == &results[0].0));
    assert_eq!(results.iter().filter(|(_, s)| matches!(s, KeySource::Created(_))).count(), 1);
}

#[test]
fn a_key_file_others_can_read_is_refused() {
    let dir = TempDir::new();
    Keyring::open_or_create(&dir.0).unwrap();
    for (perm, expect) in [
        (0o644, expect!["the master key file $DIR/master.key has mode 0644, so group or others can use it; run `chmod 600 $DIR/master.key` (and ask who may have read it: if anyone, rotate the key)"]),
        (0o640, expect!["the master key file $DIR/master.key has mode 0640, so group or others can use it; run `chmod 600 $DIR/master.key` (and ask who may have read it: if anyone, rotate the key)"]),
        (0o602, expect!["the master key file $DIR/master.key has mode 0602, so group or others can use it; run `chmod 600 $DIR/master.key` (and ask who may have read it: if anyone, rotate the key)"]),
    ] {
        std::fs::set_permissions(dir.key_file(), std::fs::Permissions::from_mode(perm)).unwrap();
        expect.assert_eq(&dir.show(&Keyring::open_or_create(&dir.0).unwrap_err()));
    }
    std::fs::set_permissions(dir.key_file(), std::fs::Permissions::from_mode(0o400)).unwrap();
    assert!(Keyring::open_or_create(&dir.0).is_ok(), "0400 is fine");
}

#[test]
fn a_directory_in_place_of_the_key_file_is_refused() {
    let dir = TempDir::new();
    std::fs::create_dir(dir.key_file()).unwrap();
    std::fs::set_permissions(dir.key_file(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let err = Keyring::open_or_create(&dir.0).unwrap_err();
    expect!["the master key file $DIR/master.key is not a regular file"].assert_eq(&dir.show(&err));
}

fn check_key_file(text: &str, expect: Expect) {
    let dir = TempDir::new();
    write_key_file(&dir, text, 0o600);
    let shown = match Keyring::read_file(&dir.key_file()) {
        Ok(k) => format!("ok: {:?}", k.ids()),
        Err(e) => dir.show(&e),
    };
    expect.assert_eq(&shown);
}

#[test]
fn key_file_mistakes_name_their_line() {
    let k1 = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
    let k2 = "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
    check_key_file(
        &format!("# comment\n\nactive b1cc2566 {k1}\nretired acd39d70 {k2}\n"),
        expect!["ok: [KeyId(b1cc2566), KeyId(acd39d70)]"],
    );
    check_key_file(
        &format!("active acd39d70 {k1}\n"),
        expect!["the master key file $DIR/master.key, line 1: the key's id is b1cc2566, not acd39d70"],
    );
    check_key_file(
        &format!("active b1cc2566 {k1}\nactive acd39d70 {k2}\n"),
        expect!["the master key file $DIR/master.key, line 2: a second active key"],
    );
    check_key_file(
        &format!("retired b1cc2566 {k1}\n"),
        expect!["the master key file $DIR/master.key has no active key"],
    );
    check_key_file(
        &format!("current b1cc2566 {k1}\n"),
        expect!["the master key file $DIR/master.key, line 1: `current` is neither `active` nor `retired`"],
    );
    check_key_file(
        "active b1cc2566\n",
        expect!["the master key file $DIR/master.key, line 1: expected `active|retired <id> <base64 key>`"],
    );
    check_key_file(
        "active b1cc2566 AQEB\n",
        expect!["the master key file $DIR/master.key, line 1: the key decodes to 3 bytes; a master key is 32 bytes (`openssl rand -base64 32`)"],
    );
    check_key_file(
        &format!("active b1cc2566 {k1}\nretired b1cc2566 {k1}\n"),
        expect!["two master keys have the id b1cc2566"],
    );
}

// --- Rotation ---

#[test]
fn rotation_keeps_old_values_readable_and_reseal_moves_them() {
    let dir = TempDir::new();
    let (before, _) = Keyring::open_or_create(&dir.0).unwrap();
    let old_id = before.active_id();
    let rows: Vec<(String, Vec<u8>)> = (0..5)
        .map(|i| {
            let aad = format!("param:op-{i}/token");
            let sealed = before.seal(format!("value-{i}").as_bytes(), aad.as_bytes()).unwrap();
            (aad, sealed)
        })
        .collect();

    let rotation = rotate(&dir.0).unwrap();
    assert_eq!(rotation.retired, old_id);
    assert_ne!(rotation.active, old_id);
    assert_eq!(mode(&dir.key_file()), 0o600);
    let (after, _) = Keyring::open_or_create(&dir.0).unwrap();
    assert_eq!(after.ids(), [rotation.active, old_id]);

    // Old rows still open; reseal moves each to the new key; new seals use the new key.
    let mut resealed = Vec::new();
    for (i, (aad, sealed)) in rows.iter().enumerate() {
        assert_eq!(after.open(sealed, aad.as_bytes()).unwrap().expose(), format!("value-{i}").as_bytes());
        assert_eq!(sealed_key_id(sealed).unwrap(), old_id);
        let moved = after.reseal(sealed, aad.as_bytes()).unwrap();
        assert_eq!(sealed_key_id(&moved).unwrap(), rotation.active);
        resealed.push(moved);
    }
    assert_eq!(sealed_key_id(&after.seal(b"new", b"x").unwrap()).unwrap(), rotation.active);
    // Reseal checks the aad too: it will not launder a row into another.
    assert!(after.reseal(&rows[0].1, rows[1].0.as_bytes()).is_err());

    // Retiring: the active key cannot go; an unknown one is named; the old one goes.
    let err = retire(&dir.0, rotation.active).unwrap_err();
    assert!(matches!(err, Error::RetireActive(id) if id == rotation.active), "{err}");
    let err = retire(&dir.0, "00000000".parse().unwrap()).unwrap_err();
    assert!(matches!(err, Error::NoSuchKey { .. }), "{err}");
    retire(&dir.0, old_id).unwrap();
    let (retired, _) = Keyring::open_or_create(&dir.0).unwrap();
    assert_eq!(retired.ids(), [rotation.active]);
    for ((aad, old), new) in rows.iter().zip(&resealed) {
        assert!(matches!(retired.open(old, aad.as_bytes()), Err(Error::UnknownKey { .. })));
        assert!(retired.open(new, aad.as_bytes()).is_ok());
    }
    assert_eq!(mode(&dir.key_file()), 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, [KEY_FILE]);
}

#[test]
fn rotations_are_serialised_by_a_lock_file() {
    let dir = TempDir::new();
    Keyring::open_or_create(&dir.0).unwrap();
    let lock = dir.0.join("master.key.lock");
    std::fs::write(&lock, "").unwrap();
    let err = rotate(&dir.0).unwrap_err();
    expect!["$DIR/master.key.lock exists: another key rotation is running, or one was interrupted; if none is running, remove it"]
        .assert_eq(&dir.show(&err));
    std::fs::remove_file(&lock).unwrap();
    let rotation = rotate(&dir.0).unwrap();
    assert!(!lock.exists());
    // A second rotation retires both earlier keys.
    let again = rotate(&dir.0).unwrap();
    assert_eq!(again.retired, rotation.active);
    assert_eq!(Keyring::read_file(&dir.key_file()).unwrap().ids().len(), 3);
}

#[test]
fn rotating_without_a_key_file_says_so() {
    let dir = TempDir::new();
    let err = rotate(&dir.0).unwrap_err();
    expect!["$DIR/master.key: open failed"].assert_eq(&dir.show(&err));
}
