use std::fmt::Write as _;
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

/// A deterministic generator (xorshift64*), so property loops need no dependency and replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, len: usize, alphabet: &[u8]) -> Vec<u8> {
        (0..len).map(|_| alphabet[self.below(alphabet.len())]).collect()
    }
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

// --- Masking ---

fn check_mask(secrets: &[&str], input: &str, expect: Expect) {
    let masker = Masker::new(secrets).unwrap();
    let masked = masker.mask(input);
    assert_eq!(masked.as_bytes(), masker.mask_bytes(input.as_bytes()), "str and bytes agree");
    expect.assert_eq(&masked);
}

#[test]
fn masking_examples() {
    check_mask(&["hunter22"], "password=hunter22 ok", expect!["password=*** ok"]);
    check_mask(&["hunter22"], "hunter22hunter22 and hunter2", expect!["*** and hunter2"]);
    // Overlapping secrets leave nothing of either; so does a secret inside another.
    check_mask(&["abcdef", "defghi"], "x abcdefghi y", expect!["x *** y"]);
    check_mask(&["token-1234", "1234"], "token-12345 1234", expect!["***5 ***"]);
    // Too short to mask: left alone, and counted.
    check_mask(&["443", "on", ""], "port 443 is on", expect!["port 443 is on"]);
    assert_eq!(Masker::new(["443", "on", "", "long enough"]).unwrap().ignored(), 3);
    assert!(Masker::new(["443"]).unwrap().is_empty());
    // Encoded forms.
    check_mask(&["hunter22"], "b64 aHVudGVyMjI= hex 68756e7465723232", expect!["b64 *** hex ***"]);
    check_mask(&["p@ss word"], "url p%40ss%20word form p%40ss+word", expect!["url *** form ***"]);
    check_mask(&["say \"hi\"\n"], r#"{"msg":"say \"hi\"\n"}"#, expect![[r#"{"msg":"***"}"#]]);
    // A multi-line secret through a terminal.
    check_mask(&["line one\nline two"], "> line one\r\nline two\r\n", expect!["> ***\r\n"]);
    // Inside a longer base64 text (basic auth): only boundary characters stay.
    check_mask(
        &["hunter22"],
        "Authorization: Basic dXNlcjpodW50ZXIyMg==",
        expect!["Authorization: Basic dXNlcjp***g=="],
    );
}

#[test]
fn a_binary_secret_never_splits_a_character() {
    // 0xA9 is the second byte of `é`; masking it alone would leave half a character.
    let masker = Masker::new([[0xA9, b'a', b'b', b'c']]).unwrap();
    assert_eq!(masker.mask("caf\u{e9}abc!"), "caf***!");
    assert_eq!(masker.mask_bytes("caf\u{e9}abc!".as_bytes()), b"caf\xC3***!");
}

/// A canary with characters every encoding treats specially, and its forms as other tools write
/// them (Python's base64, binascii, urllib and json, JavaScript's encodeURIComponent and
/// JSON.stringify, Go's HTML-safe JSON, PHP's escaped slashes), computed outside this crate.
const CANARY: &str = "Tok3n/w1th+sp ce&\"\u{e9}<?~";
const CANARY_FORMS: &[(&str, &str)] = &[
    ("raw", CANARY),
    ("base64", "VG9rM24vdzF0aCtzcCBjZSYiw6k8P34="),
    ("base64 unpadded", "VG9rM24vdzF0aCtzcCBjZSYiw6k8P34"),
    ("hex", "546f6b336e2f773174682b73702063652622c3a93c3f7e"),
    ("HEX", "546F6B336E2F773174682B73702063652622C3A93C3F7E"),
    ("percent", "Tok3n%2Fw1th%2Bsp%20ce%26%22%C3%A9%3C%3F~"),
    ("percent lower", "Tok3n%2fw1th%2bsp%20ce%26%22%c3%a9%3c%3f~"),
    ("form", "Tok3n%2Fw1th%2Bsp+ce%26%22%C3%A9%3C%3F~"),
    ("json", "Tok3n/w1th+sp ce&\\\"\u{e9}<?~"),
    ("json ascii", "Tok3n/w1th+sp ce&\\\"\\u00e9<?~"),
    ("json html", "Tok3n/w1th+sp ce\\u0026\\\"\u{e9}\\u003c?~"),
    ("json slash", "Tok3n\\/w1th+sp ce&\\\"\u{e9}<?~"),
    ("json in json", "\\\"Tok3n/w1th+sp ce&\\\\\\\"\u{e9}<?~\\\""),
    ("basic auth", "Basic dXNlcjpUb2szbi93MXRoK3NwIGNlJiLDqTw/fg=="),
    ("basic auth url-safe", "Basic dXNlcjpUb2szbi93MXRoK3NwIGNlJiLDqTw_fg=="),
    ("in base64 kubeconfig", "eGFwaVZlcnNpb246IHYxCnRva2VuOiBUb2szbi93MXRoK3NwIGNlJiLDqTw/fgpraW5kOiBDb25maWcK"),
    ("in base64, skew 2", "YWJUb2szbi93MXRoK3NwIGNlJiLDqTw/fgo="),
];

#[test]
fn canaries_are_masked_in_every_encoding() {
    let masker = Masker::new([CANARY]).unwrap();
    let mut table = String::new();
    for (name, form) in CANARY_FORMS {
        let line = format!("before {form} after");
        let masked = masker.mask(&line);
        writeln!(table, "{name}: {masked}").unwrap();
    }
    expect![[r#"
        raw: before *** after
        base64: before *** after
        base64 unpadded: before *** after
        hex: before *** after
        HEX: before *** after
        percent: before *** after
        percent lower: before *** after
        form: before *** after
        json: before *** after
        json ascii: before *** after
        json html: before *** after
        json slash: before *** after
        json in json: before \"***\" after
        basic auth: before Basic dXNlcjp***g== after
        basic auth url-safe: before Basic dXNlcjp***g== after
        in base64 kubeconfig: before eGFwaVZlcnNpb246IHYxCnRva2VuOiB***gpraW5kOiBDb25maWcK after
        in base64, skew 2: before YWJ***go= after
    "#]]
    .assert_eq(&table);
}

#[test]
fn unrelated_output_is_untouched() {
    let masker = Masker::new([CANARY, "hunter22", "ghp_0123456789abcdefghij"]).unwrap();
    let log = "\
2024-05-01T10:00:00Z INFO starting kubelet v1.30.1 on worker-3 (10.0.0.7:10250)
sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
{\"level\":\"info\",\"msg\":\"token rotated\",\"user\":\"alice\",\"path\":\"/etc/kubernetes/admin.conf\"}
certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkekNDQVIyZ0F3SUJBZ0lCQURBS0JnZ3Foa2pPUFFRREFqQWpNU0V3SHdZRFZRUUREQmhyTTNNdGMyVnkK
curl -fsS https://example.test/api?q=a%20b&x=1 -> 200 OK; hunter2 is not hunter22's prefix match
";
    let masked = masker.mask(log);
    let expected = log.replace("hunter22", "***");
    assert_eq!(masked, expected);
}

#[test]
fn streaming_examples() {
    let masker = Masker::new(["hunter22", "abcdef", "defghi"]).unwrap();
    let run = |chunks: &[&str]| {
        let mut stream = masker.stream();
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for chunk in chunks {
            stream.push(chunk.as_bytes(), &mut out);
            seen.push(String::from_utf8_lossy(&out).into_owned());
        }
        stream.finish(&mut out);
        seen.push(String::from_utf8_lossy(&out).into_owned());
        seen.join(" | ")
    };
    // What a live view shows after each chunk, then after finish.
    expect![" |  |  |  | password=*** ok, *** done"].assert_eq(&run(&[
        "pass",
        "word=hun",
        "ter22 ok, abcd",
        "efghi done",
    ]));
    expect![" |  |  |  |  |  |  |  |  |  |  | ***hun"]
        .assert_eq(&run(&["h", "u", "n", "t", "e", "r", "2", "2", "h", "u", "n"]));
    let short = Masker::new(["no"]).unwrap();
    let mut stream = short.stream();
    let mut out = Vec::new();
    stream.push(b"no secrets here", &mut out);
    assert_eq!(out, b"no secrets here", "nothing to mask: nothing held back");
}

/// The secret's forms computed independently of the masker, for the property loop.
fn independent_forms(secret: &[u8]) -> Vec<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    vec![
        secret.to_vec(),
        STANDARD.encode(secret).into_bytes(),
        URL_SAFE_NO_PAD.encode(secret).into_bytes(),
        hex.into_bytes(),
    ]
}

#[test]
fn property_masked_output_never_contains_a_secret() {
    // Bytes for secrets and filler; no `*`, which the mark itself is made of (see `Masker`).
    let alphabet: Vec<u8> = (0..=255u8).filter(|&b| b != b'*').collect();
    let narrow = b"abcdAB01+/=%\\\" \n";
    let mut rng = Rng(0x0b5e_5510_5ec2_e75d);
    for case in 0..400 {
        let secrets: Vec<Vec<u8>> = (0..1 + rng.below(3))
            .map(|_| {
                let len = MIN_SECRET_LEN + rng.below(20);
                // Half the secrets come from a narrow alphabet, so that they overlap and repeat.
                if rng.below(2) == 0 {
                    rng.bytes(len, narrow)
                } else {
                    rng.bytes(len, &alphabet)
                }
            })
            .collect();
        let masker = Masker::new(&secrets).unwrap();
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(6) {
            let filler_len = rng.below(12);
            let filler_alphabet = if rng.below(2) == 0 { &narrow[..] } else { &alphabet[..] };
            input.extend(rng.bytes(filler_len, filler_alphabet));
            let secret = &secrets[rng.below(secrets.len())];
            let forms = independent_forms(secret);
            input.extend(&forms[rng.below(forms.len())]);
        }
        let masked = masker.mask_bytes(&input);
        for secret in &secrets {
            for form in independent_forms(secret) {
                assert!(
                    !masked.windows(form.len()).any(|w| w == form),
                    "case {case}: a form of secret {secret:?} survives in {masked:?}"
                );
            }
        }
        // Streaming gives the same bytes whatever the chunking.
        let mut stream = masker.stream();
        let mut streamed = Vec::new();
        let mut rest = &input[..];
        while !rest.is_empty() {
            let n = 1 + rng.below(rest.len().min(9));
            stream.push(&rest[..n], &mut streamed);
            rest = &rest[n..];
        }
        stream.finish(&mut streamed);
        assert_eq!(streamed, masked, "case {case}: streaming differs");
    }
}
