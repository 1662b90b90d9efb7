//! `opsgraph serve` and `opsgraph token create|list|revoke`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{bail, Context as _};
use opsgraph_server::{auth, AppState, Config, Fetched, Installation, PackRegistry, RegistryError, World};
use opsgraph_store::Store;

use crate::load::{self, Source};
use crate::ops_cmd::open_store;
use crate::registry;

/// The server's state over a data directory: packs (default `bundled:packs`), the world
/// documents given, `config.yaml` (custom roles, self-approval, `limits:`) and a store connection
/// per use.
pub fn state(data_dir: &Path, packs: &[String], world: &[String]) -> anyhow::Result<AppState> {
    let packs_given = !packs.is_empty();
    // The server runs jobs: bundled packs are written out; installed packs count too.
    let (packs, diags) = crate::ops_cmd::load_packs(packs, data_dir, true)?;
    let (docs, mut world_diags) = load::documents(&world.iter().map(|p| Source::parse(p)).collect::<Vec<_>>());
    let w = load::world(docs, &mut world_diags);
    let problems: Vec<String> =
        diags.iter().chain(&world_diags).filter(|d| d.is_error()).map(ToString::to_string).collect();
    if !problems.is_empty() {
        bail!("the packs or world documents have problems:\n{}", problems.join("\n"));
    }
    let config = Config::load(data_dir)?;
    let limits = opsgraph_server::Limits::load(data_dir)?;
    open_store(data_dir)?; // creates the directory and migrates once, before any request
    let opener = crate::storage::opener(data_dir);
    let open = move || -> Result<Box<dyn Store>, opsgraph_store::Error> { opener() };
    let world =
        World { packs, resources: w.resources, providers: w.providers, policy: w.policy, operations: w.operations };
    let state = AppState::new(Box::new(open), world, config, data_dir.to_path_buf())
        .with_limits(limits)
        .with_blobs(crate::storage::blobs(data_dir)?);
    // With `--packs` the server plans with those directories only: installed packs are not used,
    // so the API does not install any.
    if !packs_given {
        return Ok(state.with_registry(Box::new(DataDirRegistry { data_dir: data_dir.to_path_buf() })));
    }
    Ok(state)
}

/// The installed-pack registry of the data directory, for `POST`/`DELETE /api/v1/packs`.
struct DataDirRegistry {
    data_dir: std::path::PathBuf,
}

fn failed(e: anyhow::Error) -> RegistryError {
    RegistryError::Failed(format!("{e:#}"))
}

impl PackRegistry for DataDirRegistry {
    fn inspect(&self, archive: &[u8]) -> Result<(String, String, String), RegistryError> {
        let p =
            registry::inspect_archive(archive, "the archive").map_err(|e| RegistryError::Refused(format!("{e:#}")))?;
        Ok((p.manifest.id.clone(), p.manifest.version.clone(), p.digest.clone()))
    }

    fn install(&self, archive: &[u8], source: &str, replace: bool, actor: &str) -> Result<Installation, RegistryError> {
        let done = registry::install_archive(&self.data_dir, archive, source, replace, actor).map_err(|e| {
            match e.downcast_ref::<registry::Conflict>() {
                Some(c) => RegistryError::Conflict(c.to_string()),
                None => failed(e),
            }
        })?;
        let v = crate::pack_cmd::installation_json(&done);
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let result = match v["result"].as_str() {
            Some("replaced") => "replaced",
            Some("unchanged") => "unchanged",
            _ => "installed",
        };
        Ok(Installation {
            result,
            id: s("id"),
            version: s("version"),
            digest: s("digest"),
            previous: v["previous"].as_str().map(str::to_string),
            source: s("source"),
        })
    }

    fn installed_digest(&self, id: &str, version: &str) -> Result<Option<String>, RegistryError> {
        let installed = registry::installed(&self.data_dir).map_err(failed)?;
        Ok(installed
            .into_iter()
            .find(|i| i.id == id && i.version == version)
            .map(|i| i.record.map(|r| r.digest).unwrap_or_else(|| "(unknown)".into())))
    }

    fn remove(&self, id: &str, version: &str) -> Result<(), RegistryError> {
        if self.installed_digest(id, version)?.is_none() {
            let reference = format!("{id}@{version}");
            let (bundled, _) = load::packs(&[Source::parse("bundled:packs")]);
            if bundled.iter().any(|p| p.reference() == reference) {
                return Err(RegistryError::Bundled(format!(
                    "pack {reference} is bundled with this binary, not installed: it cannot be removed"
                )));
            }
            return Err(RegistryError::NotInstalled(format!("pack {reference} is not installed")));
        }
        registry::remove(&self.data_dir, id, version).map_err(failed)
    }

    fn load(&self) -> Result<Vec<opsgraph_core::pack::Pack>, RegistryError> {
        let (packs, diags) = crate::ops_cmd::load_packs(&[], &self.data_dir, true).map_err(failed)?;
        for d in diags.iter().filter(|d| d.is_error()) {
            tracing::error!("{d}");
        }
        Ok(packs)
    }

    fn list(&self) -> Result<(Vec<serde_json::Value>, Vec<String>), RegistryError> {
        crate::pack_cmd::rows(&self.data_dir).map_err(failed)
    }

    /// Over http(s) only (a server does not read the files of its own machine for a client), with
    /// the keys of the data directory's `config.yaml`, read at each install.
    fn fetch_from_catalogue(&self, from: &str, reference: &str) -> Result<Fetched, RegistryError> {
        use crate::catalogue::{self, Refusal};
        let refused = |r: Refusal| RegistryError::Catalogue { code: r.code, message: r.message };
        let lower = from.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(RegistryError::Catalogue {
                code: "catalogue_invalid",
                message: format!("`{from}`: a server fetches catalogues over http:// or https:// only"),
            });
        }
        let keys = catalogue::trusted_keys(&self.data_dir, &[]).map_err(|e| match e.downcast::<Refusal>() {
            Ok(r) => refused(r),
            Err(e) => failed(e),
        })?;
        if keys.is_empty() {
            return Err(RegistryError::Catalogue {
                code: "no_trusted_keys",
                message: "this server trusts no key: packs from a catalogue are installed only when signed by a key \
                          it trusts; add the publisher's minisign public key to `trusted_keys:` in the server's \
                          config.yaml"
                    .into(),
            });
        }
        let v = catalogue::fetch_verified(from, reference, &keys).map_err(refused)?;
        let detail = serde_json::json!({
            "catalogue": from, "sha256": catalogue::sha256_hex(&v.archive), "signed_by": v.signer,
        });
        Ok(Fetched { source: v.source, detail, archive: v.archive })
    }
}

/// Creates the admin token of a store that has none: from `$OPSGRAPH_ADMIN_TOKEN_FILE`, or new
/// and printed once (only its hash is kept).
pub fn bootstrap(state: &AppState, out: &mut dyn Write) -> anyhow::Result<()> {
    let file = std::env::var_os("OPSGRAPH_ADMIN_TOKEN_FILE").map(std::path::PathBuf::from);
    let mut store = state.store()?;
    match auth::bootstrap_admin(&mut *store, state.config(), file.as_deref())? {
        Some((record, Some(token))) => {
            writeln!(out, "admin token (platform_admin, id {}); shown once, only its hash is kept:", record.id)?;
            writeln!(out, "{token}")?;
        }
        Some((record, None)) => {
            writeln!(out, "admin token {} read from $OPSGRAPH_ADMIN_TOKEN_FILE", record.id)?;
        }
        None => {}
    }
    Ok(())
}

pub fn serve(
    data_dir: &Path,
    listen: SocketAddr,
    packs: &[String],
    world: &[String],
    agents: &crate::args::AgentTimes,
    concurrency: Option<u16>,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    opsgraph_server::init_logging(std::env::var("OPSGRAPH_LOG").is_ok_and(|v| v == "json"));
    let mut state = state(data_dir, packs, world)?.with_agent_times(agents.agent_lease, agents.agent_claim_timeout);
    if let Some(n) = concurrency {
        state = state.with_concurrency(n.into());
    }
    bootstrap(&state, out)?;
    let listener = opsgraph_server::Listener::bind(listen)?;
    let addr = listener.local_addr().unwrap_or(listen);
    writeln!(out, "serving the API on http://{addr}/api/v1 (data directory {})", data_dir.display())?;
    let lease = state.lease_config();
    writeln!(
        out,
        "replica {} on {} (lease TTL {} ms)",
        lease.holder,
        opsgraph_store::redact(&crate::ops_cmd::database_url(data_dir)),
        lease.ttl.as_millis()
    )?;
    out.flush()?;
    let resumed = state.resume_running()?;
    if resumed > 0 {
        writeln!(out, "driving {resumed} operation(s) left running")?;
    }
    state.start_scanner();
    state.start_agent_listener();
    state.start_verifier(opsgraph_server::VerifierConfig::from_env());
    listener.serve(state, None)?;
    Ok(0)
}

/// The actor of local token commands: whoever can write the data directory administers it.
fn local_actor() -> String {
    crate::ops_cmd::local_actor(None)
}

pub fn token_create(data_dir: &Path, name: &str, roles: &[String], out: &mut dyn Write) -> anyhow::Result<u8> {
    let config = Config::load(data_dir)?;
    let mut store = open_store(data_dir)?;
    let (record, token) = auth::create_token(&mut store, &config, name, roles, &local_actor(), None, None)?;
    writeln!(
        out,
        "token {} ({}; roles {}); shown once, only its hash is kept:",
        record.id,
        record.name,
        roles.join(", ")
    )?;
    writeln!(out, "{token}")?;
    Ok(0)
}

pub fn token_list(data_dir: &Path, out: &mut dyn Write) -> anyhow::Result<u8> {
    let store = open_store(data_dir)?;
    let tokens: Vec<_> = store.tokens()?.iter().map(opsgraph_api::views::token).collect();
    crate::render::print_tokens(&tokens, out)
}

pub fn token_revoke(data_dir: &Path, id: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let config = Config::load(data_dir)?;
    let mut store = open_store(data_dir)?;
    let record = auth::revoke_token(&mut store, &config, id, &local_actor(), None)
        .with_context(|| format!("failed to revoke token {id}"))?;
    writeln!(out, "token {} ({}) revoked", record.id, record.name)?;
    Ok(0)
}
