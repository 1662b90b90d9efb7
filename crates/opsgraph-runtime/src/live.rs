//! An attempt's live log: its output as it arrives, masked as its final log is, readable while it
//! runs (`runs/<operation>/<job>.<attempt>.live`).
//!
//! The executor hands each chunk it reads to a [`opsgraph_exec::Tee`]; [`LiveLog::push`] masks
//! it with one [`opsgraph_secrets::MaskStream`] per stream (stdout, stderr: the final log masks
//! each stream whole, and a stream masks exactly as that does, a secret cut across two reads
//! included) and appends what can no longer be part of a secret to the file. Nothing is
//! committed to the store: the driver's decisions and its commits per job are what they were.
//! The file is bounded: past [`LIVE_MAX`] bytes it is rewritten keeping the last [`LIVE_KEEP`],
//! and its first line says the offset of the first byte it keeps, so offsets stay those of the
//! whole output. A job that produces secret artifacts shows nothing live (their values are
//! known only when it ends, and its final log masks them): one line says so.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use opsgraph_secrets::MaskStream;

use crate::masking::Masking;

pub(crate) mod share;

/// What a live log keeps: its last 256 KiB.
pub const LIVE_KEEP: usize = 256 << 10;
/// The size at which the file is cut back to [`LIVE_KEEP`].
const LIVE_MAX: usize = 2 * LIVE_KEEP;
/// The first line: the offset of the file's first byte of output, 20 digits and `\n`.
const HEADER: usize = 21;

/// The live log's file of an attempt whose final log is `runs/<op>/<job>.<attempt>.log` in
/// `run_dir`.
pub(crate) fn live_path(run_dir: &Path, stem: &str) -> PathBuf {
    run_dir.join(format!("{stem}.live"))
}

/// How a live log masks.
enum Mask {
    Plain,
    Streams(Box<[Option<MaskStream<'static>>; 2]>),
    /// Nothing is shown live; the line saying why is written once.
    Withheld {
        why: &'static str,
        said: bool,
    },
}

/// The writer of one attempt's live log (shared with the executor's reading thread).
pub(crate) struct LiveLog {
    path: PathBuf,
    mask: Mask,
    file: Option<File>,
    /// Output written so far (the offset of the next byte).
    total: u64,
    /// Bytes of output in the file.
    kept: usize,
    /// A write failed: the live view stops; the attempt and its final log go on.
    broken: bool,
    /// Shared with the other server replicas while it runs (`share.rs`).
    shared: Option<share::Shared>,
    /// Its file was (or may have been) made: it is removed when the attempt's result is taken.
    touched: bool,
}

impl LiveLog {
    /// A live log masked with the secret `values` the job was given; withheld when the job
    /// produces secret artifacts.
    /// Shared as `share` says, when it says so.
    pub(crate) fn new(
        path: PathBuf,
        values: Vec<Vec<u8>>,
        secret_outputs: bool,
        share: Option<&share::ShareAs>,
    ) -> LiveLog {
        let mask = match Masking::new(values) {
            _ if secret_outputs => Mask::Withheld {
                why: "(live output withheld: this job produces secret artifacts; its log appears when it ends)\n",
                said: false,
            },
            Masking::None => Mask::Plain,
            Masking::Mask(m) => Mask::Streams(Box::new([Some(m.clone().into_stream()), Some(m.into_stream())])),
            Masking::Withhold => {
                Mask::Withheld { why: "(live output withheld: secrets could not be masked)\n", said: false }
            }
        };
        let shared = share.map(|s| s.sharing.share(s.key.clone(), path.clone()));
        LiveLog { path, mask, file: None, total: 0, kept: 0, broken: false, shared, touched: false }
    }

    /// The tee an executor feeds: stream 0 is stdout, 1 stderr.
    pub(crate) fn tee(live: &Arc<Mutex<LiveLog>>) -> opsgraph_exec::Tee {
        let live = live.clone();
        opsgraph_exec::Tee(Arc::new(move |stream, bytes: &[u8]| {
            live.lock().unwrap_or_else(|e| e.into_inner()).push(stream, bytes)
        }))
    }

    /// Masks a chunk of `stream` and appends what can be shown now.
    pub(crate) fn push(&mut self, stream: usize, bytes: &[u8]) {
        let mut out = Vec::new();
        match &mut self.mask {
            Mask::Plain => out.extend_from_slice(bytes),
            Mask::Streams(streams) => {
                if let Some(s) = streams.get_mut(stream.min(1)).and_then(Option::as_mut) {
                    s.push(bytes, &mut out);
                }
            }
            Mask::Withheld { why, said } => {
                if !*said {
                    *said = true;
                    out.extend_from_slice(why.as_bytes());
                }
            }
        }
        self.write(&out);
    }

    /// Writes out what the masks still hold (the attempt's output ended); shares no more: its
    /// final log replaces it.
    pub(crate) fn finish(&mut self) {
        if let Mask::Streams(streams) = &mut self.mask {
            let mut out = Vec::new();
            for s in streams.iter_mut().filter_map(Option::take) {
                s.finish(&mut out);
            }
            self.write(&out);
        }
        if let Some(shared) = self.shared.take() {
            shared.close();
        }
    }

    fn write(&mut self, out: &[u8]) {
        if out.is_empty() || self.broken {
            return;
        }
        // The live view stops there; the attempt's output still shows when it ends.
        self.broken = self.append(out).is_err();
    }

    /// Whether its file may exist: false when nothing was ever written (a job without output).
    pub(crate) fn touched(&self) -> bool {
        self.touched
    }

    fn append(&mut self, out: &[u8]) -> std::io::Result<()> {
        self.touched = true;
        if self.file.is_none() {
            self.file = Some(create(&self.path, 0, &[])?);
        }
        if let Some(f) = &mut self.file {
            f.write_all(out)?;
        }
        self.total += out.len() as u64;
        self.kept += out.len();
        if self.kept > LIVE_MAX {
            // Cut back: a new file with the last LIVE_KEEP bytes, renamed over the old one (a
            // reader sees one or the other, each whole).
            let mut f = File::open(&self.path)?;
            let mut all = Vec::new();
            f.read_to_end(&mut all)?;
            let tail = &all[all.len() - LIVE_KEEP.min(all.len() - HEADER)..];
            let base = self.total - tail.len() as u64;
            let tmp = self.path.with_extension("live.tmp");
            drop(create(&tmp, base, tail)?);
            std::fs::rename(&tmp, &self.path)?;
            self.file = Some(std::fs::OpenOptions::new().append(true).open(&self.path)?);
            self.kept = tail.len();
        }
        Ok(())
    }
}

/// A new live log file (readable by this user only) holding `bytes` from offset `base`.
fn create(path: &Path, base: u64, bytes: &[u8]) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(path)?;
    f.write_all(format!("{base:020}\n").as_bytes())?;
    f.write_all(bytes)?;
    Ok(f)
}

/// Output of a live log from an offset on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveText {
    /// The offset of `text`'s first byte: later than asked for when the log no longer keeps
    /// what was asked for (it keeps the last [`LIVE_KEEP`] bytes).
    pub from: u64,
    /// The offset to ask from next.
    pub next: u64,
    pub text: String,
}

/// The live log of `job`'s `attempt` in operation `op`, from byte `after` on: the driver's file
/// in the data directory's run directory when this process has it, else what the driver shares
/// through `blobs` (another server replica on the same database drives the attempt; up to
/// [`share::EVERY`] behind); `None` when there is neither (it has not written yet, or it ended:
/// its final log is then the one to read). Ids that would leave the run directory are refused.
pub fn live_log(
    data_dir: &Path,
    blobs: &dyn opsgraph_store::BlobStore,
    op: &str,
    job: &str,
    attempt: u32,
    after: u64,
) -> Result<Option<LiveText>, crate::Error> {
    let key = opsgraph_store::LogKey::new(op, job, attempt);
    let path = data_dir.join(key.relative_path()?).with_extension("live");
    if let Some(text) =
        read_live(&path, after).map_err(|source| crate::Error::Io { path: path.display().to_string(), source })?
    {
        return Ok(Some(text));
    }
    if !blobs.shares_live_logs() {
        return Ok(None);
    }
    Ok(blobs.live(&key, after)?.map(|(start, bytes)| shared_text(start, &bytes, after)))
}

/// The live log at `path` from byte `after` on (at most [`LIVE_KEEP`] bytes, the last ones);
/// `None` when there is none. A UTF-8 character cut at the end waits for the next read.
pub(crate) fn read_live(path: &Path, after: u64) -> std::io::Result<Option<LiveText>> {
    Ok(read_raw(path, after)?.map(|(from, bytes)| shape(from, &bytes, after)))
}

/// The bytes of the live log at `path` from byte `after` on, or from the first it keeps, with
/// the offset of the first; `None` when there is none (or its first line is not written yet).
pub(crate) fn read_raw(path: &Path, after: u64) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    use std::io::{Seek, SeekFrom};
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut head = [0u8; HEADER];
    match f.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let base = std::str::from_utf8(&head[..HEADER - 1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| std::io::Error::other(format!("{}: not a live log", path.display())))?;
    let total = base + (f.metadata()?.len() - HEADER as u64);
    let from = window(after, base, total);
    f.seek(SeekFrom::Start(HEADER as u64 + (from - base)))?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(Some((from, bytes)))
}

/// Output shared through the blob store (another replica drives the attempt), from byte `after`
/// on, as [`read_live`] reads a file.
pub(crate) fn shared_text(start: u64, bytes: &[u8], after: u64) -> LiveText {
    let from = window(after, start, start + bytes.len() as u64);
    shape(from, &bytes[(from - start) as usize..], after)
}

/// Where a read asked from `after` starts in output kept from offset `first` to `end`: not
/// before what is kept, within the last [`LIVE_KEEP`] bytes, not past the end.
fn window(after: u64, first: u64, end: u64) -> u64 {
    after.max(first).max(end.saturating_sub(LIVE_KEEP as u64)).min(end)
}

/// `bytes` read from offset `from` for a reader that asked from `after`: started at a
/// character's start when not where asked, ended before a character cut at the end.
fn shape(mut from: u64, mut bytes: &[u8], after: u64) -> LiveText {
    if from != after {
        while let Some((_, rest)) = bytes.split_first().filter(|(b, _)| (**b & 0xC0) == 0x80) {
            bytes = rest;
            from += 1;
        }
    }
    let end = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    let text = String::from_utf8_lossy(&bytes[..end]).into_owned();
    LiveText { from, next: from + end as u64, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// A fresh directory of this test process.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("opsgraph-live-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Pushes `chunks` (stream, text) through a live log; reads it from 0.
    fn check(
        values: &[&str],
        secret_outputs: bool,
        chunks: &[(usize, &str)],
        finish: bool,
        expect: expect_test::Expect,
    ) {
        let path =
            scratch(&format!("check-{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst))).join("j.1.live");
        let mut live =
            LiveLog::new(path.clone(), values.iter().map(|v| v.as_bytes().to_vec()).collect(), secret_outputs, None);
        for (stream, text) in chunks {
            live.push(*stream, text.as_bytes());
        }
        if finish {
            live.finish();
        }
        let got = read_live(&path, 0).unwrap().map(|t| format!("{}..{} {:?}", t.from, t.next, t.text));
        expect.assert_eq(&got.unwrap_or_else(|| "(none)".into()));
    }

    #[test]
    fn plain_output_shows_at_once() {
        check(
            &[],
            false,
            &[(0, "first line\n"), (1, "warn\n")],
            false,
            expect_test::expect![[r#"0..16 "first line\nwarn\n""#]],
        );
    }

    #[test]
    fn a_secret_cut_across_two_chunks_is_masked() {
        // Before the end, the mask holds back what could still begin a secret…
        check(
            &["hunter2secret"],
            false,
            &[(0, "password is hunter2"), (0, "secret ok\n")],
            false,
            expect_test::expect![[r#"(none)"#]],
        );
        // …and writes it out masked, as the final log masks it.
        check(
            &["hunter2secret"],
            false,
            &[(0, "password is hunter2"), (1, "err\n"), (0, "secret ok\n")],
            true,
            expect_test::expect![[r#"0..23 "password is *** ok\nerr\n""#]],
        );
        let long = "x".repeat(8 << 10) + "\n";
        let path = scratch("cut").join("j.1.live");
        let mut live = LiveLog::new(path.clone(), vec![b"hunter2secret".to_vec()], false, None);
        live.push(0, b"the password is hunter2");
        live.push(0, b"secret\n");
        live.push(0, long.as_bytes());
        let seen = read_live(&path, 0).unwrap().unwrap();
        assert!(seen.text.starts_with("the password is ***\n"), "{:?}", &seen.text[..40]);
        assert!(!seen.text.contains("hunter2"));
    }

    #[test]
    fn secret_artifacts_and_unusable_masks_withhold() {
        check(
            &["topsecret"],
            true,
            &[(0, "topsecret\n"), (0, "more\n")],
            true,
            expect_test::expect![[
                r#"0..89 "(live output withheld: this job produces secret artifacts; its log appears when it ends)\n""#
            ]],
        );
    }

    /// Whether a live log says it made its file, against whether the file exists: the driver
    /// removes the file after a run only when it may exist (`TaskResult::no_live_file`).
    #[test]
    fn a_live_log_knows_whether_it_made_its_file() {
        let check = |name: &str, values: &[&str], secret_outputs: bool, chunks: &[&str], finish: bool, expect: bool| {
            let path = scratch(&format!("touched-{name}")).join("j.1.live");
            let values = values.iter().map(|v| v.as_bytes().to_vec()).collect();
            let mut live = LiveLog::new(path.clone(), values, secret_outputs, None);
            for chunk in chunks {
                live.push(0, chunk.as_bytes());
            }
            if finish {
                live.finish();
            }
            assert_eq!((live.touched(), path.exists()), (expect, expect), "{name}");
        };
        check("no output", &[], false, &[], true, false);
        check("empty reads", &[], false, &["", ""], true, false);
        check("output", &[], false, &["x"], false, true);
        check("held back by a mask", &["hunter2secret"], false, &["hunter2"], false, false);
        check("held back, then written at the end", &["hunter2secret"], false, &["hunter2"], true, true);
        check("withheld", &["topsecret"], true, &["topsecret\n"], true, true);
    }

    #[test]
    fn the_file_keeps_the_last_bytes_at_their_offsets() {
        let path = scratch("bounded").join("j.1.live");
        let mut live = LiveLog::new(path.clone(), vec![], false, None);
        let line = format!("{}\n", "y".repeat(1023));
        for _ in 0..600 {
            live.push(0, line.as_bytes());
        }
        let size = std::fs::metadata(&path).unwrap().len() as usize;
        assert!(size <= LIVE_MAX + HEADER, "{size}");
        // Asked from 0: the last LIVE_KEEP bytes, at their offsets in the whole output.
        let t = read_live(&path, 0).unwrap().unwrap();
        assert_eq!((t.from, t.next, t.text.len()), (600 * 1024 - LIVE_KEEP as u64, 600 * 1024, LIVE_KEEP));
        // Asked from where the reader was: only what came since.
        live.push(1, "é done\n".as_bytes());
        let t = read_live(&path, 600 * 1024).unwrap().unwrap();
        assert_eq!((t.from, t.next, t.text.as_str()), (600 * 1024, 600 * 1024 + 8, "é done\n"));
        // A character cut at the end waits for its last byte.
        live.push(0, &"é".as_bytes()[..1]);
        let t = read_live(&path, t.next).unwrap().unwrap();
        assert_eq!((t.from, t.next, t.text.as_str()), (600 * 1024 + 8, 600 * 1024 + 8, ""));
    }
}
