//! One parameter value checked against its declaration: the one check for intents, gate values
//! and patches.

use crate::model::ParamType;
use serde_json::Value;

use crate::plan::types::SECRET;
use crate::plan::Error;

/// One parameter value checked against its declaration: size, type, enum. The one check for an
/// intent's values and for a value given at a missing-input gate. Returns the value as the plan
/// holds it (a number given for a string becomes its text). A secret parameter's value is never
/// quoted in the error.
pub fn check_parameter(name: &str, spec: &crate::model::ParamSpec, v: &Value) -> Result<Value, Error> {
    use crate::plan::limits::MAX_PARAMETER_BYTES;
    let n = serde_json::to_string(v).map_or(0, |t| t.len());
    if n > MAX_PARAMETER_BYTES {
        return Err(Error::Limit { what: "bytes of one parameter value", limit: MAX_PARAMETER_BYTES, found: n });
    }
    // A secret value is never quoted back, not even in an error.
    let shown = || if spec.secret { Value::String(SECRET.into()) } else { v.clone() };
    let ok = match spec.type_ {
        ParamType::String => v.is_string() || v.is_number(),
        ParamType::Integer => v.is_i64() || v.is_u64(),
        ParamType::Number => v.is_number(),
        ParamType::Boolean => v.is_boolean(),
        ParamType::List => v.is_array(),
        ParamType::Map => v.is_object(),
    };
    if !ok {
        return Err(Error::ParameterType {
            name: name.to_string(),
            expected: format!("{:?}", spec.type_).to_lowercase(),
            found: shown(),
        });
    }
    if !spec.enum_.is_empty() && !spec.enum_.contains(v) {
        return Err(Error::ParameterValue { name: name.to_string(), allowed: spec.enum_.clone(), found: shown() });
    }
    if let Some(artifact) = &spec.artifact {
        let names = v
            .as_str()
            .and_then(|t| t.split_once('/'))
            .is_some_and(|(op, id)| crate::model::is_id(op) && id == artifact);
        if !names {
            return Err(Error::ArtifactReference {
                name: name.to_string(),
                artifact: artifact.clone(),
                found: shown(),
            });
        }
    }
    Ok(match (spec.type_, v) {
        (ParamType::String, Value::Number(n)) => Value::String(n.to_string()),
        _ => v.clone(),
    })
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};
    use serde_json::json;

    use crate::model::{ParamSpec, ParamType};

    /// A parameter naming an artifact of an earlier operation: `<operation>/<its artifact id>`.
    fn check(value: serde_json::Value, expect: Expect) {
        let spec = ParamSpec {
            type_: ParamType::String,
            default: None,
            required: true,
            description: None,
            enum_: vec![],
            secret: false,
            artifact: Some("postgresql_backup".into()),
            once: false,
        };
        let got = match super::check_parameter("backup", &spec, &value) {
            Ok(v) => format!("ok {v}"),
            Err(e) => format!("{}: {e}", e.code()),
        };
        expect.assert_eq(&got);
    }

    #[test]
    fn an_artifact_parameter_names_an_operation_and_the_declared_artifact() {
        check(json!("op-abc123/postgresql_backup"), expect![[r#"ok "op-abc123/postgresql_backup""#]]);
        check(
            json!("op-abc123/postgresql_credentials"),
            expect![[
                r#"P003: parameter `backup` names an artifact of an earlier operation, `<operation>/postgresql_backup`, found "op-abc123/postgresql_credentials""#
            ]],
        );
        check(
            json!("postgresql_backup"),
            expect![[
                r#"P003: parameter `backup` names an artifact of an earlier operation, `<operation>/postgresql_backup`, found "postgresql_backup""#
            ]],
        );
        check(
            json!("../etc/postgresql_backup"),
            expect![[
                r#"P003: parameter `backup` names an artifact of an earlier operation, `<operation>/postgresql_backup`, found "../etc/postgresql_backup""#
            ]],
        );
        check(
            json!(7),
            expect![[
                r#"P003: parameter `backup` names an artifact of an earlier operation, `<operation>/postgresql_backup`, found 7"#
            ]],
        );
    }
}
