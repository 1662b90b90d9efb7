//! A connection to PostgreSQL: the store's handle, its statement cache and one transaction of a
//! commit. Below the store's queries (`pg.rs`), its agent tasks (`pg_agent.rs`) and leases.

use std::cell::RefCell;
use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, GenericClient, Row, Statement};

use crate::Fail;

/// Now on the database server's clock, in milliseconds: lease expiry is judged by one clock.
pub(crate) const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

pub struct PgStore {
    pub(crate) client: RefCell<Client>,
    /// Prepared statements by text: a transition is parsed once per connection.
    pub(crate) statements: RefCell<HashMap<String, Statement>>,
    /// The commits of this process to this database, grouped (`pg_group.rs`).
    pub(crate) writer: std::sync::Arc<crate::pg_group::Writer>,
    /// Whether this connection listens on the timeline's channel (`wait_for_timeline` asked).
    pub(crate) listening: std::cell::Cell<bool>,
    /// Whether this connection listens on the agent tasks' channel (`wait_for_agent_tasks`).
    pub(crate) listening_agents: std::cell::Cell<bool>,
    /// Its server process, counted as this process's own while it is open.
    pub(crate) backend: Backend,
    /// Statements prepared by `PREPARE` for commits sent in one message (`pg_one.rs`).
    pub(crate) named: Named,
    /// The text of such a message, its capacity kept from turn to turn: a turn's query is
    /// written into it without growing it again (`pg_one.rs`).
    pub(crate) query: RefCell<String>,
    /// The URL connected to (for the syncer's own connection).
    pub(crate) url: String,
    /// The syncer `Store::syncer` handed out (`pg_sync.rs`): until there is one, a deferred
    /// commit is made durable at once (nothing would sync it).
    pub(crate) syncer: std::cell::OnceCell<std::sync::Arc<dyn opsgraph_store::Syncer>>,
}

/// The server's message (with its detail and SQLSTATE), or the client's reason and its causes.
pub(crate) fn pg_message(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let detail = db.detail().map(|d| format!(" ({d})")).unwrap_or_default();
        return format!("{}{detail} [SQLSTATE {}]", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The server processes (`pg_backend_pid()`) of this process's open store connections: the
/// agent tasks' notifications name the backend that wrote them, so a listener leaves its own
/// process's writes out ([`PgStore::wait_agent_news`]). Backend ids are unique on a database
/// server at a time; behind a pooler that changes backends a write of this process may look like
/// another's, which costs its waiters one look at the store.
static OWN_BACKENDS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn own_backends() -> std::sync::MutexGuard<'static, Vec<i32>> {
    OWN_BACKENDS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A store connection's backend, counted as this process's while the connection is open.
#[derive(Default)]
pub(crate) struct Backend(std::cell::Cell<Option<i32>>);

impl Backend {
    pub(crate) fn set(&self, pid: i32) {
        if self.0.replace(Some(pid)).is_none() {
            own_backends().push(pid);
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(pid) = self.0.get() {
            let mut own = own_backends();
            if let Some(at) = own.iter().position(|p| *p == pid) {
                own.swap_remove(at);
            }
        }
    }
}

impl PgStore {
    /// `Store::wait_for_agent_tasks`: the first call starts listening on the agent tasks'
    /// channel (and returns none: what was written before is for the caller to read); then the
    /// tasks other processes wrote within `timeout` (a notification's payload is `<state> <id>`,
    /// its process the backend that wrote it), each once, in order.
    pub(crate) fn wait_agent_news(&self, timeout: std::time::Duration) -> Result<Vec<(String, bool)>, Fail> {
        let mut client = self.client.borrow_mut();
        if !self.listening_agents.get() {
            client.batch_execute(&format!("LISTEN {}", crate::schema::AGENT_CHANNEL))?;
            self.listening_agents.set(true);
            return Ok(vec![]);
        }
        use postgres::fallible_iterator::FallibleIterator;
        let mut notifications = client.notifications();
        let mut seen = Vec::new();
        let first = notifications.timeout_iter(timeout).next()?;
        if let Some(first) = first {
            seen.push(first);
            let mut pending = notifications.iter();
            while let Some(n) = pending.next()? {
                seen.push(n);
            }
        }
        let mut tasks: Vec<(String, bool)> = Vec::new();
        for n in &seen {
            let Some((state, id)) = n.payload().split_once(' ') else { continue };
            if own_backends().contains(&n.process_id()) {
                continue;
            }
            match tasks.iter_mut().find(|(t, _)| t == id) {
                Some(known) => known.1 = state == "queued",
                None => tasks.push((id.to_string(), state == "queued")),
            }
        }
        Ok(tasks)
    }

    /// `Store::wait_for_timeline`: the first call starts listening on the timeline's channel
    /// (and says true: what was committed before is for the caller to read); then a
    /// notification, or `timeout` without one. Notifications that queued up are taken together.
    pub(crate) fn wait_notified(&self, timeout: std::time::Duration) -> Result<bool, Fail> {
        let mut client = self.client.borrow_mut();
        if !self.listening.get() {
            client.batch_execute(&format!("LISTEN {}", crate::schema::TIMELINE_CHANNEL))?;
            self.listening.set(true);
            return Ok(true);
        }
        use postgres::fallible_iterator::FallibleIterator;
        let mut notifications = client.notifications();
        let got = notifications.timeout_iter(timeout).next()?.is_some();
        let mut pending = notifications.iter();
        while pending.next()?.is_some() {}
        Ok(got)
    }

    /// The prepared statement for `sql` on this connection.
    pub(crate) fn prepared(
        statements: &RefCell<HashMap<String, Statement>>,
        client: &mut impl GenericClient,
        sql: &str,
    ) -> Result<Statement, Fail> {
        if let Some(s) = statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let s = client.prepare(sql)?;
        statements.borrow_mut().insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

/// One transaction of a commit, with the connection's statement cache.
pub(crate) struct Tx<'a, 'c> {
    pub(crate) tx: postgres::Transaction<'c>,
    pub(crate) statements: &'a RefCell<HashMap<String, Statement>>,
}

impl Tx<'_, '_> {
    pub(crate) fn exec(&mut self, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Result<u64, Fail> {
        let stmt = PgStore::prepared(self.statements, &mut self.tx, sql)?;
        Ok(self.tx.execute(&stmt, args)?)
    }

    pub(crate) fn query(&mut self, sql: &str, args: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, Fail> {
        let stmt = PgStore::prepared(self.statements, &mut self.tx, sql)?;
        Ok(self.tx.query(&stmt, args)?)
    }
}

/// The names statements were prepared under by `PREPARE` on one connection, by text: those a
/// turn's commits run by `EXECUTE` in one message (`pg_one.rs`).
#[derive(Default)]
pub(crate) struct Named(RefCell<HashMap<String, String>>);

impl Named {
    /// The name `sql` is prepared under on this connection, by `PREPARE` the first time.
    pub(crate) fn prepared(&self, client: &mut Client, sql: &str) -> Result<String, postgres::Error> {
        if let Some(name) = self.0.borrow().get(sql) {
            return Ok(name.clone());
        }
        let name = format!("opsgraph_tail_{}", self.0.borrow().len());
        client.batch_execute(&format!("PREPARE {name} AS {sql}"))?;
        self.0.borrow_mut().insert(sql.to_string(), name.clone());
        Ok(name)
    }
}
