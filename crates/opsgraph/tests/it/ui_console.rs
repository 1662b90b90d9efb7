//! The web UI as a run console, in headless Chromium (the helpers of `browser.rs`): each bug the
//! issue [M] found, one browser test apiece, and the run console (header, DAG, side panel).
