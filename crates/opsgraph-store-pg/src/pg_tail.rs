//! The last statement of a commit's transaction (issue [N] 5): job records, the timeline's
//! counter and timeline rows, and, for the commit a driven operation makes over and over (its
//! lease's fence, at most one transition, job records and timeline entries), the fence and the
//! transition too, in one statement of data-modifying `WITH` clauses. Each statement is a round
//! trip to the server, and the timeline counter's row lock is held from its update to the end of
//! the commit (every writer of timeline rows queues on it). A driven operation's commits go in
//! one message, each one this statement by `EXECUTE` (`pg_one.rs`); any other commit is `BEGIN`,
//! its own statements, this one and `COMMIT`.
//!
//! Checks come before writes: the fence's row is locked `FOR SHARE` and compared first, the
//! version guard (`Write::ExpectVersion`) and then the transition's version check run only when
//! the fence held, and every write (the counter included) only when all did: a refused commit
//! wrote nothing. A lone statement bound by the
//! extended protocol is never sent without `BEGIN` and `COMMIT`: the client answers it at
//! `CommandComplete`, before its implicit transaction committed, and would hide a failed commit.

use std::borrow::Cow;
use std::collections::HashMap;

use opsgraph_store::{Error, JobRecord, TimelineEntry, Write};
use postgres::types::ToSql;

use crate::conn::Tx;
use crate::Fail;

/// Whether `writes` are the commit a driven operation makes: its fence first (if any), at most
/// one transition, at most one version guard, then only job records and timeline entries. Such a
/// commit is one statement.
pub(crate) fn folds(writes: &[Write]) -> bool {
    let (mut transitions, mut guards) = (0, 0);
    for (i, w) in writes.iter().enumerate() {
        match w {
            Write::Fence { .. } if i == 0 => {}
            Write::Transition { .. } => transitions += 1,
            Write::ExpectVersion { .. } => guards += 1,
            Write::Job(_) | Write::Timeline(_) => {}
            _ => return false,
        }
    }
    transitions <= 1 && guards <= 1
}

/// A parameter of the statement: bound (`Tail::run`), or written as a literal escaped by the
/// protocol's own rules (`Tail::execute`).
#[derive(Debug)]
enum Arg<'a> {
    Text(String),
    Int(i64),
    /// Borrowed from the commit's writes where they hold the text (no copy a turn).
    Texts(Vec<Cow<'a, str>>),
    MaybeTexts(Vec<Option<&'a str>>),
    Ints(Vec<i64>),
}

impl Arg<'_> {
    fn bound(&self) -> &(dyn ToSql + Sync) {
        match self {
            Arg::Text(v) => v,
            Arg::Int(v) => v,
            Arg::Texts(v) => v,
            Arg::MaybeTexts(v) => v,
            Arg::Ints(v) => v,
        }
    }

    /// The value as SQL, appended to `out`: text as `escape_literal` writes it (quotes doubled;
    /// `E'…'` with doubled backslashes when there is one), numbers as Rust prints them, and an
    /// array as one such text literal in the array input syntax (`'{"a","b",NULL}'::text[]`),
    /// typed. One constant per array rather than `ARRAY[…]` of one per element: the server lexes,
    /// analyses and compiles each constant of an `EXECUTE` on every turn, and a turn of 16 jobs
    /// has about 220 elements (issue [N] 5: 12 % of the drive's server CPU, docs/benchmarks.md,
    /// `pg7`). Written in place, without a string per element (`pg9`).
    fn write_literal(&self, out: &mut String) {
        use std::fmt::Write as _;
        match self {
            Arg::Text(v) => {
                let mut l = Literal::open(out);
                l.text(v, false);
                l.close();
            }
            Arg::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Arg::Texts(v) => array(out, "text", v.iter().map(|t| Some(t.as_ref()))),
            Arg::MaybeTexts(v) => array(out, "text", v.iter().copied()),
            Arg::Ints(v) => {
                let l = Literal::open(out);
                l.out.push('{');
                for (k, n) in v.iter().enumerate() {
                    if k > 0 {
                        l.out.push(',');
                    }
                    let _ = write!(l.out, "{n}");
                }
                l.out.push('}');
                l.close();
                out.push_str("::bigint[]");
            }
        }
    }

    /// A NUL cannot be written in a query's text (it ends the message): such a value is bound.
    fn writable(&self) -> bool {
        let ok = |t: &str| !t.contains('\0');
        match self {
            Arg::Text(v) => ok(v),
            Arg::Int(_) | Arg::Ints(_) => true,
            Arg::Texts(v) => v.iter().all(|t| ok(t)),
            Arg::MaybeTexts(v) => v.iter().flatten().all(|t| ok(t)),
        }
    }
}

/// A text literal being written at the end of a query (`escape_literal`'s rules: `'` doubled,
/// and when the text holds a backslash, each doubled and the literal written `E'…'`, which
/// `close` decides once the text is known).
struct Literal<'a> {
    out: &'a mut String,
    start: usize,
    backslash: bool,
}

impl<'a> Literal<'a> {
    fn open(out: &'a mut String) -> Literal<'a> {
        let start = out.len();
        out.push('\'');
        Literal { out, start, backslash: false }
    }

    /// `text` in the literal; `element`: as an array element's text, with its double quotes
    /// and backslashes escaped by a backslash first. Runs without a character to escape are
    /// copied whole (every such character is ASCII: splitting there keeps UTF-8 whole).
    fn text(&mut self, text: &str, element: bool) {
        let mut from = 0;
        for (i, b) in text.bytes().enumerate() {
            let escaped = match b {
                b'\'' => "''",
                b'\\' if element => "\\\\\\\\",
                b'\\' => "\\\\",
                b'"' if element => "\\\\\"",
                _ => continue,
            };
            self.out.push_str(&text[from..i]);
            self.out.push_str(escaped);
            self.backslash |= b != b'\'';
            from = i + 1;
        }
        self.out.push_str(&text[from..]);
    }

    fn close(self) {
        self.out.push('\'');
        if self.backslash {
            self.out.insert_str(self.start, " E");
        }
    }
}

/// An array literal of text elements (`None`: `NULL`), typed `ty[]`: every element
/// double-quoted (so that `NULL`, braces, commas, quotes and white space are the text itself),
/// a backslash and a double quote escaped by a backslash, as PostgreSQL's array input reads
/// them; the whole a text literal as `escape_literal` writes it.
fn array<'t>(out: &mut String, ty: &str, items: impl Iterator<Item = Option<&'t str>>) {
    let mut l = Literal::open(out);
    l.out.push('{');
    for (k, item) in items.enumerate() {
        if k > 0 {
            l.out.push(',');
        }
        let Some(text) = item else {
            l.out.push_str("NULL");
            continue;
        };
        l.out.push('"');
        l.text(text, true);
        l.out.push('"');
    }
    l.out.push('}');
    l.close();
    out.push_str("::");
    out.push_str(ty);
    out.push_str("[]");
}

/// A statement's parameters, numbered as they are added.
#[derive(Default)]
struct Params<'a> {
    values: Vec<Arg<'a>>,
}

impl<'a> Params<'a> {
    /// `$n` of `value`.
    fn add(&mut self, value: Arg<'a>) -> String {
        self.values.push(value);
        format!("${}", self.values.len())
    }
}

/// The last statement of a commit: its text (the same for every commit of its shape: prepared
/// once per connection), its parameters, and what it checks.
pub(crate) struct Tail<'a> {
    pub(crate) sql: String,
    args: Vec<Arg<'a>>,
    /// operation, holder, token.
    fence: Option<(String, String, i64)>,
    /// operation, expected version.
    transition: Option<(String, i64)>,
    /// operation, the version it must still have (`Write::ExpectVersion`).
    expect: Option<(String, i64)>,
}

/// What the statement answered: the lease's holder and token as it found them, whether the
/// fence held, whether the transition was made, whether the version guard held.
pub(crate) struct Answer {
    pub(crate) holder: Option<String>,
    pub(crate) token: Option<i64>,
    pub(crate) fenced_ok: bool,
    pub(crate) transitioned: bool,
    pub(crate) version_ok: bool,
}

/// The last statement of `writes` (`None`: nothing to write): their job records and timeline
/// entries, and, when `fold`, their fence and transition checked in it too.
pub(crate) fn tail(writes: &[Write], fold: bool) -> Result<Option<Tail<'_>>, Fail> {
    // Job records in one statement (nothing in a transaction reads them back; a job written
    // twice in one batch keeps its last record, as two upserts in a row would).
    let mut timeline: Vec<&TimelineEntry> = Vec::new();
    let mut jobs: Vec<&JobRecord> = Vec::new();
    let mut job_at: HashMap<(&str, &str), usize> = HashMap::new();
    let mut fence = None;
    let mut transition = None;
    let mut expect = None;
    for w in writes {
        match w {
            Write::Fence { operation, holder, token } if fold => fence = Some((operation, holder, *token)),
            Write::ExpectVersion { operation, version } if fold => expect = Some((operation, *version)),
            Write::Transition { operation, expect_version, state, entry } => {
                if fold {
                    transition = Some((operation, *expect_version, state, entry.at.as_str()));
                }
                timeline.push(entry);
            }
            Write::Timeline(entry) => timeline.push(entry),
            Write::Job(j) => match job_at.get(&(j.operation.as_str(), j.id.as_str())) {
                Some(&i) => jobs[i] = j,
                None => {
                    job_at.insert((j.operation.as_str(), j.id.as_str()), jobs.len());
                    jobs.push(j);
                }
            },
            _ => {}
        }
    }
    if fence.is_none() && transition.is_none() && expect.is_none() && jobs.is_empty() && timeline.is_empty() {
        return Ok(None);
    }
    let mut p = Params::default();
    let mut with: Vec<String> = Vec::new();
    let fence_columns = match &fence {
        Some((operation, holder, token)) => {
            let o = p.add(Arg::Text(operation.to_string()));
            let (h, t) = (p.add(Arg::Text(holder.to_string())), p.add(Arg::Int(*token)));
            with.push(format!("fence AS (SELECT holder, token FROM leases WHERE operation = {o} FOR SHARE)"));
            with.push(format!("ok AS (SELECT 1 FROM fence WHERE holder = {h} AND token = {t})"));
            "(SELECT holder FROM fence), (SELECT token FROM fence)"
        }
        None => {
            with.push("ok AS (SELECT 1)".into());
            "NULL::text, NULL::bigint"
        }
    };
    // The version guard, checked only when the fence held; what follows is written only when it
    // held too (`ok` is narrowed to it).
    let version_ok = match &expect {
        Some((operation, version)) => {
            let (o, v) = (p.add(Arg::Text(operation.to_string())), p.add(Arg::Int(*version)));
            // `FOR SHARE`: a transition of the operation committing meanwhile (a pause from
            // another connection) is waited for and the version checked again on its row, so
            // the commit is refused rather than ordered after it unchecked.
            with.push(format!(
                "ver AS (SELECT 1 FROM operations WHERE id = {o} AND version = {v} AND EXISTS (SELECT 1 FROM ok)
                 FOR SHARE)"
            ));
            "EXISTS (SELECT 1 FROM ver)"
        }
        None => {
            with.push("ver AS (SELECT 1 FROM ok)".into());
            "true"
        }
    };
    let transitioned = match &transition {
        Some((operation, version, state, at)) => {
            let kind = serde_json::to_value(state.kind())?.as_str().unwrap_or_default().to_string();
            let (s, k) = (p.add(Arg::Text(serde_json::to_string(state)?)), p.add(Arg::Text(kind)));
            let (a, o, v) =
                (p.add(Arg::Text(at.to_string())), p.add(Arg::Text(operation.to_string())), p.add(Arg::Int(*version)));
            with.push(format!(
                "tr AS (UPDATE operations SET state = {s}, state_kind = {k}, updated_at = {a}, version = version + 1
                 WHERE id = {o} AND version = {v} AND EXISTS (SELECT 1 FROM ver) RETURNING 1)"
            ));
            with.push("go AS (SELECT 1 FROM tr)".into());
            "EXISTS (SELECT 1 FROM tr)"
        }
        None => {
            with.push("go AS (SELECT 1 FROM ver)".into());
            "true"
        }
    };
    if !jobs.is_empty() {
        let texts = |f: fn(&JobRecord) -> &str| Arg::Texts(jobs.iter().map(|j| Cow::Borrowed(f(j))).collect());
        let (o, i) = (p.add(texts(|j| &j.operation)), p.add(texts(|j| &j.id)));
        let s = p.add(texts(|j| j.state.as_str()));
        let n = p.add(Arg::Ints(jobs.iter().map(|j| j.attempts as i64).collect()));
        let outcomes =
            jobs.iter().map(|j| serde_json::to_string(&j.outcome).map(Cow::Owned)).collect::<Result<_, _>>()?;
        let (out, at) = (p.add(Arg::Texts(outcomes)), p.add(texts(|j| &j.updated_at)));
        with.push(format!(
            "j AS (INSERT INTO jobs (operation, id, state, attempts, outcome, updated_at)
             SELECT * FROM UNNEST({o}::text[], {i}::text[], {s}::text[], {n}::bigint[], {out}::text[], {at}::text[])
             WHERE EXISTS (SELECT 1 FROM go)
             ON CONFLICT (operation, id) DO UPDATE SET state = excluded.state, attempts = excluded.attempts,
             outcome = excluded.outcome, updated_at = excluded.updated_at)"
        ));
    }
    if !timeline.is_empty() {
        // Seqs from the counter, updated after every check: see `pg.rs`.
        let n = p.add(Arg::Int(timeline.len() as i64));
        with.push(format!(
            "c AS (UPDATE counters SET value = value + {n} WHERE name = 'timeline' AND EXISTS (SELECT 1 FROM go)
             RETURNING value)"
        ));
        let texts = |f: fn(&TimelineEntry) -> &str| Arg::Texts(timeline.iter().map(|e| Cow::Borrowed(f(e))).collect());
        let (at, actor) = (p.add(texts(|e| &e.at)), p.add(texts(|e| &e.actor)));
        let event = p.add(texts(|e| &e.event));
        let f = p.add(Arg::MaybeTexts(timeline.iter().map(|e| e.from.as_deref()).collect()));
        let t = p.add(Arg::MaybeTexts(timeline.iter().map(|e| e.to.as_deref()).collect()));
        let reason = p.add(texts(|e| &e.reason));
        let data = timeline.iter().map(|e| serde_json::to_string(&e.data).map(Cow::Owned)).collect::<Result<_, _>>()?;
        let d = p.add(Arg::Texts(data));
        // One row per run of consecutive entries of one operation (migration 11): a driven
        // commit's entries are one run. `s` and `e`: the run's first and last entry, from 1.
        let runs = runs(&timeline);
        let ro = p.add(Arg::Texts(runs.iter().map(|r| Cow::Borrowed(r.0)).collect()));
        let (rs, re) = (
            p.add(Arg::Ints(runs.iter().map(|r| r.1).collect())),
            p.add(Arg::Ints(runs.iter().map(|r| r.2).collect())),
        );
        let slice = |a: &str| format!("({a}::text[])[r.s:r.e]");
        with.push(format!(
            "t AS (INSERT INTO timeline_runs (first_seq, last_seq, operation, at, actor, event, from_state, to_state,
             reason, data)
             SELECT c.value - {n} + r.s, c.value - {n} + r.e, r.operation, {}, {}, {}, {}, {}, {}, {}
             FROM c, UNNEST({ro}::text[], {rs}::bigint[], {re}::bigint[]) AS r(operation, s, e))",
            slice(&at),
            slice(&actor),
            slice(&event),
            slice(&f),
            slice(&t),
            slice(&reason),
            slice(&d),
        ));
    }
    let sql = format!(
        "WITH {} SELECT {fence_columns}, EXISTS (SELECT 1 FROM ok), {transitioned}, {version_ok}",
        with.join(",\n")
    );
    Ok(Some(Tail {
        sql,
        args: p.values,
        fence: fence.map(|(o, h, t)| (o.clone(), h.clone(), t)),
        transition: transition.map(|(o, v, ..)| (o.clone(), v)),
        expect: expect.map(|(o, v)| (o.clone(), v)),
    }))
}

/// The runs of consecutive `entries` of one operation: the operation, the first and the last
/// entry's position (from 1).
fn runs<'e>(entries: &[&'e TimelineEntry]) -> Vec<(&'e str, i64, i64)> {
    let mut runs: Vec<(&str, i64, i64)> = Vec::new();
    for (k, e) in entries.iter().enumerate() {
        let at = k as i64 + 1;
        match runs.last_mut() {
            Some(run) if run.0 == e.operation => run.2 = at,
            _ => runs.push((&e.operation, at, at)),
        }
    }
    runs
}

impl Tail<'_> {
    /// The statement in `tx`, its parameters bound.
    pub(crate) fn run(&self, tx: &mut Tx<'_, '_>) -> Result<(), Fail> {
        let args: Vec<&(dyn ToSql + Sync)> = self.args.iter().map(Arg::bound).collect();
        let rows = tx.query(&self.sql, &args)?;
        let row =
            rows.first().ok_or_else(|| Fail::from(Error::Postgres("a commit's statement returned no row".into())))?;
        self.judge(Answer {
            holder: row.get(0),
            token: row.get(1),
            fenced_ok: row.get(2),
            transitioned: row.get(3),
            version_ok: row.get(4),
        })
    }

    /// Whether the statement can be written with its parameters as literals.
    pub(crate) fn writable(&self) -> bool {
        self.args.iter().all(Arg::writable)
    }

    /// `EXECUTE name(…)` of this statement prepared (by `PREPARE name AS` its text) as `name`,
    /// every parameter a literal, appended to `out`.
    pub(crate) fn execute(&self, name: &str, out: &mut String) {
        out.push_str("EXECUTE ");
        out.push_str(name);
        out.push('(');
        for (k, arg) in self.args.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            arg.write_literal(out);
        }
        out.push(')');
    }

    /// The commit's result from what the statement answered: a fence that did not hold, or a
    /// stale version, refuses it (the statement wrote nothing then).
    pub(crate) fn judge(&self, a: Answer) -> Result<(), Fail> {
        if let Some((operation, holder, token)) = &self.fence {
            if !a.fenced_ok {
                let current = a.holder.zip(a.token);
                return Err(Error::fenced(operation, holder, *token, current).into());
            }
        }
        if let Some((operation, version)) = &self.expect {
            if !a.version_ok {
                return Err(Error::Conflict { id: operation.clone(), expected: *version }.into());
            }
        }
        if let Some((operation, version)) = &self.transition {
            if !a.transitioned {
                return Err(Error::Conflict { id: operation.clone(), expected: *version }.into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::Arg;

    /// The literal as `pg7` wrote it: `escape_literal` of the value, an array as `escape_literal`
    /// of its array text with each element double-quoted and backslash-escaped.
    fn reference(arg: &Arg) -> String {
        use postgres_protocol::escape::escape_literal;
        let element = |t: &str| format!("\"{}\"", t.replace('\\', "\\\\").replace('"', "\\\""));
        let list =
            |items: Vec<String>, ty: &str| format!("{}::{ty}[]", escape_literal(&format!("{{{}}}", items.join(","))));
        match arg {
            Arg::Text(v) => escape_literal(v),
            Arg::Int(v) => v.to_string(),
            Arg::Texts(v) => list(v.iter().map(|t| element(t)).collect(), "text"),
            Arg::MaybeTexts(v) => list(v.iter().map(|t| t.map_or_else(|| "NULL".into(), element)).collect(), "text"),
            Arg::Ints(v) => list(v.iter().map(i64::to_string).collect(), "bigint"),
        }
    }

    /// Literals written in place are the ones `escape_literal` writes, for text that needs every
    /// kind of escape (the store test `postgres_text_in_one_message_is_stored_as_given` reads
    /// them back from the server).
    #[test]
    fn literals_written_in_place_are_escape_literals() {
        let texts: Vec<String> = [
            "",
            "plain",
            "it's",
            r"back\slash",
            r#""quoted" {braces}, commas"#,
            "NULL",
            "  spaced  ",
            r#"\"back\"slash\\"#,
            "ünïcødé ✓ 𝄞",
            "line\nbreak",
            "''",
            r"\'",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        let mut args: Vec<Arg> = texts.iter().map(|t| Arg::Text(t.clone())).collect();
        args.push(Arg::Int(-42));
        args.push(Arg::Texts(texts.iter().map(|t| Cow::Borrowed(t.as_str())).collect()));
        args.push(Arg::Texts(vec![]));
        args.push(Arg::Texts(vec![Cow::Borrowed("a"), Cow::Owned("b".into())]));
        args.push(Arg::MaybeTexts(texts.iter().enumerate().map(|(k, t)| (k % 3 != 0).then_some(t.as_str())).collect()));
        args.push(Arg::Ints(vec![1, -2, 300]));
        args.push(Arg::Ints(vec![]));
        for arg in &args {
            let mut out = String::from("x(");
            arg.write_literal(&mut out);
            assert_eq!(out, format!("x({}", reference(arg)), "{arg:?}");
        }
    }
}
