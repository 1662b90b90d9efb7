//! Secrets at rest and in flight. Secret artifacts and secret parameter values are sealed with
//! the data directory's master key (`opsgraph-secrets`) before they reach the store or the blob
//! directory; a job gets plaintext only in its environment or in files of a private directory
//! that exists while it runs; its captured output is masked (a backstop, not a promise).
//!
//! Associated data binds each ciphertext to its place, so a sealed value copied elsewhere does
//! not open: `artifact:<operation>/<job instance>/<artifact>`, `param:<plan revision>/<name>`,
//! `gate:<operation>/<gate>`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use opsgraph_secrets::{Keyring, Secret};

use crate::{Error, Runtime};

/// How a sealed value is written where a string is expected (plan parameters, gate values).
const PREFIX: &str = "sealed:";

pub(crate) fn is_sealed(v: &serde_json::Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with(PREFIX))
}

pub(crate) fn artifact_aad(operation: &str, job: &str, id: &str) -> String {
    format!("artifact:{operation}/{job}/{id}")
}

impl Runtime {
    /// The master keyring, loaded on first use (`OPSGRAPH_MASTER_KEY`, else the data
    /// directory's `master.key`, created 0600 the first time).
    pub(crate) fn keyring(&self) -> Result<Arc<Keyring>, Error> {
        self.keyring
            .get_or_init(|| Keyring::load(&self.data_dir).map(|(k, _)| Arc::new(k)).map_err(|e| e.to_string()))
            .clone()
            .map_err(Error::Secrets)
    }

    /// `sealed:<base64>` of `plain`.
    pub(crate) fn seal_text(&self, plain: &str, aad: &str) -> Result<String, Error> {
        let sealed =
            self.keyring()?.seal(plain.as_bytes(), aad.as_bytes()).map_err(|e| Error::Secrets(e.to_string()))?;
        Ok(format!("{PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(sealed)))
    }

    /// The plaintext of a `sealed:` value.
    pub(crate) fn open_text(&self, value: &str, aad: &str) -> Result<Secret, Error> {
        let b64 = value.strip_prefix(PREFIX).ok_or_else(|| Error::Secrets(format!("{aad}: not a sealed value")))?;
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| Error::Secrets(format!("{aad}: the sealed value is not base64")))?;
        self.keyring()?.open(&sealed, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))
    }

    /// Seals a produced secret artifact into the blob store; the plaintext file is removed.
    pub(crate) fn seal_artifact(&self, file: &Path, aad: &str) -> Result<(String, i64), Error> {
        let io = |source| Error::Io { path: file.display().to_string(), source };
        let plain = Secret::new(std::fs::read(file).map_err(io)?);
        let sealed = self.keyring()?.seal(plain.expose(), aad.as_bytes()).map_err(|e| Error::Secrets(e.to_string()))?;
        let (location, _) = crate::jobs::store_blob_bytes(&*self.blobs, &sealed).map_err(io)?;
        let _ = std::fs::remove_file(file);
        Ok((location, plain.len() as i64))
    }

    /// Opens a sealed artifact into `dir` (made 0700), as a 0600 file; returns its path and the
    /// plaintext (to mask).
    pub(crate) fn open_artifact_into(
        &self,
        location: &str,
        aad: &str,
        dir: &Path,
        name: &str,
    ) -> Result<(PathBuf, Secret), Error> {
        let sealed = self.read_blob(location).map_err(|source| Error::Io { path: location.to_string(), source })?;
        let plain = self.keyring()?.open(&sealed, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))?;
        let path = self
            .private_file(dir, name, plain.expose())
            .map_err(|source| Error::Io { path: dir.display().to_string(), source })?;
        Ok((path, plain))
    }
}

impl Runtime {
    /// The bytes of a stored blob, as an I/O error when it cannot be read (missing: the error a
    /// missing file always gave).
    pub(crate) fn read_blob(&self, location: &str) -> std::io::Result<Vec<u8>> {
        match self.blobs.get(location) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(std::io::Error::from_raw_os_error(2)),
            Err(e) => Err(opsgraph_store::blob::into_io(e)),
        }
    }

    /// The captured output of a job's attempt; `None` when there is none (or it cannot be read).
    pub fn job_log(&self, operation: &str, job: &str, attempt: u32) -> Option<Vec<u8>> {
        self.blobs.log(&opsgraph_store::LogKey::new(operation, job, attempt)).ok().flatten()
    }

    /// Copies an attempt's log from its run directory into the blob store, unless the blob
    /// store's logs are those files already (the data directory's).
    pub(crate) fn keep_log(&self, operation: &str, job: &str, attempt: u32, log: Option<&Path>) -> Result<(), Error> {
        let Some(log) = log.filter(|_| !self.blobs.keeps_log_files()) else { return Ok(()) };
        let bytes = std::fs::read(log).map_err(|source| Error::Io { path: log.display().to_string(), source })?;
        Ok(self.blobs.append_log(&opsgraph_store::LogKey::new(operation, job, attempt), &bytes)?)
    }

    /// The file a job reads for a plain artifact: the blob itself when it is a file here, else a
    /// copy in the job's private directory.
    pub(crate) fn plain_artifact_file(
        &self,
        r: &opsgraph_store::ArtifactRecord,
        private: &Path,
    ) -> Result<PathBuf, Error> {
        if let Some(path) = self.blobs.local_path(&r.location) {
            return Ok(path);
        }
        let bytes = self.read_blob(&r.location).map_err(|source| Error::Io { path: r.location.clone(), source })?;
        self.private_file(private, &r.id, &bytes)
            .map_err(|source| Error::Io { path: private.display().to_string(), source })
    }

    /// [`private_file`] for an attempt's private directory: noted first, so that the driver
    /// removes such directories after its results from now on (`Runtime::private_made`).
    pub(crate) fn private_file(&self, dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        self.private_made.store(true, std::sync::atomic::Ordering::SeqCst);
        private_file(dir, name, bytes)
    }
}

/// Writes `bytes` to `dir/name` readable by this user only (the directory too).
pub(crate) fn private_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    f.write_all(bytes)?;
    Ok(path)
}

/// What a key rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    pub active: String,
    pub retired: String,
    /// Sealed values moved to the new key: plan and intent parameters, gate values, artifacts.
    pub resealed: usize,
}

impl Runtime {
    /// Rotates the master key: a new active key, every sealed value of the data directory sealed
    /// again under it in one transaction, then the old key retired. With `OPSGRAPH_MASTER_KEY`
    /// the keys live in the environment: rotating means putting the new key first there.
    pub fn rotate_master_key(&mut self) -> Result<Rotation, Error> {
        if std::env::var_os(opsgraph_secrets::ENV_VAR).is_some() {
            return Err(Error::Secrets(format!(
                "the master key comes from {}: rotate it there (the new key first, the old one after a comma), \
                 then unset the old one once `opsgraph secrets reseal` has run",
                opsgraph_secrets::ENV_VAR
            )));
        }
        self.keyring()?; // the key file exists before it is rotated
        let r = opsgraph_secrets::rotate(&self.data_dir).map_err(|e| Error::Secrets(e.to_string()))?;
        self.keyring = std::sync::OnceLock::new();
        let resealed = self.reseal_all()?;
        opsgraph_secrets::retire(&self.data_dir, r.retired).map_err(|e| Error::Secrets(e.to_string()))?;
        self.keyring = std::sync::OnceLock::new();
        Ok(Rotation { active: r.active.to_string(), retired: r.retired.to_string(), resealed })
    }

    /// Seals every value not sealed under the active key again under it, in one transaction;
    /// returns how many moved.
    pub fn reseal_all(&mut self) -> Result<usize, Error> {
        let keys = self.keyring()?;
        let active = keys.active_id();
        let mut writes = Vec::new();
        let mut old_blobs = Vec::new();
        let mut moved = 0;
        for op in self.store.operations(&Default::default())? {
            if let Some(text) = self.store.plan_text(&op.plan_revision)? {
                let mut plan: opsgraph_core::plan::Plan =
                    serde_json::from_str(&text).map_err(|_| Error::Plan(op.plan_revision.clone()))?;
                let n = self.reseal_plan(&keys, &mut plan)?;
                if n > 0 {
                    moved += n;
                    let plan = serde_json::to_string(&plan).map_err(|_| Error::Plan(op.plan_revision.clone()))?;
                    writes.push(opsgraph_store::Write::ReplacePlan { revision: op.plan_revision.clone(), plan });
                }
            }
            let mut intent = op.intent.clone();
            let mut n = 0;
            if let Some(params) = intent.get_mut("parameters").and_then(|p| p.as_object_mut()) {
                for (name, v) in params.iter_mut() {
                    n += reseal_value(&keys, v, &format!("param:{}/{name}", op.plan_revision))?;
                }
            }
            if n > 0 {
                moved += n;
                writes.push(opsgraph_store::Write::ReplaceIntent { operation: op.id.clone(), intent });
            }
            for mut g in self.store.gates(&op.id)? {
                let aad = format!("gate:{}/{}", op.id, g.id);
                if let Some(v) = g.value.as_mut() {
                    if reseal_value(&keys, v, &aad)? > 0 {
                        moved += 1;
                        writes.push(opsgraph_store::Write::ReplaceGateValue {
                            operation: op.id.clone(),
                            gate: g.id.clone(),
                            value: v.clone(),
                        });
                    }
                }
            }
            for mut a in self.store.artifacts(&op.id)?.into_iter().filter(|a| a.sensitivity == "secret") {
                let path = self.data_dir.join(&a.location);
                let io = |source| Error::Io { path: path.display().to_string(), source };
                let sealed = self.read_blob(&a.location).map_err(io)?;
                if opsgraph_secrets::sealed_key_id(&sealed).is_ok_and(|id| id == active) {
                    continue;
                }
                let aad = artifact_aad(&a.operation, &a.job, &a.id);
                let again = keys.reseal(&sealed, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))?;
                let (location, _) = crate::jobs::store_blob_bytes(&*self.blobs, &again).map_err(io)?;
                old_blobs.push(a.location.clone());
                a.location = location;
                moved += 1;
                writes.push(opsgraph_store::Write::Artifact(a));
            }
        }
        if !writes.is_empty() {
            self.commit(&writes)?;
        }
        for b in old_blobs {
            let _ = self.blobs.remove(&b);
        }
        Ok(moved)
    }

    fn reseal_plan(&self, keys: &Keyring, plan: &mut opsgraph_core::plan::Plan) -> Result<usize, Error> {
        let mut n = 0;
        for name in self.secret_params(plan) {
            let aad = format!("param:{}/{name}", plan.revision.hash);
            for map in [&mut plan.parameters, &mut plan.intent.parameters] {
                if let Some(v) = map.get_mut(&name) {
                    n += reseal_value(keys, v, &aad)?;
                }
            }
        }
        for sub in &mut plan.sub_operations {
            if let Some(p) = sub.plan.as_deref_mut() {
                n += self.reseal_plan(keys, p)?;
            }
        }
        Ok(n)
    }
}

/// Seals a `sealed:` value again under the active key; 1 when it moved, 0 when it was already
/// there or is not sealed.
fn reseal_value(keys: &Keyring, v: &mut serde_json::Value, aad: &str) -> Result<usize, Error> {
    let Some(b64) = v.as_str().and_then(|s| s.strip_prefix(PREFIX)) else { return Ok(0) };
    let engine = base64::engine::general_purpose::STANDARD;
    let sealed = engine.decode(b64).map_err(|_| Error::Secrets(format!("{aad}: the sealed value is not base64")))?;
    if opsgraph_secrets::sealed_key_id(&sealed).is_ok_and(|id| id == keys.active_id()) {
        return Ok(0);
    }
    let again = keys.reseal(&sealed, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))?;
    *v = serde_json::Value::String(format!("{PREFIX}{}", engine.encode(again)));
    Ok(1)
}

impl Runtime {
    /// The content of an artifact an operation produced (the last one of that id): a secret one
    /// opened with the master key. The caller decides who may see it and records that it did.
    pub fn reveal_artifact(&self, operation: &str, id: &str) -> Result<Secret, Error> {
        let record = self
            .store
            .artifacts(operation)?
            .into_iter()
            .rfind(|a| a.id == id)
            .ok_or_else(|| Error::Unsupported(format!("operation {operation} produced no artifact `{id}`")))?;
        let path = self.data_dir.join(&record.location);
        let bytes = self
            .read_blob(&record.location)
            .map_err(|source| Error::Io { path: path.display().to_string(), source })?;
        if record.sensitivity != "secret" {
            return Ok(Secret::new(bytes));
        }
        let aad = artifact_aad(&record.operation, &record.job, &record.id);
        self.keyring()?.open(&bytes, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))
    }
}
