//! The CLI as a client of `opsgraph serve`: with `--server URL` (or `OPSGRAPH_SERVER`) and
//! `OPSGRAPH_TOKEN`, the commands that read or change operations go through the REST API and
//! print what they print locally. The token is read from the environment (or
//! `OPSGRAPH_TOKEN_FILE`), never from a flag, so it does not show in `ps`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use crate::render::Output;
use opsgraph_api::views::exit_code;
use opsgraph_api::{Client, Control, OperationView};
use opsgraph_core::model::OperationStateKind;

use crate::client::Action;
use crate::render::{document, live, print_finish, to_yaml};

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
            bail!("the server refused ({status} {code}): {message}");
        }
        Ok(value)
    }

    fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call("GET", path, None)
    }

    fn post_json(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call("POST", path, Some(("application/json", serde_json::to_vec(&body)?)))
    }

    fn operation_value(&self, id: &str) -> anyhow::Result<Value> {
        self.get(&format!("/api/v1/operations/{}", segment(id)))
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

    /// `apply -f INTENT`: preview, confirmation, then the server runs it while this follows.
    pub fn apply(
        &self,
        intent: &str,
        yes: bool,
        output: Output,
        input: &mut dyn BufRead,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> anyhow::Result<u8> {
        let text = crate::load::read_document(intent)?;
        let machine = match output {
            Output::Text => false,
            Output::Json | Output::Yaml if yes => true,
            Output::Json | Output::Yaml => bail!("`apply -o json|yaml` prints no preview to confirm: add --yes"),
            Output::Dot => bail!("`apply` has no dot output; `opsgraph plan -o dot` draws the plan"),
        };
        let preview =
            self.call("POST", "/api/v1/plans?format=text", Some(("application/yaml", text.clone().into_bytes())))?;
        if !machine {
            write!(out, "{}", preview["text"].as_str().unwrap_or_default())?;
        }
        if preview["status"] == "blocked" {
            writeln!(err, "nothing applied: a requirement cannot be met")?;
            return Ok(1);
        }
        if !yes && !crate::render::confirmed("Apply this plan?", "not applied", input, out, err)? {
            return Ok(1);
        }
        let created = self.call("POST", "/api/v1/operations", Some(("application/yaml", text.into_bytes())))?;
        let id = created["id"].as_str().context("the server did not say which operation it created")?.to_string();
        if machine {
            let view = self.follow(&id, &mut std::io::sink(), &preview)?;
            document(&serde_json::to_value(&view)?, if output == Output::Json { "json" } else { "yaml" }, out)?;
            return Ok(exit_code(view.summary.state));
        }
        writeln!(out)?;
        self.follow_and_finish(&id, &preview, out)
    }

    /// Prints the timeline as the server records it, until the operation stops moving; returns
    /// the operation document.
    fn follow(&self, id: &str, out: &mut dyn Write, plan: &Value) -> anyhow::Result<OperationView> {
        let stages: BTreeMap<String, String> = {
            let names: BTreeMap<&str, &str> = plan["stages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| Some((s["id"].as_str()?, s["name"].as_str()?)))
                .collect();
            plan["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|j| {
                    Some((j["id"].as_str()?.to_string(), names.get(j["stage"].as_str()?).copied()?.to_string()))
                })
                .collect()
        };
        let mut view = live(out, stages);
        let mut seen = 0i64;
        let mut quiet = 0;
        loop {
            let op = Client::operation(self, id)?;
            for e in &op.timeline {
                if e.seq > seen {
                    seen = e.seq;
                    view(&e.entry(id));
                }
            }
            // A stopped operation is done once two reads agree (its last entries are in).
            if !moving(op.summary.state) {
                quiet += 1;
                if quiet > 1 {
                    return Ok(op);
                }
            } else {
                quiet = 0;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn follow_and_finish(&self, id: &str, plan: &Value, out: &mut dyn Write) -> anyhow::Result<u8> {
        let view = self.follow(id, out, plan)?;
        let resource = match view.summary.resource.as_deref() {
            Some(r) => self.get(&format!("/api/v1/resources/{}", segment(r))).ok().map(|v| v["resource"].clone()),
            None => None,
        };
        print_finish(&view, resource.as_ref(), out)
    }

    /// `describe resource ID`: the server's resource document (`describe operation` is
    /// `query_cmd::describe_operation`, the same for both clients).
    pub fn describe_resource(&self, id: &str, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
        document(&self.get(&format!("/api/v1/resources/{}", segment(id)))?, output, out)?;
        Ok(0)
    }

    /// `gate answer`, `pause`, `resume`, `cancel`, `retry`, then (unless `--no-wait`) follow the
    /// operation as the server drives it.
    pub fn control(
        &mut self,
        action: &Action<'_>,
        wait: bool,
        output: Output,
        out: &mut dyn Write,
    ) -> anyhow::Result<u8> {
        let id = match action {
            Action::Answer { gate, operation: Some(id), .. } => {
                let _ = gate;
                id.to_string()
            }
            Action::Answer { gate, operation: None, .. } => opsgraph_api::find_gate(self, gate)?,
            Action::Pause(id) | Action::Resume(id) | Action::Cancel(id) => id.to_string(),
            Action::Retry(id, _) => id.to_string(),
        };
        let mut sink = std::io::sink();
        let text: &mut dyn Write = if output == Output::Text { out } else { &mut sink };
        match action {
            Action::Answer { gate, option, value, .. } => {
                Control::answer(self, &id, gate, option, value.map(opsgraph_api::gate_value), "")?;
                writeln!(text, "gate {gate} of {id}: {option}")?;
            }
            Action::Pause(_) => {
                Control::pause(self, &id)?;
                writeln!(text, "{id}: paused; running jobs finish, no new job starts")?;
            }
            Action::Resume(_) => {
                Control::resume(self, &id)?;
            }
            Action::Cancel(_) => {
                Control::cancel(self, &id)?;
                writeln!(text, "{id}: cancelled")?;
            }
            Action::Retry(_, jobs) => {
                Control::retry(self, &id, jobs)?;
            }
        }
        let waits = wait && !matches!(action, Action::Pause(_) | Action::Cancel(_));
        if output != Output::Text {
            let view =
                if waits { self.follow(&id, &mut std::io::sink(), &json!({}))? } else { Client::operation(self, &id)? };
            document(&serde_json::to_value(&view)?, if output == Output::Json { "json" } else { "yaml" }, out)?;
            return Ok(exit_code(view.summary.state));
        }
        if !waits {
            return Ok(0);
        }
        self.follow_and_finish(&id, &json!({}), out)
    }
}

impl Remote {
    /// `patch OP -f PATCH | --remedy ID`.
    pub fn patch(&self, op: &str, file: Option<&str>, remedy: Option<&str>, out: &mut dyn Write) -> anyhow::Result<u8> {
        let base = format!("/api/v1/operations/{}/patches", segment(op));
        let reply = match (file, remedy) {
            (Some(f), _) => {
                let text = crate::load::read_document(f)?;
                self.call("POST", &base, Some(("application/yaml", text.into_bytes())))?
            }
            (None, Some(id)) => self.call("POST", &format!("{base}?remedy={}", segment(id)), None)?,
            (None, None) => bail!("name a patch: -f PATCH.yaml or --remedy ID"),
        };
        self.print_patch(op, reply, out)
    }

    fn print_patch(&self, op: &str, reply: Value, out: &mut dyn Write) -> anyhow::Result<u8> {
        let reply: opsgraph_api::PatchReply = serde_json::from_value(reply)?;
        writeln!(out, "patch {} of {op}:", reply.patch)?;
        write!(out, "{}", reply.diff_text)?;
        for f in &reply.findings {
            // The severity as the API spells it (`error`, `warning`).
            let severity = serde_json::to_value(f.severity)?;
            writeln!(out, "{} {}: {}", severity.as_str().unwrap_or_default(), f.code, f.message)?;
        }
        if let Some(g) = &reply.gate {
            writeln!(
                out,
                "waiting for approval at {g}: opsgraph gate answer {g} --operation {op} --option 'approve patch'"
            )?;
        }
        Ok(0)
    }

    /// `intervene OP ...`.
    pub fn intervene(
        &mut self,
        op: &str,
        iv: &opsgraph_core::model::Intervention,
        out: &mut dyn Write,
    ) -> anyhow::Result<u8> {
        let reply = Control::intervene(self, op, iv)?;
        crate::render::print_intervention(&reply, &iv.note, out)
    }

    /// `diagnose OP [--propose]`.
    pub fn diagnose(&self, op: &str, propose: bool, output: Output, out: &mut dyn Write) -> anyhow::Result<u8> {
        let list = crate::query_cmd::diagnose(self, op, output, out)?;
        if !propose {
            return Ok(0);
        }
        let Some(remedy) = list.iter().find_map(|d| d.remedy.as_deref()) else {
            writeln!(out, "nothing to propose: no remedy matches")?;
            return Ok(1);
        };
        let reply =
            self.call("POST", &format!("/api/v1/operations/{}/patches?remedy={}", segment(op), segment(remedy)), None)?;
        self.print_patch(op, reply, out)
    }

    /// `pack install FILE.tar.gz|DIR`: a directory is packed into a `.tar.gz` in memory first,
    /// with the checks of a local directory install.
    pub fn pack_install(&self, path: &std::path::Path, replace: bool, out: &mut dyn Write) -> anyhow::Result<u8> {
        let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
        let bytes = if meta.is_dir() {
            crate::registry::archive_dir(path)?
        } else {
            crate::registry::read_archive_file(path, &meta)?
        };
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

/// The HTTP client: each read is one request, its answer the API's document.
impl opsgraph_api::Client for Remote {
    fn operations(&self) -> anyhow::Result<Vec<opsgraph_api::OperationSummary>> {
        Ok(serde_json::from_value(self.get("/api/v1/operations")?["operations"].take())?)
    }

    fn operation(&self, id: &str) -> anyhow::Result<opsgraph_api::OperationView> {
        Ok(serde_json::from_value(self.operation_value(id)?)?)
    }

    fn jobs(&self, operation: &str) -> anyhow::Result<Vec<opsgraph_store::JobRecord>> {
        Ok(serde_json::from_value(
            self.get(&format!("/api/v1/operations/{}/jobs", segment(operation)))?["jobs"].take(),
        )?)
    }

    fn gates(&self, operation: &str) -> anyhow::Result<opsgraph_api::GateList> {
        Ok(serde_json::from_value(self.get(&format!("/api/v1/operations/{}/gates", segment(operation)))?)?)
    }

    fn resources(&self) -> anyhow::Result<Vec<opsgraph_api::ResourceRow>> {
        Ok(serde_json::from_value(self.get("/api/v1/resources")?["resources"].take())?)
    }

    fn logs(&self, operation: &str, job: Option<&str>) -> anyhow::Result<Vec<opsgraph_api::LogEntry>> {
        let query = job.map(|j| format!("?job={}", segment(j))).unwrap_or_default();
        let path = format!("/api/v1/operations/{}/logs{query}", segment(operation));
        Ok(serde_json::from_value(self.get(&path)?["logs"].take())?)
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
        Ok(serde_json::from_value(self.get(&path)?["diagnosis"].take())?)
    }
}

/// The HTTP client's changes: one request each, audited by the server as the token's identity.
impl opsgraph_api::Control for Remote {
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
