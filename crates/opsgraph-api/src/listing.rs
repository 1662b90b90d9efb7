//! Which operations a list shows (`GET /operations?state=&resource=&pack=&environment=`,
//! `opsgraph get operations --state … --resource … --pack … --environment …`): the query checked
//! once, the list built once, so the server and the CLI's local client answer alike.

use opsgraph_store::{OperationFilter, Store};
use serde_json::Value;

use crate::replies::OperationItem;
use crate::views::{operation_item, pack_matches};

/// A list's narrowing; every part optional, all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperationQuery {
    /// The state's name (`failed`); a state nothing is in gives an empty list.
    pub state: Option<String>,
    /// The resource it changed.
    pub resource: Option<String>,
    /// `id` (any version) or `id@version`.
    pub pack: Option<String>,
    /// The intent's environment.
    pub environment: Option<String>,
}

/// A query part that cannot name anything: its parameter and why.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidQuery {
    pub parameter: &'static str,
    pub message: &'static str,
}

impl std::fmt::Display for InvalidQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for InvalidQuery {}

impl OperationQuery {
    /// The query, or what is wrong with it (nothing is read then).
    pub fn new(
        state: Option<String>,
        resource: Option<String>,
        pack: Option<String>,
        environment: Option<String>,
    ) -> Result<OperationQuery, InvalidQuery> {
        if let Some(p) = &pack {
            check_pack(p)?;
        }
        if environment.as_deref() == Some("") {
            return Err(InvalidQuery {
                parameter: "environment",
                message: "`environment` is an environment's name (`prod`)",
            });
        }
        Ok(OperationQuery { state, resource, pack, environment })
    }

    /// The query's pairs as they go in a URL's query, unencoded, in a fixed order.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        [("state", &self.state), ("resource", &self.resource), ("pack", &self.pack), ("environment", &self.environment)]
            .into_iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (k, v)))
            .collect()
    }
}

/// `pack` is `id` or `id@version`, as packs are named.
fn check_pack(p: &str) -> Result<(), InvalidQuery> {
    let name = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
    };
    let (id, version) = p.split_once('@').map_or((p, None), |(i, v)| (i, Some(v)));
    if name(id) && version.is_none_or(name) {
        Ok(())
    } else {
        Err(InvalidQuery { parameter: "pack", message: "`pack` is a pack's `id` or `id@version` (`postgres@1.2.0`)" })
    }
}

/// The operations the query names, oldest first.
pub fn operations(store: &dyn Store, q: &OperationQuery) -> Result<Vec<OperationItem>, opsgraph_store::Error> {
    let filter = OperationFilter { state: q.state.clone(), resource: q.resource.clone() };
    let mut out = Vec::new();
    for o in store.operations(&filter)? {
        if q.environment.as_ref().is_some_and(|e| o.intent.get("environment").and_then(Value::as_str) != Some(e)) {
            continue;
        }
        let item = operation_item(store, &o)?;
        if q.pack.as_deref().is_none_or(|p| pack_matches(item.pack.as_deref(), p)) {
            out.push(item);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pack: Option<&str>, environment: Option<&str>, expect: Result<(), &str>) {
        let got = OperationQuery::new(None, None, pack.map(Into::into), environment.map(Into::into));
        assert_eq!(got.map(|_| ()).map_err(|e| e.parameter), expect, "pack {pack:?} environment {environment:?}");
    }

    #[test]
    fn a_query_names_packs_and_environments_or_is_refused() {
        check(None, None, Ok(()));
        check(Some("postgres"), None, Ok(()));
        check(Some("postgres@1.2.0"), Some("prod"), Ok(()));
        check(Some("k8s-cluster.v2"), None, Ok(()));
        check(Some("Postgres"), None, Err("pack"));
        check(Some("postgres@"), None, Err("pack"));
        check(Some("@1.0"), None, Err("pack"));
        check(Some("a b"), None, Err("pack"));
        check(Some(""), None, Err("pack"));
        check(None, Some(""), Err("environment"));
    }

    #[test]
    fn the_pairs_are_the_given_parts_in_order() {
        let q = OperationQuery::new(Some("failed".into()), None, Some("etcd".into()), Some("prod".into())).unwrap();
        assert_eq!(q.pairs(), vec![("state", "failed"), ("pack", "etcd"), ("environment", "prod")]);
        assert!(OperationQuery::default().pairs().is_empty());
    }
}
