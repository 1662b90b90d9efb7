//! The shapes of the repair loop's kinds: gates, interventions, plan patches and their changes,
//! remedies and the failures they are matched against.

use super::*;

pub(crate) static GATE: Obj = obj(
    "gate",
    "A DAG node that waits for a person (seed §12).",
    &[
        required("id", &ID, "the gate id"),
        field(
            "type",
            &GATE_TYPE,
            "approval | provider_selection | destructive_action | policy_exception | missing_input | cost_confirmation",
        ),
        required("reason", &STR, "why it exists"),
        field("options", &STRS, "the answers a person may give"),
        field("required_roles", &IDS, "who may answer"),
        field("before", &IDS, "the jobs that wait for it"),
    ],
);

pub(crate) static INTERVENTION: Obj = obj(
    "intervention",
    "A manual fix, verified before the run goes on (seed §13).",
    &[
        required("type", &INTERVENTION_TYPE, "manually_fixed"),
        field("operation", &STR, "the operation it belongs to"),
        field("target_stage", &ID, "the stage that was fixed"),
        field("target_job", &STR, "the job that was fixed"),
        field("actor", &STR, "who fixed it"),
        required("note", &STR, "what was done"),
        field("requires_verification", &IDS, "evidence checks to run before continuing"),
    ],
);

static INSERTED_JOB: Shape = Shape::Alt(&Alt {
    doc: "a job id, or a mapping with `id`",
    scalar: Some((&ID, Wrap::Keep)),
    seq: None,
    map: Some((&Shape::Obj(&INSERTED_JOB_OBJ), Wrap::Keep)),
});
static INSERTED_JOB_OBJ: Obj =
    obj("inserted job", "A job from the pack's library or its remedies.", &[required("id", &ID, "the job id")])
        .normalized(|m| m.get("id").cloned().unwrap_or(Value::Null));
static RETRY_OBJ: Obj = obj(
    "retry",
    "Run a job again.",
    &[required("job", &STR, "the job"), field("with_descendants", &BOOL, "its descendants too")],
)
.normalized(|mut m| {
    m.entry("with_descendants").or_insert(json!(false));
    Value::Object(m)
});
static RETRY: Shape = Shape::Alt(&Alt {
    doc: "a job id, or a mapping with `job` and `with_descendants`",
    scalar: Some((&STR, Wrap::Field("job"))),
    seq: None,
    map: Some((&Shape::Obj(&RETRY_OBJ), Wrap::Keep)),
});
static SKIP_OBJ: Obj =
    obj("skip", "Skip a job, with a reason.", &[required("job", &STR, "the job"), required("reason", &STR, "why")]);
static SET_PARAMETERS_OBJ: Obj = obj(
    "set_parameters",
    "Change parameters of the plan or of one job.",
    &[field("job", &STR, "the job; the whole plan when absent"), required("parameters", &ATTRS, "the new values")],
)
.normalized(|mut m| {
    m.entry("job").or_insert(Value::Null);
    Value::Object(m)
});

pub(crate) static CHANGE: Obj = obj(
    "change",
    "One change of a plan patch: an allow-list.",
    &[
        field("insert_after", &STR, "insert `jobs` after this job"),
        field("insert_before", &STR, "insert `jobs` before this job"),
        field("jobs", &Shape::List(&INSERTED_JOB), "the jobs to insert"),
        field("retry", &RETRY, "run a job again"),
        field("skip", &Shape::Obj(&SKIP_OBJ), "skip a job"),
        field("set_parameters", &Shape::Obj(&SET_PARAMETERS_OBJ), "change parameters"),
        field("add_gate", &Shape::Obj(&GATE), "add a gate"),
    ],
)
.one_of(&["insert_after", "insert_before", "retry", "skip", "set_parameters", "add_gate"])
.normalized(normalize_change);

fn normalize_change(mut m: Map<String, Value>) -> Value {
    let jobs = m.remove("jobs").unwrap_or_else(|| json!([]));
    for key in ["insert_after", "insert_before"] {
        if let Some(anchor) = m.remove(key) {
            return json!({ key: {"anchor": anchor, "jobs": jobs} });
        }
    }
    // Exactly one key is left (checked by `one_of`).
    Value::Object(m)
}

static APPROVAL: Obj = obj(
    "approval",
    "Who approves a patch.",
    &[field("required", &BOOL, "approval is required"), field("roles", &IDS, "roles that approve")],
);

pub(crate) static PLAN_PATCH: Obj = obj(
    "plan_patch",
    "A structured change to a plan (seed §14).",
    &[
        field("id", &ID, "the patch id"),
        field("operation", &STR, "the operation it applies to"),
        field("author", &STR, "who wrote it (`ai-agent:sre`, `user:alice`)"),
        field("reason", &STR, "why"),
        required("changes", &Shape::List(&Shape::Obj(&CHANGE)), "the changes"),
        field("approval", &Shape::Obj(&APPROVAL), "who approves it"),
    ],
);

static SIGNATURE: Obj = obj(
    "signature",
    "How a known failure is recognised.",
    &[
        field("output_matches", &STRS, "regular expressions over the job's output"),
        field("exit_codes", &Shape::List(&EXIT_CODE), "exit codes"),
        field("failed_evidence", &IDS, "evidence checks that failed"),
    ],
);

pub(crate) static REMEDY: Obj = obj(
    "remedy",
    "A known failure signature with its diagnosis and patch.",
    &[
        required("id", &ID, "the remedy id"),
        required(
            "applies_to",
            &APPLIES_TO,
            "`everywhere`, or a list of job ids and `{job_type: T}`, `{provides: CAP}`, `{pack: P}` selectors",
        ),
        required("signature", &Shape::Obj(&SIGNATURE), "how the failure is recognised"),
        field("cause", &STR, "the cause in one sentence; `{name}` is a named group of the signature"),
        required("diagnosis", &STR, "what went wrong and what a person does, in words"),
        field("plan_patch", &Shape::Obj(&PLAN_PATCH), "the fix (`$job` names the failed job); none: diagnosis only"),
        field(
            "examples",
            &Shape::Obj(&REMEDY_EXAMPLES),
            "outputs the signature must and must not match, checked by `opsgraph pack test`",
        ),
    ],
);

static APPLIES_TO: Shape = Shape::Alt(&Alt {
    doc: "`everywhere`, or a list of selectors",
    scalar: Some((&Shape::Enum(&["everywhere"]), Wrap::Keep)),
    seq: Some((&Shape::List(&JOB_SELECTOR), Wrap::Keep)),
    map: None,
});
static JOB_SELECTOR: Shape = Shape::Alt(&Alt {
    doc: "a job id, or a mapping with one of `job`, `job_type`, `provides`, `pack`",
    scalar: Some((&ID, Wrap::Tag("job"))),
    seq: None,
    map: Some((&Shape::Obj(&JOB_SELECTOR_OBJ), Wrap::Keep)),
});
static JOB_SELECTOR_OBJ: Obj = obj(
    "job selector",
    "Jobs by id, by type, by a capability they provide, or by pack.",
    &[
        field("job", &ID, "a job id"),
        field("job_type", &JOB_TYPE, "automation | verification | diagnostic | rollback | noop"),
        field("provides", &Shape::CapKey, "a capability the job provides"),
        field("pack", &ID, "a pack id"),
    ],
)
.one_of(&["job", "job_type", "provides", "pack"]);

static REMEDY_EXAMPLES: Obj = obj(
    "remedy examples",
    "Failures a remedy must recognise, and near misses it must not (`opsgraph pack test`).",
    &[
        field("matches", &Shape::List(&REMEDY_EXAMPLE), "failures the remedy must be the best match for"),
        field("does_not_match", &Shape::List(&REMEDY_EXAMPLE), "failures its signature must not match"),
    ],
);
static REMEDY_EXAMPLE: Shape = Shape::Alt(&Alt {
    doc: "the job's output, or a mapping with `output`, `exit_code`, `failed_evidence`",
    scalar: Some((&STR, Wrap::Field("output"))),
    seq: None,
    map: Some((&Shape::Obj(&REMEDY_EXAMPLE_OBJ), Wrap::Keep)),
});
static REMEDY_EXAMPLE_OBJ: Obj = obj(
    "remedy example",
    "An example failure: output, exit code, failed evidence checks.",
    &[
        required("output", &STR, "the job's output"),
        field("exit_code", &EXIT_CODE, "its exit code"),
        field("failed_evidence", &IDS, "evidence checks that failed"),
    ],
);

static FAILURE_EVIDENCE: Obj = obj(
    "evidence result",
    "One evidence check's result.",
    &[
        required("check", &ID, "the evidence check id"),
        required("passed", &BOOL, "whether it passed"),
        field("observed", &ANY, "what it observed"),
    ],
);

pub(crate) static FAILURE: Obj = obj(
    "failure",
    "A failed job described outside any operation, for `opsgraph diagnose FILE`.",
    &[
        required("pack", &STR, "the pack: `id` (its highest version) or `id@version`"),
        required("job", &STR, "the job id (or an instance id `job@resource`)"),
        field("exit_code", &EXIT_CODE, "the job's exit code"),
        field("output", &STR, "the job's output (stdout and stderr)"),
        field("evidence", &Shape::List(&Shape::Obj(&FAILURE_EVIDENCE)), "the job's evidence results"),
        field("observed_state", &ANY, "what was observed on the resource, free-form"),
    ],
);
