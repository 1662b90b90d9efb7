//! Fixtures as builders on domain types: `job("a").provides("k").needs("x")`.

use opsgraph_core::model::{
    Attributes, CapabilityPolicy, Controls, EnvironmentPolicy, Health, Intent, Job, JobScope, ProvidedCapability,
    Provider, Provision, Requirement, Resource, ScopeSpec,
};
use opsgraph_core::pack::Pack;
use serde_json::Value;

pub(crate) fn attrs(pairs: &[(&str, Value)]) -> Attributes {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

pub(crate) fn req(capability: &str) -> Requirement {
    Requirement { capability: capability.into(), constraints: Attributes::new(), scope: None }
}

pub(crate) trait RequirementExt {
    fn constraint(self, key: &str, value: Value) -> Self;
    fn scoped(self, scope: &str) -> Self;
}

impl RequirementExt for Requirement {
    fn constraint(mut self, key: &str, value: Value) -> Self {
        self.constraints.insert(key.into(), value);
        self
    }
    fn scoped(mut self, scope: &str) -> Self {
        self.scope = Some(scope.into());
        self
    }
}

pub(crate) struct JobB(pub(crate) Job);

pub(crate) fn job(id: &str) -> JobB {
    JobB(Job {
        id: id.into(),
        title: None,
        description: None,
        type_: Default::default(),
        scope: None,
        inputs: Default::default(),
        outputs: Default::default(),
        controls: Controls::default(),
        run: None,
        after: Vec::new(),
        cost: None,
    })
}

impl JobB {
    pub(crate) fn on(mut self, scope: &str) -> Self {
        self.0.scope = Some(JobScope { resources: Vec::new(), target: Some(scope.into()) });
        self
    }
    pub(crate) fn requires(mut self, r: Requirement) -> Self {
        self.0.inputs.requires.capabilities.push(r);
        self
    }
    pub(crate) fn provides(mut self, capability: &str, scope: Option<&str>) -> Self {
        self.0.outputs.provides.capabilities.push(Provision {
            capability: capability.into(),
            scope: scope.map(Into::into),
            provider: None,
            attributes: Attributes::new(),
            credentials: None,
        });
        self
    }
    pub(crate) fn needs(mut self, artifact: &str) -> Self {
        self.0.inputs.requires.artifacts.push(artifact.into());
        self
    }
    pub(crate) fn produces(mut self, artifact: &str) -> Self {
        self.0.outputs.artifacts.push(artifact.into());
        self
    }
    pub(crate) fn after(mut self, job: &str) -> Self {
        self.0.after.push(job.into());
        self
    }
    pub(crate) fn destructive(mut self) -> Self {
        self.0.controls.destructive = true;
        self
    }
    pub(crate) fn rollout(mut self, r: opsgraph_core::model::Rollout) -> Self {
        self.0.controls.rollout = Box::new(r);
        self
    }
    pub(crate) fn evidence(mut self, check: &str) -> Self {
        self.0.outputs.evidence.push(check.into());
        self
    }
    pub(crate) fn one_at_a_time(mut self) -> Self {
        self.0.controls.rollout.order = opsgraph_core::model::RolloutOrder::OneAtATime;
        self
    }
}

/// A one-template pack: action `run`, every job in one stage, scope `nodes` over `targets.nodes`.
pub(crate) fn pack(id: &str, resource_type: &str, jobs: Vec<JobB>) -> Pack {
    let scopes = [("nodes".to_string(), ScopeSpec::targets("compute_node", "nodes"))].into();
    Pack::one_stage(&format!("fixture/{id}"), id, resource_type, scopes, jobs.into_iter().map(|j| j.0).collect())
}

pub(crate) fn intent(resource_type: &str, environment: &str) -> Intent {
    Intent {
        target_resource_type: resource_type.into(),
        action: "run".into(),
        name: Some("thing".into()),
        environment: Some(environment.into()),
        ..Default::default()
    }
}

pub(crate) struct ResourceB(pub(crate) Resource);

pub(crate) fn resource(type_: &str, name: &str) -> ResourceB {
    ResourceB(Resource {
        id: format!("{type_}/{name}"),
        type_: type_.into(),
        name: name.into(),
        health: Health::Healthy,
        ..Default::default()
    })
}

impl ResourceB {
    pub(crate) fn env(mut self, env: &str) -> Self {
        self.0.environment = Some(env.into());
        self
    }
    pub(crate) fn provider(mut self, p: &str) -> Self {
        self.0.provider = Some(p.into());
        self
    }
    pub(crate) fn provides(mut self, capability: &str, attributes: Attributes) -> Self {
        self.0.provides.push(ProvidedCapability { capability: capability.into(), attributes });
        self
    }
    pub(crate) fn attr(mut self, key: &str, value: Value) -> Self {
        self.0.attributes.insert(key.into(), value);
        self
    }
}

pub(crate) fn policy(capability: &str, rules: &[(&str, EnvironmentPolicy)]) -> CapabilityPolicy {
    CapabilityPolicy {
        rules: [(capability.to_string(), rules.iter().map(|(e, r)| (e.to_string(), r.clone())).collect())].into(),
    }
}

pub(crate) fn allow(providers: &[&str]) -> EnvironmentPolicy {
    EnvironmentPolicy {
        allowed_providers: Some(providers.iter().map(|p| p.to_string()).collect()),
        ..Default::default()
    }
}

pub(crate) fn creatable(id: &str, capability: &str, pack: &str, attributes: Attributes) -> Provider {
    Provider {
        id: id.into(),
        capability: capability.into(),
        title: Some(format!("create {id}")),
        description: None,
        attributes,
        create: Some(opsgraph_core::model::CreateAction {
            pack: pack.into(),
            action: "run".into(),
            parameters: Attributes::new(),
        }),
        bind: None,
        cost: None,
    }
}
