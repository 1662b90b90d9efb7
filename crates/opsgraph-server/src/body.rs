//! Request bodies read as the OpenAPI document describes them: JSON Schema calls a number with a
//! zero fraction (`3.0`) an integer, serde's integers do not take it.

/// Rewrites every number with a zero fraction that fits an integer (`3743.0`) as that integer;
/// whether it rewrote any.
pub(crate) fn integral_floats_to_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(n) => {
            let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0) else { return false };
            // 2^64 and -2^63 are exact as f64: the bounds of u64 and i64 without rounding.
            *value = if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                Value::from(f as u64)
            } else if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                Value::from(f as i64)
            } else {
                return false;
            };
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |any, v| integral_floats_to_integers(v) | any),
        Value::Object(fields) => fields.values_mut().fold(false, |any, v| integral_floats_to_integers(v) | any),
        _ => false,
    }
}

/// Whether a JSON text holds a NUL in a string (the escape `\u0000`, not an escaped backslash
/// followed by `u0000`). A raw NUL byte is not JSON at all: the parser refuses it.
pub(crate) fn holds_nul(body: &[u8]) -> bool {
    body.windows(6)
        .enumerate()
        .any(|(i, w)| w == b"\\u0000" && body[..i].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_nul_escape_is_found_and_an_escaped_backslash_is_not_one() {
        let cases: &[(&str, bool)] = &[
            (r#"{"reason": "a\u0000b"}"#, true),
            (r#"{"reason": "\u0000"}"#, true),
            (r#"{"reason": "a\\u0000b"}"#, false),
            (r#"{"reason": "a\\\u0000b"}"#, true),
            (r#"{"reason": "u0000 \u00001"}"#, true),
            (r#"{"\u0000": 1}"#, true),
            (r#"{"reason": "\u0001"}"#, false),
            (r#"{}"#, false),
        ];
        for (body, nul) in cases {
            assert_eq!(super::holds_nul(body.as_bytes()), *nul, "{body}");
        }
    }

    fn check(input: serde_json::Value, expect: serde_json::Value, rewrote: bool) {
        let mut v = input;
        assert_eq!(super::integral_floats_to_integers(&mut v), rewrote);
        assert_eq!(v.to_string(), expect.to_string());
    }

    #[test]
    fn integral_numbers_become_integers_and_nothing_else_changes() {
        check(json!({"wait_ms": 3743.0, "max_tasks": 2}), json!({"wait_ms": 3743, "max_tasks": 2}), true);
        check(json!([[-1.0e3], {"a": 0.0}]), json!([[-1000], {"a": 0}]), true);
        check(json!({"ratio": 0.5, "n": 3, "s": "3.0"}), json!({"ratio": 0.5, "n": 3, "s": "3.0"}), false);
        // Past u64 and i64: left as they are, for serde to refuse.
        check(json!(1.8446744073709552e19), json!(1.8446744073709552e19), false);
        check(json!(-1.0e19), json!(-1.0e19), false);
        check(json!(1.844674407370955e19), json!(18446744073709549568u64), true);
    }
}
