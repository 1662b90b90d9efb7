//! The API's JSON: any body to any route that takes one, as an administrator (the widest
//! access), through the real router over a real SQLite store. Never a panic or a 500; every
//! refusal is a JSON error with a stable code.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let api = opsgraph_fuzz::api();
    let Some((&pick, body)) = data.split_first() else { return };
    let route = &api.routes[pick as usize % api.routes.len()];
    let (status, reply) = api.call(route.0, &route.1, body);
    assert!(status < 500 || status == 503, "{} {} answered {status}: {reply}", route.0, route.1);
    if status >= 400 {
        let v: serde_json::Value = serde_json::from_str(&reply)
            .unwrap_or_else(|e| panic!("{} {} answered {status} without JSON ({e}): {reply}", route.0, route.1));
        let code = v["error"]["code"].as_str().unwrap_or_default();
        assert!(!code.is_empty(), "{} {} answered {status} without an error code: {reply}", route.0, route.1);
    }
});
