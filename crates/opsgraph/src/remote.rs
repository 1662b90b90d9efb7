//! The CLI as a client of `opsgraph serve`: with `--server URL` (or `OPSGRAPH_SERVER`) and
//! `OPSGRAPH_TOKEN`, the commands that read or change operations go through the REST API and
//! print what they print locally. The token is read from the environment (or
//! `OPSGRAPH_TOKEN_FILE`), never from a flag, so it does not show in `ps`.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::render::Output;
use opsgraph_api::{Client, OperationView, PatchRequest};
use opsgraph_core::model::OperationStateKind;

use crate::render::to_yaml;

/// A non-2xx answer: the server's status, code and message (with its details).
#[derive(Debug)]
struct Refused {
    status: u16,
    code: String,
    message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server refused ({} {}): {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for Refused {}

pub struct Remote {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("base", &self.base).field("token", &"<redacted>").finish()
    }
}

/// States an operation stays in only while something drives it.
fn moving(state: OperationStateKind) -> bool {
    use OperationStateKind as K;
    matches!(state, K::Running | K::DraftIntent | K::PlanPreview | K::CapabilityResolution)
}

/// Percent-encodes one path segment (resource ids hold `/`).
fn segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Remote {
    /// The server to talk to, when one is configured.
    pub fn from_env(server: Option<&str>, token_file: Option<&std::path::Path>) -> anyhow::Result<Option<Remote>> {
        let Some(base) = server.map(str::to_string).or_else(|| std::env::var("OPSGRAPH_SERVER").ok()) else {
            return Ok(None);
        };
        if base.is_empty() {
            return Ok(None);
        }
        let file =
            token_file.map(|p| p.display().to_string()).ok_or(()).or_else(|()| std::env::var("OPSGRAPH_TOKEN_FILE"));
        let token = match (std::env::var("OPSGRAPH_TOKEN"), file) {
            (Ok(t), _) if !t.is_empty() && token_file.is_none() => t,
            (_, Ok(file)) => std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read the token file {file}"))?
                .trim()
                .to_string(),
            _ => bail!("talking to {base} needs a token: set OPSGRAPH_TOKEN (or OPSGRAPH_TOKEN_FILE)"),
        };
        Ok(Some(Remote::new(&base, &token)))
    }

    pub fn new(base: &str, token: &str) -> Remote {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Remote { base: base.trim_end_matches('/').to_string(), token: token.to_string(), agent }
    }

    /// One request; a non-2xx answer is an error carrying the server's code and message.
    fn call(&self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let result = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("Authorization", &auth).call(),
            ("POST", Some((ctype, bytes))) => {
                self.agent.post(&url).header("Authorization", &auth).header("Content-Type", ctype).send(&bytes[..])
            }
            ("POST", None) => self.agent.post(&url).header("Authorization", &auth).send_empty(),
            (other, _) => bail!("unsupported method {other}"),
        };
        let mut resp = result.with_context(|| format!("cannot reach {}", self.base))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !(200..300).contains(&status) {
            let code = value["error"]["code"].as_str().unwrap_or("error");
            let mut message =
                value["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
            // The details say why: each plan error, each document diagnostic, each finding.
            let details = &value["error"]["details"];
            for key in ["errors", "diagnostics", "findings"] {
                for d in details[key].as_array().into_iter().flatten() {
                    let line = match (d.as_str(), d["code"].as_str(), d["message"].as_str()) {
                        (Some(text), _, _) => text.to_string(),
                        (None, Some(code), Some(text)) => format!("error[{code}]: {text}"),
                        _ => d.to_string(),
                    };
                    message.push_str(&format!("\n  {line}"));
                }
            }
            return Err(Refused { status, code: code.to_string(), message }.into());
        }
        Ok(value)
    }

    fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call("GET", path, None)
    }

    /// A read of the API's documents: a missing one is the error the local client gives (the
    /// server's message, which is the same text), not a refusal.
    fn read(&self, path: &str) -> anyhow::Result<Value> {
        self.get(path).map_err(|e| match e.downcast::<Refused>() {
            Ok(r) if r.status == 404 => anyhow::anyhow!(r.message),
            Ok(r) => r.into(),
            Err(e) => e,
        })
    }

    fn post_json(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call("POST", path, Some(("application/json", serde_json::to_vec(&body)?)))
    }

    fn operation_value(&self, id: &str) -> anyhow::Result<Value> {
        self.read(&format!("/api/v1/operations/{}", segment(id)))
    }

    /// `diagnose OP --ai openai [--propose]` through the server: its AI analyzer
    /// (`POST …/diagnosis?analyzer=ai`), or its patch proposed (`POST …/patches?analyzer=ai`).
    pub fn diagnose_ai(&self, operation: &str, propose: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
        let op = segment(operation);
        // The server waits up to 120 s for the model: this request waits longer than others.
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(180)))
            .build()
            .into();
        let patient = Remote { base: self.base.clone(), token: self.token.clone(), agent };
        let reply = if propose {
            patient.call("POST", &format!("/api/v1/operations/{op}/patches?analyzer=ai"), None)?
        } else {
            patient.call("POST", &format!("/api/v1/operations/{op}/diagnosis?analyzer=ai"), None)?
        };
        let d = if propose { reply["diagnosis"].clone() } else { reply["diagnosis"][0].clone() };
        let d: opsgraph_api::DiagnosisView = serde_json::from_value(d)?;
        writeln!(out, "Diagnosis of {} (ai analyzer of the server, confidence {:.1})", d.job, d.confidence)?;
        writeln!(out, "  {}", d.summary)?;
        writeln!(out, "  cause: {}", d.cause)?;
        writeln!(out, "  based on: {}", d.evidence.join("; "))?;
        if let Some(r) = &d.remedy {
            writeln!(out, "  remedy: {r} ({})", d.source.map(|s| s.as_str()).unwrap_or("pack"))?;
        }
        if propose {
            let p: opsgraph_api::PatchReply = serde_json::from_value(reply)?;
            writeln!(out, "patch {} proposed by {}:", p.patch, opsgraph_runtime::ANALYZER_AUTHOR)?;
            write!(out, "{}", p.diff_text)?;
            match &p.gate {
                Some(g) => writeln!(out, "waiting for approval at {g}")?,
                None => writeln!(out, "applied without approval: every change is within ai_policy")?,
            }
            return Ok(0);
        }
        let Some(review) = reply["review"].as_object().cloned() else { return Ok(0) };
        let review: opsgraph_api::ReviewView = serde_json::from_value(Value::Object(review))?;
        let refused = review.state == "refused";
        writeln!(
            out,
            "{}",
            if refused {
                "Its patch is refused by the review (out of policy):"
            } else {
                "Its patch passes the review (propose it with --propose):"
            }
        )?;
        crate::render::print_findings(&review.findings, out)?;
        Ok(if refused { 1 } else { 0 })
    }

    /// `plan -f INTENT`: the server's preview of an intent file.
    pub fn plan(&self, intent: &str, output: Output, out: &mut dyn Write) -> anyhow::Result<u8> {
        let text = crate::load::read_document(intent)?;
        let format = if output == Output::Text { "?format=text" } else { "" };
        let plan =
            self.call("POST", &format!("/api/v1/plans{format}"), Some(("application/yaml", text.into_bytes())))?;
        match output {
            Output::Text => write!(out, "{}", plan["text"].as_str().unwrap_or_default())?,
            Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&plan)?)?,
            Output::Yaml => write!(out, "{}", to_yaml(&plan, 0))?,
            Output::Dot => bail!("`plan -o dot` draws locally: run it without --server"),
        }
        Ok(if plan["status"] == "blocked" { 1 } else { 0 })
    }
}

/// `apply` through a server: its preview of the intent, and the operation it creates and drives.
pub struct RemoteApply {
    remote: Remote,
    text: String,
}

impl RemoteApply {
    pub fn new(remote: Remote, intent: &str) -> anyhow::Result<RemoteApply> {
        Ok(RemoteApply { remote, text: crate::load::read_document(intent)? })
    }
}

impl crate::control_cmd::Applier for RemoteApply {
    fn preview(&mut self, out: &mut dyn Write, _err: &mut dyn Write) -> anyhow::Result<Option<bool>> {
        let body = Some(("application/yaml", self.text.clone().into_bytes()));
        let preview = self.remote.call("POST", "/api/v1/plans?format=text", body)?;
        write!(out, "{}", preview["text"].as_str().unwrap_or_default())?;
        Ok(Some(preview["status"] == "blocked"))
    }

    fn create(self: Box<Self>) -> anyhow::Result<(String, Box<dyn opsgraph_api::Control>)> {
        let body = Some(("application/yaml", self.text.into_bytes()));
        let created = self.remote.call("POST", "/api/v1/operations", body)?;
        let id = created["id"].as_str().context("the server did not say which operation it created")?.to_string();
        Ok((id, Box::new(self.remote)))
    }
}

impl Remote {
    /// `pack install FILE.tar.gz|DIR`: a directory is packed into a `.tar.gz` in memory first,
    /// with the checks of a local directory install.
    pub fn pack_install(&self, path: &std::path::Path, replace: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
        let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        let bytes = if meta.is_dir() {
            crate::registry::archive_dir(path)?
        } else {
            crate::registry::read_archive_file(path, &meta)?
        };
        self.pack_upload(bytes, replace, out)
    }

    /// `pack install NAME[@VERSION] --from URL`: the server fetches it from the catalogue and
    /// verifies it against its trusted keys (`POST /api/v1/packs/catalogue`).
    pub fn pack_install_from(
        &self,
        from: &str,
        reference: &str,
        replace: bool,
        out: &mut dyn Write,
    ) -> anyhow::Result<u8> {
        let body = serde_json::json!({"from": from, "pack": reference, "replace": replace});
        let v = self.post_json("/api/v1/packs/catalogue", body)?;
        crate::pack_cmd::print_installation(&v, out)?;
        Ok(0)
    }

    /// Sends a pack archive to `POST /api/v1/packs` and prints what the server did.
    fn pack_upload(&self, bytes: Vec<u8>, replace: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
        let query = if replace { "?replace=true" } else { "" };
        let v = self.call("POST", &format!("/api/v1/packs{query}"), Some(("application/gzip", bytes)))?;
        crate::pack_cmd::print_installation(&v, out)?;
        Ok(0)
    }

    /// `pack remove ID@VERSION`.
    pub fn pack_remove(&self, reference: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
        if !reference.contains('@') {
            bail!("name the version to remove: opsgraph pack remove {reference}@VERSION");
        }
        self.call("DELETE", &format!("/api/v1/packs/{}", segment(reference)), None)?;
        writeln!(out, "removed pack {reference}")?;
        Ok(0)
    }

    /// `pack list`: the server's registry, as the local command prints it.
    pub fn pack_list(&self, output: &str, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
        let v = self.get("/api/v1/packs")?;
        if v["registry"].is_null() {
            bail!("the server was started with --packs and uses no installed packs; `opsgraph get` shows what it loaded via GET /api/v1/packs");
        }
        let rows = v["registry"]["rows"].as_array().cloned().unwrap_or_default();
        let problems: Vec<String> = v["registry"]["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(str::to_string))
            .collect();
        crate::pack_cmd::print_rows(rows, &problems, output, out, err)
    }

    /// `resource apply -f FILE`: checked here first (the same diagnostics as locally), then sent.
    pub fn resource_apply(&self, file: &str, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
        let Some((_, text)) = crate::resource_cmd::read(file, err)? else { return Ok(1) };
        let v = self.call("POST", "/api/v1/resources", Some(("application/yaml", text.into_bytes())))?;
        crate::resource_cmd::print_applied(&v, out)?;
        Ok(0)
    }

    /// `resource delete ID`.
    pub fn resource_delete(&self, id: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
        self.call("DELETE", &format!("/api/v1/resources/{}", segment(id)), None)?;
        writeln!(out, "resource {id} deleted")?;
        Ok(0)
    }
}

impl Remote {
    /// `token create|list|revoke` through the API (the server holds the caller to the rule that
    /// nobody grants what they do not hold).
    pub fn token_create(&self, name: &str, roles: &[String], out: &mut dyn Write) -> anyhow::Result<u8> {
        let t = self.post_json("/api/v1/tokens", json!({"name": name, "roles": roles}))?;
        writeln!(
            out,
            "token {} ({}; roles {}); shown once, only its hash is kept:",
            t["id"].as_str().unwrap_or_default(),
            t["name"].as_str().unwrap_or_default(),
            roles.join(", ")
        )?;
        writeln!(out, "{}", t["token"].as_str().unwrap_or_default())?;
        Ok(0)
    }

    pub fn token_list(&self, out: &mut dyn Write) -> anyhow::Result<u8> {
        let tokens: Vec<opsgraph_api::TokenView> =
            serde_json::from_value(self.get("/api/v1/tokens")?["tokens"].take())?;
        crate::render::print_tokens(&tokens, out)
    }

    pub fn token_revoke(&self, id: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
        let t = self.call("DELETE", &format!("/api/v1/tokens/{}", segment(id)), None)?;
        writeln!(out, "token {} ({}) revoked", t["id"].as_str().unwrap_or(id), t["name"].as_str().unwrap_or_default())?;
        Ok(0)
    }
}

impl crate::remote_follow::Streams for Remote {
    fn events(&self, after: i64) -> anyhow::Result<Option<Box<dyn std::io::Read + Send>>> {
        let url = format!("{}/api/v1/events?after={after}", self.base);
        // A stream lasts as long as the follower (or the server's `event_stream_duration`).
        let resp = self
            .agent
            .get(&url)
            .header("Authorization", &format!("Bearer {}", self.token))
            .header("Accept", "text/event-stream")
            .config()
            .timeout_global(None)
            .build()
            .call()
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = resp.status().as_u16();
        let (_, body) = resp.into_parts();
        if status == 429 {
            return Ok(None);
        }
        if !(200..300).contains(&status) {
            let text = body.into_with_config().limit(1 << 20).read_to_string().unwrap_or_default();
            let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            let code = value["error"]["code"].as_str().unwrap_or("error").to_string();
            let message = value["error"]["message"].as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
            return Err(if status == 404 {
                anyhow::anyhow!(message)
            } else {
                Refused { status, code, message }.into()
            });
        }
        Ok(Some(Box::new(body.into_reader())))
    }
}

/// The HTTP client: each read is one request, its answer the API's document.
impl opsgraph_api::Client for Remote {
    fn operations(&self) -> anyhow::Result<Vec<opsgraph_api::OperationSummary>> {
        Ok(serde_json::from_value(self.get("/api/v1/operations")?["operations"].take())?)
    }

    fn operation_list(&self, query: &opsgraph_api::OperationQuery) -> anyhow::Result<Vec<opsgraph_api::OperationItem>> {
        let pairs: Vec<String> = query.pairs().iter().map(|(k, v)| format!("{k}={}", segment(v))).collect();
        let path = match pairs.is_empty() {
            true => "/api/v1/operations".to_string(),
            false => format!("/api/v1/operations?{}", pairs.join("&")),
        };
        Ok(serde_json::from_value(self.get(&path)?["operations"].take())?)
    }

    fn operation(&self, id: &str) -> anyhow::Result<opsgraph_api::OperationView> {
        Ok(serde_json::from_value(self.operation_value(id)?)?)
    }

    fn timeline(&self, operation: &str, after: i64) -> anyhow::Result<Vec<opsgraph_store::TimelineEntry>> {
        let mut body = self.read(&format!("/api/v1/operations/{}/timeline", segment(operation)))?;
        let views: Vec<opsgraph_api::TimelineView> = serde_json::from_value(body["timeline"].take())?;
        Ok(views.iter().filter(|e| e.seq > after).map(|e| e.entry(operation)).collect())
    }

    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<opsgraph_store::JobRecord>> {
        Ok(serde_json::from_value(
            self.read(&format!("/api/v1/operations/{}/jobs", segment(operation)))?["jobs"].take(),
        )?)
    }

    fn gates(&self, operation: &str) -> anyhow::Result<opsgraph_api::GateList> {
        Ok(serde_json::from_value(self.read(&format!("/api/v1/operations/{}/gates", segment(operation)))?)?)
    }

    fn resources(&self) -> anyhow::Result<Vec<opsgraph_api::ResourceRow>> {
        Ok(serde_json::from_value(self.get("/api/v1/resources")?["resources"].take())?)
    }

    fn resource(&self, id: &str) -> anyhow::Result<opsgraph_api::ResourceView> {
        Ok(serde_json::from_value(self.read(&format!("/api/v1/resources/{}", segment(id)))?)?)
    }

    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<opsgraph_api::LogEntry>> {
        let query = job.map(|j| format!("?job={}", segment(j))).unwrap_or_default();
        let path = format!("/api/v1/operations/{}/logs{query}", segment(operation));
        Ok(serde_json::from_value(self.read(&path)?["logs"].take())?)
    }

    fn job_log(&self, operation: &str, job: &str, after: u64) -> anyhow::Result<opsgraph_api::JobLog> {
        let path = format!("/api/v1/operations/{}/jobs/{}/log?after={after}", segment(operation), segment(job));
        Ok(serde_json::from_value(self.read(&path)?)?)
    }

    fn audit(&self, filter: &opsgraph_store::AuditFilter) -> anyhow::Result<Vec<opsgraph_store::AuditRecord>> {
        let pairs = [
            ("actor", &filter.actor),
            ("operation", &filter.operation),
            ("resource", &filter.resource),
            ("since", &filter.since),
        ];
        let query: Vec<String> =
            pairs.iter().filter_map(|(k, v)| v.as_deref().map(|v| format!("{k}={}", segment(v)))).collect();
        let path =
            if query.is_empty() { "/api/v1/audit".to_string() } else { format!("/api/v1/audit?{}", query.join("&")) };
        Ok(serde_json::from_value(self.get(&path)?["audit"].take())?)
    }

    fn diagnosis(&self, operation: &str) -> anyhow::Result<Vec<opsgraph_api::DiagnosisView>> {
        let path = format!("/api/v1/operations/{}/diagnosis", segment(operation));
        Ok(serde_json::from_value(self.read(&path)?["diagnosis"].take())?)
    }
}

/// The HTTP client's changes: one request each, audited by the server as the token's identity.
impl opsgraph_api::Control for Remote {
    fn as_client(&self) -> &dyn Client {
        self
    }

    fn propose(&mut self, operation: &str, patch: &PatchRequest) -> anyhow::Result<opsgraph_api::PatchReply> {
        let base = format!("/api/v1/operations/{}/patches", segment(operation));
        let reply = match patch {
            PatchRequest::Document { text, .. } => {
                self.call("POST", &base, Some(("application/yaml", text.clone().into_bytes())))?
            }
            PatchRequest::Remedy(id) => self.call("POST", &format!("{base}?remedy={}", segment(id)), None)?,
            PatchRequest::Analyzer => self.call("POST", &format!("{base}?analyzer=rules"), None)?,
        };
        Ok(serde_json::from_value(reply)?)
    }

    /// Watches the server drive it: its event stream, entry by entry, until it stopped
    /// (`remote_follow.rs`).
    fn follow(
        &mut self,
        id: &str,
        after: i64,
        seen: &mut (dyn FnMut(&opsgraph_store::TimelineEntry) + Send),
    ) -> anyhow::Result<OperationView> {
        crate::remote_follow::follow(self, id, after, seen, |op| moving(op.summary.state))
    }

    fn answer(
        &mut self,
        operation: &str,
        gate: &str,
        option: &str,
        value: Option<Value>,
        _user: &str,
    ) -> anyhow::Result<opsgraph_api::AnswerReply> {
        // The answer names the plan revision it approves.
        let revision = self.operation_value(operation)?["plan_revision"].take();
        let path = format!("/api/v1/operations/{}/gates/{}/answer", segment(operation), segment(gate));
        Ok(serde_json::from_value(
            self.post_json(&path, json!({"option": option, "value": value, "revision": revision}))?,
        )?)
    }

    fn pause(&mut self, operation: &str) -> anyhow::Result<opsgraph_api::ControlReply> {
        self.act(operation, "pause", None)
    }

    fn resume(&mut self, operation: &str) -> anyhow::Result<opsgraph_api::ControlReply> {
        self.act(operation, "resume", None)
    }

    fn cancel(&mut self, operation: &str) -> anyhow::Result<opsgraph_api::ControlReply> {
        self.act(operation, "cancel", None)
    }

    fn retry(&mut self, operation: &str, jobs: &[String]) -> anyhow::Result<opsgraph_api::ControlReply> {
        self.act(operation, "retry", Some(json!({"jobs": jobs})))
    }

    fn intervene(
        &mut self,
        operation: &str,
        iv: &opsgraph_core::model::Intervention,
    ) -> anyhow::Result<opsgraph_api::InterventionReply> {
        // The document's own shape, as JSON (YAML's subset).
        let doc = json!({"intervention": {
            "type": "manually_fixed",
            "target_stage": iv.target_stage,
            "target_job": iv.target_job,
            "note": iv.note,
            "requires_verification": iv.requires_verification,
        }});
        let mut doc = doc;
        if let Some(m) = doc["intervention"].as_object_mut() {
            m.retain(|_, v| !v.is_null());
        }
        let path = format!("/api/v1/operations/{}/interventions", segment(operation));
        Ok(serde_json::from_value(self.post_json(&path, doc)?)?)
    }

    fn verify(&mut self, resource: &str) -> anyhow::Result<opsgraph_runtime::VerifyReport> {
        Ok(serde_json::from_value(self.post_json("/api/v1/verifications", json!({"resource": resource}))?)?)
    }
}

impl Remote {
    /// `POST /operations/{id}/{action}`, with a JSON body or none.
    fn act(&self, operation: &str, action: &str, body: Option<Value>) -> anyhow::Result<opsgraph_api::ControlReply> {
        let path = format!("/api/v1/operations/{}/{action}", segment(operation));
        let reply = match body {
            Some(body) => self.post_json(&path, body)?,
            None => self.call("POST", &path, None)?,
        };
        Ok(serde_json::from_value(reply)?)
    }
}
