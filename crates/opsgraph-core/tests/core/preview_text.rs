//! Reading a text preview in tests; shared with the binary's tests (`tests/it`, by path).

/// One section of a text preview, from its heading to the next blank line.
pub(crate) fn section(text: &str, heading: &str) -> String {
    let mut out = String::new();
    let mut on = false;
    for line in text.lines() {
        if line == heading {
            on = true;
        } else if on && line.is_empty() {
            break;
        }
        if on {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
