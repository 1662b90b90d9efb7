//! Evidence checks (documents.md `evidence`): proof that a job's output really exists.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

use opsgraph_core::model::{Evidence, EvidenceSource};
use regex::Regex;

use crate::duration::format_duration;
use crate::http::{parse_url, request};
use crate::spec::CANCEL_POLL;
use crate::{parse_duration, program_for, Cancel, Executor, Outcome, Program, Spec};

/// Limit of one attempt of a command or systemd check without `timeout`.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Limit of one attempt of an http or tcp check without `timeout`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Wait between attempts without `interval`.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Files and bodies are compared up to this size.
const MAX_CONTENT: usize = 16 << 20;
/// Observed text longer than this is shortened.
const SHOWN: usize = 200;

/// How a check ended. `expected` and `observed` are short and human-readable ("active" against
/// "inactive", "exit code 0" against "exit code 3", "status 200" against "status 503");
/// `detail` has the rest (the command, stderr, the number of attempts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceResult {
    pub passed: bool,
    pub expected: String,
    pub observed: String,
    pub detail: String,
    pub attempts: u32,
    /// The values of the check's `capture`, when it passed.
    pub captured: BTreeMap<String, String>,
}

/// Runs one evidence check, with its `retries` (attempts = retries + 1, `interval` apart,
/// default 1s). `command` and `systemd` checks run their command through `exec` with `env` (a
/// `Line` without shell syntax is exec'd directly); `http`, `tcp` and `file` checks run in this
/// process (a `file` check reads through `exec` when it is not local).
///
/// Comparisons: `expected` (the trimmed output, body or file content equals it, trimmed),
/// `contains`, `matches` (a regex), `expected_exit_code` (default 0, also when a command check
/// compares its output: a failed command proves nothing), `expected_status` (default 200). A check that is itself invalid (no
/// command, bad regex, bad duration) fails at once, without retries.
pub fn check_evidence(
    ev: &Evidence,
    exec: &dyn Executor,
    env: &BTreeMap<String, String>,
    cancel: &Cancel,
) -> EvidenceResult {
    let check = match Check::new(ev) {
        Ok(check) => check,
        Err(reason) => {
            return EvidenceResult {
                passed: false,
                expected: "a valid check".to_owned(),
                observed: format!("invalid check: {reason}"),
                detail: format!("evidence `{}`: {reason}", ev.id),
                attempts: 0,
                captured: BTreeMap::new(),
            }
        }
    };
    let attempts = ev.retries.unwrap_or(0).saturating_add(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut result = check.once(ev, Target { exec, env }, cancel);
        result.attempts = attempt;
        let cancelled = cancel.is_cancelled();
        if result.passed || attempt >= attempts || cancelled || !sleep(check.interval, cancel) {
            if !result.passed && attempt > 1 {
                result.detail = format!(
                    "{} attempts, {} apart; the last: {}",
                    attempt,
                    format_duration(check.interval),
                    result.detail
                );
            }
            if !result.passed && (cancelled || cancel.is_cancelled()) && result.observed != "cancelled" {
                result.detail = format!("cancelled; {}", result.detail);
            }
            return result;
        }
    }
}

/// Sleeps `d` unless cancelled first; false when cancelled.
fn sleep(d: Duration, cancel: &Cancel) -> bool {
    let end = Instant::now() + d;
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        thread::sleep(left.min(CANCEL_POLL));
    }
}

/// A comparison of text (output, body, file content).
enum Compare {
    Equals(String),
    Contains(String),
    Matches(Regex),
}

impl Compare {
    fn expected(&self, what: &str) -> String {
        match self {
            Compare::Equals(s) => s.trim().to_owned(),
            Compare::Contains(s) => format!("{what} containing `{s}`"),
            Compare::Matches(re) => format!("{what} matching /{}/", re.as_str()),
        }
    }

    fn holds(&self, text: &str) -> bool {
        match self {
            Compare::Equals(s) => text.trim() == s.trim(),
            Compare::Contains(s) => text.contains(s.as_str()),
            Compare::Matches(re) => re.is_match(text),
        }
    }

    fn observed(&self, what: &str, text: &str) -> String {
        match self {
            Compare::Equals(_) => shown(text.trim(), what),
            Compare::Contains(_) | Compare::Matches(_) => shown(text, what),
        }
    }
}

/// `text`, shortened for a message; `(empty <what>)` when empty.
fn shown(text: &str, what: &str) -> String {
    if text.is_empty() {
        return format!("(empty {what})");
    }
    if text.len() <= SHOWN {
        return text.to_owned();
    }
    let mut end = SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// A mismatch: what was expected, what was seen.
struct Miss {
    expected: String,
    observed: String,
}

/// Where a check's commands run (`command`, `systemd`, a remote `file`): the executor, and
/// the environment they get.
#[derive(Clone, Copy)]
struct Target<'a> {
    exec: &'a dyn Executor,
    env: &'a BTreeMap<String, String>,
}

struct Check {
    compares: Vec<Compare>,
    /// `capture`: name -> a regex whose first group is the value.
    captures: Vec<(String, Regex)>,
    timeout: Duration,
    interval: Duration,
}

impl Check {
    fn new(ev: &Evidence) -> Result<Check, String> {
        let mut compares = Vec::new();
        if let Some(s) = &ev.expected {
            compares.push(Compare::Equals(s.clone()));
        }
        if let Some(s) = &ev.contains {
            compares.push(Compare::Contains(s.clone()));
        }
        if let Some(s) = &ev.matches {
            compares.push(Compare::Matches(Regex::new(s).map_err(|e| format!("invalid regex `{s}`: {e}"))?));
        }
        let mut captures = Vec::new();
        for (name, pattern) in &ev.capture {
            let re = Regex::new(pattern).map_err(|e| format!("capture `{name}`: invalid regex `{pattern}`: {e}"))?;
            captures.push((name.clone(), re));
        }
        let duration = |field: &str, value: &Option<String>, default| match value {
            None => Ok(default),
            Some(v) => parse_duration(v).map_err(|e| format!("{field}: {e}")),
        };
        match ev.source {
            EvidenceSource::Command | EvidenceSource::Systemd if ev.command.is_none() => {
                return Err("a command check needs `command`".to_owned())
            }
            EvidenceSource::Http => match &ev.url {
                None => return Err("an http check needs `url`".to_owned()),
                Some(url) => {
                    parse_url(url).map_err(|e| e.to_string())?;
                }
            },
            EvidenceSource::Tcp if ev.host.is_none() || ev.port.is_none() => {
                return Err("a tcp check needs `host` and `port`".to_owned())
            }
            EvidenceSource::File if ev.path.is_none() => return Err("a file check needs `path`".to_owned()),
            EvidenceSource::Command | EvidenceSource::Systemd | EvidenceSource::Tcp | EvidenceSource::File => {}
        }
        let default_timeout = match ev.source {
            EvidenceSource::Command | EvidenceSource::Systemd => COMMAND_TIMEOUT,
            EvidenceSource::Http | EvidenceSource::Tcp | EvidenceSource::File => PROBE_TIMEOUT,
        };
        Ok(Check {
            compares,
            captures,
            timeout: duration("timeout", &ev.timeout, default_timeout)?,
            interval: duration("interval", &ev.interval, DEFAULT_INTERVAL)?,
        })
    }

    fn once(&self, ev: &Evidence, on: Target<'_>, cancel: &Cancel) -> EvidenceResult {
        match ev.source {
            EvidenceSource::Command | EvidenceSource::Systemd => self.command(ev, on, cancel),
            EvidenceSource::Http => self.http(ev, cancel),
            EvidenceSource::Tcp => self.tcp(ev),
            EvidenceSource::File => self.file(ev, on, cancel),
        }
    }

    /// Compares `text` against every comparison: the first mismatch, or the descriptions of
    /// what matched.
    fn compare(&self, what: &str, text: &str) -> Result<(Vec<String>, Vec<String>), Miss> {
        let mut expected = Vec::new();
        let mut observed = Vec::new();
        for c in &self.compares {
            if !c.holds(text) {
                return Err(Miss { expected: c.expected(what), observed: c.observed(what, text) });
            }
            expected.push(c.expected(what));
            observed.push(c.observed(what, text));
        }
        Ok((expected, observed))
    }

    /// A passing result with the values its captures found in `text`; a capture that finds
    /// nothing fails the check (what it was to observe is not there).
    fn capture(&self, mut result: EvidenceResult, what: &str, text: &str) -> EvidenceResult {
        if !result.passed {
            return result;
        }
        for (name, re) in &self.captures {
            match re.captures(text).and_then(|c| c.get(1)) {
                Some(m) => {
                    result.captured.insert(name.clone(), m.as_str().trim().to_owned());
                }
                None => {
                    return fail(
                        format!("{what} with {name} matching /{}/", re.as_str()),
                        shown(text.trim(), what),
                        result.detail,
                    )
                }
            }
        }
        result
    }

    fn command(&self, ev: &Evidence, on: Target<'_>, cancel: &Cancel) -> EvidenceResult {
        let Some(cmd) = &ev.command else {
            return invalid("a command check needs `command`");
        };
        // The exit code is always checked (0 unless the check names another): output that matches
        // from a command that failed proves nothing. It is shown only when it is the whole check,
        // when the check names it, or when it differs.
        let want = ev.expected_exit_code.unwrap_or(0);
        let exit_code = ev.expected_exit_code.or(if self.compares.is_empty() { Some(0) } else { None });
        let mut all_expected: Vec<String> = exit_code.map(|c| format!("exit code {c}")).into_iter().collect();
        all_expected.extend(self.compares.iter().map(|c| c.expected("output")));
        let mut spec = Spec::new(program_for(cmd));
        spec.env = on.env.clone();
        spec.timeout = Some(self.timeout);
        let run = on.exec.run(&spec, cancel);
        let stdout = run.output.stdout_lossy();
        let stderr = run.output.stderr_lossy();
        let mut detail = format!("command `{cmd}`");
        if !stderr.trim().is_empty() {
            detail.push_str(&format!("; stderr: {}", shown(last_lines(stderr.trim(), 5), "stderr")));
        }
        let code = match run.outcome {
            Outcome::Exited { code } => code,
            ref other => return fail(all_expected.join("; "), other.to_string(), detail),
        };
        // An output that does not match is the more telling miss; then the exit code.
        let compared = self.compare("output", &stdout);
        if code != want && compared.is_ok() {
            let mut observed = format!("exit code {code}");
            if !stdout.trim().is_empty() {
                observed.push_str(&format!(", output {}", shown(stdout.trim(), "output")));
            }
            return fail(format!("exit code {want}"), observed, detail);
        }
        match compared {
            Err(miss) => fail(miss.expected, miss.observed, detail),
            Ok((expected, observed)) => {
                let mut e: Vec<String> = exit_code.map(|c| format!("exit code {c}")).into_iter().collect();
                let mut o = e.clone();
                e.extend(expected);
                o.extend(observed);
                self.capture(pass(e.join("; "), o.join("; "), detail), "output", &stdout)
            }
        }
    }

    fn http(&self, ev: &Evidence, cancel: &Cancel) -> EvidenceResult {
        let Some(url) = &ev.url else {
            return invalid("an http check needs `url`");
        };
        let parsed = match parse_url(url) {
            Ok(parsed) => parsed,
            Err(e) => return invalid(&e.to_string()),
        };
        let want = ev.expected_status.unwrap_or(200);
        let detail = format!("GET {url}");
        let response = match request("GET", &parsed, &[], &[], Some(self.timeout), MAX_CONTENT, cancel) {
            Ok(response) => response,
            Err(failure) => return fail(format!("status {want}"), failure.observed(self.timeout), detail),
        };
        let body = String::from_utf8_lossy(&response.body);
        if response.status != want {
            return fail(
                format!("status {want}"),
                format!("status {}", response.status),
                format!("{detail}; body: {}", shown(body.trim(), "body")),
            );
        }
        match self.compare("body", &body) {
            Err(miss) => fail(miss.expected, miss.observed, detail),
            Ok((mut expected, mut observed)) => {
                expected.insert(0, format!("status {want}"));
                observed.insert(0, format!("status {}", response.status));
                self.capture(pass(expected.join("; "), observed.join("; "), detail), "body", &body)
            }
        }
    }

    fn tcp(&self, ev: &Evidence) -> EvidenceResult {
        let (Some(host), Some(port)) = (&ev.host, ev.port) else {
            return invalid("a tcp check needs `host` and `port`");
        };
        let target = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        let expected = format!("a tcp connection to {target}");
        let detail = format!("connect to {target} within {}", format_duration(self.timeout));
        let addrs = match (host.as_str(), port).to_socket_addrs() {
            Ok(addrs) => addrs.collect::<Vec<_>>(),
            Err(e) => return fail(expected, format!("failed to resolve {host}: {e}"), detail),
        };
        let deadline = Instant::now() + self.timeout;
        let mut observed = format!("{host} resolved to no address");
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                observed = format!("no connection within {}", format_duration(self.timeout));
                break;
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(_) => return pass(expected, "connected".to_owned(), detail),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    observed = format!("no connection within {}", format_duration(self.timeout))
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    observed = "connection refused".to_owned()
                }
                Err(e) => observed = e.to_string(),
            }
        }
        fail(expected, observed, detail)
    }

    fn file(&self, ev: &Evidence, on: Target<'_>, cancel: &Cancel) -> EvidenceResult {
        let Some(path) = &ev.path else {
            return invalid("a file check needs `path`");
        };
        let exists = format!("file {path} exists");
        let content = if on.exec.is_local() {
            let file = std::fs::File::open(path);
            match file.and_then(|f| {
                let mut bytes = Vec::new();
                f.take(MAX_CONTENT as u64).read_to_end(&mut bytes).map(|_| bytes)
            }) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return fail(exists, "no such file".to_owned(), format!("read {path}"))
                }
                Err(e) => return fail(exists, format!("unreadable: {e}"), format!("read {path}")),
            }
        } else {
            let mut spec = Spec::new(Program::Argv(vec!["cat".into(), "--".into(), path.clone()]));
            spec.env = on.env.clone();
            spec.timeout = Some(self.timeout);
            spec.output_cap = MAX_CONTENT;
            let run = on.exec.run(&spec, cancel);
            let stderr = run.output.stderr_lossy();
            match run.outcome {
                Outcome::Exited { code: 0 } => run.output.stdout,
                Outcome::Exited { .. } if stderr.contains("No such file") => {
                    return fail(exists, "no such file".to_owned(), format!("cat {path} on the target"))
                }
                Outcome::Exited { .. } => {
                    return fail(
                        exists,
                        format!("unreadable: {}", shown(stderr.trim(), "stderr")),
                        format!("cat {path} on the target"),
                    )
                }
                other => return fail(exists, other.to_string(), format!("cat {path} on the target")),
            }
        };
        let text = String::from_utf8_lossy(&content);
        let result = match self.compare("content", &text) {
            Err(miss) => fail(miss.expected, miss.observed, format!("read {path}")),
            Ok((expected, _)) if expected.is_empty() => pass(exists, "exists".to_owned(), format!("read {path}")),
            Ok((expected, observed)) => pass(expected.join("; "), observed.join("; "), format!("read {path}")),
        };
        self.capture(result, "content", &text)
    }
}

fn last_lines(text: &str, n: usize) -> &str {
    match text.char_indices().rev().filter(|(_, c)| *c == '\n').nth(n - 1) {
        Some((i, _)) => &text[i + 1..],
        None => text,
    }
}

fn pass(expected: String, observed: String, detail: String) -> EvidenceResult {
    EvidenceResult { passed: true, expected, observed, detail, attempts: 1, captured: BTreeMap::new() }
}

fn fail(expected: String, observed: String, detail: String) -> EvidenceResult {
    EvidenceResult { passed: false, expected, observed, detail, attempts: 1, captured: BTreeMap::new() }
}

fn invalid(reason: &str) -> EvidenceResult {
    EvidenceResult {
        passed: false,
        expected: "a valid check".to_owned(),
        observed: format!("invalid check: {reason}"),
        detail: reason.to_owned(),
        attempts: 1,
        captured: BTreeMap::new(),
    }
}
