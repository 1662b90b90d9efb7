//! `opsgraph serve`: the REST API under `/api/v1`, and the web UI at `/` (static files, [`ui`]).
//!
//! - [`table::ROUTES`] is the one table of routes: each names its method, path, the permission it
//!   needs and its handler. The router and the OpenAPI document are both built from it.
//! - Deny by default: a route's permission is checked (bearer token -> roles -> permissions, one
//!   table in [`auth`]) before its handler runs; a route with no permission is public by name.
//! - Every mutation commits its audit record in the same store transaction as the change
//!   (`Runtime::attach` for changes the runtime makes): no audit, no change.
//! - Handlers are synchronous functions on a blocking thread with their own store connection;
//!   operations are driven by one driver thread each (`drivers`), which people steer through
//!   the store as they do from the CLI.

mod agent;
mod ai_budget;
mod analyze;
pub mod auth;
mod body;
mod catalog;
mod error;
mod handlers;
mod hub;
mod limits;
mod listen;
mod manage;
pub mod media;
mod observe;
mod openapi;
mod reads;
mod replica;
mod reveal;
mod route;
pub mod routes;
mod stages;
mod stream;
pub mod table;
mod ui;
mod verifier;
pub use verifier::VerifierConfig;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use opsgraph_core::model::{CapabilityPolicy, OperationsPolicy, Provider, Resource};
use opsgraph_core::pack::Pack;
use opsgraph_runtime::Runtime;
use opsgraph_store::Store;

pub use auth::{Config, Identity, Permission};
pub use error::ApiError;
pub use limits::Limits;
pub use listen::Listener;
pub use manage::{Fetched, Installation, PackRegistry, RegistryError};
pub use routes::router;
pub use table::{openapi, Access, Route, ROUTES};

/// Opens a connection to the store; called per request and per driver.
pub type OpenStore = dyn Fn() -> Result<Box<dyn Store>, opsgraph_store::Error> + Send + Sync;

/// What plans are made from: the packs and the world the server was started with. The packs are
/// loaded again (bundled + installed) after a pack is installed or removed through the API; the
/// world documents stay as started.
#[derive(Default, Clone)]
pub struct World {
    pub packs: Vec<Pack>,
    pub resources: Vec<Resource>,
    pub providers: Vec<Provider>,
    pub policy: CapabilityPolicy,
    pub operations: OperationsPolicy,
}

/// The server's state, shared by every request and driver.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) open: Arc<OpenStore>,
    /// This replica's leases on the operations it drives (`opsgraph_runtime::lease`).
    pub(crate) keeper: opsgraph_runtime::lease::Keeper,
    /// Swapped whole when the packs are loaded again: a request or a driver works with the
    /// snapshot it took.
    pub(crate) world: RwLock<Arc<World>>,
    /// The installed-pack registry, when the server uses it (not with `--packs`).
    pub(crate) registry: Option<Box<dyn PackRegistry>>,
    pub(crate) config: Config,
    pub(crate) limits: Limits,
    pub(crate) data_dir: PathBuf,
    /// Artifact contents and job logs (the data directory's files unless `with_blobs` says).
    pub(crate) blobs: Arc<dyn opsgraph_store::BlobStore>,
    /// Mutations made through the API take this lock: check-then-act (resource busy, idempotency
    /// keys, token names) is not raced by another request of this server.
    pub(crate) write: Mutex<()>,
    /// Operations being driven, and whether they were woken while driven (drive once more).
    pub(crate) drivers: Mutex<HashMap<String, bool>>,
    pub(crate) idle: Condvar,
    /// Event streams open now, in all and per actor (`limits.event_streams_per_identity`).
    pub(crate) streams: AtomicUsize,
    pub(crate) streams_by_actor: Mutex<HashMap<String, usize>>,
    /// The readers event streams share, one per followed operation (`hub.rs`).
    pub(crate) hubs: Mutex<hub::Hubs>,
    /// Stream tokens by hash: when each was last read and whether it held (`stream.rs`).
    pub(crate) token_checks: Mutex<HashMap<String, (std::time::Instant, bool)>>,
    /// Connections closed at once because a connection limit was reached (`listen`).
    pub(crate) refused: AtomicU64,
    /// Set when the server shuts down: event streams end.
    pub(crate) closing: AtomicBool,
    /// Requests answered: (method, route, status) -> count, for `/metrics`.
    pub(crate) requests: Mutex<BTreeMap<(&'static str, &'static str, u16), u64>>,
    /// How drivers reach remote agents, and the bell the agent routes ring and wait on.
    pub(crate) agents: Arc<opsgraph_runtime::Agents>,
    /// Jobs of one operation run at once (the runtime's default when `None`).
    pub(crate) concurrency: Option<usize>,
    /// Store connections a finished request gave back, for the next ([`AppState::pooled`]).
    pub(crate) pool: Arc<opsgraph_store::idle::Idle<Box<dyn Store>>>,
    /// Answers kept until the store's next commit (`reads.rs`).
    pub(crate) reads: reads::Reads,
    /// The AI analyzer's questions of the last hour (`limits.ai_requests_*`).
    pub(crate) ai_budget: ai_budget::AiBudget,
}

/// The most idle store connections kept for requests: about as many as requests run at once
/// (tokio's blocking threads), far fewer than the connections a busy server serves.
const POOL_IDLE: usize = 32;

/// A store connection lent to one request, given back to the pool when dropped
/// ([`opsgraph_store::idle`]).
pub(crate) struct Pooled(opsgraph_store::idle::Lent<Box<dyn Store>>);

impl std::ops::Deref for Pooled {
    type Target = dyn Store;
    fn deref(&self) -> &(dyn Store + 'static) {
        &**self.0
    }
}

impl std::ops::DerefMut for Pooled {
    fn deref_mut(&mut self) -> &mut (dyn Store + 'static) {
        &mut **self.0
    }
}

impl AppState {
    pub fn new(open: Box<OpenStore>, world: World, config: Config, data_dir: PathBuf) -> AppState {
        let open: Arc<OpenStore> = Arc::from(open);
        let agents = Arc::new(opsgraph_runtime::Agents::new(open.clone()));
        let renewals = Arc::clone(&open);
        let keeper = opsgraph_runtime::lease::Keeper::new(
            opsgraph_runtime::lease::LeaseConfig::from_env(),
            Box::new(move || renewals()),
        );
        AppState(Arc::new(Inner {
            open,
            keeper,
            world: RwLock::new(Arc::new(world)),
            registry: None,
            config,
            limits: Limits::default(),
            blobs: Arc::new(opsgraph_store::FsBlobStore::new(&data_dir)),
            data_dir,
            write: Mutex::new(()),
            drivers: Mutex::new(HashMap::new()),
            idle: Condvar::new(),
            streams: AtomicUsize::new(0),
            streams_by_actor: Mutex::new(HashMap::new()),
            hubs: Mutex::new(hub::Hubs::default()),
            token_checks: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            requests: Mutex::new(BTreeMap::new()),
            agents,
            concurrency: None,
            pool: opsgraph_store::idle::Idle::new(POOL_IDLE, |_| true),
            reads: reads::Reads::default(),
            ai_budget: ai_budget::AiBudget::default(),
        }))
    }

    /// Agents: how long a claim lasts without a heartbeat, and how long a task waits to be
    /// claimed before its job fails.
    pub fn with_agent_times(self, lease: Duration, claim_timeout: Duration) -> AppState {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                let mut agents = opsgraph_runtime::Agents::new(inner.open.clone());
                agents.lease = lease;
                agents.claim_timeout = claim_timeout;
                inner.agents = Arc::new(agents);
                AppState(Arc::new(inner))
            }
            Err(shared) => AppState(shared),
        }
    }

    /// How many jobs of one operation its driver runs at once.
    pub fn with_concurrency(self, n: usize) -> AppState {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.concurrency = Some(n.max(1));
                AppState(Arc::new(inner))
            }
            Err(shared) => AppState(shared),
        }
    }

    /// Where the server keeps artifact contents and job logs.
    pub fn with_blobs(self, blobs: Arc<dyn opsgraph_store::BlobStore>) -> AppState {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.blobs = blobs;
                AppState(Arc::new(inner))
            }
            Err(shared) => AppState(shared),
        }
    }

    pub fn with_limits(self, limits: Limits) -> AppState {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.limits = limits;
                AppState(Arc::new(inner))
            }
            Err(shared) => AppState(shared),
        }
    }

    /// Pack installs and removals through the API go to this registry; without one they are
    /// refused (409 `packs_fixed`).
    pub fn with_registry(self, registry: Box<dyn PackRegistry>) -> AppState {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                inner.registry = Some(registry);
                AppState(Arc::new(inner))
            }
            Err(shared) => AppState(shared),
        }
    }

    /// The packs and world plans are made from now.
    pub fn world(&self) -> Arc<World> {
        self.0.world.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Loads the packs again from the registry (bundled + installed) and swaps them in. Packs
    /// that do not load are left out and logged, as at start. Operations already created keep
    /// the pack id@version and digest they recorded: the runtime refuses to run other files.
    pub(crate) fn reload_packs(&self) -> Result<(), RegistryError> {
        let Some(registry) = &self.0.registry else { return Ok(()) };
        let packs = registry.load()?;
        let mut world = self.0.world.write().unwrap_or_else(|e| e.into_inner());
        let mut next = World::clone(&world);
        next.packs = packs;
        *world = Arc::new(next);
        Ok(())
    }

    pub fn store(&self) -> Result<Box<dyn Store>, opsgraph_store::Error> {
        (self.0.open)()
    }

    /// A store connection for one request: an idle one when there is one, else a new one.
    /// Opening one (SQLite: the file, its pragmas, the schema check, no statement prepared yet)
    /// cost more than answering a small request.
    pub(crate) fn pooled(&self) -> Result<Pooled, opsgraph_store::Error> {
        self.0.pool.lend(|| self.store()).map(Pooled)
    }

    pub fn config(&self) -> &Config {
        &self.0.config
    }

    pub(crate) fn runtime(&self) -> Result<Runtime, opsgraph_store::Error> {
        let w = self.world();
        let mut rt = Runtime::new(self.store()?, w.packs.clone(), w.resources.clone(), self.0.data_dir.clone());
        rt.rules = self.config().patch_rules.clone();
        rt.agents = Some(self.0.agents.clone());
        rt.blobs = self.0.blobs.clone();
        rt.plan_world = Some(opsgraph_runtime::PlanWorld {
            providers: w.providers.clone(),
            policy: w.policy.clone(),
            operations: w.operations.clone(),
        });
        if let Some(n) = self.0.concurrency {
            rt.set_concurrency(n);
        }
        Ok(rt)
    }

    /// Drives an operation on a driver thread of its own; when one already drives it, that one
    /// goes round once more (it may have just decided to stop).
    pub fn wake(&self, id: &str) {
        let mut drivers = self.0.drivers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(again) = drivers.get_mut(id) {
            *again = true;
            return;
        }
        drivers.insert(id.to_string(), false);
        let state = self.clone();
        let id = id.to_string();
        let spawned = std::thread::Builder::new().name(format!("drive {id}")).spawn({
            let id = id.clone();
            move || state.drive_loop(&id)
        });
        if let Err(e) = spawned {
            tracing::error!(operation = %id, error = %e, "failed to start a driver thread");
            drivers.remove(&id);
        }
    }

    fn drive_loop(&self, id: &str) {
        loop {
            match self.runtime() {
                Ok(mut rt) => match rt.drive_leased(id, &self.0.keeper, &mut |e| {
                    tracing::info!(operation = %e.operation, event = %e.event, actor = %e.actor, "{}", e.reason)
                }) {
                    Ok(state) => tracing::info!(operation = %id, state = ?state.kind(), "driver stopped"),
                    Err(opsgraph_runtime::Error::Store(e @ opsgraph_store::Error::LeaseHeld { .. })) => {
                        tracing::info!(operation = %id, "not driven here: {e}")
                    }
                    Err(e) => tracing::warn!(operation = %id, error = %e, "driver stopped with an error"),
                },
                Err(e) => tracing::error!(operation = %id, error = %e, "driver could not open the store"),
            }
            let mut drivers = self.0.drivers.lock().unwrap_or_else(|e| e.into_inner());
            match drivers.get_mut(id) {
                Some(again) if *again => *again = false,
                _ => {
                    drivers.remove(id);
                    self.0.idle.notify_all();
                    return;
                }
            }
        }
    }

    /// Waits until no operation is being driven (tests, shutdown); false on timeout.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let drivers = self.0.drivers.lock().unwrap_or_else(|e| e.into_inner());
        let (drivers, result) =
            self.0.idle.wait_timeout_while(drivers, timeout, |d| !d.is_empty()).unwrap_or_else(|e| e.into_inner());
        drop(drivers);
        !result.timed_out()
    }

    /// Operations left `running` by an earlier server are driven again (recovery checks the
    /// evidence of attempts left without an outcome first).
    pub fn resume_running(&self) -> Result<usize, opsgraph_store::Error> {
        let store = self.store()?;
        let filter = opsgraph_store::OperationFilter { state: Some("running".into()), resource: None };
        let ops: Vec<String> =
            store.operations(&filter)?.into_iter().filter(|o| o.parent.is_none()).map(|o| o.id).collect();
        for id in &ops {
            self.wake(id);
        }
        Ok(ops.len())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the server failed")]
    Serve(#[source] std::io::Error),
    #[error("failed to start the async runtime")]
    Runtime(#[source] std::io::Error),
}

/// Binds `addr` and serves the API (blocking). Operations left running are driven again first,
/// and the replica scanner adopts those whose lease expires later.
pub fn serve(addr: SocketAddr, state: AppState) -> Result<(), Error> {
    let listener = Listener::bind(addr)?;
    if let Err(e) = state.resume_running() {
        tracing::error!(error = %e, "could not look for operations left running");
    }
    state.start_scanner();
    state.start_agent_listener();
    state.start_verifier(VerifierConfig::from_env());
    listener.serve(state, None)
}

#[cfg(test)]
mod tests;

/// Structured logs on standard error: text, or JSON lines when `json` (`OPSGRAPH_LOG=json`).
pub fn init_logging(json: bool) {
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false);
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
