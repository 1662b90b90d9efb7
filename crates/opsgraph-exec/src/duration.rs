//! `30s`, `500ms`, `10m`, `1h30m`: the durations documents write.

use std::time::Duration;

use crate::Error;

/// Parses a duration: one or more `<digits><unit>` parts with the units `ms`, `s`, `m`, `h`, `d`
/// (`1h30m`). A bare number is an error: the unit is never guessed.
pub fn parse_duration(input: &str) -> Result<Duration, Error> {
    let error = |reason| Error::InvalidDuration { input: input.to_owned(), reason };
    if input.is_empty() {
        return Err(error("it is empty"));
    }
    let bytes = input.as_bytes();
    let mut total = Duration::ZERO;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(error("expected a number, like `30s`, `500ms` or `10m`"));
        }
        let number: u64 = input[start..i].parse().map_err(|_| error("the number is too large"))?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let part = match &input[unit_start..i] {
            "ms" => Some(Duration::from_millis(number)),
            "s" => Some(Duration::from_secs(number)),
            "m" => number.checked_mul(60).map(Duration::from_secs),
            "h" => number.checked_mul(3600).map(Duration::from_secs),
            "d" => number.checked_mul(86_400).map(Duration::from_secs),
            "" => return Err(error("a unit is missing (ms, s, m, h or d)")),
            _ => return Err(error("unknown unit (expected ms, s, m, h or d)")),
        };
        total = part.and_then(|p| total.checked_add(p)).ok_or_else(|| error("the number is too large"))?;
    }
    Ok(total)
}

/// `1m30s`, `250ms`, `0s`: the inverse of [`parse_duration`] for messages (rounded to ms).
pub(crate) fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms % 1000 != 0 && ms < 60_000 {
        if ms < 1000 {
            return format!("{ms}ms");
        }
        return format!("{}.{:03}s", ms / 1000, ms % 1000).trim_end_matches('0').to_owned();
    }
    let mut secs = ms / 1000;
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}
