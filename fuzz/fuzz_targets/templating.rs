//! Templating: an idempotency key's `{placeholder}`s, and a command line turned into argv or a
//! shell line. Never a panic; a key without values renders as written; a line split into argv
//! holds no shell syntax and loses no word.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // `template\x00name=value\x00name=value…`
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or_default();
    let values: BTreeMap<String, String> =
        parts.filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    assert_eq!(opsgraph_runtime::render_key(template, &BTreeMap::new()), template, "no values: as written");
    let rendered = opsgraph_runtime::render_key(template, &values);
    if !template.contains('{') {
        assert_eq!(rendered, template);
    }

    let line = opsgraph_core::model::Command::Line(template.to_owned());
    match opsgraph_exec::program_for(&line) {
        opsgraph_exec::Program::Argv(argv) => {
            let words: Vec<&str> = template.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
            assert_eq!(argv, words, "argv is the line's words");
            for w in &argv {
                assert!(
                    !w.contains(['\'', '"', '$', '`', ';', '|', '&', '<', '>', '\n', '*', '?']),
                    "{w:?} is shell syntax"
                );
            }
        }
        opsgraph_exec::Program::Shell(s) => assert_eq!(s, template),
        other => panic!("a line became {other:?}"),
    }
    let env = opsgraph_exec::param_env(template);
    assert!(env.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'), "{env:?}");
});
