//! The `openai` analyzer provider: any OpenAI-compatible chat-completions endpoint, asked for a
//! JSON answer that matches the Diagnosis schema (and, optionally, a `plan_patch` document). The
//! answer is checked strictly: a malformed one, or a patch the reviewer refuses, is refused with
//! its reason recorded on the operation's timeline and never applied. It reads only what the
//! runtime's `failure_context` gives it (captured output is masked before it is stored).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

/// Where the endpoint is: `DATA_DIR/config.yaml`:
///
/// ```yaml
/// ai:
///   url: https://api.example.com/v1      # or the full .../chat/completions
///   model: gpt-4o-mini
///   api_key_env: OPENAI_API_KEY          # the key is read from this variable, never stored
/// ```
pub struct OpenAi {
    url: String,
    model: String,
    key: Option<String>,
    agent: ureq::Agent,
}

const SYSTEM: &str = "You are the Analyzer and Planner of the Opsgraph control plane. You receive the \
context of a failed operation as JSON. Answer with ONE JSON object and nothing else, with exactly these keys: \
\"summary\" (string: what went wrong), \"cause\" (string: why), \"confidence\" (number from 0 to 1), \
\"evidence\" (array of strings: what in the context supports it), \"remedy\" (the id of one of the listed remedies, \
or null), \"plan_patch\" (null, or an object with \"reason\" and \"changes\": a list of changes among \
insert_after/insert_before {anchor, jobs from job_library}, retry {job, with_descendants}, skip {job, reason}, \
set_parameters {parameters}, add_gate). Never propose anything outside that list. If you are not sure, say so \
with a low confidence and no plan_patch.";

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
    pub plan_patch: Option<opsgraph_core::model::PlanPatch>,
    /// The answer as received (for the timeline).
    pub raw: Value,
}

impl OpenAi {
    pub fn from_config(data_dir: &Path) -> anyhow::Result<OpenAi> {
        let path = data_dir.join("config.yaml");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("the openai analyzer is configured in {} (`ai: {{url, model}}`)", path.display())
        })?;
        let docs = opsgraph_core::pack::yaml::parse_stream(&text)
            .map_err(|e| anyhow::anyhow!("{}:{}: {}", path.display(), e.pos.line, e.message))?;
        let config = docs.first().map(opsgraph_core::pack::shape::to_json).unwrap_or(Value::Null);
        let ai = &config["ai"];
        let url = ai["url"].as_str().with_context(|| format!("no `ai.url` in {}", path.display()))?;
        let model = ai["model"].as_str().with_context(|| format!("no `ai.model` in {}", path.display()))?;
        let key = ai["api_key_env"].as_str().and_then(|v| std::env::var(v).ok());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        Ok(OpenAi { url: url.trim_end_matches('/').to_string(), model: model.to_string(), key, agent })
    }

    /// Asks for a diagnosis of `context`. `Err` is a refusal: its reason says why.
    pub fn diagnose(&self, context: &Value) -> anyhow::Result<Result<Answer, String>> {
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
        let mut req = self.agent.post(&url).header("Content-Type", "application/json");
        if let Some(k) = &self.key {
            req = req.header("Authorization", &format!("Bearer {k}"));
        }
        let mut resp =
            req.send(serde_json::to_vec(&body)?.as_slice()).with_context(|| format!("cannot reach {url}"))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        if !(200..300).contains(&status) {
            bail!("the analyzer endpoint answered {status}: {}", text.chars().take(300).collect::<String>());
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
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
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
            items.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()
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
    Ok(Answer { summary, cause, confidence, evidence, remedy, plan_patch, raw: v })
}
