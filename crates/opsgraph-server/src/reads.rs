//! Answers kept between commits: the operation view of `GET /api/v1/operations/{id}` as written
//! JSON, for as long as nothing is committed to the store. A polled operation is read and
//! written once per change, not once per request.
//!
//! What tells a change is the store's `data_version` on a connection of its own that never
//! commits ([`Reads::version`]): it moves with every commit of every other connection — this
//! server's requests and drivers, the CLI, another replica on the same file. Everything kept
//! belongs to one version and is dropped when the version moves. The version is read before the
//! store is, so what is kept is never older than its version; a commit after that read moves the
//! version the next request reads. A backend that cannot tell (`None`: PostgreSQL) keeps nothing:
//! every request reads the store.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Bytes;
use opsgraph_store::Store;

use crate::error::ApiError;
use crate::handlers::{Ctx, Reply};
use crate::AppState;

/// The most operation views kept, and their most bytes together (a 2,000-job operation's view
/// is about 1.2 MB).
const VIEWS: usize = 256;
const VIEW_BYTES: usize = 64 << 20;

#[derive(Default)]
pub(crate) struct Reads {
    /// The connection whose `data_version` is the version, and how many were opened before it
    /// (first use opens one; one that fails is dropped and the next request opens another).
    watcher: Mutex<(u64, Option<Box<dyn Store>>)>,
    kept: Mutex<Kept>,
}

/// A version of the store: the watcher it was read on (two connections' `data_version`s do not
/// compare) and what it said. Later versions compare greater.
pub(crate) type Version = (u64, i64);

/// What was read at one version.
#[derive(Default)]
struct Kept {
    version: Option<Version>,
    views: HashMap<String, Bytes>,
    view_bytes: usize,
}

impl Kept {
    /// Whether what is kept belongs to `version`: a later version drops it all first.
    fn at(&mut self, version: Version) -> bool {
        match self.version {
            Some(v) if v == version => true,
            Some(v) if v > version => false,
            _ => {
                *self = Kept { version: Some(version), ..Kept::default() };
                true
            }
        }
    }
}

impl Reads {
    /// The store's version now (`None`: it cannot tell, or the watcher failed: keep nothing).
    pub(crate) fn version(&self, state: &AppState) -> Option<Version> {
        let mut watcher = self.watcher.lock().unwrap_or_else(|e| e.into_inner());
        let (opened, store) = &mut *watcher;
        if store.is_none() {
            *store = Some(state.store().ok()?);
            *opened += 1;
        }
        match store.as_ref()?.data_version() {
            Ok(v) => v.map(|v| (*opened, v)),
            Err(e) => {
                tracing::warn!(error = %e, "reading the store's data_version failed; answers are read anew");
                *store = None;
                None
            }
        }
    }

    fn get<T: Clone>(&self, version: Option<Version>, pick: impl FnOnce(&Kept) -> Option<&T>) -> Option<T> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        (kept.at(version?)).then(|| pick(&kept).cloned()).flatten()
    }

    fn keep(&self, version: Option<Version>, put: impl FnOnce(&mut Kept)) {
        let Some(version) = version else { return };
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.at(version) {
            put(&mut kept);
        }
    }
}

/// `GET /api/v1/operations/{id}`: the view `handlers::operation` writes, kept as its bytes
/// until the store's version moves.
pub(crate) fn operation(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let reads = &ctx.state.0.reads;
    let version = reads.version(&ctx.state);
    let id = ctx.param("id");
    if let Some(bytes) = reads.get(version, |k| k.views.get(&id)) {
        return Reply::bytes("application/json", bytes.to_vec(), false);
    }
    let op = ctx.operation_record()?;
    let view = opsgraph_api::views::operation(&*ctx.store, &op)?;
    let bytes = serde_json::to_vec(&view).map_err(|e| ApiError::internal("an answer cannot be written", &e))?;
    if bytes.len() <= VIEW_BYTES {
        let shared = Bytes::copy_from_slice(&bytes);
        reads.keep(version, |k| {
            if k.views.len() < VIEWS && k.view_bytes + shared.len() <= VIEW_BYTES {
                k.view_bytes += shared.len();
                if let Some(old) = k.views.insert(id, shared) {
                    k.view_bytes -= old.len();
                }
            }
        });
    }
    Reply::bytes("application/json", bytes, false)
}
