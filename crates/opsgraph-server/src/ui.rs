//! The web UI: three static files and one vendored library (`ui/vendor/`: dagre, the DAG's
//! layout, a committed build file with its licence and checksum) compiled into the binary
//! (`cargo build` builds them; there is no front-end toolchain). They are public; everything they show or do goes through the API
//! with the token the person signs in with, and the server enforces every permission.

use axum::http::StatusCode;

use crate::error::ApiError;
use crate::handlers::{Content, Ctx, Reply};

/// The files under `/ui/`, by name: (content type, text).
const FILES: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("../ui/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../ui/app.css")),
    ("dagre.min.js", "text/javascript; charset=utf-8", include_str!("../ui/vendor/dagre.min.js")),
];

pub(crate) fn index(_: &mut Ctx) -> Result<Reply, ApiError> {
    Ok(page(crate::media::HTML, include_str!("../ui/index.html")))
}

pub(crate) fn file(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let name = ctx.param("file");
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, text)) => Ok(page(content_type, text)),
        None => Err(ApiError::not_found("no_ui_file", format!("the UI has no file `{name}`"))),
    }
}

fn page(content_type: &'static str, text: &'static str) -> Reply {
    Reply::with(StatusCode::OK, Content::Page { content_type, text })
}
