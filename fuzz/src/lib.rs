//! What the fuzz targets share: the bundled lab-cluster pack, the lab inventory, and the plan
//! of the lab's create-cluster intent, read once from the repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use opsgraph_core::model::{CapabilityPolicy, Document, Intent, OperationsPolicy, Resource};
use opsgraph_core::pack::{check_pack, parse_file, Pack, PackFile};
use opsgraph_core::plan::{Input, Inventory, Plan};

pub struct Lab {
    pub pack: Pack,
    pub resources: Vec<Resource>,
    pub plan: Plan,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn files(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        if p.is_dir() {
            files(&p, &rel, out);
        } else {
            out.push((rel, p));
        }
    }
}

/// The documents of one file, or a panic naming the file's problems (the inputs are ours).
fn documents(path: &Path) -> Vec<Document> {
    let text = std::fs::read_to_string(path).unwrap();
    let parsed = parse_file(&path.display().to_string(), &text);
    assert!(!parsed.has_errors(), "{}: {:?}", path.display(), parsed.diagnostics);
    parsed.docs.into_iter().map(|d| d.doc).collect()
}

/// The documents fuzz input `data` holds, read as the file `name`: none when it is not UTF-8, and
/// those that parse when some do not (the targets feed them on).
pub fn documents_in(data: &[u8], name: &str) -> Vec<Document> {
    let Ok(text) = std::str::from_utf8(data) else { return Vec::new() };
    parse_file(name, text).docs.into_iter().map(|d| d.doc).collect()
}

pub fn lab() -> &'static Lab {
    static LAB: OnceLock<Lab> = OnceLock::new();
    LAB.get_or_init(|| {
        let root = repo().join("packs/lab-cluster");
        let mut all = Vec::new();
        files(&root, "", &mut all);
        let yaml: Vec<PackFile> = all
            .iter()
            .filter(|(rel, _)| rel.ends_with(".yaml"))
            .map(|(rel, p)| PackFile { path: rel.clone(), text: std::fs::read_to_string(p).unwrap() })
            .collect();
        let paths: BTreeSet<String> = all.iter().map(|(rel, _)| rel.clone()).collect();
        let (pack, diags) = check_pack(&root.display().to_string(), &yaml, &paths);
        let pack = pack.unwrap_or_else(|| panic!("the lab-cluster pack: {diags:?}"));
        let resources: Vec<Resource> = documents(&repo().join("examples/lab/inventory/nodes.yaml"))
            .into_iter()
            .filter_map(|d| match d {
                Document::Resource(r) => Some(r),
                _ => None,
            })
            .collect();
        let intent = documents(&repo().join("examples/lab/intents/lab-create-cluster.yaml"))
            .into_iter()
            .find_map(|d| match d {
                Document::Intent(i) => Some(i),
                _ => None,
            })
            .unwrap();
        let plan = build(&pack, &resources, &intent).expect("the lab plan builds");
        Lab { pack, resources, plan }
    })
}

/// The plan of `intent` over the lab pack and inventory.
pub fn build(pack: &Pack, resources: &[Resource], intent: &Intent) -> Result<Plan, Vec<opsgraph_core::plan::Error>> {
    let inventory = Inventory::new(resources);
    opsgraph_core::plan::build(&Input {
        intent,
        packs: std::slice::from_ref(pack),
        inventory: &inventory,
        providers: &[],
        policy: &CapabilityPolicy::default(),
        operations: &OperationsPolicy::default(),
        recorded: None,
        roles: &[],
    })
}

/// The API over a real SQLite store in a directory of its own (removed at exit is not needed:
/// it lives under the system's temporary directory), with an administrator's token.
pub struct ApiHarness {
    state: opsgraph_server::AppState,
    token: String,
    rt: tokio::runtime::Runtime,
    /// Every route that takes a body: method and path, parameters filled in.
    pub routes: Vec<(&'static str, String)>,
}

pub fn api() -> &'static ApiHarness {
    static API: OnceLock<ApiHarness> = OnceLock::new();
    API.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("opsgraph-fuzz-api-{}", std::process::id()));
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("config.yaml"), "").unwrap();
        let packs = [repo().join("packs/lab-cluster").display().to_string()];
        let state = opsgraph::serve_cmd::state(&data, &packs, &[]).expect("server state");
        let token = {
            let mut store = state.store().unwrap();
            opsgraph_server::auth::create_token(
                &mut *store,
                state.config(),
                "fuzz",
                &["platform_admin".into()],
                "fuzz",
                None,
                None,
            )
            .unwrap()
            .1
        };
        let routes = opsgraph_server::ROUTES
            .iter()
            .filter(|r| r.method != "GET" && r.body != "none" && r.body != "archive")
            .map(|r| {
                let path = r.path.replace("{*id}", "compute_node/fuzz").replace("{id}", "op-fuzz");
                let path = regex_lite_fill(&path);
                (r.method, path)
            })
            .collect();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        ApiHarness { state, token, rt, routes }
    })
}

/// Fills the remaining `{param}`s of a route's path with `fuzz`.
fn regex_lite_fill(path: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').map_or(rest.len(), |e| start + e + 1);
        out.push_str("fuzz");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

impl ApiHarness {
    /// One request; the status and the body as text.
    pub fn call(&self, method: &str, path: &str, body: &[u8]) -> (u16, String) {
        use tower::ServiceExt;
        let req = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_vec()))
            .unwrap();
        let response = self.rt.block_on(opsgraph_server::router(self.state.clone()).oneshot(req)).unwrap();
        let status = response.status().as_u16();
        let bytes = self.rt.block_on(axum::body::to_bytes(response.into_body(), 1 << 24)).unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }
}
