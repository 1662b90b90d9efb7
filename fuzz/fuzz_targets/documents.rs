//! The document parser on any bytes: never a panic; every problem names a position inside the
//! text; documents that pass survive a JSON round trip of the model.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parsed = opsgraph_core::pack::parse_file("fuzz.yaml", text);
    // Lines as YAML counts them: `\n`, `\r\n` and a lone `\r` each end one (found by this
    // target: `str::lines` does not count a lone `\r`); a position may be just past the end.
    let breaks = text
        .bytes()
        .enumerate()
        .filter(|&(i, b)| b == b'\n' || (b == b'\r' && text.as_bytes().get(i + 1) != Some(&b'\n')))
        .count();
    let lines = u32::try_from(breaks + 2).unwrap_or(u32::MAX);
    for d in &parsed.diagnostics {
        assert!(d.pos.line >= 1 && d.pos.line <= lines, "diagnostic outside the text: {d}");
        let _ = d.to_string();
    }
    for located in &parsed.docs {
        let json = serde_json::to_value(&located.doc).expect("a model document serialises");
        let back: opsgraph_core::model::Document = serde_json::from_value(json).expect("and reads back");
        assert_eq!(back, located.doc);
    }
});
