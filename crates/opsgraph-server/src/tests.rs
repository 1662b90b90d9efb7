use std::collections::BTreeSet;

use crate::auth::{Config, Permission, BUILTIN_ROLES};
use crate::table::{openapi_path, ROUTES};

fn perms(role: &str) -> BTreeSet<Permission> {
    Config::default().permissions(role).unwrap()
}

#[test]
fn each_builtin_role_holds_the_one_below_it_and_the_admin_holds_everything() {
    let names: Vec<&str> = BUILTIN_ROLES.iter().map(|(r, _)| *r).collect();
    assert_eq!(names, ["viewer", "ai_agent", "operator", "sre", "platform_admin", "agent"]);
    // The people's chain; the AI agent sits beside it: within sre, and never deciding.
    let people = ["viewer", "operator", "sre", "platform_admin"];
    for pair in people.windows(2) {
        assert!(perms(pair[0]).is_subset(&perms(pair[1])), "{} is not within {}", pair[0], pair[1]);
    }
    assert_eq!(perms("platform_admin"), Permission::ALL.into_iter().collect());
    assert!(!perms("sre").contains(&Permission::RevealSecrets));
    let ai = perms("ai_agent");
    assert!(ai.is_subset(&perms("sre")));
    for p in [Permission::AnswerGates, Permission::ApprovePatches, Permission::RevealSecrets, Permission::Apply] {
        assert!(!ai.contains(&p), "ai_agent holds {}", p.as_str());
    }
    for p in Permission::ALL {
        assert_eq!(Permission::parse(p.as_str()), Some(p));
    }
    // A remote agent does its work and nothing else; no person's role below the admin does it.
    assert_eq!(perms("agent"), [Permission::AgentWork].into_iter().collect());
    assert!(!perms("sre").contains(&Permission::AgentWork));
}

#[test]
fn custom_roles_come_from_the_config_and_bad_ones_are_refused() {
    let c = Config::parse(
        "config.yaml",
        "users: {alice: [sre]}\nallow_self_approval: true\nroles:\n  auditor: [read]\n  tokens: [read, manage_tokens]\n",
    )
    .unwrap();
    assert!(c.patch_rules.allow_self_approval);
    assert_eq!(c.permissions("auditor"), Some([Permission::Read].into_iter().collect()));
    assert_eq!(c.union(&["auditor".into(), "tokens".into(), "nobody".into()]).len(), 2);
    assert_eq!(c.table().len(), 8);
    let err = |text: &str| Config::parse("config.yaml", text).unwrap_err().to_string();
    assert_eq!(err("roles: {sre: [read]}\n"), "config.yaml: role `sre` is built in and cannot be redefined");
    assert_eq!(
        err("roles: {x: [rule]}\n"),
        "config.yaml: role `x`: unknown permission `\"rule\"`; expected one of read, apply, answer_gates, patch, approve_patches, intervene, reveal_secrets, manage_packs, manage_resources, manage_tokens, metrics, agent_work"
    );
    assert_eq!(
        err("allow_self_approval: maybe\n"),
        "config.yaml: `allow_self_approval` must be true or false, not \"maybe\""
    );
    assert!(Config::parse("config.yaml", "").unwrap().roles.is_empty());
}

#[test]
fn tokens_are_random_url_safe_and_stored_as_hashes() {
    let a = crate::auth::new_token().unwrap();
    let b = crate::auth::new_token().unwrap();
    assert_ne!(a, b);
    assert!(a.starts_with("og_") && a.len() == 46);
    assert!(a[3..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    let h = crate::auth::token_hash(&a);
    assert!(h.starts_with("sha256:") && h.len() == 7 + 64 && !h.contains(&a[3..]));
    assert_eq!(
        crate::auth::token_hash("abc"),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn route_paths_are_unique_and_wildcards_become_plain_parameters_in_the_document() {
    let mut seen = BTreeSet::new();
    for r in ROUTES {
        assert!(seen.insert((r.method, r.path)), "{} {} twice", r.method, r.path);
        let ui = r.access == crate::table::Access::Public && (r.path == "/" || r.path.starts_with("/ui/"));
        assert!(r.path.starts_with("/api/v1/") || r.path == "/metrics" || ui, "{}", r.path);
    }
    assert_eq!(openapi_path("/api/v1/resources/{*id}"), "/api/v1/resources/{id}");
}

#[test]
fn path_parameters_are_percent_decoded_and_a_wildcard_takes_the_rest() {
    let uri: axum::http::Uri = "/api/v1/resources/compute_node%2Fn1/extra".parse().unwrap();
    let p = crate::routes::path_params(&uri, "/api/v1/resources/{*id}");
    assert_eq!(p["id"], "compute_node/n1/extra");
    let uri: axum::http::Uri = "/api/v1/operations/op-1/gates/a%20b/answer".parse().unwrap();
    let p = crate::routes::path_params(&uri, "/api/v1/operations/{id}/gates/{gate}/answer");
    assert_eq!((p["id"].as_str(), p["gate"].as_str()), ("op-1", "a b"));
    assert_eq!(crate::routes::percent_decode("100%"), "100%");
    assert_eq!(crate::routes::percent_decode("%zz%41"), "%zzA");
}

/// Runtime errors that say something about the operation's state are not server errors: a
/// finished operation whose pack was removed since (schemathesis found a 500 there).
#[test]
fn a_removed_pack_is_a_conflict_not_a_server_error() {
    let e = crate::error::ApiError::from(opsgraph_runtime::Error::NoPack("hello@1.0.0".into()));
    assert_eq!((e.status.as_u16(), e.code), (409, "pack_missing"));
    assert_eq!(e.message, "the pack `hello@1.0.0` of this operation is not loaded");
}
