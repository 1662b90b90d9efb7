//! What people do to an operation: answer gates, pause, resume, cancel, retry.

use opsgraph_core::model::{GateKind, GateType, OperationState};
use opsgraph_core::plan::lifecycle::Event;
use opsgraph_core::plan::Plan;
use opsgraph_store::{now, GateRecord, JobRecord, JobState, Write};
use serde_json::{json, Value};

use crate::timeline::{entry, Progress};
use crate::{Error, Runtime};

/// An answer to a gate.
#[derive(Debug, Clone)]
pub struct GateAnswer {
    pub option: String,
    /// Who answers (recorded), and the role they act in (checked against the gate's roles).
    pub actor: String,
    pub role: String,
    /// A typed value, for missing-input gates.
    pub value: Option<Value>,
}

/// Gates whose answer approves something (a plan, a patch, a destructive action, an exception, a
/// cost): their operation's creator may not answer them, except to cancel, unless
/// `allow_self_approval` is set; and a patch's author never approves it.
pub fn approves(gate_type: GateType) -> bool {
    matches!(
        gate_type,
        GateType::Approval | GateType::DestructiveAction | GateType::PolicyException | GateType::CostConfirmation
    )
}

impl Runtime {
    /// Answers a gate. Refused when the gate is unknown or already answered, the role may not
    /// answer it, or the option is not one of its options.
    pub fn answer_gate(&mut self, op_id: &str, gate_id: &str, answer: &GateAnswer) -> Result<OperationState, Error> {
        let attached = self.take_attached();
        let state = self.answer_gate_here(op_id, gate_id, answer, attached)?;
        self.wake_parents(op_id, &answer.actor)?;
        Ok(state)
    }

    /// The operation at the top of `id`'s chain of parents: the one to drive.
    pub fn root_of(&self, id: &str) -> Result<String, Error> {
        let mut id = id.to_string();
        for _ in 0..16 {
            match self.store.operation(&id)?.and_then(|o| o.parent) {
                Some(parent) => id = parent,
                None => break,
            }
        }
        Ok(id)
    }

    /// Parents paused while this child waited for a person run again once it can go on.
    fn wake_parents(&mut self, id: &str, actor: &str) -> Result<(), Error> {
        let mut child = self.store.operation(id)?.ok_or_else(|| Error::NoOperation(id.to_string()))?;
        while let Some(parent) = child.parent.clone() {
            let Some(p) = self.store.operation(&parent)? else { break };
            if let OperationState::Paused { reason } = &p.state {
                if reason.starts_with("waiting for sub-operation") {
                    let why = format!("sub-operation {} can go on", child.id);
                    self.transition(&p, Event::Resume, actor, &why, vec![], &mut |_| {})?;
                }
            }
            child = p;
        }
        Ok(())
    }

    /// The resource a person describes when binding an external provider at a gate: `--value`
    /// is `{"name": ..., "attributes": {...}, "credentials": "/abs/path"}`; it must meet the
    /// requirement's constraints.
    fn external_resource(
        &self,
        plan: &opsgraph_core::plan::Plan,
        cap: &str,
        provider: &str,
        answer: &GateAnswer,
    ) -> Result<(String, opsgraph_core::model::Resource), Error> {
        let usage = || {
            format!(
                "`{}` binds a resource outside the inventory: describe it with --value '{{\"name\": \"...\", \"attributes\": {{...}}, \"credentials\": \"/absolute/path\"}}'",
                answer.option
            )
        };
        let Some(Value::Object(v)) = &answer.value else { return Err(Error::Unsupported(usage())) };
        if let Some(k) = v.keys().find(|k| !matches!(k.as_str(), "name" | "attributes" | "credentials")) {
            return Err(Error::Unsupported(format!("unknown field `{k}`; {}", usage())));
        }
        let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
        let valid = !name.is_empty()
            && name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !valid {
            return Err(Error::Unsupported(format!(
                "`name` must be 1 to 63 letters, digits, `-`, `_` or `.`, starting with a letter or digit; {}",
                usage()
            )));
        }
        let attributes: opsgraph_core::model::Attributes = match v.get("attributes") {
            None => Default::default(),
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Some(_) => return Err(Error::Unsupported(format!("`attributes` must be a mapping; {}", usage()))),
        };
        let mut credentials = std::collections::BTreeMap::new();
        match v.get("credentials") {
            None => {}
            Some(Value::String(p)) if std::path::Path::new(p).is_absolute() => {
                credentials.insert(cap.to_string(), p.clone());
            }
            Some(_) => return Err(Error::Unsupported(format!("`credentials` must be an absolute path; {}", usage()))),
        }
        let type_ = cap.split('.').next().unwrap_or(cap).to_string();
        let r = opsgraph_core::model::Resource {
            id: format!("{type_}/{name}"),
            type_,
            name: name.to_string(),
            environment: plan.intent.environment.clone(),
            provider: Some(provider.to_string()),
            observed_state: Some(format!("described by {} at gate, not observed", answer.actor)),
            health: opsgraph_core::model::Health::Unknown,
            status: Some(opsgraph_core::model::ResourceStatus::Running),
            provides: vec![opsgraph_core::model::ProvidedCapability { capability: cap.to_string(), attributes }],
            credentials,
            ..Default::default()
        };
        if self.store.resource(&r.id)?.is_some() || self.resources.iter().any(|x| x.id == r.id) {
            return Err(Error::Unsupported(format!(
                "resource {} already exists; bind it by planning again, or choose another name",
                r.id
            )));
        }
        let res = plan
            .resolution
            .iter()
            .find(|x| x.requirement.capability == cap)
            .ok_or_else(|| Error::Unsupported(format!("the plan has no requirement {cap}")))?;
        // Its constraints and the policy it was planned under (encryption, the rules' `require`),
        // against what the person supplies, with their role.
        opsgraph_core::plan::resolve::meets_constraints(res, &plan.intent, std::slice::from_ref(&answer.role), &r)
            .map_err(|why| Error::Unsupported(format!("{} does not meet the requirement: {why}", r.id)))?;
        Ok((cap.to_string(), r))
    }

    fn answer_gate_here(
        &mut self,
        op_id: &str,
        gate_id: &str,
        answer: &GateAnswer,
        attached: Vec<Write>,
    ) -> Result<OperationState, Error> {
        // An AI proposes; a person decides. An AI identity never answers a gate.
        if answer.actor.starts_with("ai-agent:") {
            return Err(Error::Unsupported(format!(
                "{} is an AI identity: gates are answered by people",
                answer.actor
            )));
        }
        let (op, plan) = self.load(op_id)?;
        let gates = self.store.gates(op_id)?;
        let gate = gates
            .iter()
            .find(|g| g.id == gate_id)
            .ok_or_else(|| Error::NoGate { operation: op_id.to_string(), gate: gate_id.to_string() })?;
        if let (Some(a), Some(by), Some(at)) = (&gate.answer, &gate.answered_by, &gate.answered_at) {
            return Err(Error::AlreadyAnswered {
                gate: gate_id.into(),
                answer: a.clone(),
                by: by.clone(),
                at: at.clone(),
            });
        }
        // A gate that opens after job instances (a rollout's canary gate) is answered once they
        // finished: a person approves what ran, not what is expected to.
        let opens_after = plan.gates.iter().find(|g| g.id == gate_id).map_or(&[][..], |g| g.opens_after.as_slice());
        if !opens_after.is_empty() && answer.option != "cancel operation" {
            let records = self.store.jobs(op_id)?;
            let finished =
                |id: &String| records.iter().any(|r| r.id == *id && (r.state.is_done() || r.state == JobState::Failed));
            let waiting: Vec<&str> = opens_after.iter().filter(|id| !finished(id)).map(String::as_str).collect();
            if !waiting.is_empty() {
                return Err(Error::GateNotOpen { gate: gate_id.to_string(), waiting: waiting.join(", ") });
            }
        }
        if !gate.required_roles.is_empty() && !gate.required_roles.contains(&answer.role) {
            return Err(Error::Forbidden {
                gate: gate_id.into(),
                role: answer.role.clone(),
                required: gate.required_roles.join(", "),
            });
        }
        let cancelling = answer.option == "cancel operation" || answer.option == "reject patch";
        if approves(gate.gate_type) && op.actor == answer.actor && !cancelling && !self.rules.allow_self_approval {
            return Err(Error::SelfApproval {
                actor: answer.actor.clone(),
                gate: gate_id.to_string(),
                why: format!("created operation `{op_id}`"),
            });
        }
        if !gate.options.is_empty() && !gate.options.contains(&answer.option) {
            return Err(Error::NoOption {
                gate: gate_id.into(),
                option: answer.option.clone(),
                options: gate.options.join(", "),
            });
        }
        let reviews = gate.kind.clone();
        let plan_gate = plan.gates.iter().find(|g| g.id == gate_id);
        use opsgraph_core::plan::resolve::GateOption;
        let chosen: Option<(String, &GateOption)> = plan
            .resolution
            .iter()
            .filter_map(|r| match &r.outcome {
                opsgraph_core::plan::Outcome::Gate { gate } if gate.id == gate_id => {
                    Some((r.requirement.capability.clone(), gate))
                }
                _ => None,
            })
            .flat_map(|(cap, g)| g.options.iter().map(move |o| (cap.clone(), o)))
            .find(|(_, o)| o.label() == answer.option);
        // Choosing to create a provider starts its sub-operation (from the plan the preview showed)
        // when the run starts. Binding an external one records the resource the person described.
        let mut external: Option<(String, opsgraph_core::model::Resource)> = None;
        match chosen {
            Some((cap, GateOption::Create { provider, .. })) => {
                let sub = plan.sub_operations.iter().find(|s| s.provider == *provider && s.requirement == cap);
                match sub.and_then(|s| s.plan.as_deref()) {
                    Some(_) => {}
                    None => {
                        return Err(Error::Unsupported(format!(
                            "provider {provider} has no plan to create it: {}",
                            sub.and_then(|s| s.error.clone()).unwrap_or_else(|| "its pack is not loaded".into())
                        )))
                    }
                }
            }
            Some((cap, GateOption::BindExternal { provider, .. })) => {
                external = Some(self.external_resource(&plan, &cap, provider, answer)?);
            }
            _ => {}
        }
        if plan_gate.is_some_and(|g| g.type_ == GateType::MissingInput)
            && answer.option != "cancel operation"
            && answer.value.is_none()
        {
            return Err(Error::Unsupported(format!("gate `{gate_id}` needs a value: answer it with --value")));
        }
        // A value given for a missing parameter is checked exactly as the intent's would be.
        let checked = match (plan_gate, &answer.value) {
            (Some(g), Some(v)) if g.type_ == GateType::MissingInput && answer.option != "cancel operation" => {
                let name = gate_id.strip_prefix("input-").unwrap_or(gate_id).replace('-', "_");
                let pack = self.pack(&plan)?;
                let spec = pack
                    .templates
                    .iter()
                    .find(|t| t.id == plan.template)
                    .and_then(|t| t.parameters.get(&name))
                    .ok_or_else(|| {
                        Error::Unsupported(format!("gate `{gate_id}` names no parameter of the template"))
                    })?;
                let value = opsgraph_core::plan::check_parameter(&name, spec, v).map_err(|e| Error::BadValue {
                    gate: gate_id.to_string(),
                    code: e.code(),
                    message: e.to_string(),
                })?;
                Some(value)
            }
            (_, v) => v.clone(),
        };
        let at = now();
        // The value of a secret parameter is stored sealed.
        let secret = plan_gate.is_some_and(|g| g.type_ == GateType::MissingInput)
            && gate_id.strip_prefix("input-").is_some_and(|p| self.secret_params(&plan).contains(&p.replace('-', "_")));
        let value = match &checked {
            Some(v) if secret => {
                let text = crate::jobs::param_text(v);
                Some(Value::String(self.seal_text(&text, &format!("gate:{op_id}/{gate_id}"))?))
            }
            other => other.clone(),
        };
        let record = GateRecord {
            answer: Some(answer.option.clone()),
            answered_by: Some(answer.actor.clone()),
            answered_at: Some(at.clone()),
            value,
            ..gate.clone()
        };
        let note = Write::Timeline(entry(
            op_id,
            &answer.actor,
            "gate_answered",
            format!("{gate_id}: {} (as {})", answer.option, answer.role),
            json!({"gate": gate_id, "option": answer.option, "role": answer.role}),
        ));
        let mut writes = vec![Write::Gate(record), note];
        if let Some((cap, r)) = external {
            writes.push(Write::Timeline(entry(
                op_id,
                &answer.actor,
                "external_bound",
                format!(
                    "{cap}: bound to {} ({}), described by {}",
                    r.id,
                    r.provider.clone().unwrap_or_default(),
                    answer.actor
                ),
                json!({"requirement": cap, "resource": r.id, "provider": r.provider}),
            )));
            writes.push(Write::Resource(opsgraph_store::ResourceRecord {
                id: r.id.clone(),
                doc: serde_json::to_value(&r).unwrap_or(Value::Null),
                last_operation: Some(op_id.to_string()),
                updated_at: now(),
            }));
        }
        writes.extend(attached);
        // The approval of a plan patch under review (of a failed operation), or of a paused one.
        if let GateKind::PatchReview { patch } = &reviews {
            let deciding = match &op.state {
                OperationState::PlanPatchReview { patch: under_review } => under_review == patch,
                OperationState::Paused { .. } => self.patch_under_review(&op.id, patch).is_ok(),
                _ => false,
            };
            if deciding {
                let approve = answer.option == "approve patch";
                return self.decide_patch(&op, patch, approve, &answer.actor, writes);
            }
        }
        if answer.option == "cancel operation" {
            let reason = format!("gate {gate_id} answered `cancel operation` by {}", answer.actor);
            let op = self.transition(
                &op,
                Event::Cancel { reason: reason.clone() },
                &answer.actor,
                &reason,
                writes,
                &mut |_| {},
            )?;
            return Ok(op.state);
        }
        let next = match &op.state {
            OperationState::WaitingForApproval { .. } => {
                let event = Event::Approved { gate: gate_id.to_string() };
                let op =
                    self.transition(&op, event, &answer.actor, &format!("{gate_id} approved"), writes, &mut |_| {})?;
                op.state
            }
            OperationState::WaitingForInput { .. } => {
                let event = Event::InputProvided { gate: gate_id.to_string() };
                let op =
                    self.transition(&op, event, &answer.actor, &format!("{gate_id} answered"), writes, &mut |_| {})?;
                if matches!(op.state, OperationState::CapabilityResolution) {
                    let actor = answer.actor.clone();
                    self.after_resolution(&op, &plan, &actor)?.state
                } else {
                    op.state
                }
            }
            OperationState::Paused { reason } if reason.starts_with("waiting for gate") => {
                let op = self.transition(
                    &op,
                    Event::Resume,
                    &answer.actor,
                    &format!("{gate_id} answered"),
                    writes,
                    &mut |_| {},
                )?;
                op.state
            }
            // A gate in the DAG answered while the run goes on: it only unblocks its descendants.
            _ => {
                self.commit(&writes)?;
                op.state
            }
        };
        Ok(next)
    }

    /// Records an operation under an id the caller chose (`new_operation_id`), so that writes
    /// attached to its creation (an audit record, an idempotency record) can name it.
    pub fn create_as(&mut self, id: &str, plan: &Plan, actor: &str, progress: Progress<'_>) -> Result<String, Error> {
        self.create_durable(id, plan, actor, crate::Durable::Now, progress)
    }

    /// [`Runtime::create_as`], made durable when `durable` says (`Durable::ByItsDrive`: the
    /// caller drives it at once with `drive_leased` and reports nothing of it before).
    pub fn create_durable(
        &mut self,
        id: &str,
        plan: &Plan,
        actor: &str,
        durable: crate::Durable,
        progress: Progress<'_>,
    ) -> Result<String, Error> {
        let extra = self.take_attached();
        let new = crate::create::New { id: id.to_string(), parent: None, extra, durable };
        self.create_operation(plan, new, actor, progress)
    }

    pub fn pause(&mut self, op_id: &str, actor: &str, reason: &str) -> Result<OperationState, Error> {
        self.person_event(op_id, Event::Pause { reason: reason.to_string() }, actor, reason)
    }

    pub fn resume(&mut self, op_id: &str, actor: &str) -> Result<OperationState, Error> {
        self.person_event(op_id, Event::Resume, actor, "resumed")
    }

    pub fn cancel(&mut self, op_id: &str, actor: &str, reason: &str) -> Result<OperationState, Error> {
        self.person_event(op_id, Event::Cancel { reason: reason.to_string() }, actor, reason)
    }

    /// A person's lifecycle event on an operation (pause, resume, cancel), committed with what
    /// was attached to the call.
    fn person_event(&mut self, op_id: &str, event: Event, actor: &str, reason: &str) -> Result<OperationState, Error> {
        let attached = self.take_attached();
        let (op, _) = self.load(op_id)?;
        Ok(self.transition(&op, event, actor, reason, attached, &mut |_| {})?.state)
    }

    /// Runs failed jobs again (all failed ones when `jobs` is empty).
    pub fn retry(&mut self, op_id: &str, jobs: &[String], actor: &str) -> Result<OperationState, Error> {
        let attached = self.take_attached();
        let (op, plan) = self.load(op_id)?;
        let records = self.store.jobs(op_id)?;
        let chosen: Vec<JobRecord> = records
            .into_iter()
            .filter(|j| matches!(j.state, JobState::Failed | JobState::Cancelled))
            .filter(|j| jobs.is_empty() || jobs.contains(&j.id))
            .collect();
        if chosen.is_empty() {
            return Err(Error::Unsupported("no failed job to retry".into()));
        }
        let ids: Vec<String> = chosen.iter().map(|j| j.id.clone()).collect();
        // A job whose outcome is unknown is checked by its evidence first, as recovery does: the
        // lifecycle is asked first, so a refused retry checks nothing.
        opsgraph_core::plan::lifecycle::apply(&op.state, &Event::Retry { jobs: ids.clone() })?;
        let mut writes = self.retry_checks(&op, &plan, &chosen, actor)?;
        writes.extend(attached);
        let reason = format!("retry {}", ids.join(", "));
        Ok(self.transition(&op, Event::Retry { jobs: ids }, actor, &reason, writes, &mut |_| {})?.state)
    }
}
