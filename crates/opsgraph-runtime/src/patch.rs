//! Plan patches on a failed operation (seed §3, §14): failed -> diagnosing -> plan patch review
//! -> running. The patch is reviewed (`opsgraph_core::plan::patch`); a refused patch changes nothing.
//! One that needs approval waits at a `patch-<id>` gate, answered by its roles and never by its
//! author; once approved it becomes the operation's next plan revision — new jobs recorded, the
//! jobs it retries reset, the ones it skips skipped — and the run goes on from where it stopped.

use opsgraph_core::model::{GateKind, GateType, OperationState, PlanPatch};
use opsgraph_core::plan::lifecycle::Event;
use opsgraph_core::plan::patch::{apply_patch, Diff, Finding, Severity};
use opsgraph_core::plan::Plan;
use opsgraph_store::{now, GateRecord, JobRecord, JobState, OperationRecord, Write};
use serde_json::{json, Value};

use crate::timeline::entry;
use crate::{Error, Runtime};

/// What proposing a patch did.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub patch: String,
    pub diff: Diff,
    pub findings: Vec<Finding>,
    /// The gate that waits for an approval, when the patch needs one.
    pub gate: Option<String>,
    pub state: OperationState,
    /// Why it waits (empty when it was applied at once).
    pub approval: Vec<ApprovalReason>,
}

/// Change kinds a policy may list as safe to apply without a second person. Inserted jobs are
/// never among them: new work always waits for an approval (four eyes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SafeChanges {
    /// `retry_idempotent`: retrying jobs whose idempotency key makes a second run safe.
    pub retry_idempotent: bool,
}

impl SafeChanges {
    /// A list of change kind names (`key` names the setting in messages); an unknown one is an
    /// error naming the known ones.
    pub fn parse(key: &str, names: &[String]) -> Result<SafeChanges, String> {
        let mut p = SafeChanges::default();
        for n in names {
            match n.as_str() {
                "retry_idempotent" => p.retry_idempotent = true,
                "insert_diagnostic" => {
                    return Err(format!(
                        "`{key}: insert_diagnostic` is no longer accepted: a patch that inserts jobs always waits for a person's approval"
                    ))
                }
                other => return Err(format!("unknown `{key}` entry `{other}`; known: retry_idempotent")),
            }
        }
        Ok(p)
    }

    /// Whether every change of `patch` is one this policy lists as safe.
    fn allows(&self, patch: &PlanPatch, plan: &Plan, pack: &opsgraph_core::pack::Pack) -> bool {
        use opsgraph_core::model::PatchChange;
        let template = pack.templates.iter().find(|t| t.id == plan.template);
        let job = |id: &str| template.and_then(|t| pack.job(t, id));
        !patch.changes.is_empty()
            && patch.changes.iter().all(|c| match c {
                PatchChange::Retry { job: j, with_descendants: false } => {
                    let base = plan.jobs.iter().find(|i| i.id == *j || i.job == *j).map(|i| i.job.clone());
                    self.retry_idempotent
                        && base.and_then(|b| job(&b)).is_some_and(|d| d.controls.idempotency.is_some())
                }
                _ => false,
            })
    }
}

/// Who may change a running operation's plan without whom: `DATA_DIR/config.yaml`'s
/// `ai_policy.auto_apply`, `patch_policy.safe_changes` and `allow_self_approval`, read by one
/// function for the server and the local CLI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchRules {
    /// What an AI's patch may apply without a person (nothing by default).
    pub ai_auto_apply: SafeChanges,
    /// What a person's patch may apply without a second person once the plan was approved
    /// (nothing by default).
    pub safe_changes: SafeChanges,
    /// May the creator of an operation answer its approval gates (patch gates included)?
    pub allow_self_approval: bool,
    /// `ai_policy.environments`: the environments whose operations the AI analyzer may be asked
    /// about (their failure's context leaves the machine); `None`: every environment.
    pub ai_environments: Option<Vec<String>>,
}

impl PatchRules {
    /// From the parsed `config.yaml` (JSON values); a missing key is the default.
    pub fn from_config(config: &Value) -> Result<PatchRules, String> {
        let list = |v: &Value, key: &str| -> Result<SafeChanges, String> {
            match v {
                Value::Null => Ok(SafeChanges::default()),
                Value::Array(a) => {
                    let names: Vec<String> = a.iter().map(|v| v.as_str().unwrap_or_default().to_string()).collect();
                    SafeChanges::parse(key, &names)
                }
                other => Err(format!("`{key}` must be a list, not {other}")),
            }
        };
        let allow_self_approval = match &config["allow_self_approval"] {
            Value::Null => false,
            Value::Bool(b) => *b,
            other => return Err(format!("`allow_self_approval` must be true or false, not {other}")),
        };
        let ai_environments = match &config["ai_policy"]["environments"] {
            Value::Null => None,
            Value::Array(a) if a.iter().all(Value::is_string) => {
                Some(a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            }
            other => return Err(format!("`ai_policy.environments` must be a list of environment names, not {other}")),
        };
        Ok(PatchRules {
            ai_auto_apply: list(&config["ai_policy"]["auto_apply"], "ai_policy.auto_apply")?,
            safe_changes: list(&config["patch_policy"]["safe_changes"], "patch_policy.safe_changes")?,
            allow_self_approval,
            ai_environments,
        })
    }
}

/// Why a patch waits at its gate for a person's approval. None of them: it applies at once.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum ApprovalReason {
    /// The patch asks for it (`approval.required`).
    Requested,
    /// It inserts jobs: new work always needs a second person.
    InsertsJobs,
    /// Its author is an AI and `ai_policy.auto_apply` does not cover every change.
    AiAuthor,
    /// The operation's plan was approved at `gate` by `by`; a change to an approved plan needs a
    /// new approval unless `patch_policy.safe_changes` covers every change.
    ApprovedPlan { gate: String, by: String },
}

impl ApprovalReason {
    pub fn text(&self) -> String {
        match self {
            ApprovalReason::Requested => "the patch asks for approval".into(),
            ApprovalReason::InsertsJobs => "it inserts jobs".into(),
            ApprovalReason::AiAuthor => "an AI wrote it and ai_policy does not cover every change".into(),
            ApprovalReason::ApprovedPlan { gate, by } => format!("it changes a plan {by} approved at {gate}"),
        }
    }
}

/// The default roles that approve a patch that asks for approval without naming any.
const APPROVERS: &[&str] = &["sre", "platform_admin"];

impl Runtime {
    /// Reviews `patch` for a failed operation and, when it passes, opens its review: applied at
    /// once when it needs no approval, else waiting at its gate. Refused findings change nothing.
    pub fn propose_patch(&mut self, op_id: &str, patch: &PlanPatch, author: &str) -> Result<Proposal, Error> {
        let (op, plan) = self.load(op_id)?;
        // A failed operation goes through diagnosing and review; a paused one stays paused while
        // its patch waits, and resumes when the patch is applied.
        let paused = matches!(op.state, OperationState::Paused { .. });
        if !paused && !matches!(op.state, OperationState::Failed { .. }) {
            return Err(Error::Unsupported(format!(
                "a plan patch applies to a failed or paused operation; {op_id} is {}",
                opsgraph_core::plan::lifecycle::state_name(op.state.kind())
            )));
        }
        let pack = self.pack(&plan)?.clone();
        let reviewed = apply_patch(&plan, &pack, patch).map_err(|f| Error::PatchRefused(render(&f)))?;
        let n = self.store.timeline(op_id)?.iter().filter(|e| e.event == "patch_proposed").count() + 1;
        let id = patch.id.clone().unwrap_or_else(|| format!("p{n}"));
        let approval = patch.approval.as_ref();
        let reasons = self.approval_reasons(op_id, patch, author, &plan, &pack)?;
        let needs = !reasons.is_empty();
        let roles: Vec<String> = match approval.map(|a| a.roles.clone()).filter(|r| !r.is_empty()) {
            Some(r) => r,
            None => APPROVERS.iter().map(|r| r.to_string()).collect(),
        };
        let attached = self.take_attached();
        let data = json!({
            "patch": id,
            "author": author,
            "reason": patch.reason,
            "changes": patch,
            "diff": reviewed.diff,
            "findings": reviewed.findings,
            "revision": reviewed.plan.revision.hash,
            "approval_needed": reasons,
        });
        let op = if paused {
            op
        } else {
            self.transition(&op, Event::Diagnose, author, "a plan patch is proposed", vec![], &mut |_| {})?
        };
        let mut writes = vec![Write::Timeline(entry(
            op_id,
            author,
            "patch_proposed",
            format!("patch {id} by {author}: {}", reviewed.diff.text().lines().collect::<Vec<_>>().join("; ")),
            data,
        ))];
        let gate = needs.then(|| GateKind::review_gate_id(&id));
        if let Some(g) = &gate {
            writes.push(Write::Gate(GateRecord {
                operation: op_id.to_string(),
                id: g.clone(),
                gate_type: GateType::Approval,
                kind: GateKind::PatchReview { patch: id.clone() },
                reason: format!(
                    "plan patch {id} by {author}{} (approval: {})",
                    patch.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default(),
                    reasons.iter().map(ApprovalReason::text).collect::<Vec<_>>().join("; ")
                ),
                options: vec!["approve patch".into(), "reject patch".into()],
                required_roles: roles,
                answer: None,
                answered_by: None,
                answered_at: None,
                value: None,
            }));
        }
        writes.extend(attached);
        let op = if paused {
            self.commit(&writes)?;
            op
        } else {
            self.transition(
                &op,
                Event::ProposePatch { patch: id.clone() },
                author,
                "patch under review",
                writes,
                &mut |_| {},
            )?
        };
        let state =
            if gate.is_none() { self.apply_reviewed(&op, &plan, &id, patch, author, paused)? } else { op.state };
        Ok(Proposal { patch: id, diff: reviewed.diff, findings: reviewed.findings, gate, state, approval: reasons })
    }

    /// Why `patch` must wait for a person (four eyes on every plan change): the patch asks; it
    /// inserts jobs (always); an AI wrote it beyond `ai_policy.auto_apply`; or the operation's plan
    /// was already approved by someone and `patch_policy.safe_changes` does not cover it.
    fn approval_reasons(
        &self,
        op_id: &str,
        patch: &PlanPatch,
        author: &str,
        plan: &Plan,
        pack: &opsgraph_core::pack::Pack,
    ) -> Result<Vec<ApprovalReason>, Error> {
        use opsgraph_core::model::PatchChange;
        let mut reasons = Vec::new();
        if patch.approval.as_ref().is_some_and(|a| a.required) {
            reasons.push(ApprovalReason::Requested);
        }
        if patch.changes.iter().any(|c| matches!(c, PatchChange::InsertAfter { .. } | PatchChange::InsertBefore { .. }))
        {
            reasons.push(ApprovalReason::InsertsJobs);
        }
        let ai = author.starts_with("ai-agent:");
        if ai && !self.rules.ai_auto_apply.allows(patch, plan, pack) {
            reasons.push(ApprovalReason::AiAuthor);
        }
        let approved = self.store.gates(op_id)?.into_iter().find(|g| {
            crate::control::approves(g.gate_type)
                && g.answered_by.is_some()
                && !matches!(g.answer.as_deref(), Some("cancel operation" | "reject patch") | None)
        });
        if let Some(g) = approved {
            let safe = if ai { &self.rules.ai_auto_apply } else { &self.rules.safe_changes };
            if !safe.allows(patch, plan, pack) {
                reasons.push(ApprovalReason::ApprovedPlan { gate: g.id, by: g.answered_by.unwrap_or_default() });
            }
        }
        Ok(reasons)
    }

    /// The patch of remedy `id` of the operation's pack.
    pub fn remedy_patch(&self, op_id: &str, id: &str) -> Result<PlanPatch, Error> {
        let (_, plan) = self.load(op_id)?;
        let pack = self.pack(&plan)?;
        // A remedy the diagnosis matched: its patch for the job that failed (`$job` filled in).
        if let Some(d) = self.diagnose(op_id)?.into_iter().find(|d| d.remedy.as_deref() == Some(id)) {
            return d
                .patch
                .ok_or_else(|| Error::Unsupported(format!("remedy `{id}` diagnoses without a patch: {}", d.cause)));
        }
        let library = opsgraph_core::pack::library::remedies();
        let remedy = pack.remedies.iter().chain(library).find(|r| r.id == id).ok_or_else(|| {
            let known: Vec<&str> = pack.remedies.iter().map(|r| r.id.as_str()).collect();
            Error::Unsupported(format!("pack {} has no remedy `{id}` (remedies: {})", plan.pack, known.join(", ")))
        })?;
        let patch = remedy
            .plan_patch
            .clone()
            .ok_or_else(|| Error::Unsupported(format!("remedy `{id}` diagnoses without a patch")))?;
        let names_failed = serde_json::to_string(&patch).unwrap_or_default().contains("\"$job\"");
        if names_failed {
            return Err(Error::Unsupported(format!(
                "remedy `{id}` patches the job that failed, and it matches no failed job of {op_id}"
            )));
        }
        Ok(patch)
    }

    /// The patch under review of `op`, its author and its changes, from the timeline.
    pub(crate) fn patch_under_review(&self, op_id: &str, patch: &str) -> Result<(PlanPatch, String), Error> {
        let proposed = self
            .store
            .timeline(op_id)?
            .into_iter()
            .rev()
            .find(|e| e.event == "patch_proposed" && e.data["patch"] == patch)
            .ok_or_else(|| Error::Unsupported(format!("no patch {patch} was proposed for {op_id}")))?;
        let changes: PlanPatch = serde_json::from_value(proposed.data["changes"].clone())
            .map_err(|e| Error::Unsupported(format!("patch {patch} cannot be read back: {e}")))?;
        Ok((changes, proposed.data["author"].as_str().unwrap_or_default().to_string()))
    }

    /// An answer at a `patch-<id>` gate: approve (the author may not) applies it, reject sends
    /// the operation back to failed.
    pub(crate) fn decide_patch(
        &mut self,
        op: &OperationRecord,
        patch: &str,
        approve: bool,
        actor: &str,
        writes: Vec<Write>,
    ) -> Result<OperationState, Error> {
        let (changes, author) = self.patch_under_review(&op.id, patch)?;
        if approve && author == actor {
            return Err(Error::SelfApproval {
                actor: actor.to_string(),
                gate: GateKind::review_gate_id(patch),
                why: format!("proposed patch {patch}"),
            });
        }
        let paused = matches!(op.state, OperationState::Paused { .. });
        if paused && !approve {
            let mut writes = writes;
            writes.push(Write::Timeline(entry(
                &op.id,
                actor,
                "patch_rejected",
                format!("patch {patch} rejected by {actor}; the operation stays paused"),
                json!({"patch": patch}),
            )));
            self.commit(&writes)?;
            return Ok(op.state.clone());
        }
        if !approve {
            let reason = format!("rejected by {actor}");
            let event = Event::PatchRejected { patch: patch.to_string(), reason: reason.clone() };
            return Ok(self.transition(op, event, actor, &reason, writes, &mut |_| {})?.state);
        }
        self.commit(&writes)?;
        let (op, plan) = self.load(&op.id)?;
        self.apply_reviewed(&op, &plan, patch, &changes, actor, paused)
    }

    /// Makes the reviewed patch the operation's plan, in one transaction with its job records and
    /// the transition back to running.
    fn apply_reviewed(
        &mut self,
        op: &OperationRecord,
        plan: &Plan,
        patch_id: &str,
        patch: &PlanPatch,
        actor: &str,
        paused: bool,
    ) -> Result<OperationState, Error> {
        let pack = self.pack(plan)?.clone();
        let reviewed = apply_patch(plan, &pack, patch).map_err(|f| Error::PatchRefused(render(&f)))?;
        let mut next = reviewed.plan;
        let revision = next.revision.hash.clone();
        // Sealed parameters are bound to their revision: seal them again for the new one.
        let mut intent = op.intent.clone();
        for name in self.secret_params(&next) {
            let (old, new) = (format!("param:{}/{name}", plan.revision.hash), format!("param:{revision}/{name}"));
            for v in [next.parameters.get_mut(&name), next.intent.parameters.get_mut(&name)].into_iter().flatten() {
                if crate::secrets::is_sealed(v) {
                    let plain = self.open_text(v.as_str().unwrap_or_default(), &old)?;
                    *v = Value::String(self.seal_text(&String::from_utf8_lossy(plain.expose()), &new)?);
                }
            }
            if let Some(v) = intent.get_mut("parameters").and_then(|p| p.get_mut(&name)) {
                if crate::secrets::is_sealed(v) {
                    let plain = self.open_text(v.as_str().unwrap_or_default(), &old)?;
                    *v = Value::String(self.seal_text(&String::from_utf8_lossy(plain.expose()), &new)?);
                }
            }
        }
        let at = now();
        let mut writes = vec![
            Write::SetPlan {
                operation: op.id.clone(),
                revision: revision.clone(),
                plan: serde_json::to_string(&next).map_err(|_| Error::Plan(revision.clone()))?,
            },
            Write::ReplaceIntent { operation: op.id.clone(), intent },
        ];
        let records = self.store.jobs(&op.id)?;
        let job = |id: &str, state: JobState| {
            let old = records.iter().find(|r| r.id == id);
            Write::Job(JobRecord {
                operation: op.id.clone(),
                id: id.to_string(),
                state,
                attempts: old.map_or(0, |r| r.attempts),
                outcome: old.map_or(Value::Null, |r| r.outcome.clone()),
                updated_at: at.clone(),
            })
        };
        for (id, _) in &reviewed.diff.added_jobs {
            writes.push(job(id, JobState::Pending));
        }
        for id in &reviewed.diff.retried {
            writes.push(job(id, JobState::Pending));
        }
        for (id, _) in &reviewed.diff.skipped {
            writes.push(job(id, JobState::Skipped));
        }
        for g in next.gates.iter().filter(|g| reviewed.diff.added_gates.contains(&g.id)) {
            writes.push(crate::create::open_gate(&op.id, g));
        }
        // From review, the patch applied; from a pause, the run resumes with it.
        let event = if paused {
            Event::Resume
        } else {
            Event::PatchApplied { patch: patch_id.to_string(), revision: revision.clone() }
        };
        let reason = format!("patch {patch_id} applied: plan revision {}", next.revision.number);
        Ok(self.transition(op, event, actor, &reason, writes, &mut |_| {})?.state)
    }
}

/// Findings as one message: each on its line, errors first.
pub(crate) fn render(findings: &[Finding]) -> String {
    let mut f: Vec<&Finding> = findings.iter().collect();
    f.sort_by_key(|f| f.severity);
    f.iter()
        .map(|f| {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Info => "info",
            };
            let at = f.change.map(|c| format!(" (change {})", c + 1)).unwrap_or_default();
            format!("{sev}[{}]{at}: {}", f.code, f.message)
        })
        .collect::<Vec<_>>()
        .join("\n")
}
