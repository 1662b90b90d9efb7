//! The shape of each document kind of documents.md.

use serde_json::{json, Map, Value};

use crate::pack::shape::{field, obj, required, Alt, Obj, Shape, Wrap};

mod repair;
pub(crate) use repair::CHANGE;
use repair::{FAILURE, GATE, INTERVENTION, PLAN_PATCH, REMEDY};

static STR: Shape = Shape::Str;
static ID: Shape = Shape::Id;
static CAP: Shape = Shape::CapKey;
static RID: Shape = Shape::ResourceId;
static DURATION: Shape = Shape::Duration;
static BOOL: Shape = Shape::Bool;
static NUMBER: Shape = Shape::Number;
static SCALAR: Shape = Shape::Scalar;
static ANY: Shape = Shape::Any;
static PORT: Shape = Shape::Int { min: 1, max: 65535 };
static COUNT: Shape = Shape::Int { min: 1, max: i64::MAX };
static EXIT_CODE: Shape = Shape::Int { min: 0, max: 255 };
static STATUS_CODE: Shape = Shape::Int { min: 100, max: 599 };
static IDS: Shape = Shape::List(&ID);
static STRS: Shape = Shape::List(&STR);
static RIDS: Shape = Shape::List(&RID);
static ATTRS: Shape = Shape::Map { key: &STR, value: &ANY };
static STR_MAP: Shape = Shape::Map { key: &STR, value: &STR };
static CONSTRAINT_VALUE: Shape = Shape::Alt(&Alt {
    doc: "a value, `required`, `same-as-workload`, or a list of allowed values",
    scalar: Some((&SCALAR, Wrap::Keep)),
    seq: Some((&Shape::List(&SCALAR), Wrap::Keep)),
    map: None,
});
static CONSTRAINTS: Shape = Shape::Map { key: &ID, value: &CONSTRAINT_VALUE };

pub(crate) static HEALTH: Shape = Shape::Enum(&["healthy", "degraded", "error", "unknown"]);
pub(crate) static RESOURCE_STATUS: Shape = Shape::Enum(&["provisioning", "running", "degraded", "error"]);
pub(crate) static SENSITIVITY: Shape = Shape::Enum(&["public", "internal", "confidential", "secret"]);
pub(crate) static GATE_TYPE: Shape = Shape::Enum(&[
    "approval",
    "provider_selection",
    "destructive_action",
    "policy_exception",
    "missing_input",
    "cost_confirmation",
]);
static RISK_LEVEL: Shape = Shape::Enum(&["low", "medium", "high", "critical"]);
static JOB_TYPE: Shape = Shape::Enum(&["automation", "verification", "diagnostic", "rollback", "noop"]);
static EXECUTOR: Shape = Shape::Enum(&["local", "ssh", "http"]);
static EVIDENCE_SOURCE: Shape = Shape::Enum(&["command", "systemd", "http", "tcp", "file"]);
static PARAM_TYPE: Shape = Shape::Enum(&["string", "integer", "number", "boolean", "list", "map"]);
static STORAGE: Shape = Shape::Enum(&["blob", "secret_ref"]);
static BIND_MODE: Shape = Shape::Enum(&["external"]);
static INTERVENTION_TYPE: Shape = Shape::Enum(&["manually_fixed"]);
static ROLLBACK_SUPPORT: Shape = Shape::Alt(&Alt {
    doc: "`full`, `partial`, `none`, or true / false",
    scalar: Some((&Shape::Enum(&["full", "partial", "none", "true", "false"]), Wrap::Keep)),
    seq: None,
    map: None,
});

static COMMAND: Shape = Shape::Alt(&Alt {
    doc: "a command line, or an argv list (run without a shell)",
    scalar: Some((&STR, Wrap::Tag("line"))),
    seq: Some((&Shape::List(&STR), Wrap::Tag("argv"))),
    map: None,
});

// --- requirements and provisions -----------------------------------------------------------

pub(crate) static REQUIREMENT_OBJ: Obj = obj(
    "requirement",
    "A capability requirement: key, constraints, scope (seed §5).",
    &[
        required("capability", &CAP, "the capability key (`key` is accepted too)").aliases(&["key"]),
        field("constraints", &CONSTRAINTS, "attribute predicates the provider must satisfy"),
        field("scope", &ID, "the template scope whose resources must provide it (`target_nodes`)"),
    ],
);
pub(crate) static REQUIREMENT: Shape = Shape::Alt(&Alt {
    doc: "a capability key, or a mapping with `capability`, `constraints`, `scope`",
    scalar: Some((&CAP, Wrap::Field("capability"))),
    seq: None,
    map: Some((&Shape::Obj(&REQUIREMENT_OBJ), Wrap::Keep)),
});
static REQUIREMENTS: Shape = Shape::List(&REQUIREMENT);

static PROVISION_OBJ: Obj = obj(
    "provision",
    "A capability provided, in a scope, with the attributes it will have.",
    &[
        required("capability", &CAP, "the capability key (`key` is accepted too)").aliases(&["key"]),
        field("scope", &ID, "the template scope it is provided on"),
        field("provider", &ID, "a provider id this pack can create"),
        field("attributes", &ATTRS, "attributes the provided capability has"),
        field(
            "credentials",
            &ID,
            "the artifact this operation produces that holds the credentials to use it (a kubeconfig, a key file)",
        ),
    ],
);
static PROVISION: Shape = Shape::Alt(&Alt {
    doc: "a capability key, or a mapping with `capability`, `scope`, `attributes`",
    scalar: Some((&CAP, Wrap::Field("capability"))),
    seq: None,
    map: Some((&Shape::Obj(&PROVISION_OBJ), Wrap::Keep)),
});
static PROVISIONS: Shape = Shape::List(&PROVISION);

// --- resource ------------------------------------------------------------------------------

static PROVIDED_OBJ: Obj = obj(
    "provided capability",
    "A capability a resource provides, with the attributes constraints match.",
    &[
        required("capability", &CAP, "the capability key").aliases(&["key"]),
        field("attributes", &ATTRS, "attributes constraints are matched against"),
    ],
);
static PROVIDED: Shape = Shape::Alt(&Alt {
    doc: "a capability key, or a mapping with `capability` and `attributes`",
    scalar: Some((&CAP, Wrap::Field("capability"))),
    seq: None,
    map: Some((&Shape::Obj(&PROVIDED_OBJ), Wrap::Keep)),
});

static SSH_ACCESS: Obj = obj(
    "ssh access",
    "How the SSH executor reaches the resource.",
    &[
        required("host", &STR, "host name or address"),
        field("port", &PORT, "port, 22 by default"),
        field("user", &STR, "login user"),
        field("key", &STR, "path of the private key file"),
        field("known_hosts", &STR, "path of the known_hosts file to check the host key against"),
    ],
);
static ACCESS: Obj = obj(
    "access",
    "How executors reach the resource.",
    &[
        field("ssh", &Shape::Obj(&SSH_ACCESS), "reach it over SSH"),
        field("local", &BOOL, "the resource is this machine"),
        field("agent", &STR, "jobs go to the remote agent with this name"),
    ],
);

pub(crate) static RESOURCE: Obj = obj(
    "resource",
    "A managed object: a host, a cluster, a bucket (seed §2, §4).",
    &[
        field("id", &RID, "`<type>/<name>`; derived from type and name when absent"),
        required("type", &ID, "the resource type (`cluster`, `compute_node`)"),
        required("name", &ID, "the resource name, unique within its type"),
        field("environment", &ID, "the environment it belongs to (`dev`, `prod`)"),
        field("provider", &ID, "the provider id policies name (`shared_minio`)"),
        field("labels", &STR_MAP, "free labels"),
        field("organization", &ID, "the organization that owns it; policy rules see it as `candidate.organization`"),
        field("criticality", &ID, "how critical it is (`low` … `critical`); `candidate.criticality`"),
        field("compliance", &IDS, "the compliance regimes it serves (`pci`); `candidate.compliance`"),
        field("attributes", &ATTRS, "attributes constraints are matched against"),
        field("desired_state", &STR, "what it should be, in words"),
        field("observed_state", &STR, "what it was last seen to be"),
        field("health", &HEALTH, "healthy | degraded | error | unknown"),
        field("status", &RESOURCE_STATUS, "provisioning | running | degraded | error"),
        field("provides", &Shape::List(&PROVIDED), "the capabilities it provides"),
        field("access", &Shape::Obj(&ACCESS), "how executors reach it"),
        field(
            "credentials",
            &STR_MAP,
            "capability -> an absolute file path, or `artifact:<operation>/<artifact>`: handed to jobs bound to it",
        ),
    ],
)
.normalized(|mut m| {
    if !m.contains_key("id") {
        if let (Some(Value::String(t)), Some(Value::String(n))) = (m.get("type"), m.get("name")) {
            let id = format!("{t}/{n}");
            m.insert("id".into(), json!(id));
        }
    }
    Value::Object(m)
});

// --- provider and policy -------------------------------------------------------------------

static CREATE_ACTION: Obj = obj(
    "create action",
    "The pack action that creates a resource of this provider (a sub-operation).",
    &[
        required("pack", &ID, "the pack id"),
        required("action", &ID, "the pack action"),
        field("parameters", &ATTRS, "parameters passed to the action"),
    ],
);

pub(crate) static PROVIDER: Obj = obj(
    "provider",
    "What `allowed_providers` and `default_provider` name.",
    &[
        required("id", &ID, "the provider id"),
        required("capability", &CAP, "the capability it provides"),
        field("title", &STR, "how options name it (`create dedicated MinIO`)"),
        field("description", &STR, "free text"),
        field("attributes", &ATTRS, "attributes every resource of this provider has"),
        field("create", &Shape::Obj(&CREATE_ACTION), "the pack action that creates one"),
        field("bind", &BIND_MODE, "`external`: a person may bind a resource outside the inventory at a gate"),
        field("cost", &NUMBER, "estimated monthly cost of creating one"),
    ],
);

static ENV_POLICY: Obj = obj(
    "environment policy",
    "The provider policy of one capability in one environment (seed §6).",
    &[
        field("allowed_providers", &IDS, "providers that may serve it; absent: any"),
        field("default_provider", &ID, "the provider chosen when several match"),
        field("require_encryption", &BOOL, "candidates must have `encryption: true`"),
        field("require_approval", &BOOL, "binding or creating needs an approval gate"),
        field("approval_roles", &IDS, "the roles that answer the gate"),
        field("soft", &Shape::Obj(&SOFT_POLICY), "rules broken only by exception, at a `policy_exception` gate"),
        field("exception_roles", &IDS, "the roles that grant an exception (default `platform_admin`)"),
        field("rules", &POLICY_RULES, "rules with CEL expressions over the intent, the roles and each candidate"),
    ],
);
static POLICY_RULE: Obj = obj(
    "policy rule",
    "A capability policy rule: while `when` holds, candidates must satisfy `require`, or the plan needs an approval.",
    &[
        required("name", &ID, "the rule's name, said with every rejection it causes"),
        field("when", &STR, "CEL over `intent` and `roles`; absent: always"),
        field(
            "require",
            &STR,
            "CEL over `intent`, `roles` and `candidate`: a candidate for which it is false is rejected",
        ),
        field("require_approval", &BOOL, "binding or creating needs an approval gate while `when` holds"),
        field("approval_roles", &IDS, "the roles that answer that gate"),
        field("reason", &STR, "why the rule exists, said with its rejections"),
    ],
);
static POLICY_RULES: Shape = Shape::List(&Shape::Obj(&POLICY_RULE));
static OPERATIONS_RULE: Obj = obj(
    "operations rule",
    "An operations policy rule: while `when` holds, the plan is refused, needs an approval, or confirms its cost above another threshold.",
    &[
        required("name", &ID, "the rule's name, said where it acts"),
        field("when", &STR, "CEL over `intent`, `roles` and `cost` (the plan's estimate); absent: always"),
        field("deny", &STR, "the plan is refused, with this reason (P013)"),
        field("require_approval", &BOOL, "the plan needs an approval gate"),
        field("approval_roles", &IDS, "the roles that answer it (default `sre`, `platform_admin`)"),
        field("confirm_cost_above", &NUMBER, "replaces the environment's threshold (the first rule that holds)"),
    ],
);
static SOFT_POLICY: Obj = obj(
    "soft policy",
    "Preferred rules: a candidate that breaks them is used only if nothing else fits, after an exception.",
    &[
        field("allowed_providers", &IDS, "the preferred providers"),
        field("require_encryption", &BOOL, "prefer candidates with `encryption: true`"),
        field("reason", &STR, "why the rule exists, shown at the gate"),
    ],
);
static ENV_OPERATIONS: Obj = obj(
    "environment operations policy",
    "Rules about whole operations in one environment (`default`: any environment without its own).",
    &[
        field("confirm_cost_above", &NUMBER, "a plan estimated above this needs a `cost_confirmation` gate"),
        field("cost_roles", &IDS, "the roles that confirm the cost (default `sre`, `platform_admin`)"),
        field("cost_unit", &STR, "how cost figures are labelled (`USD/month`)"),
        field("repair", &REPAIR_MODE, "a resource that drifts to degraded: off | propose | apply_safe"),
        field(
            "rules",
            &Shape::List(&Shape::Obj(&OPERATIONS_RULE)),
            "rules with CEL expressions over the intent, the roles and the cost",
        ),
        field("rollouts", &ROLLOUTS, "job id -> its rollout in this environment (wins over the pack and the intent)"),
    ],
);
static REPAIR_MODE: Shape = Shape::Enum(&["off", "propose", "apply_safe"]);
pub(crate) static OPERATIONS_POLICY: Shape = Shape::Map { key: &ID, value: &Shape::Obj(&ENV_OPERATIONS) };
static ENV_POLICIES: Shape = Shape::Map { key: &ID, value: &Shape::Obj(&ENV_POLICY) };
pub(crate) static CAPABILITY_POLICY: Shape = Shape::Map { key: &CAP, value: &ENV_POLICIES };

// --- intent --------------------------------------------------------------------------------

pub(crate) static INTENT: Obj = obj(
    "intent",
    "What a person wants (seed §2).",
    &[
        field("id", &ID, "an id for the intent"),
        required("target_resource_type", &ID, "the type of resource to create or change"),
        required("action", &ID, "the pack action (`install`, `create_cluster`)"),
        field(
            "pack",
            &Shape::PackRef,
            "the pack to use, `id` or `id@version`; by default the one for the target type, highest version",
        ),
        field("name", &ID, "the resource the operation creates or changes"),
        field("environment", &ID, "the environment; selects the policy"),
        field("organization", &ID, "the requesting organization; policy rules see `intent.organization`"),
        field("criticality", &ID, "how critical the workload is (`low` … `critical`); `intent.criticality`"),
        field("compliance", &IDS, "compliance regimes the workload falls under (`pci`); `intent.compliance`"),
        field("desired_result", &STR, "the result, in words"),
        field("parameters", &ATTRS, "values for the plan template's parameters"),
        field("constraints", &ATTRS, "the workload's attributes (`region`), for `same-as-workload`"),
        field("targets", &Shape::Map { key: &ID, value: &RIDS }, "scope name -> resource ids"),
        field("requires", &REQUIREMENTS, "requirements beyond the pack's own"),
        field("rollouts", &ROLLOUTS, "job id -> its rollout for this operation (wins over the pack's)"),
    ],
);

// --- scenario pack -------------------------------------------------------------------------

static TEMPLATE_REF: Obj = obj(
    "plan template reference",
    "A plan template of the pack.",
    &[
        required("id", &ID, "the plan_template id"),
        field("entrypoint", &ID, "the job the plan starts from"),
        field("action", &ID, "the action it implements"),
    ],
);
static EDITABLE: Obj = obj(
    "editable",
    "What users may change.",
    &[field("advanced_mode", &BOOL, "jobs and contracts are editable in advanced mode")],
);
static RISK: Obj = obj(
    "risk",
    "The pack's risk.",
    &[
        field("default_level", &RISK_LEVEL, "low | medium | high | critical"),
        field("approval_from", &RISK_LEVEL, "from this level up, plans get an approval gate"),
    ],
);

pub(crate) static SCENARIO_PACK: Obj = obj(
    "scenario_pack",
    "The manifest of a pack directory (seed §15).",
    &[
        required("id", &ID, "the pack id"),
        required("version", &STR, "the pack version (`1.0.0`)"),
        field("title", &STR, "the name used in sentences (`Tempo`)"),
        field("description", &STR, "free text"),
        field("resource_types", &IDS, "resource types the pack manages"),
        field("actions", &IDS, "the actions it offers"),
        field("requires", &REQUIREMENTS, "capabilities it needs"),
        field("provides", &PROVISIONS, "capabilities it provides"),
        field("plan_templates", &Shape::List(&Shape::Obj(&TEMPLATE_REF)), "its plan templates"),
        field("editable", &Shape::Obj(&EDITABLE), "what users may change"),
        field("risk", &Shape::Obj(&RISK), "its risk"),
        field(
            "libraries",
            &STRS,
            "library scripts (`scripts/lib/NAME.sh`) staged beside every job's script; scripts source them from `$OPSGRAPH_LIB`",
        ),
        field(
            "resources",
            &Shape::List(&Shape::Obj(&RESOURCE_SPEC)),
            "how its resource types are verified after day 1",
        ),
    ],
);
static RESOURCE_SPEC: Obj = obj(
    "resource verification",
    "How a managed resource type is observed and verified after its first operation.",
    &[
        required("type", &ID, "one of the pack's resource_types"),
        required(
            "on",
            &Shape::OneOrList(&ID),
            "the job (or jobs, one per template) whose instances give the checks their hosts and environment",
        ),
        required("interval", &DURATION, "between two verifications by `opsgraph serve`"),
        field("verify", &IDS, "evidence checks that must pass for the resource to be running"),
        field("observe", &IDS, "evidence checks with `capture`: their values are the observed state"),
    ],
);

// --- plan template -------------------------------------------------------------------------

static PARAM_SPEC: Obj = obj(
    "parameter",
    "A typed parameter of a plan template.",
    &[
        required("type", &PARAM_TYPE, "string | integer | number | boolean | list | map"),
        field("default", &ANY, "the value when the intent gives none"),
        field("required", &BOOL, "the intent must give it (else a missing_input gate)"),
        field("description", &STR, "free text"),
        field("enum", &Shape::List(&SCALAR), "the allowed values"),
        field("secret", &BOOL, "encrypted at rest, masked in output"),
        field("once", &BOOL, "given per action (force, purge): a day-2 plan never inherits it from the record"),
        field(
            "artifact",
            &ID,
            "the value names this artifact of an earlier operation, `<operation>/<artifact>`; jobs get its file",
        ),
    ],
);
static SCOPE_SPEC: Obj = obj(
    "scope",
    "A set of resources jobs fan out over.",
    &[
        required("resource_type", &ID, "the type of its resources"),
        required("from", &Shape::OneOrList(&STR), "`targets.<name>`: the intent's targets; a list joins several"),
        field("min", &Shape::Int { min: 0, max: i64::MAX }, "at least this many resources"),
        field("max", &Shape::Int { min: 0, max: i64::MAX }, "at most this many resources"),
    ],
);
static STAGE_SPEC: Obj = obj(
    "stage",
    "A group of jobs, for people (seed §11).",
    &[required("id", &ID, "the stage id"), required("name", &STR, "its name"), required("jobs", &IDS, "its jobs")],
);
static JOB_ENTRY: Shape = Shape::Alt(&Alt {
    doc: "a job id from the pack's library, or an inline job",
    scalar: Some((&ID, Wrap::Tag("ref"))),
    seq: None,
    map: Some((&Shape::Obj(&JOB), Wrap::Tag("inline"))),
});

pub(crate) static PLAN_TEMPLATE: Obj = obj(
    "plan_template",
    "How a pack action becomes a plan.",
    &[
        required("id", &ID, "the template id (`kubernetes.create`)"),
        required("action", &ID, "the action it implements"),
        field("title", &STR, "free text"),
        field("description", &STR, "free text"),
        field("parameters", &Shape::Map { key: &ID, value: &Shape::Obj(&PARAM_SPEC) }, "typed parameters"),
        field("scopes", &Shape::Map { key: &ID, value: &Shape::Obj(&SCOPE_SPEC) }, "resource sets jobs fan out over"),
        field("stages", &Shape::List(&Shape::Obj(&STAGE_SPEC)), "stages, for people"),
        field("jobs", &Shape::List(&JOB_ENTRY), "the jobs of the plan"),
        field("gates", &Shape::List(&Shape::Obj(&GATE)), "explicit gates"),
        field("requires", &REQUIREMENTS, "external requirements; the pack's when absent"),
        field("risk", &RISK_LEVEL, "overrides the pack's risk level"),
        field("provides", &PROVISIONS, "what the resulting resource provides"),
        field("removes_resource", &BOOL, "the completed operation removes its resource (uninstall)"),
        field("removes_targets", &BOOL, "the resources it targets leave the resource's record (remove_node)"),
        field(
            "refuse",
            &crate::pack::refusals::REFUSALS,
            "when a plan of it is refused before anything runs (docs/day2.md)",
        ),
    ],
);

// --- job -----------------------------------------------------------------------------------

static JOB_SCOPE: Obj = obj(
    "job scope",
    "Where a job runs.",
    &[
        field("resources", &IDS, "resource types it runs on"),
        field("target", &ID, "the template scope it fans out over"),
    ],
);
static REQUIRES: Obj = obj(
    "requires",
    "What a job needs.",
    &[field("capabilities", &REQUIREMENTS, "capabilities"), field("artifacts", &IDS, "artifacts other jobs produce")],
);
static INPUTS: Obj = obj(
    "inputs",
    "A job's input contract.",
    &[
        field("parameters", &ATTRS, "parameters and their defaults"),
        field("requires", &Shape::Obj(&REQUIRES), "what it needs"),
    ],
);
static PROVIDES: Obj = obj("provides", "What a job provides.", &[field("capabilities", &PROVISIONS, "capabilities")]);
static OUTPUTS: Obj = obj(
    "outputs",
    "A job's output contract.",
    &[
        field("provides", &Shape::Obj(&PROVIDES), "capabilities it provides"),
        field("artifacts", &IDS, "artifacts it produces"),
        field("evidence", &IDS, "evidence checks that prove its outputs"),
    ],
);
static RETRY_POLICY: Obj = obj(
    "retry_policy",
    "How often a job is tried.",
    &[
        field("max_attempts", &COUNT, "attempts in all, 1 by default"),
        field("backoff", &DURATION, "delay before the second attempt, doubled after"),
        field("max_backoff", &DURATION, "the longest delay"),
    ],
);
static IDEMPOTENCY: Obj = obj(
    "idempotency",
    "The key under which a successful run is remembered.",
    &[required("key", &STR, "a template: `install-containerd:{node_id}:{version}`")],
);
static ROLLBACK: Obj = obj(
    "rollback",
    "How a job is undone.",
    &[required("supported", &ROLLBACK_SUPPORT, "full | partial | none"), field("job", &ID, "the job that undoes it")],
)
.normalized(|mut m| {
    if let Some(Value::String(s)) = m.get("supported") {
        let s = match s.as_str() {
            "true" => "full",
            "false" => "none",
            other => other,
        }
        .to_string();
        m.insert("supported".into(), json!(s));
    }
    Value::Object(m)
});
static MANUAL: Obj =
    obj("manual_intervention", "Whether a person may fix it by hand.", &[required("allowed", &BOOL, "true or false")]);
static CONTROLS: Obj = obj(
    "controls",
    "Retries, idempotency, rollback, manual intervention.",
    &[
        field("retry_policy", &Shape::Obj(&RETRY_POLICY), "attempts and backoff"),
        field("idempotency", &Shape::Obj(&IDEMPOTENCY), "the idempotency key"),
        field("rollback", &Shape::Obj(&ROLLBACK), "how it is undone"),
        field("manual_intervention", &Shape::Obj(&MANUAL), "whether a manual fix is allowed"),
        field("destructive", &BOOL, "a destructive_action gate goes before it"),
        field("rollout", &ROLLOUT, "parallel (default) | one_at_a_time | a fleet rollout: waves, budgets, canary"),
    ],
);
static ROLLOUTS: Shape = Shape::Map { key: &ID, value: &ROLLOUT };
static WAVE: Shape = Shape::Amount { min: 1 };
static BUDGET: Shape = Shape::Amount { min: 0 };
static ROLLOUT: Shape = Shape::Alt(&Alt {
    doc: "`parallel`, `one_at_a_time`, or a mapping (rollout) of waves, budgets and a canary gate",
    scalar: Some((&Shape::Enum(&["parallel", "one_at_a_time"]), Wrap::Field("order"))),
    seq: None,
    map: Some((&Shape::Obj(&ROLLOUT_POLICY), Wrap::Keep)),
});
static ROLLOUT_POLICY: Obj = obj(
    "rollout",
    "A fleet rollout of a fanned-out job: waves in the scope's order, a failure budget, a canary.",
    &[
        field("waves", &Shape::List(&WAVE), "wave sizes (`[1, 5%, 25%, 100%]`); the last repeats"),
        field("max_in_flight", &WAVE, "at most this many instances at once"),
        field("max_failures", &BUDGET, "failures tolerated overall (rounded down); one more pauses"),
        field("max_failures_per_wave", &BUDGET, "failures tolerated within one wave (rounded down)"),
        field("pause_between", &DURATION, "time between the end of a wave and the next"),
        field("canary_gate", &BOOL, "a gate after the first wave, answerable once it finished"),
        field(
            "verify_between_waves",
            &Shape::Enum(&["hosts_done", "resource", "none"]),
            "where the checks between waves run: hosts_done (default) | resource | none",
        ),
    ],
);
static RUN: Obj = obj(
    "run",
    "How the job runs.",
    &[
        field("executor", &EXECUTOR, "local | ssh | http"),
        field("command", &COMMAND, "a command: argv list, or a line"),
        field("script", &STR, "a script of the pack, run with `sh -eu`"),
        field("timeout", &DURATION, "TERM after this long, then KILL"),
        field("env", &STR_MAP, "extra environment"),
        field("workdir", &STR, "working directory"),
        field("method", &Shape::Enum(&["GET", "POST", "PUT", "PATCH", "DELETE"]), "HTTP method"),
        field("url", &STR, "HTTP URL"),
    ],
);

pub(crate) static JOB: Obj = obj(
    "job",
    "A job and its contract (seed §8).",
    &[
        required("id", &ID, "the job id"),
        field("title", &STR, "its title"),
        field("description", &STR, "free text"),
        field("type", &JOB_TYPE, "automation | verification | diagnostic | rollback | noop"),
        field("scope", &Shape::Obj(&JOB_SCOPE), "where it runs"),
        field("inputs", &Shape::Obj(&INPUTS), "its input contract"),
        field("outputs", &Shape::Obj(&OUTPUTS), "its output contract"),
        field("controls", &Shape::Obj(&CONTROLS), "retries, idempotency, rollback"),
        field("run", &Shape::Obj(&RUN), "how it runs"),
        field("after", &IDS, "ordering no contract expresses"),
        field("cost", &NUMBER, "estimated cost"),
    ],
);

// --- evidence, artifact --------------------------------------------------------------------

pub(crate) static EVIDENCE_OBJ: Obj = obj(
    "evidence",
    "A check that proves an output exists (seed §10).",
    &[
        required("id", &ID, "the check id"),
        required("source", &EVIDENCE_SOURCE, "command | systemd | http | tcp | file"),
        field("description", &STR, "free text"),
        field("command", &COMMAND, "command and systemd sources: what to run"),
        field("url", &STR, "http source: the URL"),
        field("host", &STR, "tcp source: the host"),
        field("port", &PORT, "tcp source: the port"),
        field("path", &STR, "file source: the path"),
        field("expected", &STR, "trimmed output equals this"),
        field("expected_exit_code", &EXIT_CODE, "the exit code"),
        field("expected_status", &STATUS_CODE, "http source: the status"),
        field("contains", &STR, "output contains this"),
        field("matches", &STR, "output matches this regular expression"),
        field("retries", &Shape::Int { min: 0, max: 1000 }, "tries again this many times"),
        field("interval", &DURATION, "between tries"),
        field("timeout", &DURATION, "for one try"),
        field("capture", &STR_MAP, "observed values: name -> a regular expression whose first group is the value"),
    ],
);
pub(crate) static EVIDENCE: Shape = Shape::OneOrList(&Shape::Obj(&EVIDENCE_OBJ));

pub(crate) static ARTIFACT: Obj = obj(
    "artifact",
    "A concrete output other jobs can use (seed §9).",
    &[
        field("id", &ID, "the artifact id; `type` when absent"),
        required("type", &ID, "its type (`kubeconfig.admin`)"),
        required("sensitivity", &SENSITIVITY, "public | internal | confidential | secret"),
        field("storage", &STORAGE, "blob | secret_ref"),
        field("visible_to_roles", &IDS, "roles that may read it"),
        field("description", &STR, "free text"),
        field("from_file", &STR, "where the job leaves it"),
    ],
)
.normalized(|mut m| {
    if !m.contains_key("id") {
        if let Some(t) = m.get("type").cloned() {
            m.insert("id".into(), t);
        }
    }
    Value::Object(m)
});

/// Every kind: its root key and shape.
pub(crate) static KINDS: &[(&str, &Shape)] = &[
    ("resource", &Shape::Obj(&RESOURCE)),
    ("provider", &Shape::Obj(&PROVIDER)),
    ("capability_policy", &CAPABILITY_POLICY),
    ("operations_policy", &OPERATIONS_POLICY),
    ("intent", &Shape::Obj(&INTENT)),
    ("scenario_pack", &Shape::Obj(&SCENARIO_PACK)),
    ("plan_template", &Shape::Obj(&PLAN_TEMPLATE)),
    ("job", &Shape::Obj(&JOB)),
    ("evidence", &EVIDENCE),
    ("artifact", &Shape::Obj(&ARTIFACT)),
    ("gate", &Shape::Obj(&GATE)),
    ("intervention", &Shape::Obj(&INTERVENTION)),
    ("plan_patch", &Shape::Obj(&PLAN_PATCH)),
    ("remedy", &Shape::Obj(&REMEDY)),
    ("failure", &Shape::Obj(&FAILURE)),
    ("requires", &Shape::OneOrList(&REQUIREMENT)),
];
