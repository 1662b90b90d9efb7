// The Opsgraph web UI: plain DOM, no framework. Everything goes through the API with the token
// kept in sessionStorage; the server enforces every permission (buttons are only a courtesy).
"use strict";

const KEY = "opsgraph.token";
let me = null;
let stream = null; // the AbortController of the open event stream
let advanced = false;

const $ = (id) => document.getElementById(id);

// Builds an element; strings become text nodes (never HTML).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick") el.addEventListener("click", v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function status(message, error) {
  const s = $("status");
  s.textContent = message || "";
  s.classList.toggle("error", !!error);
  s.setAttribute("role", error ? "alert" : "status");
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { json = null; }
  if (!r.ok) {
    const e = (json && json.error) || {};
    const err = new Error(`${r.status} ${e.code || ""}: ${e.message || text}`);
    err.status = r.status;
    throw err;
  }
  return json;
}

const enc = encodeURIComponent;
const stateEl = (state, testid) => h("span", { class: "state state-" + state, "data-testid": testid }, state);

// ---- Sign in ----

async function signIn(token) {
  sessionStorage.setItem(KEY, token);
  try {
    me = await api("GET", "/api/v1/me");
  } catch (e) {
    sessionStorage.removeItem(KEY);
    me = null;
    status("Sign-in failed: " + e.message, true);
    return false;
  }
  return true;
}

function signOut() {
  sessionStorage.removeItem(KEY);
  me = null;
  stopStream();
  status("Signed out.");
  render();
}

function showSignIn() {
  $("signin").hidden = false;
  $("signout").hidden = true;
  $("whoami").textContent = "";
  $("view").replaceChildren();
  $("token").focus();
}

// ---- Event streams: fetch + ReadableStream (EventSource cannot send the token) ----

function stopStream() {
  if (stream) stream.abort();
  stream = null;
}

async function follow(path, onEvent) {
  stopStream();
  const ctl = new AbortController();
  stream = ctl;
  try {
    const r = await fetch(path, { headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY) }, signal: ctl.signal });
    if (!r.ok || !r.body) return;
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let event = "message";
        let data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (data) onEvent(event, data);
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") status("The live updates stopped: " + e.message, true);
  }
}

// Re-renders at most once per 100 ms however many events arrive.
function debounce(f) {
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; f(); }, 100);
  };
}

// Keeps keyboard focus on the element with the same id across a re-render.
function keepFocus(f) {
  const id = document.activeElement && document.activeElement.id;
  f();
  if (id && $(id)) $(id).focus();
}

// ---- Pages ----

async function listPage() {
  const view = $("view");
  let shown = null;
  const draw = async () => {
    let ops;
    try {
      ops = (await api("GET", "/api/v1/operations")).operations || [];
    } catch (e) {
      status("Could not load operations: " + e.message, true);
      return;
    }
    const key = JSON.stringify(ops);
    if (key === shown) return;
    shown = key;
    const rows = ops.map((o) =>
      h("tr", { "data-testid": "op-row", "data-id": o.id },
        h("td", {}, h("a", { href: "#/operations/" + enc(o.id), "data-testid": "op-link" }, o.id)),
        h("td", {}, stateEl(o.state)),
        h("td", {}, o.detail),
        h("td", {}, o.resource || "")));
    keepFocus(() => view.replaceChildren(
      h("h2", {}, "Operations"),
      ops.length === 0 ? h("p", { class: "muted" }, "No operations yet.") :
        h("table", { id: "operations", "data-testid": "operations" },
          h("caption", { class: "muted" }, `${ops.length} operation(s), live`),
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Operation"), h("th", { scope: "col" }, "State"),
            h("th", { scope: "col" }, "Detail"), h("th", { scope: "col" }, "Resource"))),
          h("tbody", {}, rows))));
  };
  await draw();
  follow("/api/v1/events", debounce(draw));
}

function mayAnswer(gate) {
  const roles = (me && me.roles) || [];
  return (gate.required_roles || []).some((r) => roles.includes(r));
}

async function answer(op, gate, option) {
  status(`Answering ${gate.id}: ${option}…`);
  try {
    await api("POST", `/api/v1/operations/${enc(op.id)}/gates/${enc(gate.id)}/answer`,
      { option, revision: op.plan_revision });
    status(`Answered ${gate.id}: ${option}.`);
  } catch (e) {
    status(`The server refused the answer to ${gate.id}: ${e.message}`, true);
  }
}

function gatesSection(op) {
  const open = (op.gates || []).filter((g) => g.answer === null || g.answer === undefined);
  const items = open.map((g) => {
    const allowed = mayAnswer(g);
    return h("div", { class: "gate", "data-testid": "gate", "data-gate": g.id, role: "group", "aria-label": "Gate " + g.id },
      h("h4", {}, `${g.id} (${g.gate_type})`),
      h("p", {}, g.reason),
      allowed
        ? g.options.map((opt) => h("button", {
            type: "button", class: opt === g.options[0] ? "primary" : null, id: `gate-${g.id}-${opt}`.replace(/[^A-Za-z0-9_-]/g, "_"),
            "data-testid": "gate-option", "data-gate": g.id, "data-option": opt,
            onclick: () => answer(op, g, opt),
          }, opt))
        : h("p", { class: "muted", "data-testid": "gate-not-yours" },
            `Needs one of the roles ${g.required_roles.join(", ")}; you hold ${(me.roles || []).join(", ")}.`));
  });
  return h("section", { "aria-labelledby": "gates-h" }, h("h3", { id: "gates-h" }, "Gates"),
    items.length ? items : h("p", { class: "muted" }, "No open gates."));
}

function jobIndex(op) {
  const jobs = {};
  for (const j of op.jobs || []) jobs[j.id] = j;
  return jobs;
}

function simpleView(op) {
  const jobs = jobIndex(op);
  const stages = op.stages || [];
  return h("ol", { class: "stages", "data-testid": "stages" }, stages.map((s) => {
    const ids = s.jobs || [];
    const done = ids.filter((id) => jobs[id] && ["succeeded", "skipped"].includes(jobs[id].state)).length;
    return h("li", { "data-testid": "stage", "data-stage": s.id },
      h("h4", {}, s.name || s.id),
      h("label", { for: "progress-" + s.id }, `${done} of ${ids.length} jobs done `),
      h("progress", { id: "progress-" + s.id, max: ids.length || 1, value: done }),
      h("ul", {}, ids.map((id) => h("li", {}, id + ": ", stateEl(jobs[id] ? jobs[id].state : "pending")))));
  }));
}

// The pack's job contracts (inputs, outputs), fetched once per pack version.
const contracts = {};
async function loadContracts(pack) {
  if (!pack || contracts[pack]) return;
  try {
    const v = ((await api("GET", "/api/v1/packs/" + enc(pack))).versions || [])[0] || {};
    contracts[pack] = v.jobs || {};
  } catch (_) {
    contracts[pack] = {};
  }
}

function contractView(op, instance) {
  const job = (contracts[op.pack] || {})[instance.split("@")[0]];
  if (!job) return h("span", { class: "muted" }, "not available");
  const compact = (v) => JSON.stringify(v || {});
  return h("dl", { class: "contract" },
    h("dt", {}, "inputs"), h("dd", {}, h("code", {}, compact(job.inputs))),
    h("dt", {}, "outputs"), h("dd", {}, h("code", {}, compact(job.outputs))));
}

function advancedView(op) {
  const evidence = op.evidence || [];
  return h("table", { "data-testid": "jobs" },
    h("thead", {}, h("tr", {}, ["Job", "Contract", "State", "Attempts", "Outcome", "Evidence"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, (op.jobs || []).map((j) => h("tr", { "data-testid": "job", "data-job": j.id },
      h("td", {}, j.id),
      h("td", {}, contractView(op, j.id)),
      h("td", {}, stateEl(j.state)),
      h("td", {}, String(j.attempts)),
      h("td", {}, h("pre", {}, j.outcome === null ? "" : JSON.stringify(j.outcome, null, 1))),
      h("td", {}, h("ul", {}, evidence.filter((e) => e.job === j.id).map((e) =>
        h("li", { class: e.passed ? "pass" : "fail" },
          `${e.check}: ${e.passed ? "passed" : "failed"} (expected ${JSON.stringify(e.expected)}, observed ${JSON.stringify(e.observed)})`))))))));
}

function timelineView(op) {
  return h("section", { "aria-labelledby": "timeline-h" }, h("h3", { id: "timeline-h" }, "Timeline"),
    h("ol", { class: "timeline", "data-testid": "timeline" }, (op.timeline || []).map((e) =>
      h("li", {}, h("time", {}, e.at), ` ${e.actor} ${e.event}`, e.to ? ` → ${e.to}` : "", e.reason ? `: ${e.reason}` : ""))));
}

async function operationPage(id) {
  const view = $("view");
  let shown = null; // the document last drawn with the mode it was drawn in
  const draw = async (force) => {
    let op;
    try {
      op = await api("GET", "/api/v1/operations/" + enc(id));
    } catch (e) {
      status("Could not load the operation: " + e.message, true);
      return;
    }
    if (advanced) await loadContracts(op.pack);
    // An event that changed nothing shown leaves the page (and its focus) alone.
    const key = JSON.stringify([advanced, (me && me.name), op]);
    if (key === shown && force !== true) return;
    shown = key;
    const toggle = h("button", { type: "button", id: "mode-toggle", "data-testid": "mode-toggle", "aria-pressed": advanced ? "true" : "false",
      onclick: () => { advanced = !advanced; draw(true); } }, advanced ? "Simple view" : "Advanced view");
    keepFocus(() => view.replaceChildren(
      h("p", {}, h("a", { href: "#/" }, "← All operations")),
      h("h2", {}, "Operation ", h("span", { "data-testid": "op-id" }, op.id)),
      h("p", {}, "State: ", stateEl(op.state, "op-state"), " ", h("span", { class: "muted", "data-testid": "op-detail" }, op.detail)),
      h("p", { class: "muted" }, `${op.pack || ""} · resource ${op.resource || "-"} · by ${op.actor} · revision ${op.plan_revision}`),
      gatesSection(op),
      h("section", { "aria-labelledby": "progress-h" }, h("h3", { id: "progress-h" }, advanced ? "Jobs" : "Stages", " ", toggle),
        advanced ? advancedView(op) : simpleView(op)),
      timelineView(op)));
  };
  await draw();
  follow(`/api/v1/operations/${enc(id)}/events`, debounce(draw));
}

async function render() {
  stopStream();
  if (!sessionStorage.getItem(KEY)) return showSignIn();
  if (!me && !(await signIn(sessionStorage.getItem(KEY)))) return showSignIn();
  $("signin").hidden = true;
  $("signout").hidden = false;
  $("whoami").textContent = `Signed in as ${me.name} (${(me.roles || []).join(", ")})`;
  const m = location.hash.match(/^#\/operations\/(.+)$/);
  if (m) await operationPage(decodeURIComponent(m[1]));
  else await listPage();
}

document.addEventListener("DOMContentLoaded", () => {
  $("signin").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    $("token").value = "";
    if (await signIn(token)) {
      status("Signed in.");
      render();
    }
  });
  $("signout").addEventListener("click", signOut);
  window.addEventListener("hashchange", () => { status(""); render(); });
  render();
});
