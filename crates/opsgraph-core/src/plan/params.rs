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
    Ok(match (spec.type_, v) {
        (ParamType::String, Value::Number(n)) => Value::String(n.to_string()),
        _ => v.clone(),
    })
}
