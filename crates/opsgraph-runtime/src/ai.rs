//! The AI analyzer (seed §14): any OpenAI-compatible chat-completions endpoint, asked for a JSON
//! answer that matches the Diagnosis schema (and, optionally, a `plan_patch` document). One
//! implementation for the CLI (`diagnose OP --ai openai`) and the server (`POST …/diagnosis` and
//! `POST …/patches` with `analyzer=ai`):
//!
//! - it is asked only about operations of the environments `ai_policy.environments` names (every
//!   environment when it names none), else refused (`ai_policy_forbids`) before anything is sent;
//! - it reads only the failure's context (`failure_context`), with every secret value of the
//!   operation masked once more before anything leaves (captured output is masked when it is
//!   stored; the context is masked again as a whole, and nothing is sent when it cannot be);
//! - the answer is checked strictly: a malformed one, or one that names a remedy nobody listed, is
//!   refused with its reason on the operation's timeline (`ai_answer_refused`);
//! - its patch passes the reviewer every patch passes (`opsgraph_core::plan::patch::apply_patch`),
//!   and is proposed as [`ANALYZER_AUTHOR`] under the same four-eyes rules as any other
//!   (`ai_policy.auto_apply`); a refused patch is recorded (`ai_patch_refused`) and never applied.

use std::time::Duration;

use opsgraph_core::model::PlanPatch;
use opsgraph_core::plan::patch::{apply_patch, Finding};
use serde_json::{json, Value};

use crate::masking::Masking;
use crate::patch::Proposal;
use crate::{Error, Runtime, ANALYZER_AUTHOR};

/// Who answers on the timeline (`ai_diagnosis`, `ai_answer_refused`).
pub const AI_ANALYZER: &str = "ai-agent:analyzer";

/// Where the endpoint is: the `ai:` section of `DATA_DIR/config.yaml`, read by the CLI and the
/// server alike:
///
/// ```yaml
/// ai:
///   url: https://api.example.com/v1      # or the full .../chat/completions
///   model: gpt-4o-mini
///   api_key_env: OPENAI_API_KEY          # the key is read from this variable, never stored
/// ```
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    model: String,
    key: Key,
    agent: ureq::Agent,
}

/// The endpoint's key: none configured (an endpoint that needs none, such as a local model
/// server), read from the variable `api_key_env` names, or that variable unset — then nothing is
/// sent: a request without its key would only be refused by the endpoint, after the context left.
#[derive(Clone)]
enum Key {
    None,
    Set(String),
    Missing(String),
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed, not even in a debug dump of the configuration.
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("model", &self.model)
            .field(
                "key",
                &match &self.key {
                    Key::None => "(none)".to_string(),
                    Key::Set(_) => "(set)".to_string(),
                    Key::Missing(var) => format!("(${var} unset)"),
                },
            )
            .finish()
    }
}

const SYSTEM: &str = "You are the Analyzer and Planner of the Opsgraph control plane. You receive the \
context of a failed operation as JSON. Answer with ONE JSON object and nothing else, with exactly these keys: \
\"summary\" (string: what went wrong), \"cause\" (string: why), \"confidence\" (number from 0 to 1), \
\"evidence\" (array of strings: what in the context supports it), \"remedy\" (the id of one of the listed remedies, \
or null), \"plan_patch\" (null, or an object with \"reason\" and \"changes\": a list of changes among \
{\"insert_after\": ANCHOR_JOB, \"jobs\": [ids from job_library]} (or insert_before), {\"retry\": {job, with_descendants}}, \
{\"skip\": {job, reason}}, {\"set_parameters\": {parameters}}, {\"add_gate\": {id, type, reason, options, required_roles, before}}). Never propose anything outside that list. If you are not sure, say so \
with a low confidence and no plan_patch.";

impl Endpoint {
    /// From the parsed `config.yaml` (JSON values): `None` when it has no `ai:` section.
    pub fn from_config(config: &Value) -> Result<Option<Endpoint>, String> {
        let ai = &config["ai"];
        let Some(map) = ai.as_object() else {
            return match ai {
                Value::Null => Ok(None),
                other => Err(format!("`ai` must be a mapping with `url` and `model`, not {other}")),
            };
        };
        if let Some(k) = map.keys().find(|k| !["url", "model", "api_key_env"].contains(&k.as_str())) {
            return Err(format!("unknown key `ai.{k}` (expected url, model, api_key_env)"));
        }
        let text = |k: &str| ai[k].as_str().filter(|s| !s.trim().is_empty());
        let url = text("url").ok_or("no `ai.url`: the endpoint's base URL (https://…/v1)")?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("`ai.url` must be an http:// or https:// URL, not `{url}`"));
        }
        let model = text("model").ok_or("no `ai.model`: the model to ask")?;
        let key = match text("api_key_env") {
            None => Key::None,
            Some(var) => match std::env::var(var.trim()) {
                Ok(k) if !k.trim().is_empty() => Key::Set(k.trim().to_string()),
                _ => Key::Missing(var.trim().to_string()),
            },
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        Ok(Some(Endpoint { url: url.trim_end_matches('/').to_string(), model: model.to_string(), key, agent }))
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    /// Asks for a diagnosis of `context`. `Ok(Err(reason))` is a refused answer;
    /// `Err(Error::Ai)` an endpoint that could not be asked (`ai_unavailable`).
    pub fn ask(&self, context: &Value) -> Result<Result<Answer, String>, Error> {
        let url = if self.url.ends_with("/chat/completions") {
            self.url.clone()
        } else {
            format!("{}/chat/completions", self.url)
        };
        let body = json!({
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": format!("{SYSTEM}\nThe answer's JSON Schema: {}", answer_schema())},
                {"role": "user", "content": context.to_string()},
            ],
        });
        let unavailable = |message: String| Error::Ai { code: "ai_unavailable", message };
        let mut req = self.agent.post(&url).header("Content-Type", "application/json");
        match &self.key {
            Key::None => {}
            Key::Set(k) => req = req.header("Authorization", &format!("Bearer {k}")),
            Key::Missing(var) => {
                return Err(Error::Ai {
                    code: "ai_key_missing",
                    message: format!("`ai.api_key_env` names ${var}, which is not set: nothing was sent to {url}"),
                })
            }
        }
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut resp = req.send(bytes.as_slice()).map_err(|e| unavailable(format!("cannot reach {url}: {e}")))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            let head: String = text.chars().take(300).collect();
            return Err(unavailable(format!("the analyzer endpoint answered {status}: {head}")));
        }
        let envelope: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => return Ok(Err(format!("the endpoint's reply is not JSON: {e}"))),
        };
        let Some(content) = envelope["choices"][0]["message"]["content"].as_str() else {
            return Ok(Err("the reply has no choices[0].message.content".into()));
        };
        Ok(check(content))
    }
}

/// The JSON Schema of an analyzer's answer, sent with every question; `check` enforces it (and,
/// for `plan_patch`, the document shapes). Its keys are a subset of what `diagnose -o json`
/// prints (`opsgraph schema diagnosis`).
pub fn answer_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Diagnosis",
        "type": "object",
        "additionalProperties": false,
        "required": ["summary", "cause", "confidence"],
        "properties": {
            "summary": {"type": "string", "minLength": 1, "description": "what went wrong"},
            "cause": {"type": "string", "minLength": 1, "description": "why"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "evidence": {"type": "array", "items": {"type": "string"}, "description": "what in the context supports it"},
            "remedy": {"type": ["string", "null"], "description": "the id of a listed remedy, or null"},
            "plan_patch": {
                "type": ["object", "null"],
                "description": "a plan_patch document body (`opsgraph schema plan_patch`), or null",
            },
        },
    })
}

/// A checked answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub summary: String,
    pub cause: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub remedy: Option<String>,
    /// The named remedy comes from the remedy library (not the operation's pack).
    pub from_library: bool,
    /// The failed jobs the question was about.
    pub jobs: Vec<String>,
    pub plan_patch: Option<PlanPatch>,
    /// The answer as received (for the timeline).
    pub raw: Value,
}

/// Checks an answer's content against the Diagnosis schema, strictly.
pub fn check(content: &str) -> Result<Answer, String> {
    let v: Value = serde_json::from_str(content).map_err(|e| format!("the answer is not a JSON object: {e}"))?;
    let Some(obj) = v.as_object() else { return Err("the answer is not a JSON object".into()) };
    const KEYS: &[&str] = &["summary", "cause", "confidence", "evidence", "remedy", "plan_patch"];
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key `{k}` in the answer (expected {})", KEYS.join(", ")));
    }
    let text = |k: &str| -> Result<String, String> {
        match &v[k] {
            // The model's text reaches a terminal as a host's does: its control characters escaped.
            Value::String(s) if !s.trim().is_empty() => Ok(crate::masking::printable(s).into_owned()),
            other => Err(format!("`{k}` must be a non-empty string, found {other}")),
        }
    };
    let summary = text("summary")?;
    let cause = text("cause")?;
    let confidence = v["confidence"]
        .as_f64()
        .filter(|c| (0.0..=1.0).contains(c))
        .ok_or_else(|| format!("`confidence` must be a number from 0 to 1, found {}", v["confidence"]))?;
    let evidence = match &v["evidence"] {
        Value::Array(items) if items.iter().all(Value::is_string) => {
            items.iter().filter_map(|s| s.as_str().map(|s| crate::masking::printable(s).into_owned())).collect()
        }
        Value::Null => Vec::new(),
        other => return Err(format!("`evidence` must be a list of strings, found {other}")),
    };
    let remedy = match &v["remedy"] {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => return Err(format!("`remedy` must be a string or null, found {other}")),
    };
    let plan_patch = match &v["plan_patch"] {
        Value::Null => None,
        Value::Object(_) => {
            // The patch is a document like any other: checked by the same shapes, with positions.
            let doc = serde_json::to_string_pretty(&json!({"plan_patch": v["plan_patch"]})).unwrap_or_default();
            let parsed = opsgraph_core::pack::parse_file("ai-answer.json", &doc);
            if parsed.has_errors() {
                let diags: Vec<String> = parsed.diagnostics.iter().map(ToString::to_string).collect();
                return Err(format!("the proposed plan_patch is not a valid document:\n{}", diags.join("\n")));
            }
            match parsed.docs.into_iter().next().map(|d| d.doc) {
                Some(opsgraph_core::model::Document::PlanPatch(p)) => Some(p),
                _ => return Err("the proposed plan_patch is not a plan_patch document".into()),
            }
        }
        other => return Err(format!("`plan_patch` must be an object or null, found {other}")),
    };
    Ok(Answer {
        summary,
        cause,
        confidence,
        evidence,
        remedy,
        from_library: false,
        jobs: Vec::new(),
        plan_patch,
        raw: v,
    })
}

/// What the AI analyzer made of a failed operation, and what the reviewer made of its patch.
#[derive(Debug, Clone)]
pub struct AiDiagnosis {
    pub answer: Answer,
    /// The reviewer on the answer's patch (a dry run on the operation's plan; nothing changes):
    /// its findings when it passes, every finding when it is refused. `None` without a patch.
    pub review: Option<Result<Vec<Finding>, Vec<Finding>>>,
}

impl Runtime {
    /// Asks `endpoint` about `op_id`'s failure and reviews the patch it proposes, without
    /// proposing it. The answer (or its refusal, and a refused patch) is on the timeline.
    pub fn ai_diagnose(&mut self, op_id: &str, endpoint: &Endpoint) -> Result<AiDiagnosis, Error> {
        let answer = self.ai_answer(op_id, endpoint)?;
        let review = match &answer.plan_patch {
            None => None,
            Some(patch) => {
                let (_, plan) = self.load(op_id)?;
                let pack = self.pack(&plan)?;
                let review = apply_patch(&plan, pack, patch).map(|p| p.findings);
                if let Err(findings) = &review {
                    let text = crate::patch::render(findings);
                    self.note(op_id, ANALYZER_AUTHOR, "ai_patch_refused", &text, json!({"provider": "openai"}))?;
                }
                Some(review)
            }
        };
        Ok(AiDiagnosis { answer, review })
    }

    /// Proposes the patch of an `answer` of [`Runtime::ai_answer`] as [`ANALYZER_AUTHOR`]
    /// (`propose_patch`: the reviewer, then four eyes and `ai_policy.auto_apply`); `None` when it
    /// has none. A refused patch is on the timeline (`ai_patch_refused`) and is
    /// `Error::PatchRefused`.
    pub fn ai_propose(&mut self, op_id: &str, answer: &Answer) -> Result<Option<Proposal>, Error> {
        let Some(patch) = &answer.plan_patch else { return Ok(None) };
        match self.propose_patch(op_id, patch, ANALYZER_AUTHOR) {
            Ok(p) => Ok(Some(p)),
            Err(Error::PatchRefused(findings)) => {
                self.note(op_id, ANALYZER_AUTHOR, "ai_patch_refused", &findings, json!({"provider": "openai"}))?;
                Err(Error::PatchRefused(findings))
            }
            Err(e) => Err(e),
        }
    }

    /// The endpoint's checked answer to `op_id`'s masked failure context, noted on the timeline
    /// (`ai_diagnosis`); a refused answer is noted (`ai_answer_refused`) and is
    /// `Error::Ai { code: "ai_answer_refused" }`. Nothing else changes: it takes no lock a
    /// proposal needs, so a slow endpoint holds nobody up.
    pub fn ai_answer(&mut self, op_id: &str, endpoint: &Endpoint) -> Result<Answer, Error> {
        self.ai_allowed(op_id)?;
        let context = self.ai_context(op_id)?;
        let jobs: Vec<String> = context["failed_jobs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|j| j["job"].as_str().map(str::to_string))
            .collect();
        if jobs.is_empty() {
            return Err(Error::Unsupported(format!("operation {op_id} has no failed job to diagnose")));
        }
        let listed = |source: &str| -> Vec<String> {
            let remedies = context["remedies"].as_array().into_iter().flatten();
            remedies.filter(|r| r["source"] == source).filter_map(|r| r["id"].as_str().map(str::to_string)).collect()
        };
        let (pack, library) = (listed("pack"), listed("library"));
        let checked = endpoint.ask(&context)?.and_then(|mut a| {
            if let Some(r) = &a.remedy {
                if !pack.contains(r) && !library.contains(r) {
                    return Err(format!("the answer names remedy `{r}`, which is not among the listed remedies"));
                }
                a.from_library = !pack.contains(r);
            }
            a.jobs = jobs;
            Ok(a)
        });
        match checked {
            Ok(answer) => {
                let data = json!({"provider": "openai", "model": endpoint.model(), "answer": answer.raw});
                self.note(op_id, AI_ANALYZER, "ai_diagnosis", &answer.summary, data)?;
                Ok(answer)
            }
            Err(reason) => {
                let data = json!({"provider": "openai", "model": endpoint.model()});
                self.note(op_id, AI_ANALYZER, "ai_answer_refused", &reason, data)?;
                Err(Error::Ai {
                    code: "ai_answer_refused",
                    message: format!("the analyzer's answer is refused: {reason}"),
                })
            }
        }
    }

    /// `ai_policy.environments`: an operation of another environment is not sent to the
    /// analyzer (`Error::Ai { code: "ai_policy_forbids" }`), and nothing is recorded.
    fn ai_allowed(&self, op_id: &str) -> Result<(), Error> {
        let Some(allowed) = &self.rules.ai_environments else { return Ok(()) };
        let (op, _) = self.load(op_id)?;
        let env = op.intent["environment"].as_str().unwrap_or_default();
        if allowed.iter().any(|e| e == env) {
            return Ok(());
        }
        Err(Error::Ai {
            code: "ai_policy_forbids",
            message: format!(
                "ai_policy.environments ({}) does not allow the AI analyzer for operation {op_id} of environment `{env}`: nothing was sent",
                if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
            ),
        })
    }

    /// The failure's context with every secret value of the operation masked (its secret
    /// parameters and the values given at its missing-input gates). When the values cannot be
    /// opened or the masker cannot be built, nothing is sent.
    fn ai_context(&self, op_id: &str) -> Result<Value, Error> {
        let mut context = self.failure_context(op_id)?;
        let (_, plan) = self.load(op_id)?;
        let secret = self.secret_params(&plan);
        let mut values = Vec::new();
        for name in &secret {
            for v in [plan.parameters.get(name), plan.intent.parameters.get(name)].into_iter().flatten() {
                if crate::secrets::is_sealed(v) {
                    let aad = format!("param:{}/{name}", plan.revision.hash);
                    values.push(self.open_text(v.as_str().unwrap_or_default(), &aad)?.expose().to_vec());
                } else if let Some(s) = v.as_str() {
                    values.push(s.as_bytes().to_vec());
                }
            }
        }
        for (name, v) in self.gate_inputs(op_id)? {
            if secret.contains(&name) {
                values.push(v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()).into_bytes());
            }
        }
        values.retain(|v| !v.is_empty());
        let masking = Masking::new(values);
        if matches!(masking, Masking::Withhold) {
            return Err(Error::Ai {
                code: "ai_unavailable",
                message: "the operation's secret values cannot be masked: nothing is sent to the analyzer".into(),
            });
        }
        mask(&mut context, &masking);
        Ok(context)
    }
}

/// Every string of `v` masked.
fn mask(v: &mut Value, masking: &Masking) {
    match v {
        Value::String(s) => *s = masking.text(s),
        Value::Array(items) => items.iter_mut().for_each(|i| mask(i, masking)),
        Value::Object(map) => map.values_mut().for_each(|i| mask(i, masking)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    #[test]
    fn a_models_text_is_made_printable() {
        let answer = super::check(
            r#"{"summary": "disk full\u001b[2J", "cause": "the \u202eWAL\u202c grew", "confidence": 0.5, "evidence": ["df: 100%\r0%"]}"#,
        )
        .unwrap();
        expect![[r#"disk full\x1b[2J | the \u{202e}WAL\u{202c} grew | ["df: 100%\\x0d0%"]"#]]
            .assert_eq(&format!("{} | {} | {:?}", answer.summary, answer.cause, answer.evidence));
    }
}
