//! Identities and permissions: one table from role to permissions, tokens stored as hashes, and
//! the rule that nobody grants what they do not hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use base64::Engine as _;
use opsgraph_store::{now, Store, TokenRecord, Write};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// What a request may do. Every route names the one it needs (`routes::ROUTES`); a request
/// whose roles do not hold it is refused before its handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    Read,
    Apply,
    AnswerGates,
    Patch,
    ApprovePatches,
    Intervene,
    RevealSecrets,
    ManagePacks,
    ManageResources,
    ManageTokens,
    /// `GET /metrics`: counts only. Its own permission, so that a scraper's token (a custom role
    /// `scraper: [metrics]`) reads nothing else; of the built-in roles only `platform_admin`
    /// holds it, so no existing role or token gains anything.
    Metrics,
    /// `/api/v1/agent/*`: claim work for the resources whose `access.agent` is the token's
    /// name, and heartbeat, log and report it. Only the `agent` role and `platform_admin` hold it.
    AgentWork,
}

impl Permission {
    /// Every permission (what `platform_admin` holds).
    pub const ALL: [Permission; 12] = [
        Permission::Read,
        Permission::Apply,
        Permission::AnswerGates,
        Permission::Patch,
        Permission::ApprovePatches,
        Permission::Intervene,
        Permission::RevealSecrets,
        Permission::ManagePacks,
        Permission::ManageResources,
        Permission::ManageTokens,
        Permission::Metrics,
        Permission::AgentWork,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Apply => "apply",
            Permission::AnswerGates => "answer_gates",
            Permission::Patch => "patch",
            Permission::ApprovePatches => "approve_patches",
            Permission::Intervene => "intervene",
            Permission::RevealSecrets => "reveal_secrets",
            Permission::ManagePacks => "manage_packs",
            Permission::ManageResources => "manage_resources",
            Permission::ManageTokens => "manage_tokens",
            Permission::Metrics => "metrics",
            Permission::AgentWork => "agent_work",
        }
    }

    pub fn parse(s: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

use Permission::*;

/// The built-in roles. This is the one table: the router, `GET /api/v1/roles`, the docs and the
/// authorization matrix test all read it.
pub const BUILTIN_ROLES: &[(&str, &[Permission])] = &[
    ("viewer", &[Read]),
    // An AI agent reads and proposes patches; it acts as `ai-agent:<name>`, never answers a gate
    // (the runtime refuses it whatever other role the token holds) and never reveals secrets.
    ("ai_agent", &[Read, Patch]),
    ("operator", &[Read, Apply, AnswerGates]),
    ("sre", &[Read, Apply, AnswerGates, Patch, ApprovePatches, Intervene]),
    ("platform_admin", &Permission::ALL),
    // A remote agent (`opsgraph agent`): pulls and reports the work of the resources that name
    // it (`access: {agent: NAME}`, NAME the token's name), and nothing else.
    ("agent", &[AgentWork]),
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Yaml { path: String, line: u32, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// The server's part of `DATA_DIR/config.yaml`: custom roles and the self-approval rule. The
/// `users:` section is the embedded CLI's and is left alone.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Custom roles: name -> permissions.
    pub roles: BTreeMap<String, BTreeSet<Permission>>,
    /// Four eyes: `allow_self_approval` (may the creator of an operation answer its approval
    /// gates? default no), `ai_policy.auto_apply` and `patch_policy.safe_changes`. The runtime
    /// applies them, for the server and the local CLI alike.
    pub patch_rules: opsgraph_runtime::PatchRules,
    /// The AI analyzer's endpoint (`ai: {url, model, api_key_env}`, as the CLI reads it); without
    /// it, asking for `analyzer=ai` is 409 `ai_not_configured`.
    pub ai: Option<opsgraph_runtime::ai::Endpoint>,
}

/// `DIR/config.yaml` read by `parse` (given its path and text); a missing file is the default.
pub(crate) fn load_config<T: Default>(
    data_dir: &Path,
    parse: impl FnOnce(&str, &str) -> Result<T, ConfigError>,
) -> Result<T, ConfigError> {
    let path = data_dir.join("config.yaml");
    match std::fs::read_to_string(&path) {
        Ok(text) => parse(&path.display().to_string(), &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(source) => Err(ConfigError::Read { path: path.display().to_string(), source }),
    }
}

/// The configuration text of `path` as a value: its first YAML document (null when empty).
pub(crate) fn config_value(path: &str, text: &str) -> Result<Value, ConfigError> {
    let docs = opsgraph_core::pack::yaml::parse_stream(text).map_err(|e| ConfigError::Yaml {
        path: path.to_string(),
        line: e.pos.line,
        message: e.message,
    })?;
    Ok(docs.first().map(opsgraph_core::pack::shape::to_json).unwrap_or(Value::Null))
}

impl Config {
    /// Reads `DIR/config.yaml`; a missing file is the default configuration.
    pub fn load(data_dir: &Path) -> Result<Config, ConfigError> {
        load_config(data_dir, Config::parse)
    }

    pub fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        let value = config_value(path, text)?;
        let invalid = |message: String| ConfigError::Invalid { path: path.to_string(), message };
        let mut config = Config {
            patch_rules: opsgraph_runtime::PatchRules::from_config(&value).map_err(invalid)?,
            ai: opsgraph_runtime::ai::Endpoint::from_config(&value).map_err(invalid)?,
            ..Config::default()
        };
        match &value["roles"] {
            Value::Null => {}
            Value::Object(roles) => {
                for (name, perms) in roles {
                    if builtin(name).is_some() {
                        return Err(invalid(format!("role `{name}` is built in and cannot be redefined")));
                    }
                    let list = perms.as_array().ok_or_else(|| invalid(format!("role `{name}`: expected a list")))?;
                    let mut set = BTreeSet::new();
                    for p in list {
                        let text = p.as_str().unwrap_or_default();
                        let perm = Permission::parse(text).ok_or_else(|| {
                            let known: Vec<&str> = Permission::ALL.iter().map(|p| p.as_str()).collect();
                            invalid(format!(
                                "role `{name}`: unknown permission `{p}`; expected one of {}",
                                known.join(", ")
                            ))
                        })?;
                        set.insert(perm);
                    }
                    config.roles.insert(name.clone(), set);
                }
            }
            other => return Err(invalid(format!("`roles` must map role names to permissions, not {other}"))),
        }
        Ok(config)
    }

    /// The permissions of a role, built in or custom; `None` for an unknown role.
    pub fn permissions(&self, role: &str) -> Option<BTreeSet<Permission>> {
        builtin(role).map(|p| p.iter().copied().collect()).or_else(|| self.roles.get(role).cloned())
    }

    /// Every role and its permissions, built-in first.
    pub fn table(&self) -> Vec<(String, BTreeSet<Permission>)> {
        let mut out: Vec<(String, BTreeSet<Permission>)> =
            BUILTIN_ROLES.iter().map(|(r, p)| (r.to_string(), p.iter().copied().collect())).collect();
        out.extend(self.roles.iter().map(|(r, p)| (r.clone(), p.clone())));
        out
    }

    /// What a token with these roles may do: the union of their permissions (unknown roles grant
    /// nothing), less [`AI_NEVER`] when one of them is `ai_agent` — an AI identity stays bounded
    /// whatever else it holds.
    pub fn union(&self, roles: &[String]) -> BTreeSet<Permission> {
        let mut all: BTreeSet<Permission> = roles.iter().filter_map(|r| self.permissions(r)).flatten().collect();
        if is_ai(roles) {
            all.retain(|p| !AI_NEVER.contains(p));
        }
        all
    }
}

/// What an AI identity never does, whatever other role its token holds: answer gates (or approve
/// patches), reveal secrets, create or revoke tokens. A person decides; an AI proposes.
pub const AI_NEVER: [Permission; 4] = [AnswerGates, ApprovePatches, RevealSecrets, ManageTokens];

/// Whether a token with these roles acts as an AI (`ai-agent:NAME`).
pub fn is_ai(roles: &[String]) -> bool {
    roles.iter().any(|r| r == "ai_agent")
}

fn builtin(role: &str) -> Option<&'static [Permission]> {
    BUILTIN_ROLES.iter().find(|(r, _)| *r == role).map(|(_, p)| *p)
}

/// Who made a request: a token's name (as the actor `user:<name>`), its roles and what they
/// allow, evaluated at request time so a changed role takes effect at once.
#[derive(Debug, Clone)]
pub struct Identity {
    pub token: String,
    pub name: String,
    pub roles: Vec<String>,
    pub permissions: BTreeSet<Permission>,
}

impl Identity {
    /// The actor recorded in timelines and the audit log; the same as `--as NAME` in the CLI.
    pub fn actor(&self) -> String {
        if is_ai(&self.roles) {
            format!("ai-agent:{}", self.name)
        } else if self.roles.iter().any(|r| r == "agent") {
            format!("agent:{}", self.name)
        } else {
            format!("user:{}", self.name)
        }
    }

    pub fn may(&self, p: Permission) -> bool {
        self.permissions.contains(&p)
    }
}

/// `sha256:<hex>` of a token: what is stored and looked up.
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    format!("sha256:{}", hex(&digest))
}

/// Lower-case hex, two digits a byte (without a `format!` and a `String` a byte: every request's
/// token is hashed and written so, issue [N] 2).
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// A new token: `og_` and 32 random bytes, base64url without padding.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("og_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

fn new_token_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes)?;
    Ok(format!("tok-{}", hex(&bytes)))
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token name `{0}` is not valid: use 1 to 64 of a-z, 0-9, `.`, `_`, `-`, starting with a letter or digit")]
    BadName(String),
    #[error("a token needs at least one role")]
    NoRole,
    #[error("unknown role `{role}`; roles: {known}")]
    UnknownRole { role: String, known: String },
    #[error("cannot grant role `{role}`: it allows {missing}, which you do not hold")]
    GrantRefused { role: String, missing: String },
    #[error("role `ai_agent` cannot be combined with `{role}`, which allows {allows}: an AI identity never answers gates, reveals secrets or manages tokens, so give the AI a token of its own")]
    MixedAi { role: String, allows: String },
    #[error("an active token is already named `{0}`; revoke it first")]
    NameTaken(String),
    #[error("no token `{0}`")]
    NoToken(String),
    #[error("token `{id}` was already revoked at {at}")]
    AlreadyRevoked { id: String, at: String },
    #[error("cannot revoke token `{id}`: its roles allow {missing}, which you do not hold")]
    RevokeRefused { id: String, missing: String },
    #[error("failed to draw random bytes for a token")]
    Random(getrandom::Error),
    #[error("store failed")]
    Store(#[from] opsgraph_store::Error),
}

/// The actor's permissions, when the rule "nobody grants what they do not hold" applies; `None`
/// for the local administrator (whoever can write the data directory).
pub type Grantor<'a> = Option<&'a BTreeSet<Permission>>;

fn missing(config: &Config, roles: &[String], holder: &BTreeSet<Permission>) -> Option<(String, String)> {
    for role in roles {
        let perms = config.permissions(role).unwrap_or_default();
        let lacking: Vec<&str> = perms.difference(holder).map(|p| p.as_str()).collect();
        if !lacking.is_empty() {
            return Some((role.clone(), lacking.join(", ")));
        }
    }
    None
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// Creates a token and its audit record in one transaction. Returns the record and the token,
/// which is not stored and cannot be shown again. `token` is a provisioned token to store
/// instead of a new one.
pub fn create_token(
    store: &mut dyn Store,
    config: &Config,
    name: &str,
    roles: &[String],
    actor: &str,
    grantor: Grantor<'_>,
    token: Option<String>,
) -> Result<(TokenRecord, String), TokenError> {
    if !valid_name(name) {
        return Err(TokenError::BadName(name.to_string()));
    }
    if roles.is_empty() {
        return Err(TokenError::NoRole);
    }
    for role in roles {
        if config.permissions(role).is_none() {
            let known: Vec<String> = config.table().into_iter().map(|(r, _)| r).collect();
            return Err(TokenError::UnknownRole { role: role.clone(), known: known.join(", ") });
        }
    }
    if is_ai(roles) {
        // A token is an AI's or a person's: `ai_agent` beside a role that lets a person act
        // (answer, reveal, manage tokens, apply, intervene...) is refused rather than bounded.
        let ai: BTreeSet<Permission> = config.permissions("ai_agent").unwrap_or_default();
        for role in roles.iter().filter(|r| *r != "ai_agent") {
            let extra: Vec<&str> =
                config.permissions(role).unwrap_or_default().difference(&ai).map(|p| p.as_str()).collect();
            if !extra.is_empty() {
                return Err(TokenError::MixedAi { role: role.clone(), allows: extra.join(", ") });
            }
        }
    }
    if let Some((role, missing)) = grantor.and_then(|held| missing(config, roles, held)) {
        return Err(TokenError::GrantRefused { role, missing });
    }
    if store.tokens()?.iter().any(|t| t.name == name && t.revoked_at.is_none()) {
        return Err(TokenError::NameTaken(name.to_string()));
    }
    let token = match token {
        Some(t) => t,
        None => new_token().map_err(TokenError::Random)?,
    };
    let at = now();
    let record = TokenRecord {
        id: new_token_id().map_err(TokenError::Random)?,
        name: name.to_string(),
        hash: token_hash(&token),
        roles: roles.to_vec(),
        created_by: actor.to_string(),
        created_at: at.clone(),
        revoked_at: None,
    };
    let audit = audit(actor, "token.create", &record.id, None, None, json!({"name": name, "roles": roles}));
    store.commit(&[Write::Token(record.clone()), Write::Audit(audit)])?;
    Ok((record, token))
}

/// Revokes a token (by id) and records who did, in one transaction.
pub fn revoke_token(
    store: &mut dyn Store,
    config: &Config,
    id: &str,
    actor: &str,
    grantor: Grantor<'_>,
) -> Result<TokenRecord, TokenError> {
    let record = store.tokens()?.into_iter().find(|t| t.id == id).ok_or_else(|| TokenError::NoToken(id.to_string()))?;
    if let Some(at) = &record.revoked_at {
        return Err(TokenError::AlreadyRevoked { id: id.to_string(), at: at.clone() });
    }
    // Revoking a token that holds more than you would let a lesser administrator lock out a
    // greater one: the same rule as granting.
    if let Some((_, missing)) = grantor.and_then(|held| missing(config, &record.roles, held)) {
        return Err(TokenError::RevokeRefused { id: id.to_string(), missing });
    }
    let revoked = TokenRecord { revoked_at: Some(now()), ..record };
    let audit = audit(actor, "token.revoke", id, None, None, json!({"name": revoked.name}));
    store.commit(&[Write::Token(revoked.clone()), Write::Audit(audit)])?;
    Ok(revoked)
}

/// The admin token of a store without tokens: read from `token_file` when given, else new. It
/// is returned once (to be printed) and only its hash is kept. `None` when tokens exist.
pub fn bootstrap_admin(
    store: &mut dyn Store,
    config: &Config,
    token_file: Option<&Path>,
) -> Result<Option<(TokenRecord, Option<String>)>, BootstrapError> {
    if !store.tokens()?.is_empty() {
        return Ok(None);
    }
    let provisioned = match token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|source| BootstrapError::Read { path: path.display().to_string(), source })?;
            let token = text.trim().to_string();
            if token.len() < 32 {
                return Err(BootstrapError::Short { path: path.display().to_string() });
            }
            Some(token)
        }
        None => None,
    };
    let from_file = provisioned.is_some();
    let roles = vec!["platform_admin".to_string()];
    let (record, token) = create_token(store, config, "admin", &roles, "bootstrap", None, provisioned)?;
    Ok(Some((record, if from_file { None } else { Some(token) })))
}

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("failed to read the admin token file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the admin token in {path} is shorter than 32 characters")]
    Short { path: String },
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("store failed")]
    Store(#[from] opsgraph_store::Error),
}

/// An audit record (the store assigns `seq`): the runtime's one builder of them.
pub use opsgraph_runtime::audit::record as audit;

pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}
