//! `opsgraph agent`: a remote agent. It long-polls `opsgraph serve` for the tasks of the
//! resources that name it (`access: {agent: NAME}`, NAME its token's name), as many at once as
//! it has free slots (`--parallel`), runs each on a thread of its own with the same code as a
//! local attempt (`opsgraph_runtime::agent::execute`: the local executor, the same evidence
//! checks), streams the output while the job runs, heartbeats its lease and reports, the last
//! output lines with the report. Every call goes over one pool of keep-alive connections.
//!
//! The server says which agent protocol it speaks in every claim's answer (`protocol`): batches
//! (`max_tasks`) and the last lines in the report are used only with a server that speaks 2 or
//! later; with an older one the agent claims one task at a time and sends every line as a log
//! chunk. With 3 or later a report also claims the task's successor (`claim`, one commit and one
//! round trip for both), which runs on the same slot; when nothing is queued the slot goes back
//! to the long-polling claim.
//!
//! It survives the server's restarts (every call is retried with backoff; the lease is only
//! given up by the server) and its own (a task whose agent died is recovered by the server once
//! its lease expires: evidence first). A refused heartbeat (409 `stale_lease`: the task was given
//! up or cancelled) stops the job.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use opsgraph_exec::{Cancel, Tee};
use opsgraph_runtime::agent::{AgentJob, Payload};
use opsgraph_runtime::LogStream;
use serde_json::{json, Value};

use crate::agent_client::{send_log, Answer, Backoff, Client, Parsed};
use crate::agent_side::{Side, Watch};

/// How `opsgraph agent` runs.
#[derive(Debug, Clone)]
pub struct AgentArgs {
    pub server: String,
    pub token: String,
    /// Only these resources (all that name the token's name when empty).
    pub resources: Vec<String>,
    /// Where tasks run: one private directory per slot (`slot-PID-N`), emptied after each task's
    /// report, and the scripts kept by content (`scripts`).
    pub work_dir: PathBuf,
    /// Tasks run at once.
    pub parallel: usize,
    /// Stop claiming after this many tasks (benchmarks, tests); never when `None`.
    pub max_tasks: Option<u64>,
    /// How long one claim waits for work.
    pub wait: Duration,
}

/// The token: `--token`, else `OPSGRAPH_TOKEN`, else `--token-file` / `OPSGRAPH_TOKEN_FILE`.
pub fn token(flag: Option<&str>, file: Option<&Path>) -> anyhow::Result<String> {
    if let Some(t) = flag.filter(|t| !t.is_empty()) {
        return Ok(t.to_string());
    }
    if let (Ok(t), None) = (std::env::var("OPSGRAPH_TOKEN"), file) {
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let file = file.map(Path::to_path_buf).or_else(|| std::env::var("OPSGRAPH_TOKEN_FILE").ok().map(PathBuf::from));
    match file {
        Some(f) => Ok(std::fs::read_to_string(&f)
            .with_context(|| format!("cannot read the token file {}", f.display()))?
            .trim()
            .to_string()),
        None => bail!("an agent needs a token: --token, OPSGRAPH_TOKEN or --token-file (a token of the `agent` role)"),
    }
}

/// The agent protocol with batches (`max_tasks`) and a report that carries the last lines.
const PROTOCOL_BATCH: u64 = 2;
/// The agent protocol with a report that claims the next task (`claim`).
const PROTOCOL_NEXT: u64 = 3;

/// Runs the agent until `max_tasks` are done (or forever); an unusable token ends it.
pub fn run(args: AgentArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    std::fs::create_dir_all(&args.work_dir)
        .with_context(|| format!("cannot create the work directory {}", args.work_dir.display()))?;
    let instance = format!(
        "{}/{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim(),
        std::process::id()
    );
    writeln!(
        out,
        "agent {instance} pulling work from {} for {}",
        args.server,
        if args.resources.is_empty() {
            "every resource naming this token".to_string()
        } else {
            args.resources.join(", ")
        }
    )?;
    out.flush()?;
    let lines: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let fatal = claim_loop(&args, &instance, &lines);
    for l in lines.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        writeln!(out, "{l}")?;
    }
    if let Some(why) = fatal {
        bail!("{why}");
    }
    Ok(0)
}

/// Tasks running now, tasks claimed and claims in flight (within `--max-tasks`), and the
/// condition their changes are signalled on.
struct Slots {
    state: Mutex<SlotState>,
    changed: std::sync::Condvar,
    parallel: usize,
    /// `--max-tasks` (no limit: `u64::MAX`).
    max: u64,
    /// Working directories free for a task (`slot-PID-N`, and whether it was left empty), and
    /// how many were made.
    dirs: Mutex<(Vec<(usize, bool)>, usize)>,
}

#[derive(Default)]
struct SlotState {
    running: usize,
    claimed: u64,
    /// Tasks asked for by claims whose answers have not come yet.
    asked: u64,
}

impl Slots {
    fn new(parallel: usize, max: Option<u64>) -> Slots {
        Slots {
            state: Mutex::default(),
            changed: std::sync::Condvar::new(),
            parallel,
            max: max.unwrap_or(u64::MAX),
            dirs: Mutex::default(),
        }
    }

    /// A working directory no running task of this process uses (`slot-PID-N`), until
    /// [`Slots::give_dir`], and whether it must be emptied first: a new one may hold what an
    /// earlier process of the same pid left; one given back empty needs nothing.
    fn take_dir(&self) -> (usize, bool) {
        let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
        match dirs.0.pop() {
            Some((n, empty)) => (n, !empty),
            None => {
                dirs.1 += 1;
                (dirs.1 - 1, true)
            }
        }
    }

    /// Slot `n`'s directory is free again; `empty`: nothing is left in it.
    fn give_dir(&self, n: usize, empty: bool) {
        self.dirs.lock().unwrap_or_else(|e| e.into_inner()).0.push((n, empty));
    }

    /// The working directory of slot `n` under `work_dir`: named by this process too, since two
    /// agents may share a work directory.
    fn dir(work_dir: &Path, n: usize) -> PathBuf {
        work_dir.join(format!("slot-{}-{n}", std::process::id()))
    }

    /// Once no task runs: the slots' directories removed (a restarted agent has other names).
    fn remove_dirs(&self, work_dir: &Path) {
        let made = self.dirs.lock().unwrap_or_else(|e| e.into_inner()).1;
        for n in 0..made {
            let _ = std::fs::remove_dir_all(Slots::dir(work_dir, n));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// For the long-polling claim: waits until a slot is free and `--max-tasks` leaves room
    /// beside the claims in flight; then asks for that many. `None` once every task is claimed.
    fn ask_free(&self) -> Option<usize> {
        let state = self.lock();
        let state = self
            .changed
            .wait_while(state, |s| {
                s.claimed < self.max && (s.running >= self.parallel || s.claimed + s.asked >= self.max)
            })
            .unwrap_or_else(|e| e.into_inner());
        let mut state = state;
        if state.claimed >= self.max {
            return None;
        }
        let free = (self.parallel - state.running)
            .min(usize::try_from(self.max - state.claimed - state.asked).unwrap_or(usize::MAX));
        state.asked += free as u64;
        Some(free)
    }

    /// For a report: asks for one successor when `--max-tasks` leaves room.
    fn ask_one(&self) -> bool {
        let mut state = self.lock();
        let room = state.claimed + state.asked < self.max;
        if room {
            state.asked += 1;
        }
        room
    }

    /// A claim asked for `asked` and got `got`, which run from now on.
    fn answered(&self, asked: usize, got: usize) {
        let mut state = self.lock();
        state.asked -= asked as u64;
        state.claimed += got as u64;
        state.running += got;
        drop(state);
        self.changed.notify_all();
    }

    /// A task ended.
    fn ended(&self) {
        self.lock().running -= 1;
        self.changed.notify_all();
    }
}

/// What a runner needs to claim its task's successor with the report.
#[derive(Clone)]
struct Claiming {
    resources: Vec<String>,
    instance: String,
    slots: Arc<Slots>,
}

/// A new lease token for a claim.
fn new_lease() -> String {
    opsgraph_server::auth::new_token().unwrap_or_else(|_| format!("og_{}_{}", std::process::id(), now_nanos()))
}

fn now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// The tasks of a claim's answer (`task`, then `more`), `protocol` the server's; taken out of
/// the answer, not copied (a payload holds the whole job).
fn claimed_of(v: &mut Value, protocol: u64) -> Vec<Claimed> {
    if v["task"].is_null() {
        return vec![];
    }
    let first = Claimed {
        id: v["task"]["id"].as_str().unwrap_or_default().to_string(),
        lease: v["lease"].as_str().unwrap_or_default().to_string(),
        heartbeat_ms: v["heartbeat_ms"].as_u64(),
        payload: Payload::Opened(v["payload"].take()),
        protocol,
    };
    let more: Vec<Claimed> = match v["more"].take() {
        Value::Array(more) => more
            .into_iter()
            .map(|mut m| Claimed {
                id: m["task"]["id"].as_str().unwrap_or_default().to_string(),
                payload: Payload::Opened(m["payload"].take()),
                lease: first.lease.clone(),
                ..first
            })
            .collect(),
        _ => vec![],
    };
    std::iter::once(first).chain(more).collect()
}

/// A claim's answer read straight into its jobs, without a JSON tree (issue [N] 2); an answer
/// that is not this (a server of another version) is read as a tree by [`claimed_of`].
#[derive(Default, serde::Deserialize)]
struct ClaimAnswer {
    #[serde(default)]
    protocol: Option<u64>,
    #[serde(default)]
    task: Option<TaskId>,
    #[serde(default)]
    lease: Option<String>,
    #[serde(default)]
    heartbeat_ms: Option<u64>,
    #[serde(default)]
    payload: Option<AgentJob>,
    #[serde(default)]
    more: Vec<MoreAnswer>,
}

#[derive(serde::Deserialize)]
struct TaskId {
    id: String,
}

#[derive(serde::Deserialize)]
struct MoreAnswer {
    task: TaskId,
    payload: AgentJob,
}

/// A report's answer, read as [`ClaimAnswer`] is: what its claim took (`next`).
#[derive(serde::Deserialize)]
struct ReportAnswer {
    #[serde(default)]
    next: Option<ClaimAnswer>,
}

impl ClaimAnswer {
    /// Its tasks, as [`claimed_of`] takes them from a tree.
    fn claimed(self, protocol: u64) -> Vec<Claimed> {
        let Some(task) = self.task else { return vec![] };
        let payload = |job: Option<AgentJob>| match job {
            Some(job) => Payload::Job(Box::new(job)),
            None => Payload::Opened(Value::Null),
        };
        let first = Claimed {
            id: task.id,
            lease: self.lease.unwrap_or_default(),
            heartbeat_ms: self.heartbeat_ms,
            payload: payload(self.payload),
            protocol,
        };
        let more: Vec<Claimed> = self
            .more
            .into_iter()
            .map(|m| Claimed {
                id: m.task.id,
                payload: Payload::Job(Box::new(m.payload)),
                lease: first.lease.clone(),
                ..first
            })
            .collect();
        std::iter::once(first).chain(more).collect()
    }
}

/// Claims while slots are free and hands each task to a thread of its own, which also runs the
/// successors its reports claim; returns why it stopped when the server refused the agent. With
/// `--max-tasks`, it stops once that many were claimed and waits for them to end.
fn claim_loop(args: &AgentArgs, instance: &str, lines: &Arc<Mutex<Vec<String>>>) -> Option<String> {
    let client = Client::new(&args.server, &args.token);
    let slots = Arc::new(Slots::new(args.parallel.max(1), args.max_tasks));
    let claiming = Claiming { resources: args.resources.clone(), instance: instance.to_string(), slots: slots.clone() };
    let mut backoff = Backoff::new();
    // What the server speaks: learnt from its first answer (1 until then: one task a claim).
    let mut protocol = 1u64;
    // The lease this agent claims under, kept until tasks come with it: a claim whose answer
    // was lost (the server restarted) is made again with it and gets the tasks it holds.
    let mut lease = new_lease();
    let mut runners = Vec::new();
    let fatal = loop {
        let Some(free) = slots.ask_free() else { break None };
        let mut body = json!({"resources": args.resources, "wait_ms": args.wait.as_millis() as u64,
                              "instance": instance, "lease": lease});
        let asked = if protocol >= PROTOCOL_BATCH { free.min(64) } else { 1 };
        if asked > 1 {
            body["max_tasks"] = json!(asked);
        }
        let mut answer = client.post_as::<ClaimAnswer>("/api/v1/agent/claim", &body);
        let claimed = match &mut answer {
            Answer::Ok(Parsed::Typed(a)) => {
                protocol = a.protocol.unwrap_or(1);
                std::mem::take(a).claimed(protocol)
            }
            Answer::Ok(Parsed::Tree(v)) => {
                protocol = v["protocol"].as_u64().unwrap_or(1);
                claimed_of(v, protocol)
            }
            _ => vec![],
        };
        // A claimed task is always run (one dropped here could only be recovered by its
        // evidence after its lease expired).
        slots.answered(free, claimed.len());
        match answer {
            Answer::Ok(_) => {
                backoff = Backoff::new();
                if claimed.is_empty() {
                    continue;
                }
                lease = new_lease();
                for c in claimed {
                    let (client, work_dir, lines, claiming) =
                        (client.clone(), args.work_dir.clone(), lines.clone(), claiming.clone());
                    let keep = args.max_tasks.is_some();
                    runners.push(std::thread::spawn(move || {
                        // Its side thread (heartbeats, log chunks) is started first, at the
                        // agent's priority; the runner then only runs jobs and reports them,
                        // below it, as the runtime's attempt workers do: it spawns its jobs'
                        // processes itself, not through the process's spawning thread (two
                        // hand-offs a spawn, two spawns a job; issue [N] 2).
                        let side = Side::new();
                        opsgraph_exec::job_thread();
                        let mut next = vec![c];
                        while let Some(c) = next.pop() {
                            let (line, successors) = run_task(&client, &work_dir, &c, &claiming, &side);
                            eprintln!("{line}");
                            if keep {
                                lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                            }
                            claiming.slots.ended();
                            next.extend(successors);
                        }
                    }));
                }
                runners.retain(|r| !r.is_finished());
            }
            Answer::Refused(status, code, message) if matches!(status, 401 | 403) => {
                break Some(format!("the server refused this agent ({status} {code}): {message}"));
            }
            Answer::Refused(status, code, message) => {
                eprintln!("claim refused ({status} {code}): {message}");
                backoff.sleep();
            }
            Answer::Unreachable(why) => {
                eprintln!("cannot reach {}: {why}; retrying", args.server);
                backoff.sleep();
            }
        }
    };
    for r in runners {
        let _ = r.join();
    }
    slots.remove_dirs(&args.work_dir);
    fatal
}

/// A task as claimed, with what its runner needs.
#[derive(Clone)]
struct Claimed {
    id: String,
    lease: String,
    heartbeat_ms: Option<u64>,
    payload: Payload,
    protocol: u64,
}

/// Runs one claimed task to its report; returns a line saying what happened, and the successors
/// the report claimed (protocol 3).
fn run_task(
    client: &Client,
    work_dir: &Path,
    claimed: &Claimed,
    claiming: &Claiming,
    side: &Side,
) -> (String, Vec<Claimed>) {
    let id = claimed.id.clone();
    let lease = claimed.lease.clone();
    let beat = Duration::from_millis(claimed.heartbeat_ms.unwrap_or(10_000).max(100));
    let payload = &claimed.payload;
    // With protocol 2 the last lines travel in the report; before, every line is a log chunk.
    let lines_in_report = claimed.protocol >= PROTOCOL_BATCH;
    // A directory of its own while it runs, reused by the slot's next task: emptied after each
    // task (what a task leaves never reaches the next one), and before the slot's first (an
    // earlier process of this pid may have left it), not made and removed per task.
    let (slot, dirty) = claiming.slots.take_dir();
    let dir = Slots::dir(work_dir, slot);
    if dirty {
        empty(&dir);
    }
    let cancel = Cancel::new();
    let stream = Arc::new(Mutex::new(match payload {
        Payload::Job(job) => LogStream::for_job(job),
        Payload::Opened(v) => LogStream::for_payload(v),
    }));
    let tee = {
        let stream = stream.clone();
        Tee(Arc::new(move |_, bytes: &[u8]| stream.lock().unwrap_or_else(|e| e.into_inner()).push(bytes)))
    };
    side.watch(Watch {
        client: client.clone(),
        id: id.clone(),
        lease: lease.clone(),
        cancel: cancel.clone(),
        stream: stream.clone(),
        beat,
        lines_in_report,
    });
    let scripts = work_dir.join("scripts");
    let report = match payload {
        Payload::Job(job) => opsgraph_runtime::agent::execute_job(job, &dir, &scripts, Some(tee), &cancel),
        Payload::Opened(v) => opsgraph_runtime::agent::execute(v, &dir, &scripts, Some(tee), &cancel),
    };
    side.end();
    // The last lines: all but the final chunk as log chunks, the final one in the report.
    let mut last = String::new();
    if lines_in_report {
        let mut stream = stream.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let text = stream.take(true);
            if stream.is_empty() {
                last = text;
                break;
            }
            send_log(client, &id, &lease, text, &cancel, true);
        }
    }
    let verdict = match &report.failure {
        None => "ok".to_string(),
        Some(f) => format!("failed: {f}"),
    };
    let mut body = json!({"task": id, "lease": lease, "report": report});
    if !last.is_empty() {
        body["text"] = json!(last);
    }
    // The successor, claimed in the report's commit (sent again, the same lease gets the same).
    let asked = claimed.protocol >= PROTOCOL_NEXT && claiming.slots.ask_one();
    if asked {
        body["claim"] = json!({"resources": claiming.resources, "instance": claiming.instance,
                               "lease": new_lease()});
    }
    let mut backoff = Backoff::new();
    let mut last_beat = Instant::now();
    let mut next = vec![];
    let line = loop {
        match client.post_as::<ReportAnswer>("/api/v1/agent/report", &body) {
            Answer::Ok(Parsed::Typed(ReportAnswer { next: answer })) => {
                if let Some(a) = answer {
                    let protocol = a.protocol.unwrap_or(claimed.protocol);
                    next = a.claimed(protocol);
                }
                break format!("{id}: reported ({verdict})");
            }
            Answer::Ok(Parsed::Tree(mut v)) => {
                let protocol = v["next"]["protocol"].as_u64().unwrap_or(claimed.protocol);
                next = claimed_of(&mut v["next"], protocol);
                break format!("{id}: reported ({verdict})");
            }
            Answer::Refused(status, code, message) => {
                break format!("{id}: report refused ({status} {code}): {message}")
            }
            Answer::Unreachable(why) => {
                eprintln!("{id}: cannot report yet ({why}); retrying");
                backoff.sleep();
                // Keep the lease while the server comes back.
                if last_beat.elapsed() >= beat {
                    last_beat = Instant::now();
                    let _ = client.post("/api/v1/agent/heartbeat", &json!({"task": id, "lease": lease}));
                }
            }
        }
    };
    if asked {
        claiming.slots.answered(1, next.len());
    }
    let emptied = empty(&dir);
    claiming.slots.give_dir(slot, emptied);
    (line, next)
}

/// Removes what is in `dir` (a task's files, its output), keeping the directory; what cannot be
/// removed (a job took its own permissions away) goes aside with the directory, so that the
/// slot's next task still starts in an empty one. Whether nothing is left there (a directory
/// that cannot be read, or set aside, is emptied again before the slot's next task).
fn empty(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return !dir.exists() };
    let mut stuck = false;
    for e in entries {
        let Ok(e) = e else {
            stuck = true;
            continue;
        };
        let path = e.path();
        let removed = match e.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        stuck |= removed.is_err();
    }
    !stuck || std::fs::rename(dir, dir.with_extension(format!("left-{}", now_nanos()))).is_ok()
}

/// How a runtime of this process (`apply`, `resume`, `retry`) reaches agents: through the data
/// directory's store (`--database`, else its SQLite file), which a server's agent routes share.
/// `OPSGRAPH_AGENT_CLAIM_TIMEOUT` sets how long a task waits to be claimed.
pub fn local_agents(data_dir: &Path) -> Arc<opsgraph_runtime::Agents> {
    let mut agents = opsgraph_runtime::Agents::new(crate::storage::opener(data_dir));
    if let Some(d) =
        std::env::var("OPSGRAPH_AGENT_CLAIM_TIMEOUT").ok().and_then(|v| opsgraph_exec::parse_duration(&v).ok())
    {
        agents.claim_timeout = d;
    }
    Arc::new(agents)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a claimed task is to its runner, comparable.
    fn seen(c: &Claimed) -> String {
        let job: AgentJob = match &c.payload {
            Payload::Job(job) => (**job).clone(),
            Payload::Opened(v) => serde_json::from_value(v.clone()).unwrap(),
        };
        let job = serde_json::to_string(&job).unwrap();
        format!("{} {} {:?} {} {job}", c.id, c.lease, c.heartbeat_ms, c.protocol)
    }

    /// A claim's (or a report's `next`) answer is read straight into its jobs, giving the tasks
    /// the JSON tree gave (issue [N] 2); an answer that is not one to this build (another
    /// version's payload) is read as a tree, as before, and its runner reports what it cannot run.
    #[test]
    fn a_claims_answer_is_read_into_its_jobs_as_the_tree_gave_them_and_else_as_a_tree() {
        let job = json!({"instance": "j@w0", "attempt": 1, "kind": "run", "job": {"id": "j"}, "evidence": [],
                         "program": {"shell": "true"}, "env": {"A": "b"}, "files": [], "timeout_ms": null,
                         "check_first": false, "secret_outputs": [], "mask": ["c2VjcmV0"]});
        let answer = json!({"protocol": 3, "task": {"id": "t1", "operation": "op", "job": "j@w0", "attempt": 1,
                            "kind": "run", "resource": "w0", "agent": "pool"},
                            "lease": "l".repeat(16), "lease_expires_ms": 5, "heartbeat_ms": 100, "payload": job,
                            "more": [{"task": {"id": "t2"}, "lease_expires_ms": 5, "payload": job}]});
        let typed: ClaimAnswer = serde_json::from_str(&answer.to_string()).unwrap();
        let typed: Vec<String> = typed.claimed(3).iter().map(seen).collect();
        let tree: Vec<String> = claimed_of(&mut answer.clone(), 3).iter().map(seen).collect();
        assert_eq!(typed.len(), 2);
        assert_eq!(typed, tree);
        let report: ReportAnswer =
            serde_json::from_str(&json!({"task": "t0", "state": "reported", "next": answer}).to_string()).unwrap();
        assert_eq!(report.next.unwrap().claimed(3).iter().map(seen).collect::<Vec<_>>(), tree);
        for nothing in [json!({"protocol": 3, "task": null}), json!({"task": "t0", "state": "reported"})] {
            let a: ClaimAnswer = serde_json::from_str(&nothing.to_string()).unwrap_or_default();
            assert!(a.claimed(3).is_empty());
        }
        // Another version's payload: not this build's job, so the answer is read as a tree and
        // the runner is given the payload as it came.
        let odd = json!({"protocol": 9, "task": {"id": "t3"}, "lease": "l", "payload": {"instance": "x", "new": 1}});
        assert!(serde_json::from_str::<ClaimAnswer>(&odd.to_string()).is_err());
        let tasks = claimed_of(&mut odd.clone(), 9);
        assert!(matches!(&tasks[0].payload, Payload::Opened(v) if v["new"] == 1));
    }

    /// A slot's directory is emptied before a task only when it may hold something: new to
    /// this process (an earlier one of the same pid may have left it), or left unemptied by the
    /// slot's last task, which empties it after itself; one left empty is taken as it is.
    #[test]
    fn a_slots_directory_is_emptied_before_a_task_only_when_it_may_hold_something() {
        let work = std::env::temp_dir().join(format!("opsgraph-slots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        let slots = Slots::new(2, None);
        let mut seen = Vec::new();
        let (slot, dirty) = slots.take_dir();
        seen.push(format!("slot {slot}: empty it first {dirty}"));
        let dir = Slots::dir(&work, slot);
        std::fs::create_dir_all(dir.join("out")).unwrap();
        std::fs::write(dir.join("out/f"), "x").unwrap();
        std::fs::write(dir.join("g"), "y").unwrap();
        let emptied = empty(&dir);
        seen.push(format!("after its task: emptied {emptied}, {} left", std::fs::read_dir(&dir).unwrap().count()));
        slots.give_dir(slot, emptied);
        let (slot, dirty) = slots.take_dir();
        seen.push(format!("slot {slot} again: empty it first {dirty}"));
        slots.give_dir(slot, false);
        let (slot, dirty) = slots.take_dir();
        seen.push(format!("slot {slot}, left unemptied: empty it first {dirty}"));
        let (slot, dirty) = slots.take_dir();
        seen.push(format!("slot {slot} beside it: empty it first {dirty}"));
        assert_eq!(
            seen,
            [
                "slot 0: empty it first true",
                "after its task: emptied true, 0 left",
                "slot 0 again: empty it first false",
                "slot 0, left unemptied: empty it first true",
                "slot 1 beside it: empty it first true",
            ]
        );
        std::fs::remove_dir_all(&work).unwrap();
    }
}
