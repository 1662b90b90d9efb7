//! A headless Chromium driven over WebDriver (plain JSON over HTTP), shared by the browser tests
//! (`ui.rs`, `ui_console.rs`): start it, find and wait for elements, click, type, press keys,
//! run a script, list unlabelled controls, write screenshots. Skipped (`screenshots()` answers
//! `None`) when Debian's `chromium` and `chromium-driver` are not installed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

pub(crate) const CHROMIUM: &str = "/usr/bin/chromium";
pub(crate) const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C WebDriver key of an element reference.
pub(crate) const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver child process and one browser session on it; both end on drop.
pub(crate) struct Browser {
    driver: Child,
    base: String,
    session: String,
    pub(crate) agent: ureq::Agent,
}

/// A test of an element's text for [`Browser::wait`]: it holds each of `parts`.
pub(crate) fn all_of<'a>(parts: &'a [&'a str]) -> impl Fn(&str) -> bool + 'a {
    move |text| parts.iter().all(|p| text.contains(p))
}

impl Browser {
    pub(crate) fn start() -> Browser {
        let port = crate::support::free_port("127.0.0.1");
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let mut b = Browser { driver, base: format!("http://127.0.0.1:{port}"), session: String::new(), agent };
        let deadline = Instant::now() + Duration::from_secs(20);
        while b.call("GET", "/status", None).map(|v| v["ready"] != true).unwrap_or(true) {
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"}, "goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"],
        }}}});
        let created = b.call("POST", "/session", Some(caps)).expect("a browser session");
        b.session = created["sessionId"].as_str().expect("a session id").to_string();
        b
    }

    /// One WebDriver command: its `value`, or the WebDriver error as text.
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let result = match method {
            "GET" => self.agent.get(&url).call(),
            "DELETE" => self.agent.delete(&url).call(),
            _ => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body.unwrap_or(json!({})).to_string()),
        };
        let mut resp = result.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        if status == 200 {
            Ok(v["value"].clone())
        } else {
            Err(format!("{status} {}", v["value"]))
        }
    }

    pub(crate) fn cmd(&self, method: &str, path: &str, body: Value) -> Result<Value, String> {
        self.call(method, &format!("/session/{}{path}", self.session), Some(body))
    }

    pub(crate) fn go(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url })).unwrap();
    }

    pub(crate) fn find(&self, css: &str) -> Option<String> {
        let v = self.cmd("POST", "/element", json!({"using": "css selector", "value": css})).ok()?;
        v[ELEMENT].as_str().map(str::to_string)
    }

    pub(crate) fn text(&self, el: &str) -> String {
        self.cmd("GET", &format!("/element/{el}/text"), Value::Null)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    }

    /// Waits for an element matching `css` whose text satisfies `ok`; its reference.
    pub(crate) fn wait(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_for(css, ok).0
    }

    /// Waits as `wait` does; the text that satisfied `ok`. Read it here, not from the element
    /// afterwards: the page may render again and replace the element (a stale reference reads
    /// as no text).
    pub(crate) fn wait_text(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        self.wait_for(css, ok).1
    }

    pub(crate) fn wait_for(&self, css: &str, ok: impl Fn(&str) -> bool) -> (String, String) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(el) = self.find(css) {
                let text = self.text(&el);
                if ok(&text) {
                    return (el, text);
                }
            }
            let status = self.find("#status").map(|s| self.text(&s)).unwrap_or_default();
            if Instant::now() >= deadline {
                // The page's console (script errors) says why.
                let console = self.cmd("POST", "/se/log", json!({"type": "browser"})).unwrap_or_default();
                let page = self.cmd(
                    "POST",
                    "/execute/sync",
                    json!({"script": "return location.href + '\\n' + document.body.innerText", "args": []}),
                );
                panic!("never saw {css} (status area: {status:?}; console: {console}; page: {page:?})");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn click(&self, el: &str) {
        self.cmd("POST", &format!("/element/{el}/click"), json!({})).unwrap();
    }

    /// Waits for `css` (text satisfying `ok`) and clicks it; again when a live update replaced
    /// the element in between.
    pub(crate) fn click_when(&self, css: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let el = self.wait(css, &ok);
            match self.cmd("POST", &format!("/element/{el}/click"), json!({})) {
                Ok(_) => return,
                Err(e) if e.contains("stale element") && Instant::now() < deadline => continue,
                Err(e) => panic!("clicking {css}: {e}"),
            }
        }
    }

    pub(crate) fn type_in(&self, el: &str, text: &str) {
        self.cmd("POST", &format!("/element/{el}/value"), json!({ "text": text })).unwrap();
    }

    /// Runs `script` in the page; its return value.
    pub(crate) fn js(&self, script: &str) -> Value {
        self.cmd("POST", "/execute/sync", json!({"script": script, "args": []})).unwrap()
    }

    /// Presses one key (a WebDriver key code) on whatever has the focus.
    pub(crate) fn press(&self, key: &str) {
        let keys = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]});
        self.cmd("POST", "/actions", keys).unwrap();
    }

    /// Clears an input and types `text` into it; again when a live update replaced the input in
    /// between (the page keeps what was typed, so the second try starts from it).
    pub(crate) fn fill(&self, css: &str, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let el = self.wait(css, |_| true);
            let done = self
                .cmd("POST", &format!("/element/{el}/clear"), json!({}))
                .and_then(|_| self.cmd("POST", &format!("/element/{el}/value"), json!({ "text": text })));
            match done {
                Ok(_) => return,
                Err(e) if e.contains("stale element") && Instant::now() < deadline => continue,
                Err(e) => panic!("filling {css}: {e}"),
            }
        }
    }

    /// Signs out (when signed in) and signs in with `token`.
    pub(crate) fn sign_in(&self, token: &str, name: &str) {
        if self.js("return document.getElementById('signout').hidden") == json!(false) {
            self.click_when("#signout", |_| true);
        }
        let input = self.wait("input#token", |_| true);
        self.type_in(&input, &format!("{token}\u{E007}"));
        self.wait("[data-testid=whoami]", |t| t.contains(name));
    }

    /// Every control on the page that has no accessible name: inputs, selects and textareas
    /// without a label, buttons, links and summaries without text or `aria-label`; their ids.
    pub(crate) fn unlabelled(&self) -> Value {
        self.js(
            "const shown = (e) => e.type !== 'hidden' && !e.closest('[hidden]');\
             const fields = [...document.querySelectorAll('input, select, textarea')].filter(shown)\
               .filter(e => !(e.id && document.querySelector(`label[for=\"${e.id}\"]`)) && !e.getAttribute('aria-label') && !e.closest('label'));\
             const named = [...document.querySelectorAll('button, a[href], summary')].filter(shown)\
               .filter(e => !e.textContent.trim() && !e.getAttribute('aria-label'));\
             return [...fields, ...named].map(e => e.id || e.outerHTML)",
        )
    }

    /// Presses Tab until the control with this id has the focus, then Enter: a keyboard user.
    pub(crate) fn tab_to_and_press(&self, id: &str) {
        let focused = || self.js("return document.activeElement ? document.activeElement.id : ''");
        let mut tabs = 0;
        while focused() != id {
            self.press("\u{E004}"); // Tab
            tabs += 1;
            assert!(tabs < 100, "#{id} is not reachable with Tab (focus on {})", focused());
        }
        self.press("\u{E007}"); // Enter
    }

    /// A screenshot of the window scrolled to one element (a section of a page).
    pub(crate) fn shot_of(&self, dir: &Path, css: &str, name: &str) -> PathBuf {
        self.wait(css, |_| true);
        let css = serde_json::to_string(css).unwrap();
        self.js(&format!("document.querySelector({css}).scrollIntoView(); return null"));
        self.screenshot(dir, name)
    }

    pub(crate) fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let b64 = self.cmd("GET", "/screenshot", Value::Null).unwrap();
        let png = base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where the UI tests write their screenshots; `None` (the test skips) when Debian's `chromium`
/// or `chromium-driver` is not installed.
pub(crate) fn screenshots() -> Option<PathBuf> {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        eprintln!("SKIPPED the UI test: chromium/chromedriver not installed ({CHROMIUM}, {CHROMEDRIVER})");
        return None;
    }
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    Some(shots)
}
