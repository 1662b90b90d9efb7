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
        let (location, _) = crate::jobs::store_blob_bytes(&self.data_dir, &sealed).map_err(io)?;
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
        let sealed = std::fs::read(self.data_dir.join(location))
            .map_err(|source| Error::Io { path: location.to_string(), source })?;
        let plain = self.keyring()?.open(&sealed, aad.as_bytes()).map_err(|e| Error::Secrets(format!("{aad}: {e}")))?;
        let path = private_file(dir, name, plain.expose())
            .map_err(|source| Error::Io { path: dir.display().to_string(), source })?;
        Ok((path, plain))
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
