//! Managing what plans are made from: installing and removing packs (`manage_packs`), storing
//! and deleting resources (`manage_resources`).
//!
//! Resources live in the store: the change and its audit row are one transaction. Installed
//! packs are files (`DATA_DIR/packs/<id>/<version>/`, owned by the binary's registry, reached
//! through [`PackRegistry`]): the audit row is committed right after the rename that installs or
//! removes the pack. When it cannot be, the request fails (500); a fresh install is taken back
//! first, so nothing stays installed without its row; a replacement or a removal cannot be taken
//! back (the old files are gone) and is logged as unaudited.

use axum::http::StatusCode;
use opsgraph_core::model::Document;
use opsgraph_core::pack::{split_pack_ref, Pack};
use opsgraph_store::Write;
use serde_json::{json, Value};

use crate::auth;
use crate::error::ApiError;
use crate::handlers::{Content, Ctx, Reply};

/// What an install did.
#[derive(Debug, Clone)]
pub struct Installation {
    /// `installed`, `replaced` or `unchanged` (the same id@version with the same digest).
    pub result: &'static str,
    pub id: String,
    pub version: String,
    pub digest: String,
    /// The digest replaced, for `replaced`.
    pub previous: Option<String>,
    /// Where it was installed from, as recorded.
    pub source: String,
}

/// Why the registry refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The archive or the pack in it is refused (an entry and the rule it breaks, a limit, an
    /// invalid pack): 422 `pack_refused`.
    #[error("{0}")]
    Refused(String),
    /// The same id@version is installed with other content: 409 `pack_conflict`.
    #[error("{0}")]
    Conflict(String),
    /// Not installed: 404 `no_pack`.
    #[error("{0}")]
    NotInstalled(String),
    /// Bundled with the binary, so not removable: 409 `pack_bundled`.
    #[error("{0}")]
    Bundled(String),
    /// The files could not be read or written: 500.
    #[error("{0}")]
    Failed(String),
    /// A catalogue install refused before anything was written (docs/errors.md, "Pack catalogue
    /// errors"): 502 `catalogue_fetch_failed`, else 422 with the refusal's code.
    #[error("{message}")]
    Catalogue { code: &'static str, message: String },
}

/// A pack archive fetched from a catalogue and verified, ready to install.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub archive: Vec<u8>,
    /// Where it came from, as the install record says it.
    pub source: String,
    /// What the `pack.install` audit row adds: the catalogue, the archive's sha256, the key.
    pub detail: Value,
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> ApiError {
        match e {
            RegistryError::Refused(m) => ApiError::unprocessable("pack_refused", m),
            RegistryError::Conflict(m) => ApiError::conflict("pack_conflict", m),
            RegistryError::NotInstalled(m) => ApiError::not_found("no_pack", m),
            RegistryError::Bundled(m) => ApiError::conflict("pack_bundled", m),
            RegistryError::Catalogue { code: "catalogue_fetch_failed", message } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "catalogue_fetch_failed", message)
            }
            RegistryError::Catalogue { code, message } => ApiError::unprocessable(code, message),
            RegistryError::Failed(m) => {
                tracing::error!(error = %m, "the pack registry failed");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the pack registry failed; see the server log",
                )
            }
        }
    }
}

/// The installed-pack registry of the data directory, as the CLI's `pack` commands use it. The
/// binary crate implements it (it owns loading and the registry's files).
pub trait PackRegistry: Send + Sync {
    /// id, version and digest of the pack in a `.tar.gz`, every entry checked; nothing written.
    fn inspect(&self, archive: &[u8]) -> Result<(String, String, String), RegistryError>;
    /// Installs a `.tar.gz` read in memory; `source` is recorded.
    fn install(&self, archive: &[u8], source: &str, replace: bool, actor: &str) -> Result<Installation, RegistryError>;
    /// The digest recorded for an installed id@version, `None` when it is not installed.
    fn installed_digest(&self, id: &str, version: &str) -> Result<Option<String>, RegistryError>;
    /// Removes an installed id@version.
    fn remove(&self, id: &str, version: &str) -> Result<(), RegistryError>;
    /// The packs plans are made from: bundled + installed, as `opsgraph serve` loads them.
    fn load(&self) -> Result<Vec<Pack>, RegistryError>;
    /// The rows of `opsgraph pack list -o json` and the problems it reports.
    fn list(&self) -> Result<(Vec<Value>, Vec<String>), RegistryError>;
    /// `reference` (`name[@version]`) fetched from the catalogue at `from` and verified against
    /// the server's trusted keys; nothing written. Without an implementation, refused.
    fn fetch_from_catalogue(&self, from: &str, reference: &str) -> Result<Fetched, RegistryError> {
        let _ = (from, reference);
        Err(RegistryError::Catalogue {
            code: "catalogue_invalid",
            message: "this server installs from no catalogue".into(),
        })
    }
}

fn registry(app: &crate::AppState) -> Result<&dyn PackRegistry, ApiError> {
    app.0.registry.as_deref().ok_or_else(|| {
        ApiError::conflict(
            "packs_fixed",
            "this server was started with --packs: it plans with those directories only and does not use \
             installed packs",
        )
    })
}

/// The `pack list` rows, for `GET /api/v1/packs` (`None` without a registry).
pub(crate) fn registry_rows(ctx: &Ctx) -> Result<Option<opsgraph_api::RegistryRows>, ApiError> {
    match ctx.state.0.registry.as_deref() {
        None => Ok(None),
        Some(r) => {
            let (rows, problems) = r.list()?;
            Ok(Some(opsgraph_api::RegistryRows { rows, problems }))
        }
    }
}

fn in_use(ctx: &Ctx, reference: &str, digest: Option<&str>) -> Result<(), ApiError> {
    if let Some(op) = opsgraph_runtime::manage::operation_using_pack(&*ctx.store, reference, digest)? {
        let state = opsgraph_core::plan::lifecycle::state_name(op.state.kind());
        return Err(ApiError::conflict(
            "pack_in_use",
            format!("pack {reference} is in use by operation {} ({state}): wait for it to finish or cancel it", op.id),
        )
        .with_details(json!({"operation": op.id, "state": state})));
    }
    Ok(())
}

/// Commits the audit row of a registry change that already happened.
fn audit_after(ctx: &mut Ctx, action: &str, target: &str, detail: Value) -> Result<(), ApiError> {
    let actor = ctx.who()?.actor();
    ctx.store.commit(&[Write::Audit(auth::audit(&actor, action, target, None, None, detail))])?;
    Ok(())
}

/// `POST /api/v1/packs[?replace=true]`: a `.tar.gz` pack archive, installed as `opsgraph pack
/// install` installs it.
pub(crate) fn install_pack(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let replace = match ctx.query.get("replace").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_parameter",
                format!("`replace` is true or false, not `{other}`"),
            ))
        }
    };
    let ctype = ctx.headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let ctype = ctype.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if !matches!(ctype.as_str(), "application/gzip" | "application/x-gzip") {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the pack as a .tar.gz archive with `Content-Type: application/gzip`",
        ));
    }
    let archive = std::mem::take(&mut ctx.body);
    install_archive(ctx, &archive, format!("api upload by {actor}"), replace, json!({}))
}

/// `POST /api/v1/packs/catalogue` `{"from": URL, "pack": "name[@version]", "replace": false}`:
/// fetched from the catalogue over http(s) and verified against the server's trusted keys
/// (`config.yaml` `trusted_keys`), then installed as an upload is.
pub(crate) fn install_from_catalogue(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let body: opsgraph_api::CatalogueInstallRequest = ctx.json(false)?;
    let app = ctx.state.clone();
    let fetched = registry(&app)?.fetch_from_catalogue(&body.from, &body.pack)?;
    install_archive(ctx, &fetched.archive, fetched.source, body.replace, fetched.detail)
}

/// Installs a checked archive and commits its `pack.install` row (`extra` added to its detail).
fn install_archive(
    ctx: &mut Ctx,
    archive: &[u8],
    source: String,
    replace: bool,
    extra: Value,
) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let app = ctx.state.clone();
    let reg = registry(&app)?;
    let (id, version, digest) = reg.inspect(archive)?;
    let reference = format!("{id}@{version}");
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    // Replacing the files of a version an unfinished operation runs is refused, as removing is.
    if replace {
        if let Some(old) = reg.installed_digest(&id, &version)?.filter(|d| *d != digest) {
            in_use(ctx, &reference, Some(&old))?;
        }
    }
    let done = reg.install(archive, &source, replace, &actor)?;
    let body = json!(opsgraph_api::PackInstalled {
        result: done.result.to_string(),
        id: done.id.clone(),
        version: done.version.clone(),
        reference: reference.clone(),
        digest: done.digest.clone(),
        previous: done.previous.clone(),
        source: done.source.clone(),
    });
    if done.result == "unchanged" {
        return Ok(Reply::with(StatusCode::OK, Content::Json(body)));
    }
    let mut detail = json!({"result": done.result, "digest": done.digest, "previous": done.previous});
    if let (Some(d), Value::Object(extra)) = (detail.as_object_mut(), extra) {
        d.extend(extra);
    }
    if let Err(e) = audit_after(ctx, "pack.install", &reference, detail) {
        if done.result == "installed" {
            if let Err(undo) = reg.remove(&id, &version) {
                tracing::error!(pack = %reference, error = %undo, "installed without its audit row, and could not take it back");
            }
        } else {
            tracing::error!(pack = %reference, "replaced without its audit row (the old files are gone)");
        }
        return Err(e);
    }
    app.reload_packs()?;
    Ok(Reply::with(StatusCode::CREATED, Content::Json(body)))
}

/// `DELETE /api/v1/packs/{id}` with `id@version`.
pub(crate) fn remove_pack(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let reference = ctx.param("id");
    let (id, Some(version)) = split_pack_ref(&reference) else {
        return Err(ApiError::bad_request(
            "invalid_parameter",
            format!("name the version to remove: /api/v1/packs/{reference}@VERSION"),
        ));
    };
    let (id, version) = (id.to_string(), version.to_string());
    let app = ctx.state.clone();
    let reg = registry(&app)?;
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let Some(digest) = reg.installed_digest(&id, &version)? else {
        // The registry tells a bundled pack from an unknown one.
        reg.remove(&id, &version)?;
        return Err(ApiError::not_found("no_pack", format!("pack {reference} is not installed")));
    };
    // An unreadable install record (digest unknown): any operation of this id@version holds it.
    let known = Some(digest.as_str()).filter(|d| d.starts_with("sha256:"));
    in_use(ctx, &reference, known)?;
    reg.remove(&id, &version)?;
    if let Err(e) = audit_after(ctx, "pack.remove", &reference, json!({"digest": digest})) {
        tracing::error!(pack = %reference, "removed without its audit row");
        return Err(e);
    }
    app.reload_packs()?;
    Reply::ok(json!(opsgraph_api::PackRemoved { result: "removed".into(), reference, digest }))
}

/// `POST /api/v1/resources`: one `resource` document, stored (insert or replace) with its audit
/// row in one transaction.
pub(crate) fn apply_resource(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let Document::Resource(resource) = ctx.document("resource")? else { unreachable!("kind checked") };
    let app = ctx.state.clone();
    if app.world().resources.iter().any(|r| r.id == resource.id) {
        return Err(ApiError::conflict(
            "world_resource",
            format!(
                "resource `{}` is described by the inventory the server was started with, which wins in plans; \
                 change it there",
                resource.id
            ),
        ));
    }
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    let result = opsgraph_runtime::manage::apply_resource(&mut *ctx.store, &resource, &actor)?;
    let status = if result == opsgraph_runtime::manage::Upsert::Created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(Reply::with(
        status,
        Content::Json(json!(opsgraph_api::ResourceChange { id: resource.id, result: result.as_str().into() })),
    ))
}

/// `DELETE /api/v1/resources/{*id}`.
pub(crate) fn delete_resource(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let actor = ctx.who()?.actor();
    let id = ctx.param("id");
    let app = ctx.state.clone();
    let _write = app.0.write.lock().unwrap_or_else(|e| e.into_inner());
    if !opsgraph_runtime::manage::delete_resource(&mut *ctx.store, &id, &actor)? {
        return Err(ApiError::not_found("no_resource", format!("no resource `{id}` is stored")));
    }
    Reply::ok(json!(opsgraph_api::ResourceChange { id, result: "deleted".into() }))
}
