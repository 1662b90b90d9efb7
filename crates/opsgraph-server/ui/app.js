// The Opsgraph web UI: plain DOM, no framework. Everything goes through the API with the token
// kept in sessionStorage; the server enforces every permission (buttons are only a courtesy).
"use strict";

const KEY = "opsgraph.token";
let me = null;
let stream = null; // the AbortController of the open event stream
let advanced = false;

const $ = (id) => document.getElementById(id);

// Builds an element; strings become text nodes (never HTML). `on<event>` attributes become
// listeners.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// The list `key` of GET `path`, for the view of generation `gen`: null when the request failed
// (said in the status line, naming `what`) or the view has moved on meanwhile.
async function listFor(gen, path, key, what) {
  let body;
  try {
    body = await api("GET", path);
  } catch (e) {
    if (current(gen)) status(`Could not load ${what}: ` + e.message, true);
    return null;
  }
  return current(gen) ? body[key] || [] : null;
}

function status(message, error) {
  const st = $("status");
  st.textContent = message || "";
  st.classList.toggle("error", !!error);
  st.setAttribute("role", error ? "alert" : "status");
}

// One API call. `body`: an object (sent as JSON) or a string (sent as YAML). `raw`: answer the
// response text instead of JSON.
async function api(method, path, body, raw) {
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
  let payload;
  if (typeof body === "string") {
    headers["Content-Type"] = "application/yaml";
    payload = body;
  } else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const r = await fetch(path, { method, headers, body: payload, cache: "no-store" });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { json = null; }
  if (!r.ok) {
    const e = (json && json.error) || {};
    const reasons = errorReasons(e.details);
    const err = new Error(`${r.status} ${e.code || ""}: ${e.message || text}${reasons.length ? " — " + reasons.join("; ") : ""}`);
    err.status = r.status;
    err.code = e.code;
    err.reasons = reasons;
    err.details = e.details;
    throw err;
  }
  return raw ? text : json;
}

// The reasons an API error gives in its details, as sentences: document diagnostics, the plan's
// errors (`P012: …`), what a refusal needs.
function errorReasons(details) {
  if (!details || typeof details !== "object") return [];
  const out = [];
  for (const d of details.diagnostics || []) out.push(String(d));
  for (const x of details.errors || []) out.push(typeof x === "string" ? x : `${x.code ? x.code + ": " : ""}${x.message || JSON.stringify(x)}`);
  if (details.needs) out.push(`needs ${details.needs}`);
  return out;
}

// A value for people: strings as they are (no JSON quotes), anything else as JSON.
const show = (v) => (v === null || v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v));

const enc = encodeURIComponent;
const stateEl = (state, testid) => h("span", { class: "state state-" + state, "data-testid": testid }, state);
const may = (perm) => !!(me && (me.permissions || []).includes(perm));
const safeId = (x) => String(x).replace(/[^A-Za-z0-9_-]/g, "_");

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
  $("nav").hidden = true;
  $("whoami").textContent = "";
  $("view").replaceChildren();
  $("token").focus();
}

// ---- Event streams: fetch + ReadableStream (EventSource cannot send the token) ----

// What the open stream received: every event id in the order it arrived and how often the
// stream was resumed. The live indicator shows it; the browser test reads it. Each stream has
// its own record, so one being stopped cannot write into the next one's.
let live = { ids: [], reconnects: 0 };

function showLive(text, state) {
  const el = $("live");
  el.textContent = text;
  el.dataset.state = state;
  el.dataset.reconnects = String(live.reconnects);
  el.title = state === "off" ? "" : `live updates: ${live.ids.length} events, resumed ${live.reconnects} time(s)`;
}

function stopStream() {
  if (stream) stream.abort();
  stream = null;
  showLive("", "off");
}

// Follows a server-sent event stream; when it ends or drops it reconnects with `Last-Event-ID`
// set to the last id received, so no event is missed or seen twice. The server ends a stream
// after `limits.event_stream_duration` with `event: reconnect`: the page resumes at once. After
// a failure it waits 0.5 s, doubling to 5 s. `event: end` (a terminal operation) ends it.
async function follow(path, onEvent, gen) {
  if (!current(gen)) return;
  stopStream();
  const ctl = new AbortController();
  stream = ctl;
  const rec = (live = { ids: [], reconnects: 0 });
  const show = (text, state) => { if (stream === ctl) showLive(text, state); };
  let last = null;
  let delay = 500;
  let connected = 0;
  while (!ctl.signal.aborted) {
    let ended = false;
    let resume = false;
    try {
      const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
      if (last !== null) headers["Last-Event-ID"] = last;
      const r = await fetch(path, { headers, signal: ctl.signal, cache: "no-store" });
      if (r.status === 401 || r.status === 403 || r.status === 404) {
        status(`The live updates were refused (${r.status}).`, true);
        show("Not live", "refused");
        return;
      }
      if (r.ok && r.body) {
        connected += 1;
        if (connected > 1) {
          rec.reconnects += 1;
          onEvent("reconnected", "{}");
        }
        show("Live", "live");
        delay = 500;
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
            let id = null;
            for (const line of block.split("\n")) {
              if (line.startsWith("event:")) event = line.slice(6).trim();
              else if (line.startsWith("data:")) data += line.slice(5).trim();
              else if (line.startsWith("id:")) id = line.slice(3).trim();
            }
            if (event === "end") ended = true;
            if (event === "reconnect") resume = true;
            if (id !== null) {
              rec.ids.push(Number(id));
              // Never the same event twice, whatever the server sends.
              if (last !== null && Number(id) <= Number(last)) continue;
              last = id;
            }
            if (data && event !== "reconnect") onEvent(event, data);
          }
        }
      }
    } catch (e) {
      if (e.name === "AbortError" || ctl.signal.aborted) return;
      resume = false; // dropped mid-stream: wait before trying again
    }
    if (ctl.signal.aborted) return;
    if (ended) {
      show("Finished", "ended");
      return;
    }
    show("Reconnecting…", "reconnecting");
    if (resume) continue;
    await new Promise((ok) => setTimeout(ok, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

// Loads for live redraws: `f` never runs twice at once (a slow answer cannot land after a newer
// one and draw a stale page) and runs once more when asked while it ran.
function serial(f) {
  let busy = false;
  let queued = false;
  let queuedArg;
  const run = async (arg) => {
    if (busy) {
      queued = true;
      queuedArg = queuedArg || arg;
      return;
    }
    busy = true;
    try {
      await f(arg);
    } finally {
      busy = false;
      if (queued) {
        const next = queuedArg;
        queued = false;
        queuedArg = undefined;
        run(next);
      }
    }
  };
  return run;
}

function debounce(f) {
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; f(); }, 100);
  };
}

// Replaces the children of `el` when `key` differs from the last one drawn there, keeping
// keyboard focus on the element with the same id; when that element is gone, on the first
// control of the same `data-focus-group` (Pause becomes Resume), so a keyboard user is not sent
// back to the top of the page.
function patchSection(el, key, build) {
  if (el.dataset.key === key) return;
  el.dataset.key = key;
  const active = document.activeElement;
  const id = active && active.id;
  const box = active && el.contains(active) ? active.closest("[data-focus-group]") : null;
  const group = box ? box.dataset.focusGroup : null;
  // Where the caret was in a text field being typed in.
  const caret = active && typeof active.selectionStart === "number" ? [active.selectionStart, active.selectionEnd] : null;
  el.replaceChildren(...[build()].flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  if (id && $(id)) {
    const again = $(id);
    if (document.activeElement !== again) {
      again.focus();
      if (caret && again !== active) try { again.setSelectionRange(caret[0], caret[1]); } catch (_) { /* not a text field */ }
    }
  } else if (group) {
    const next = el.querySelector(`[data-focus-group="${group}"] button, [data-focus-group="${group}"] input`);
    if (next) next.focus();
  }
}

// ---- Operations ----

// The list's filters, kept while the tab lives (across live redraws and navigation).
const listFilter = { state: "", resource: "", actor: "", pack: "", environment: "" };

async function listPage() {
  const gen = generation;
  const view = $("view");
  const body = h("div", { id: "ops-body" });
  let ops = [];
  // A choice among the values the list holds (state, pack, environment), "any" first.
  const choice = (key, id) => {
    const el = h("select", { id, onchange: () => { listFilter[key] = el.value; redraw(); } });
    return el;
  };
  const choices = { state: choice("state", "filter-state"), pack: choice("pack", "filter-pack"), environment: choice("environment", "filter-environment") };
  const text = (key, id) => {
    const el = h("input", { id, type: "search", autocomplete: "off", value: listFilter[key],
      oninput: () => { listFilter[key] = el.value; redraw(); } });
    return el;
  };
  const filters = h("form", { class: "filters", role: "search", "aria-label": "Filter the operations", onsubmit: (ev) => ev.preventDefault() },
    h("label", { for: "filter-state" }, "State"), choices.state,
    h("label", { for: "filter-resource" }, "Resource"), text("resource", "filter-resource"),
    h("label", { for: "filter-pack" }, "Pack"), choices.pack,
    h("label", { for: "filter-environment" }, "Environment"), choices.environment,
    h("label", { for: "filter-actor" }, "By"), text("actor", "filter-actor"));
  view.replaceChildren(
    h("h2", {}, "Operations"),
    may("apply") ? h("p", {}, h("a", { href: "#/new", id: "new-op", class: "button", "data-testid": "new-op" }, "New operation")) : "",
    filters, body);
  // Newest first; the rows the filters keep.
  const redraw = () => {
    for (const [key, sel] of Object.entries(choices)) {
      const values = [...new Set(ops.map((o) => o[key]).filter(Boolean))].sort();
      if (sel.dataset.key === values.join()) continue;
      sel.dataset.key = values.join();
      sel.replaceChildren(h("option", { value: "" }, "any"), ...values.map((x) => h("option", { value: x, selected: x === listFilter[key] }, x)));
      sel.value = listFilter[key];
    }
    const has = (v, f) => !f || String(v || "").toLowerCase().includes(f.toLowerCase());
    const is = (o, key) => !listFilter[key] || o[key] === listFilter[key];
    const shown = ops.filter((o) => is(o, "state") && is(o, "pack") && is(o, "environment") && has(o.resource, listFilter.resource) && has(o.actor, listFilter.actor))
      .sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
    patchSection(body, JSON.stringify([shown, ops.length]), () => drawList(shown, ops.length));
  };
  const draw = serial(async () => {
    const listed = await listFor(gen, "/api/v1/operations", "operations", "operations");
    if (!listed) return;
    ops = listed;
    redraw();
  });
  const drawList = (shown, total) => {
    const rows = shown.map((o) =>
        h("tr", { "data-testid": "op-row", "data-id": o.id },
          h("td", {}, h("a", { href: "#/operations/" + enc(o.id), "data-testid": "op-link" }, o.id)),
          h("td", {}, stateEl(o.state)),
          h("td", {}, o.detail),
          h("td", {}, o.resource ? h("a", { href: "#/resources/" + enc(o.resource) }, o.resource) : ""),
          h("td", { "data-testid": "op-pack" }, o.pack || ""),
          h("td", { "data-testid": "op-environment" }, o.environment || ""),
          h("td", {}, o.actor),
          h("td", {}, h("time", { datetime: o.created_at }, new Date(o.created_at).toLocaleString([], { hour12: false }))),
          h("td", { "data-testid": "op-duration" }, ["completed", "cancelled", "failed"].includes(o.state)
            ? fmtDuration(Date.parse(o.updated_at) - Date.parse(o.created_at)) : `${fmtDuration(Date.now() - Date.parse(o.created_at))} so far`)));
    if (!total) return h("p", { class: "muted" }, "No operations yet.");
    if (!shown.length) return h("p", { class: "muted", "data-testid": "no-match" }, `None of the ${total} operation(s) matches the filters.`);
    return h("table", { id: "operations", "data-testid": "operations" },
      h("caption", { class: "muted" }, shown.length === total ? `${total} operation(s), newest first, live` : `${shown.length} of ${total} operation(s), newest first, live`),
      h("thead", {}, h("tr", {}, ["Operation", "State", "Detail", "Resource", "Pack", "Environment", "By", "Started", "Duration"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows));
  };
  await draw();
  follow("/api/v1/events", debounce(draw), gen);
}

// ---- Packs and parameter schemas ----

const packCache = {};
async function packDetail(ref) {
  if (!ref) return null;
  if (!(ref in packCache)) {
    try {
      packCache[ref] = ((await api("GET", "/api/v1/packs/" + enc(ref))).versions || [])[0] || null;
    } catch (_) {
      packCache[ref] = null;
    }
  }
  return packCache[ref];
}

// One labelled input for a parameter of a template, from its schema (`type`, `default`, `enum`,
// `required`, `secret`, `description`). `read()` answers its typed value (undefined: not given).
function paramField(prefix, name, spec) {
  const id = safeId(`${prefix}-${name}`);
  const type = spec.type || "string";
  const hint = [type, spec.required ? "required" : null, spec.secret ? "secret" : null].filter(Boolean).join(", ");
  const label = h("label", { for: id }, name, " ", h("span", { class: "muted" }, `(${hint})`));
  const dflt = spec.secret ? undefined : spec.default;
  const described = spec.description ? id + "-help" : null;
  let input;
  let read;
  const common = { id, name, "data-param": name, "aria-describedby": described, required: !!spec.required && dflt === undefined };
  if (Array.isArray(spec.enum) && spec.enum.length) {
    input = h("select", common,
      spec.required ? null : h("option", { value: "" }, "(default)"),
      spec.enum.map((v, i) => h("option", { value: String(i), selected: JSON.stringify(v) === JSON.stringify(dflt) }, show(v))));
    read = () => (input.value === "" ? undefined : spec.enum[Number(input.value)]);
  } else if (type === "boolean") {
    input = h("input", { ...common, type: "checkbox", checked: dflt === true, required: false });
    read = () => input.checked;
  } else if (type === "integer" || type === "number") {
    input = h("input", { ...common, type: "number", step: type === "integer" ? "1" : "any", value: dflt });
    read = () => (input.value === "" ? undefined : Number(input.value));
  } else if (type === "list" || type === "map") {
    input = h("textarea", { ...common, rows: 3, placeholder: type === "list" ? '["a", "b"]' : '{"key": "value"}' },
      dflt === undefined ? "" : JSON.stringify(dflt));
    read = () => {
      if (input.value.trim() === "") return undefined;
      try { return JSON.parse(input.value); } catch (_) { throw new Error(`${name}: not JSON (${type})`); }
    };
  } else {
    input = h("input", { ...common, type: spec.secret ? "password" : "text", autocomplete: "off", value: dflt });
    read = () => (input.value === "" ? undefined : input.value);
  }
  return {
    el: h("div", { class: "field", "data-testid": "param", "data-param": name }, label, input,
      spec.description ? h("small", { id: described, class: "muted" }, spec.description) : null),
    read,
  };
}

// ---- The intent's targets and constraints ----

// The intent targets a scope reads: `from: [targets.members]` -> ["members"].
const targetNames = (from) => [].concat(from || []).map(String).filter((f) => f.startsWith("targets.")).map((f) => f.slice(8));

// One picker per target the template's scopes read (`targets.<name>`), listing the inventory's
// resources of the scope's type with their health. A scope derived from another's targets
// (`verifiers: {from: targets.members}`) gets no picker of its own: filling `members` fills it.
async function targetPickers(scopes) {
  const byTarget = {};
  for (const [scope, sc] of Object.entries(scopes)) {
    for (const t of targetNames(sc.from)) {
      const x = (byTarget[t] = byTarget[t] || { type: sc.resource_type, min: sc.min, max: sc.max });
      if (t === scope) Object.assign(x, { type: sc.resource_type, min: sc.min, max: sc.max });
    }
  }
  const pickers = [];
  for (const [name, x] of Object.entries(byTarget)) {
    let found = [];
    try {
      found = (await api("GET", "/api/v1/inventory?type=" + enc(x.type))).resources || [];
    } catch (e) {
      status(`Could not read the inventory of ${x.type}: ${e.message}`, true);
    }
    pickers.push(targetPicker(name, x, found));
  }
  return pickers;
}

// At fleet scale a target may list hundreds of hosts: a filter (every word must appear in the
// resource's id, health, status, environment or observed state) narrows the list, "Select all
// shown" / "Clear all shown" act on what it shows, and a live count says how many are shown and
// chosen. Chosen resources stay chosen while the filter hides them.
function targetPicker(name, x, found) {
  const bounds = [x.min !== undefined && x.min !== null ? `at least ${x.min}` : null, x.max !== undefined && x.max !== null ? `at most ${x.max}` : null].filter(Boolean).join(", ");
  const boxes = found.map((r) => {
    const id = safeId(`target-${name}-${r.id}`);
    const input = h("input", { id, type: "checkbox", name: "target-" + name, value: r.id, "data-target": name, onchange: () => recount() });
    const words = [r.id, r.health, r.status, r.environment, r.observed_state].filter(Boolean).join(" ").toLowerCase();
    return h("div", { class: "pick", "data-testid": "target-option", "data-target": name, "data-resource": r.id, "data-words": words },
      input, h("label", { for: id }, r.id, " ",
        h("span", { class: "health health-" + r.health, "data-testid": "target-health" }, r.health),
        h("span", { class: "muted" }, [r.status, r.environment, r.observed_state].filter(Boolean).map((v) => " · " + v).join(""))));
  });
  const inputs = boxes.map((b) => b.querySelector("input"));
  const read = () => inputs.filter((i) => i.checked).map((i) => i.value);
  const shown = () => boxes.filter((b) => !b.hidden).map((b) => b.querySelector("input"));
  const count = h("span", { class: "muted", role: "status", "aria-live": "polite", "data-testid": "target-count" });
  function recount() {
    count.textContent = `${shown().length} of ${boxes.length} shown, ${read().length} chosen`;
  }
  const filter = h("input", {
    id: safeId("target-filter-" + name), type: "search", autocomplete: "off", "data-testid": "target-filter",
    placeholder: "name, health, status, environment",
    oninput: () => {
      const terms = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      for (const b of boxes) b.hidden = !terms.every((t) => b.dataset.words.includes(t));
      recount();
    },
  });
  const set = (checked) => () => { for (const i of shown()) i.checked = checked; recount(); };
  const tools = boxes.length
    ? h("div", { class: "target-tools" },
        h("label", { for: filter.id }, `Filter ${name}`), filter,
        h("button", { type: "button", id: safeId("target-select-shown-" + name), "data-testid": "target-select-shown", onclick: set(true) }, "Select all shown"),
        h("button", { type: "button", id: safeId("target-clear-shown-" + name), "data-testid": "target-clear-shown", onclick: set(false) }, "Clear all shown"),
        count)
    : null;
  recount();
  const el = h("fieldset", { class: "targets", id: safeId("targets-" + name), "data-testid": "target", "data-target": name },
    h("legend", {}, `Targets: ${name} `, h("span", { class: "muted" }, `(${x.type}${bounds ? ", " + bounds : ""})`)),
    tools,
    boxes.length ? h("div", { class: "target-list" }, boxes) : h("p", { class: "muted", "data-testid": "no-targets" }, `The inventory holds no ${x.type}.`));
  return { name, el, read };
}

// Constraints of the intent (`constraints:`, the workload's attributes that `same-as-workload`
// requirements match): name and value rows, a value read as JSON when it
// is JSON (`3`, `true`, `["a"]`), else as text.
function constraintRows() {
  const rows = h("div", { id: "constraint-rows" });
  let n = 0;
  const add = () => {
    n += 1;
    const k = h("input", { id: `constraint-${n}-name`, type: "text", autocomplete: "off", "data-constraint": "name", placeholder: "region" });
    const v = h("input", { id: `constraint-${n}-value`, type: "text", autocomplete: "off", "data-constraint": "value", placeholder: "eu-west-1" });
    const row = h("div", { class: "constraint", "data-testid": "constraint" },
      h("label", { for: k.id }, `Constraint ${n} name`), k, h("label", { for: v.id }, `Constraint ${n} value`), v);
    row.append(h("button", { type: "button", "aria-label": `Remove constraint ${n}`, onclick: () => { row.remove(); addBtn.focus(); } }, "Remove"));
    rows.append(row);
    return k;
  };
  const addBtn = h("button", { type: "button", id: "add-constraint", onclick: () => add().focus() }, "Add a constraint");
  const read = () => {
    const out = {};
    for (const row of rows.children) {
      const key = row.querySelector("[data-constraint=name]").value.trim();
      const raw = row.querySelector("[data-constraint=value]").value.trim();
      if (!key) continue;
      let value = raw;
      try { value = JSON.parse(raw); } catch (_) { value = raw; }
      out[key] = value;
    }
    return out;
  };
  const el = h("fieldset", { id: "new-constraints", "data-testid": "constraints" }, h("legend", {}, "Constraints"),
    h("p", { class: "muted" }, "The workload's attributes (region: eu-west-1): a requirement whose constraint reads same-as-workload must match them."),
    rows, addBtn);
  return { el, read };
}

// ---- A new operation: pack, action, parameters; preview, then apply ----

async function newPage() {
  const gen = generation;
  const view = $("view");
  if (!may("apply")) {
    view.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← All operations")), h("h2", {}, "New operation"),
      h("p", { class: "muted", "data-testid": "new-not-allowed" },
        `Filing an operation needs the apply permission; your roles (${((me && me.roles) || []).join(", ")}) do not hold it.`));
    return;
  }
  const packs = await listFor(gen, "/api/v1/packs", "packs", "the packs");
  if (!packs) return;
  const packSel = h("select", { id: "new-pack", name: "pack", required: true },
    packs.map((p) => h("option", { value: p.reference }, `${p.title || p.id} (${p.reference})`)));
  const actionSel = h("select", { id: "new-template", name: "template", required: true });
  const typeSel = h("select", { id: "new-type", name: "target_resource_type", required: true });
  const name = h("input", { id: "new-name", name: "name", type: "text", required: true, autocomplete: "off", pattern: "[a-z0-9][a-z0-9\\-]*" });
  const env = h("input", { id: "new-env", name: "environment", type: "text", value: "dev", autocomplete: "off" });
  const desired = h("input", { id: "new-desired", name: "desired_result", type: "text", autocomplete: "off", "aria-describedby": "new-desired-help" });
  const params = h("fieldset", { id: "new-params", "data-testid": "params" });
  const targetsBox = h("div", { id: "new-targets", "data-testid": "targets" });
  const constraints = constraintRows();
  const preview = h("section", { id: "preview", "data-testid": "preview", "aria-live": "polite" });
  let fields = [];
  let targets = [];
  let scopes = {};
  let lastPreview = null;

  const pack = () => packs.find((p) => p.reference === packSel.value);
  const fillActions = () => {
    const p = pack();
    actionSel.replaceChildren(...(p ? p.templates : []).map((t) => h("option", { value: t.id }, `${t.action} (${t.id})`)));
    typeSel.replaceChildren(...(p ? p.resource_types : []).map((t) => h("option", { value: t }, t)));
  };
  let filling = 0;
  const fillParams = async () => {
    lastPreview = null;
    preview.replaceChildren();
    const mine = ++filling;
    const detail = await packDetail(packSel.value);
    // Another choice was made while this one loaded: that one draws the form.
    if (mine !== filling || !current(gen)) return;
    const t = ((detail && detail.templates) || []).find((x) => x.id === actionSel.value) || {};
    scopes = t.scopes || {};
    const picks = await targetPickers(scopes);
    if (mine !== filling || !current(gen)) return;
    fields = Object.entries(t.parameters || {}).map(([n, spec]) => ({ name: n, ...paramField("param", n, spec) }));
    targets = picks;
    params.replaceChildren(h("legend", {}, "Parameters"),
      ...(fields.length ? fields.map((f) => f.el) : [h("p", { class: "muted" }, "This action takes no parameters.")]));
    targetsBox.replaceChildren(...targets.map((x) => x.el));
  };
  const intent = () => {
    const p = pack();
    const t = p.templates.find((x) => x.id === actionSel.value);
    const doc = { target_resource_type: typeSel.value, action: t.action, pack: p.id, name: name.value.trim() };
    if (env.value.trim()) doc.environment = env.value.trim();
    if (desired.value.trim()) doc.desired_result = desired.value.trim();
    const values = {};
    for (const f of fields) {
      const v = f.read();
      if (v !== undefined) values[f.name] = v;
    }
    if (Object.keys(values).length) doc.parameters = values;
    const given = constraints.read();
    if (Object.keys(given).length) doc.constraints = given;
    const tg = {};
    for (const x of targets) {
      const ids = x.read();
      if (ids.length) tg[x.name] = ids;
    }
    if (Object.keys(tg).length) doc.targets = tg;
    return { intent: doc };
  };
  // The form's element for a plan error's `field` (`parameters.port`, `targets.nodes`,
  // `scopes.verifiers` — a scope is shown as the targets it reads —, `action`, …).
  const fieldsOf = (field) => {
    const [kind, rest] = [field.split(".")[0], field.split(".").slice(1).join(".")];
    if (kind === "parameters") return fields.filter((f) => f.name === rest).map((f) => f.el);
    if (kind === "targets") return targets.filter((x) => x.name === rest).map((x) => x.el);
    if (kind === "scopes") {
      const from = targetNames((scopes[rest] || {}).from);
      return targets.filter((x) => from.includes(x.name)).map((x) => x.el);
    }
    const own = { action: actionSel, pack: packSel, target_resource_type: typeSel }[kind];
    return own ? [own.parentElement] : [];
  };
  const clearFieldErrors = () => {
    for (const e of document.querySelectorAll("#new-form [data-testid=field-error]")) e.remove();
    for (const e of document.querySelectorAll("#new-form [aria-invalid]")) {
      e.removeAttribute("aria-invalid");
      const by = (e.getAttribute("aria-describedby") || "").split(" ").filter((x) => x && !x.startsWith("ferr-")).join(" ");
      if (by) e.setAttribute("aria-describedby", by); else e.removeAttribute("aria-describedby");
    }
  };
  // Each plan error beside its field, the field marked invalid and described by it; those of no
  // field stay in the summary only. Answers the first field with an error.
  const showFieldErrors = (errors) => {
    let first = null;
    errors.forEach((x, i) => {
      if (!x.field) return;
      for (const el of fieldsOf(x.field)) {
        const id = `ferr-${i}-${safeId(x.field)}`;
        // A scope the form hides (derived from other targets) is named by what fills it.
        const [kind, scope] = [x.field.split(".")[0], x.field.split(".").slice(1).join(".")];
        const derived = kind === "scopes" && !targets.some((t) => t.name === scope)
          ? ` (scope ${scope} is filled from the targets ${targetNames((scopes[scope] || {}).from).join(", ")})` : "";
        el.append(h("p", { id, class: "fail field-error", "data-testid": "field-error", "data-field": x.field }, `${x.code}: ${x.message}${derived}`));
        for (const input of el.querySelectorAll("input, select, textarea")) {
          input.setAttribute("aria-invalid", "true");
          input.setAttribute("aria-describedby", [input.getAttribute("aria-describedby"), id].filter(Boolean).join(" "));
        }
        first = first || el.querySelector("input, select, textarea");
      }
    });
    return first;
  };
  const doPreview = async (ev) => {
    ev.preventDefault();
    let body;
    try { body = intent(); } catch (e) { status(e.message, true); return; }
    clearFieldErrors();
    status("Planning…");
    try {
      const plan = await api("POST", "/api/v1/plans?format=text", body);
      lastPreview = JSON.stringify(body);
      status("Preview ready: nothing runs until you apply it.");
      const blocked = plan.status === "blocked";
      preview.replaceChildren(
        h("h3", { id: "preview-h", tabindex: "-1" }, "Plan preview"),
        h("p", {}, "Status: ", stateEl(String(plan.status || "")), ` · risk ${(plan.risk && plan.risk.level) || "-"} · revision ${plan.revision ? plan.revision.number : ""}`),
        h("pre", { "data-testid": "preview-text" }, plan.text || JSON.stringify(plan, null, 1)),
        h("button", { type: "button", class: "primary", id: "apply", "data-testid": "apply", disabled: blocked ? true : null,
          "aria-describedby": blocked ? "apply-why" : null, onclick: () => doApply(body) }, "Apply this plan"),
        ...(blocked ? [h("p", { id: "apply-why", class: "fail", "data-testid": "apply-why" },
          "This plan is blocked and cannot be applied: ", blockedReasons(plan).join("; ") || "see the preview above.")] : []));
      $("preview-h").focus();
    } catch (e) {
      const errors = ((e.details && e.details.errors) || []).filter((x) => typeof x === "object");
      preview.replaceChildren(h("div", { class: "fail", role: "alert", "data-testid": "preview-error", id: "preview-error", tabindex: "-1" },
        h("p", {}, h("strong", {}, "The plan cannot be built"), e.code ? ` (${e.code})` : "", ":"),
        (e.reasons || []).length ? h("ul", {}, e.reasons.map((x) => h("li", {}, x))) : h("p", {}, e.message)));
      const first = showFieldErrors(errors);
      (first || $("preview-error")).focus();
      status("The plan was refused: " + e.message, true);
    }
  };
  // Why a blocked plan is blocked: its unsatisfiable requirements, in the API's words.
  const blockedReasons = (plan) => (plan.resolution || []).filter((r) => r.outcome === "unsatisfiable")
    .map((r) => `${r.requirement}: ${r.reason || "unsatisfiable"}`);
  const doApply = async (body) => {
    if (lastPreview !== JSON.stringify(body)) return;
    status("Applying…");
    try {
      const created = await api("POST", "/api/v1/operations", body);
      status(`Operation ${created.id} created.`);
      location.hash = "#/operations/" + enc(created.id);
    } catch (e) {
      status("The server refused the operation: " + e.message, true);
    }
  };
  const form = h("form", { id: "new-form", "data-testid": "new-form", onsubmit: doPreview },
    h("div", { class: "field" }, h("label", { for: "new-pack" }, "Pack"), packSel),
    h("div", { class: "field" }, h("label", { for: "new-template" }, "Action"), actionSel),
    h("div", { class: "field" }, h("label", { for: "new-type" }, "Resource type"), typeSel),
    h("div", { class: "field" }, h("label", { for: "new-name" }, "Name ", h("span", { class: "muted" }, "(lowercase letters, digits, -)")), name),
    h("div", { class: "field" }, h("label", { for: "new-env" }, "Environment"), env),
    h("div", { class: "field" }, h("label", { for: "new-desired" }, "Desired result ", h("span", { class: "muted" }, "(optional)")), desired,
      h("small", { id: "new-desired-help", class: "muted" }, "What should be true when the operation is done, in your words; kept with the intent.")),
    params,
    targetsBox,
    constraints.el,
    h("button", { type: "submit", id: "preview-btn", "data-testid": "preview-btn" }, "Preview the plan"));
  // Any change voids the preview: a person applies exactly what they previewed.
  form.addEventListener("input", () => {
    lastPreview = null;
    const a = $("apply");
    if (a && !a.disabled) {
      a.disabled = true;
      a.after(h("p", { class: "muted", "data-testid": "apply-why" }, "The form changed after the preview: preview the plan again to apply it."));
    }
  });
  packSel.addEventListener("change", async () => { fillActions(); await fillParams(); });
  actionSel.addEventListener("change", fillParams);
  view.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← All operations")), h("h2", {}, "New operation"), form, preview);
  fillActions();
  await fillParams();
}

// ---- One operation ----

function roleAllows(gate) {
  const roles = (me && me.roles) || [];
  return may("answer_gates") && (gate.required_roles || []).some((r) => roles.includes(r));
}

async function answer(op, ctx, gate, option, value) {
  status(`Answering ${gate.id}: ${option}…`);
  const body = { option, revision: op.plan_revision };
  if (value !== undefined) body.value = value;
  try {
    await api("POST", `/api/v1/operations/${enc(op.id)}/gates/${enc(gate.id)}/answer`, body);
    status(`Answered ${gate.id}: ${option}.`);
  } catch (e) {
    status(`The server refused the answer to ${gate.id}: ${e.message}`, true);
  }
  reload(ctx);
}

// The schema of a missing-input gate's parameter (`input-<name>`), from the template.
function inputSpec(ctx, gate) {
  const name = gate.id.replace(/^input-/, "").replace(/-/g, "_");
  const t = ((ctx.pack && ctx.pack.templates) || []).find((x) => ctx.plan && x.id === ctx.plan.template);
  return { name, spec: (t && t.parameters && t.parameters[name]) || { type: "string" } };
}

function gateButtons(op, ctx, g, read) {
  return g.options.map((opt) => h("button", {
    type: "button", class: opt === g.options[0] ? "primary" : null, id: safeId(`gate-${g.id}-${opt}`),
    "data-testid": "gate-option", "data-gate": g.id, "data-option": opt,
    onclick: () => {
      let value;
      if (read && opt !== "cancel operation") {
        try { value = read(); } catch (e) { status(e.message, true); return; }
        if (value === undefined) { status(`${g.id} needs a value.`, true); return; }
      }
      answer(op, ctx, g, opt, value);
    },
  }, opt));
}

function gatesSection(op, ctx) {
  const open = (op.gates || []).filter((g) => (g.answer === null || g.answer === undefined) && g.kind !== "patch_review");
  const items = open.map((g) => {
    const allowed = roleAllows(g);
    let field = null;
    if (g.gate_type === "missing_input" && allowed) {
      const { name, spec } = inputSpec(ctx, g);
      field = paramField("gate-value-" + g.id, name, spec);
    }
    return h("div", { class: "gate", "data-testid": "gate", "data-gate": g.id, role: "group", "aria-label": "Gate " + g.id },
      h("h4", {}, `${g.id} (${g.gate_type})`),
      h("p", {}, g.reason),
      field ? field.el : null,
      allowed
        ? gateButtons(op, ctx, g, field && field.read)
        : h("p", { class: "muted", "data-testid": "gate-not-yours" },
            `Needs one of the roles ${g.required_roles.join(", ")}; you hold ${(me.roles || []).join(", ")}.`));
  });
  return [h("h3", { id: "gates-h" }, "Gates"), items.length ? items : h("p", { class: "muted" }, "No open gates.")];
}

// A failed run's diagnosis (`GET …/diagnosis`): for each failed job the analyzer's cause, its
// confidence, the log lines that matched, and the remedy; "Propose this remedy" fills the patch
// form with the remedy's plan patch (a person still reviews and sends it).
function diagnosisSection(op, ctx) {
  const list = ctx.diagnosis;
  if (!list || op.state !== "failed") return null;
  return [h("h3", { id: "diagnosis-h" }, "Diagnosis"),
    list.length ? list.map((d) => h("article", { class: "diagnosis" + (d.confidence > 0 ? "" : " unmatched"), "data-testid": "diagnosis", "data-job": d.job },
      h("p", {}, h("strong", {}, d.job), ": ", d.summary),
      d.cause && d.cause !== d.summary ? h("p", {}, "Cause: ", d.cause) : null,
      // A diagnosis without confidence found nothing: it says what it looked at, not what matched.
      h("p", { class: "muted" }, d.confidence > 0 ? `Confidence ${Math.round(d.confidence * 100)}% · ${d.analyzer}${d.remedy ? " · remedy " + d.remedy + (d.source ? ` (from the ${d.source === "library" ? "remedy library" : "pack"})` : "") : ""}` : `Analyzer: ${d.analyzer}`),
      (d.evidence || []).length ? [h("p", {}, d.confidence > 0 ? "What matched:" : "What it looked at:"), h("pre", { class: "log", "data-testid": "diagnosis-evidence" }, d.evidence.join("\n"))] : null,
      d.patch && may("patch") ? h("button", { type: "button", id: "remedy-" + safeId(d.job), "data-testid": "propose-remedy", onclick: () => {
        ctx.draft.text = JSON.stringify({ plan_patch: d.patch }, null, 2);
        ctx.draft.open = true;
        ctx.focus = "patch-yaml";
        ctx.paint(true);
      } }, `Propose this remedy for ${d.job}`) : null))
      : h("p", { class: "muted" }, "No analyzer recognises this failure; the job's log and evidence below say what happened.")];
}

// Patch review: each proposed patch with its diff and the Reviewer's findings; approve / reject
// at its `patch-<id>` gate for those who may (not its author).
function patchesSection(op, ctx) {
  const patches = ctx.patches || [];
  const items = patches.map((p) => {
    const gate = (op.gates || []).find((g) => g.id === p.gate);
    const open = gate && (gate.answer === null || gate.answer === undefined);
    let act = null;
    if (open) {
      if (p.author === me.actor) act = h("p", { class: "muted", "data-testid": "patch-own" }, "You proposed this patch: another person must approve it.");
      else if (!may("approve_patches") || !roleAllows(gate)) {
        act = h("p", { class: "muted", "data-testid": "patch-not-yours" },
          `Approving needs approve_patches and one of the roles ${gate.required_roles.join(", ")}; you hold ${(me.roles || []).join(", ")}.`);
      } else act = h("div", { class: "actions" }, gateButtons(op, ctx, gate));
    }
    const findings = p.findings || [];
    return h("article", { class: "patch", "data-testid": "patch", "data-patch": p.id, "aria-labelledby": "patch-h-" + safeId(p.id) },
      h("h4", { id: "patch-h-" + safeId(p.id) }, `Patch ${p.id} by ${p.author} `, stateEl(p.state, "patch-state")),
      p.reason ? h("p", {}, p.reason) : null,
      h("h5", {}, "Diff"),
      h("pre", { class: "diff", "data-testid": "patch-diff" }, (p.diff_text || "").split("\n").filter(Boolean).map((line) =>
        h("span", { class: line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "chg" }, line + "\n"))),
      h("h5", {}, "The plan after it"),
      patchDag(ctx, p),
      h("h5", {}, "Reviewer's findings"),
      findings.length
        ? h("ul", { "data-testid": "patch-findings" }, findings.map((f) =>
            h("li", { class: "finding-" + String(f.severity).toLowerCase() }, `${f.severity} ${f.code}: ${f.message}`)))
        : h("p", { class: "muted", "data-testid": "patch-findings" }, "The Reviewer found nothing to object to."),
      p.answered_by ? h("p", { class: "muted" }, `Answered by ${p.answered_by}.`) : null,
      act);
  });
  // What a person types is kept in `ctx.draft` across live redraws; so is the last answer.
  // Until the person types, the draft retries the first job that failed now.
  const draft = ctx.draft;
  const failedNow = (op.jobs || []).filter((j) => j.state === "failed").map((j) => j.id);
  // A draft that is valid as drafted: a reason and a retry of the failed job. Without a failed
  // job (a paused run) there is nothing to draft: the text area only shows an example.
  const initial = failedNow.length
    ? `plan_patch:\n  reason: retry ${failedNow[0]} after its failure\n  changes:\n    - retry: {job: ${failedNow[0]}}\n`
    : "";
  const result = draft.result
    ? h("p", { id: "patch-result", tabindex: "-1", "data-testid": "patch-result", role: draft.result.ok ? "status" : "alert",
        class: draft.result.ok ? "pass" : "fail" }, draft.result.text)
    : null;
  let propose = null;
  if ((op.state === "failed" || op.state === "paused") && may("patch")) {
    const text = h("textarea", { id: "patch-yaml", rows: 8, required: true, spellcheck: "false", "aria-describedby": "patch-help",
      placeholder: "plan_patch:\n  reason: why\n  changes:\n    - skip: {job: JOB}",
      oninput: () => { draft.text = text.value; } }, draft.text === null ? initial : draft.text);
    propose = h("details", { "data-testid": "propose-patch", open: draft.open, ontoggle: (ev) => toggled(ctx, draft, ev) },
      h("summary", { id: "patch-summary" }, "Propose a plan patch"),
      h("form", { id: "patch-form", onsubmit: async (ev) => {
        ev.preventDefault();
        status("Proposing the patch…");
        try {
          const r = await api("POST", `/api/v1/operations/${enc(op.id)}/patches`, text.value);
          draft.result = { ok: true, text: `Patch ${r.patch} proposed: ${r.detail}.` };
          draft.text = null;
          draft.open = false;
        } catch (e) {
          draft.result = { ok: false, text: "The patch was refused: " + e.message };
        }
        status(draft.result.text, !draft.result.ok);
        ctx.focus = "patch-result";
        paintLater(ctx);
      } },
        h("label", { for: "patch-yaml" }, "plan_patch document (YAML)"),
        text,
        h("small", { id: "patch-help", class: "muted" }, "Changes: insert_before / insert_after, retry, skip, set_parameters, add_gate. The Reviewer checks it; one that asks for approval waits for another person."),
        h("button", { type: "submit", id: "patch-submit" }, "Propose")));
  }
  return [h("h3", { id: "patches-h" }, "Patches"), items.length ? items : h("p", { class: "muted" }, "No patches."), result, propose];
}

// Pause, resume, retry and cancel, as the caller's permissions allow. Cancel asks first (with an
// optional reason); the question is kept across live redraws in `ctx.confirmCancel`.
function controlsSection(op, ctx, paint) {
  const act = async (what, label, body) => {
    status(`${label}…`);
    try {
      const r = await api("POST", `/api/v1/operations/${enc(op.id)}/${what}`, body || {});
      status(`${label}: done; the operation is ${r.state} (${r.detail}).`);
    } catch (e) { status(`The server refused ${what}: ${e.message}`, true); }
    reload(ctx);
  };
  const control = (what, label) => h("button", { type: "button", id: "op-" + what, "data-testid": "op-" + what,
    onclick: () => act(what, label) }, label);
  const buttons = [];
  const terminal = ["completed", "cancelled"].includes(op.state);
  // The lifecycle pauses a running operation only (anything else is 409).
  if (may("apply") && op.state === "running") buttons.push(control("pause", "Pause"));
  // A run paused at a gate goes on when the gate is answered, not by resume.
  if (may("apply") && op.state === "paused" && !String(op.detail).startsWith("paused: waiting for gate")) buttons.push(control("resume", "Resume"));
  if (may("intervene") && op.state === "failed") buttons.push(control("retry", "Retry failed jobs"));
  if (may("apply") && !terminal) {
    if (ctx.confirmCancel) {
      const reason = h("input", { id: "cancel-reason", type: "text", autocomplete: "off", placeholder: "cancelled by a person",
        value: ctx.cancelReason, oninput: () => { ctx.cancelReason = reason.value; } });
      buttons.push(h("div", { class: "confirm", role: "group", "aria-labelledby": "cancel-q", "data-testid": "cancel-confirm" },
        h("p", { id: "cancel-q" }, `Cancel ${op.id}? Its running jobs are stopped, and a cancelled operation cannot be resumed.`),
        h("label", { for: "cancel-reason" }, "Reason (optional)"), reason,
        h("div", { class: "actions" },
          h("button", { type: "button", id: "op-cancel-yes", class: "danger", "data-testid": "op-cancel-yes", onclick: () => {
            const why = reason.value.trim();
            ctx.confirmCancel = false;
            ctx.cancelReason = "";
            act("cancel", "Cancel", why ? { reason: why } : {});
          } }, "Yes, cancel the operation"),
          h("button", { type: "button", id: "op-cancel-no", onclick: () => { ctx.confirmCancel = false; ctx.focus = "op-cancel"; paint(); } }, "No, keep it"))));
    } else {
      buttons.push(h("button", { type: "button", id: "op-cancel", "data-testid": "op-cancel",
        onclick: () => { ctx.confirmCancel = true; ctx.focus = "op-cancel-no"; paint(); } }, "Cancel operation"));
    }
  }
  if (!buttons.length) {
    return terminal ? null : h("p", { class: "muted", "data-testid": "no-controls" },
      `Your roles (${((me && me.roles) || []).join(", ")}) allow no action on this operation now.`);
  }
  return h("div", { class: "actions", role: "group", "aria-label": "Operation controls", "data-focus-group": "controls" }, buttons);
}

// The evidence checks a job's contract names (what verifies a manual fix of it by default).
function evidenceOf(ctx, instance) {
  const job = ((ctx.pack && ctx.pack.jobs) || {})[String(instance).split("@")[0]];
  return ((job && job.outputs && job.outputs.evidence) || []).map((e) => (typeof e === "string" ? e : e.id || JSON.stringify(e)));
}

// Record a manual fix: the failed job, what was done, and the evidence checks that verify it.
// What a person typed is kept in `ctx.iv` across live redraws, and so is the last answer: each
// check with what it expected and observed, and whether the run goes on or stays failed.
function interventionSection(op, ctx) {
  const iv = ctx.iv;
  let result = null;
  if (iv.result) {
    const r = iv.result;
    result = h("div", { id: "iv-result", tabindex: "-1", "data-testid": "intervention-result", "data-verified": r.verified ? "true" : "false",
      role: r.verified ? "status" : "alert", class: "result " + (r.verified ? "pass" : "fail") },
      h("p", {}, h("strong", {}, r.text)),
      (r.checks || []).length ? h("ul", {}, r.checks.map((c) => h("li", { class: c.passed ? "pass" : "fail" },
        `${c.job} · ${c.check}: ${c.passed ? "passed" : "failed"} (expected ${c.expected}, observed ${c.observed})`))) : null);
  }
  if (op.state === "verification") return [h("p", { class: "muted", "data-testid": "intervention-busy" }, "Verifying the manual fix…"), result];
  if (!may("intervene") || op.state !== "failed") return result;
  const failed = (op.jobs || []).filter((j) => j.state === "failed");
  if (!failed.some((j) => j.id === iv.job)) {
    iv.job = failed.length ? failed[0].id : "";
    iv.checks = evidenceOf(ctx, iv.job).join(", ");
  }
  const job = h("select", { id: "iv-job", required: true, onchange: () => {
    const before = evidenceOf(ctx, iv.job).join(", ");
    iv.job = job.value;
    if (iv.checks === before) { iv.checks = evidenceOf(ctx, iv.job).join(", "); checks.value = iv.checks; }
  } }, failed.map((j) => h("option", { value: j.id, selected: j.id === iv.job }, j.id)));
  const note = h("textarea", { id: "iv-note", rows: 3, required: true, oninput: () => { iv.note = note.value; } }, iv.note);
  const checks = h("input", { id: "iv-checks", type: "text", autocomplete: "off", required: true, value: iv.checks,
    "aria-describedby": "iv-checks-help", oninput: () => { iv.checks = checks.value; } });
  const submit = async (ev) => {
    ev.preventDefault();
    const names = iv.checks.split(",").map((x) => x.trim()).filter(Boolean);
    const doc = { intervention: { type: "manually_fixed", target_job: iv.job, note: iv.note, requires_verification: names } };
    status(`Recording the fix of ${iv.job} and checking ${names.join(", ")}…`);
    try {
      const r = await api("POST", `/api/v1/operations/${enc(op.id)}/interventions`, doc);
      const list = r.checks || [];
      const verified = r.state !== "failed" && list.every((c) => c.passed);
      const passed = list.filter((c) => c.passed).length;
      iv.result = { verified, checks: list, text: verified
        ? `Verified: ${passed} of ${list.length} checks passed; the run goes on (${r.detail}).`
        : `Not verified: the evidence refutes the fix (${passed} of ${list.length} checks passed); the operation stays failed.` };
      if (verified) iv.note = "";
      status(iv.result.text, !verified);
    } catch (e) {
      iv.result = { verified: false, checks: [], text: "The intervention was refused: " + e.message };
      status(iv.result.text, true);
    }
    ctx.focus = "iv-result";
    paintLater(ctx);
  };
  return [h("details", { "data-testid": "intervention", open: iv.open, ontoggle: (ev) => toggled(ctx, iv, ev) },
    h("summary", { id: "iv-summary" }, "Record a manual fix (intervention)"),
    h("form", { id: "intervention-form", onsubmit: submit },
      h("label", { for: "iv-job" }, "Job fixed"), job,
      h("label", { for: "iv-note" }, "What was done"), note,
      h("label", { for: "iv-checks" }, "Evidence checks that verify it (comma-separated)"), checks,
      h("small", { id: "iv-checks-help", class: "muted" }, "The job's own evidence by default; they run now, and the run goes on only if every one passes."),
      h("button", { type: "submit", id: "iv-submit" }, "Record and verify"))), result];
}

// A <details> was opened or closed: remembered in `into.open`. The toggle event comes a moment
// after the click; when a live redraw replaced the element in between, paint again so the new
// one shows what the person chose.
function toggled(ctx, into, ev) {
  into.open = ev.target.open;
  if (!ev.target.isConnected && ctx.paint) ctx.paint(true);
}

// After an action's answer: draw what the page holds now, then ask the API for the rest (the
// live stream would bring it too).
function paintLater(ctx) {
  if (ctx.paint) ctx.paint();
  reload(ctx);
}

function reload(ctx) {
  if (ctx.reload) ctx.reload();
}

function jobIndex(op) {
  const jobs = {};
  for (const j of op.jobs || []) jobs[j.id] = j;
  return jobs;
}

function simpleView(op) {
  const jobs = jobIndex(op);
  const stages = op.stages || [];
  return h("ol", { class: "stages", "data-testid": "stages" }, stages.map((st) => {
    const ids = st.jobs || [];
    const done = ids.filter((id) => jobs[id] && ["succeeded", "skipped"].includes(jobs[id].state)).length;
    return h("li", { "data-testid": "stage", "data-stage": st.id },
      h("h4", {}, st.name || st.id),
      h("label", { for: "progress-" + safeId(st.id) }, `${done} of ${ids.length} jobs done `),
      h("progress", { id: "progress-" + safeId(st.id), max: ids.length || 1, value: done }),
      h("ul", {}, ids.map((id) => h("li", {}, id + ": ", stateEl(jobs[id] ? jobs[id].state : "pending")))));
  }));
}

function contractView(ctx, instance) {
  // A rollout's checks between waves run no job of the pack: what they check, and where.
  const planned = ((ctx.plan && ctx.plan.jobs) || []).find((j) => j.id === instance);
  if (planned && planned.verifies) return h("p", { "data-testid": "panel-checks" }, planned.title || "checks between waves");
  const job = ((ctx.pack && ctx.pack.jobs) || {})[instance.split("@")[0]];
  if (!job) return h("span", { class: "muted" }, "not available");
  const inputs = job.inputs || {};
  const outputs = job.outputs || {};
  const name = (x) => (typeof x === "string" ? x : x && x.capability ? x.capability + (x.scope ? " @ " + x.scope : "") : JSON.stringify(x));
  const list = (v) => (v && v.length ? v.map(name).join(", ") : "-");
  const req = inputs.requires || {};
  const prov = outputs.provides || {};
  const params = Object.entries(inputs.parameters || {}).map(([k, v]) => `${k}=${show(v)}`);
  return h("dl", { class: "contract" },
    h("dt", {}, "parameters"), h("dd", {}, params.length ? params.join(", ") : "-"),
    h("dt", {}, "requires"), h("dd", {}, list(req.capabilities), req.artifacts && req.artifacts.length ? " · artifacts " + list(req.artifacts) : ""),
    h("dt", {}, "provides"), h("dd", {}, list(prov.capabilities), outputs.artifacts && outputs.artifacts.length ? " · artifacts " + list(outputs.artifacts) : ""),
    h("dt", {}, "evidence"), h("dd", {}, list(outputs.evidence)));
}

// Job logs. Which panels are open and what they hold live in `ctx.logs` (job -> { entries,
// error, live }), so a live redraw draws them again instead of dropping them; every load of the
// page reads the open ones again, and while one of their jobs runs the page reads them every
// second (`tailLogs`): the running attempt's output is tailed from the job's live log
// (`/jobs/{job}/log?after=`, masked by the server as the final log is) and the final log
// replaces it when the attempt ends.
async function fetchLogs(ctx, job) {
  const id = ctx.op.id;
  try {
    const logs = (await api("GET", `/api/v1/operations/${enc(id)}/logs?job=${enc(job)}`)).logs || [];
    const live = await fetchLive(ctx, job, logs);
    if (ctx.logs[job]) ctx.logs[job] = { entries: logs, error: null, live };
  } catch (e) {
    const was = ctx.logs[job] || {};
    if (ctx.logs[job]) ctx.logs[job] = { entries: was.entries || null, error: e.message, live: was.live || null };
  }
}

// The running attempt's output since what the panel holds: { attempt, next, text }, or null when
// the job does not run or its attempt has ended (its final log is in `entries` then).
async function fetchLive(ctx, job, entries) {
  const last = entries[entries.length - 1];
  const running = (ctx.op.jobs || []).some((j) => j.id === job && j.state === "running");
  if (!running || !last || last.output !== null) return null;
  const prev = (ctx.logs[job] || {}).live;
  const after = prev && prev.attempt === last.attempt ? prev.next : 0;
  const r = await api("GET", `/api/v1/operations/${enc(ctx.op.id)}/jobs/${enc(job)}/log?after=${after}`);
  if (r.final || r.attempt !== last.attempt) return null;
  const head = after && r.from === after ? prev.text
    : r.from > 0 ? `[… the first ${r.from} bytes are no longer kept live]\n` : "";
  return { attempt: r.attempt, next: r.next, text: head + r.text };
}

async function toggleLogs(ctx, job) {
  if (ctx.logs[job]) delete ctx.logs[job];
  else {
    ctx.logs[job] = { entries: null, error: null };
    await fetchLogs(ctx, job);
  }
  ctx.focus = "logs-" + safeId(job);
  if (ctx.paint) ctx.paint();
}

const refreshLogs = (ctx) => Promise.all(Object.keys(ctx.logs).map((job) => fetchLogs(ctx, job)));

function logsView(ctx, job) {
  const l = ctx.logs[job];
  if (!l) return null;
  const running = ctx.op && (ctx.op.jobs || []).some((j) => j.id === job && j.state === "running");
  const list = l.entries || [];
  return h("div", { "data-testid": "logs", "data-job": job, "aria-live": running ? "polite" : null },
    l.error ? h("p", { class: "fail" }, l.error) : null,
    l.entries === null && !l.error ? h("p", { class: "muted" }, "Loading…") : null,
    l.entries !== null && !list.length ? h("p", { class: "muted" }, "No attempts yet.") : null,
    list.map((x) => h("div", {}, h("strong", {}, `attempt ${x.attempt}`), running && x === list[list.length - 1] ? h("span", { class: "muted" }, " · live") : null,
      h("pre", { class: "log", "data-testid": "log-output" }, x.output !== null ? x.output
        : running && x === list[list.length - 1] ? (l.live && l.live.attempt === x.attempt && l.live.text ? l.live.text : "(running: no output yet)")
        : "(no output captured)"))));
}

// A job's last outcome in words: how it ended, why it failed, how long it took.
function outcomeText(o) {
  if (!o || typeof o !== "object") return "";
  return [o.outcome, o.duration_ms !== undefined ? fmtDuration(o.duration_ms) : null].filter(Boolean).join(" · ") +
    (o.failure && o.failure !== o.outcome ? ` — ${o.failure}` : "");
}

function advancedView(op, ctx) {
  const evidence = op.evidence || [];
  return h("table", { "data-testid": "jobs" },
    h("thead", {}, h("tr", {}, ["Job", "Contract", "State", "Attempts", "Outcome", "Evidence", "Logs"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, (op.jobs || []).map((j) => {
      return h("tr", { "data-testid": "job", "data-job": j.id },
        h("td", {}, j.id),
        h("td", {}, contractView(ctx, j.id)),
        h("td", {}, stateEl(j.state)),
        h("td", {}, String(j.attempts)),
        h("td", { "data-testid": "job-outcome" }, outcomeText(j.outcome)),
        h("td", {}, h("ul", {}, evidence.filter((e) => e.job === j.id).map((e) =>
          h("li", { class: e.passed ? "pass" : "fail" },
            `${e.check}: ${e.passed ? "passed" : "failed"} (expected ${show(e.expected)}, observed ${show(e.observed)})`)))),
        h("td", {}, h("button", { type: "button", id: "logs-" + safeId(j.id), "aria-expanded": ctx.logs[j.id] ? "true" : "false",
          onclick: () => toggleLogs(ctx, j.id) }, `Logs of ${j.id}`), logsView(ctx, j.id)));
    })));
}

// The DAG: the plan's jobs and gates laid out by dagre (a layered, Sugiyama layout: ranks,
// fewer crossings, edges routed around nodes; vendored in `ui/vendor/`), left to right, each node
// as wide as its full label and coloured by its live state. The drawing fits the width; Zoom in,
// Zoom out and Fit (and the mouse wheel, and dragging) zoom and pan it, kept in `ctx.zoom` across
// live redraws. A node is a button: a click (or Enter) opens its side panel.
let measurer = null;
function textWidth(text, font) {
  measurer = measurer || document.createElement("canvas").getContext("2d");
  measurer.font = font;
  return measurer.measureText(text).width;
}

function nodeState(op, ctx, n) {
  if (n.kind === "gate") {
    const g = (op.gates || []).find((x) => x.id === n.id);
    return !g ? "pending" : g.answer ? "answered" : "open";
  }
  const j = (op.jobs || []).find((x) => x.id === n.id);
  return j ? j.state : "pending";
}

function dagView(op, ctx) {
  const plan = ctx.plan;
  if (!plan) return h("p", { class: "muted" }, "The plan is not available.");
  if (!window.dagre) return h("p", { class: "fail" }, "The DAG layout library did not load.");
  const nodes = {};
  for (const j of plan.jobs || []) nodes[j.id] = { id: j.id, kind: "job", deps: j.depends_on || [], title: j.title || j.job };
  for (const g of plan.gates || []) if (!nodes[g.id]) nodes[g.id] = { id: g.id, kind: "gate", deps: [], title: g.reason };
  for (const n of Object.values(nodes)) n.state = nodeState(op, ctx, n);
  // Fan-out groups (a job's instances, `install-runtime@n1`…): a collapsed one is one node,
  // `install-runtime ×3`, in the state that matters most among its instances.
  const groups = fanOut(plan);
  const into = {};
  for (const [base, ids] of Object.entries(groups)) {
    if (!ctx.collapsed.has(base)) continue;
    const members = ids.map((i) => nodes[i]);
    const counts = {};
    for (const m of members) counts[m.state] = (counts[m.state] || 0) + 1;
    const state = ["failed", "running", "cancelled", "pending"].find((x) => counts[x]) || members[0].state;
    const gid = `${base} ×${ids.length}`;
    for (const i of ids) { into[i] = gid; delete nodes[i]; }
    nodes[gid] = { id: gid, kind: "group", base, deps: [...new Set(members.flatMap((m) => m.deps))], state, title: Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ") };
  }
  for (const n of Object.values(nodes)) n.deps = [...new Set(n.deps.map((d) => into[d] || d))].filter((d) => d !== n.id && nodes[d]);
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 14, ranksep: 56, marginx: 10, marginy: 10 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of Object.values(nodes)) {
    const w = Math.max(textWidth(n.id, "600 13px system-ui, sans-serif"), textWidth(n.state, "12px system-ui, sans-serif")) + 24;
    g.setNode(n.id, { width: Math.ceil(Math.max(110, w)), height: 44 });
  }
  for (const n of Object.values(nodes)) for (const d of n.deps) if (nodes[d]) g.setEdge(d, n.id);
  dagre.layout(g);
  const { width, height } = g.graph();
  const edges = g.edges().map((e) => {
    const pts = g.edge(e).points;
    return s("path", { class: "edge", d: "M" + pts.map((p) => `${p.x},${p.y}`).join(" L"), "marker-end": "url(#arrow)" });
  });
  const shapes = Object.values(nodes).map((n) => {
    const p = g.node(n.id);
    const x = p.x - p.width / 2, y = p.y - p.height / 2;
    const open = () => (n.kind === "group" ? toggleGroup(ctx, n.base) : selectNode(ctx, n.id));
    return s("g", { class: `node node-${n.kind} node-${n.state}${ctx.selected === n.id ? " selected" : ""}`, "data-testid": "dag-node", "data-node": n.id,
      "data-state": n.state, role: "button", tabindex: "0", "aria-pressed": ctx.selected === n.id ? "true" : "false",
      "aria-label": n.kind === "group" ? `${n.id} instances: ${n.title}. Expand them` : `${n.kind} ${n.id}: ${n.state}. Open its details`, id: "node-" + safeId(n.id),
      onclick: open, onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); open(); } } },
      s("title", {}, `${n.kind} ${n.id}: ${n.state}${n.title ? " — " + n.title : ""}`),
      s("rect", { x, y, width: p.width, height: p.height, rx: n.kind === "gate" ? 18 : 6 }),
      s("text", { x: x + 12, y: y + 18, class: "name" }, n.id),
      s("text", { x: x + 12, y: y + 35, class: "st" }, n.kind === "group" ? n.title : `${n.kind === "gate" ? "gate · " : ""}${n.state}`));
  });
  const z = ctx.zoom;
  const inner = s("g", { class: "viewport", transform: `translate(${z.x},${z.y}) scale(${z.k})` }, edges, shapes);
  // Its natural size, shrunk to the page's width by CSS (`max-width: 100%`), never enlarged.
  const svg = s("svg", { class: "dag", "data-testid": "dag", viewBox: `0 0 ${width} ${height}`, width, height,
    preserveAspectRatio: "xMinYMin meet", role: "group",
    "aria-label": "Jobs and gates of the plan, in the order they run" },
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))),
    inner);
  const apply = () => inner.setAttribute("transform", `translate(${z.x},${z.y}) scale(${z.k})`);
  const zoomBy = (f) => { z.k = Math.min(4, Math.max(0.25, z.k * f)); apply(); };
  svg.addEventListener("wheel", (ev) => { ev.preventDefault(); zoomBy(ev.deltaY < 0 ? 1.1 : 1 / 1.1); }, { passive: false });
  let drag = null;
  svg.addEventListener("pointerdown", (ev) => { if (ev.target.closest(".node")) return; drag = { x: ev.clientX, y: ev.clientY, zx: z.x, zy: z.y }; });
  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const scale = width / svg.getBoundingClientRect().width;
    z.x = drag.zx + (ev.clientX - drag.x) * scale;
    z.y = drag.zy + (ev.clientY - drag.y) * scale;
    apply();
  });
  svg.addEventListener("pointerup", () => { drag = null; });
  svg.addEventListener("pointerleave", () => { drag = null; });
  const tools = h("div", { class: "actions dag-tools", role: "group", "aria-label": "Zoom and pan the DAG" },
    h("button", { type: "button", id: "dag-zoom-in", onclick: () => zoomBy(1.25) }, "Zoom in"),
    h("button", { type: "button", id: "dag-zoom-out", onclick: () => zoomBy(0.8) }, "Zoom out"),
    h("button", { type: "button", id: "dag-fit", onclick: () => { z.k = 1; z.x = 0; z.y = 0; apply(); } }, "Fit"),
    Object.entries(groups).map(([base, ids]) => h("button", { type: "button", id: "dag-group-" + safeId(base), "data-testid": "dag-group",
      "aria-pressed": ctx.collapsed.has(base) ? "true" : "false", onclick: () => toggleGroup(ctx, base) },
      `${ctx.collapsed.has(base) ? "Expand" : "Collapse"} ${base} ×${ids.length}`)),
    h("span", { class: "muted" }, "Drag to pan, wheel to zoom; a node opens its details."));
  return [tools, svg];
}

// The plan as a patch would leave it, for its review: the plan's nodes and the patch's changes
// (from its structured `diff`) marked — added jobs and gates, new dependencies, retried and
// skipped instances — laid out by dagre like the DAG, with a legend in words.
function patchDag(ctx, p) {
  const plan = ctx.plan;
  const d = p.diff || {};
  if (!plan || !window.dagre) return null;
  const nodes = {};
  for (const j of plan.jobs || []) nodes[j.id] = { deps: [...(j.depends_on || [])], mark: "" };
  for (const g of plan.gates || []) if (!nodes[g.id]) nodes[g.id] = { deps: [], mark: "" };
  for (const [id, deps] of d.added_jobs || []) nodes[id] = { deps: [...deps], mark: "added" };
  for (const id of d.added_gates || []) nodes[id] = nodes[id] || { deps: [], mark: "added" };
  const newEdges = new Set();
  for (const [id, dep] of d.added_edges || []) {
    if (!nodes[dep]) nodes[dep] = { deps: [], mark: "added" };
    if (nodes[id]) { nodes[id].deps.push(dep); newEdges.add(`${dep}>${id}`); }
  }
  for (const id of d.retried || []) if (nodes[id]) nodes[id].mark = "retried";
  for (const [id] of d.skipped || []) if (nodes[id]) nodes[id].mark = "skipped";
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 12, ranksep: 44, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const [id, n] of Object.entries(nodes)) {
    g.setNode(id, { width: Math.ceil(Math.max(90, textWidth(id, "600 13px system-ui, sans-serif") + 24)), height: n.mark ? 40 : 30 });
  }
  for (const [id, n] of Object.entries(nodes)) for (const dep of n.deps) if (nodes[dep]) g.setEdge(dep, id);
  dagre.layout(g);
  const { width, height } = g.graph();
  return h("div", { class: "dag-wrap patch-dag" },
    s("svg", { class: "dag", "data-testid": "patch-dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "list",
      "aria-label": `The plan after patch ${p.id}` },
      s("defs", {}, s("marker", { id: "arrow-" + safeId(p.id), viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))),
      g.edges().map((e) => s("path", { class: "edge" + (newEdges.has(`${e.v}>${e.w}`) ? " edge-added" : ""), "marker-end": `url(#arrow-${safeId(p.id)})`,
        d: "M" + g.edge(e).points.map((q) => `${q.x},${q.y}`).join(" L") })),
      Object.entries(nodes).map(([id, n]) => {
        const q = g.node(id);
        const x = q.x - q.width / 2, y = q.y - q.height / 2;
        return s("g", { class: "node patch-node" + (n.mark ? " node-" + n.mark : ""), role: "listitem", "data-testid": "patch-dag-node", "data-node": id, "data-mark": n.mark,
          "aria-label": `${id}${n.mark ? ": " + n.mark + " by the patch" : ""}` },
          s("rect", { x, y, width: q.width, height: q.height, rx: 6 }),
          s("text", { x: x + 12, y: y + 19, class: "name" }, id),
          n.mark ? s("text", { x: x + 12, y: y + 34, class: "st" }, n.mark) : null);
      })),
    h("p", { class: "muted" }, "After the patch: added jobs, gates and dependencies in green, retried jobs in blue, skipped ones crossed out in grey."));
}

// A Gantt chart of the attempts: one row per attempt, a bar from its start to its end (or now),
// coloured by how it ended, on one time axis from the operation's start. A row is a button that
// opens the job's panel.
function ganttView(op, ctx) {
  const rows = [];
  for (const j of op.jobs || []) for (const a of attemptsOf(op, j.id)) rows.push({ job: j.id, ...a });
  if (!rows.length) return h("p", { class: "muted" }, "No attempt has started yet.");
  rows.sort((a, b) => Date.parse(a.start) - Date.parse(b.start));
  const t0 = Date.parse(op.created_at);
  const terminal = ["completed", "cancelled", "failed"].includes(op.state);
  const tEnd = Math.max(t0 + 1, terminal ? Date.parse(op.updated_at) : Date.now(), ...rows.map((r) => Date.parse(r.end || r.start)));
  const label = Math.max(...rows.map((r) => textWidth(`${r.job} #${r.attempt}`, "12px system-ui, sans-serif"))) + 16;
  const W = 900, RH = 22, plot = W - label - 70;
  const X = (t) => label + ((t - t0) / (tEnd - t0)) * plot;
  const height = rows.length * RH + 24;
  return s("svg", { class: "gantt", "data-testid": "gantt", viewBox: `0 0 ${W} ${height}`, width: W, height, role: "list", "aria-label": "Attempts over time" },
    s("text", { x: label, y: height - 6, class: "axis" }, fmtTime(op.created_at)),
    s("text", { x: W - 70, y: height - 6, class: "axis", "text-anchor": "end" }, `+${fmtDuration(tEnd - t0)}`),
    rows.map((r, i) => {
      const x1 = X(Date.parse(r.start));
      const x2 = Math.max(x1 + 2, X(r.end ? Date.parse(r.end) : tEnd));
      const dur = fmtDuration((r.end ? Date.parse(r.end) : tEnd) - Date.parse(r.start));
      return s("g", { class: `bar bar-${r.how}${ctx.selected === r.job ? " selected" : ""}`, role: "listitem", "data-testid": "gantt-row", "data-job": r.job,
        "aria-label": `${r.job} attempt ${r.attempt}: ${r.how}, ${dur}`, onclick: () => selectNode(ctx, r.job) },
        s("title", {}, `${r.job} attempt ${r.attempt}: ${r.how}, ${dur}`),
        s("text", { x: 4, y: i * RH + 15, class: "label" }, `${r.job} #${r.attempt}`),
        s("rect", { x: x1, y: i * RH + 4, width: x2 - x1, height: RH - 8, rx: 3 }),
        s("text", { x: x2 + 4, y: i * RH + 15, class: "dur" }, dur));
    }));
}

// A plan's fan-out groups: job -> its instance ids, for jobs with more than one instance.
function fanOut(plan) {
  const by = {};
  for (const j of plan.jobs || []) if (j.id.includes("@")) (by[j.job] = by[j.job] || []).push(j.id);
  return Object.fromEntries(Object.entries(by).filter(([, ids]) => ids.length > 1));
}

function toggleGroup(ctx, base) {
  if (ctx.collapsed.has(base)) ctx.collapsed.delete(base);
  else ctx.collapsed.add(base);
  ctx.focus = "dag-group-" + safeId(base);
  if (ctx.paint) ctx.paint();
}

// The side panel of one node of the DAG (or a failing step of the header): its contract, its
// attempts with start, end and duration (from the timeline), its evidence with expected and
// observed values, its artifacts, and its log (read again on every update, every second while
// it runs).
function selectNode(ctx, id) {
  ctx.selected = id;
  if (id && !ctx.logs[id] && (ctx.plan && (ctx.plan.jobs || []).some((j) => j.id === id))) {
    ctx.logs[id] = { entries: null, error: null };
    fetchLogs(ctx, id).then(() => ctx.paint && ctx.paint());
  }
  ctx.focus = "panel-h";
  if (ctx.paint) ctx.paint();
}

const fmtTime = (at) => (at ? new Date(at).toLocaleTimeString([], { hour12: false }) : "-");
function fmtDuration(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return "-";
  const sec = Math.round(ms / 1000);
  if (ms < 1000) return `${ms} ms`;
  if (sec < 60) return `${sec} s`;
  const m = Math.floor(sec / 60);
  return m < 60 ? `${m} min ${sec % 60} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

// Each attempt of a job: (attempt, started, ended, how it ended), from the timeline's
// `job_started` and the `job_*` entry of the same attempt that ends it.
function attemptsOf(op, job) {
  const out = [];
  for (const e of op.timeline || []) {
    const d = e.data || {};
    if (d.job !== job || d.attempt === undefined) continue;
    if (e.event === "job_started") out.push({ attempt: d.attempt, start: e.at, end: null, how: "running" });
    else if (e.event.startsWith("job_")) {
      const a = out.find((x) => x.attempt === d.attempt && !x.end);
      if (a) { a.end = e.at; a.how = e.event.slice(4); }
    }
  }
  return out;
}

function panelView(op, ctx) {
  const id = ctx.selected;
  if (!id) return null;
  const job = (op.jobs || []).find((j) => j.id === id);
  const gate = (op.gates || []).find((g) => g.id === id);
  const close = h("button", { type: "button", id: "panel-close", "aria-label": "Close the details of " + id,
    onclick: () => { ctx.selected = null; ctx.focus = "node-" + safeId(id); ctx.paint(); } }, "Close");
  const head = [h("div", { class: "panel-head" }, h("h3", { id: "panel-h", tabindex: "-1" }, id), close)];
  if (!job) {
    return [...head, gate
      ? h("div", {}, h("p", {}, `Gate (${gate.gate_type}): `, stateEl(gate.answer ? "answered" : "open")), h("p", {}, gate.reason),
          gate.answer ? h("p", { class: "muted" }, `Answered ${gate.answer} by ${gate.answered_by} at ${fmtTime(gate.answered_at)}.`) : null)
      : h("p", { class: "muted" }, "Not started.")];
  }
  const now = Date.now();
  const attempts = attemptsOf(op, id);
  const evidence = (op.evidence || []).filter((e) => e.job === id);
  const artifacts = (op.artifacts || []).filter((a) => a.job === id);
  return [...head,
    h("p", {}, "State: ", stateEl(job.state, "panel-state"), job.outcome && job.outcome.failure ? h("span", { class: "fail" }, " — " + job.outcome.failure) : null),
    h("h4", {}, "Contract"), contractView(ctx, id),
    h("h4", {}, "Attempts"),
    attempts.length ? h("table", { "data-testid": "panel-attempts" },
      h("thead", {}, h("tr", {}, ["#", "Started", "Ended", "Duration", "Result"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, attempts.map((a) => h("tr", {}, h("td", {}, String(a.attempt)), h("td", {}, fmtTime(a.start)), h("td", {}, a.end ? fmtTime(a.end) : "-"),
        h("td", {}, fmtDuration((a.end ? Date.parse(a.end) : now) - Date.parse(a.start))), h("td", {}, stateEl(a.how))))))
      : h("p", { class: "muted" }, "No attempt yet."),
    h("h4", {}, "Evidence"),
    evidence.length ? h("ul", { "data-testid": "panel-evidence" }, evidence.map((e) => h("li", { class: e.passed ? "pass" : "fail" },
      `${e.check}: ${e.passed ? "passed" : "failed"} — expected ${show(e.expected)}, observed ${show(e.observed)}`)))
      : h("p", { class: "muted" }, "No evidence checked yet."),
    h("h4", {}, "Artifacts"),
    artifacts.length ? h("ul", {}, artifacts.map((a) => h("li", {}, `${a.id} (${a.sensitivity})`))) : h("p", { class: "muted" }, "None."),
    h("h4", {}, "Log"), logsView(ctx, id) || h("p", { class: "muted" }, "Loading…")];
}

// The run console's header: state, progress in jobs, when it started and how long it has run,
// who filed it, and the failing step (a link opening its panel).
function headerFacts(op, ctx) {
  const jobs = op.jobs || [];
  const done = jobs.filter((j) => ["succeeded", "skipped", "already_satisfied", "recovered", "manually_fixed"].includes(j.state)).length;
  const terminal = ["completed", "cancelled", "failed"].includes(op.state);
  const end = terminal ? Date.parse(op.updated_at) : Date.now();
  const failing = jobs.filter((j) => j.state === "failed");
  return h("dl", { class: "facts", "data-testid": "run-header" },
    h("div", {}, h("dt", {}, "State"), h("dd", {}, stateEl(op.state, "op-state"), " ", h("span", { class: "muted detail", "data-testid": "op-detail" }, op.detail))),
    h("div", {}, h("dt", {}, "Progress"), h("dd", { "data-testid": "run-progress" }, `${done}/${jobs.length} jobs`,
      h("progress", { max: jobs.length || 1, value: done, "aria-label": `${done} of ${jobs.length} jobs done` }))),
    wavesFacts(op, ctx),
    h("div", {}, h("dt", {}, "Started"), h("dd", { "data-testid": "run-started" }, h("time", { datetime: op.created_at }, new Date(op.created_at).toLocaleString([], { hour12: false })))),
    h("div", {}, h("dt", {}, "Duration"), h("dd", { "data-testid": "run-duration" },
      h("span", { id: "run-duration-value", "data-since": terminal ? null : op.created_at }, fmtDuration(end - Date.parse(op.created_at))), terminal ? "" : " so far")),
    h("div", {}, h("dt", {}, "By"), h("dd", {}, op.actor)),
    failing.length ? h("div", {}, h("dt", {}, "Failing step"), h("dd", { "data-testid": "run-failing" }, failing.map((j) =>
      h("a", { href: "#/operations/" + enc(op.id), "data-job": j.id, id: "failing-" + safeId(j.id),
        onclick: (ev) => { ev.preventDefault(); selectNode(ctx, j.id); } }, j.id)))) : null);
}

// A fleet rollout's progress, one line per rolled-out job: the first wave not finished (or the
// last), its instances done and failed, and the failures the rollout still tolerates — what the
// CLI's live view prints (`wave 2/4: 12/50 done, 1 failed, budget 1 left`).
function wavesFacts(op, ctx) {
  const plan = ctx.plan;
  if (!plan || !(plan.rollouts || []).length) return null;
  const state = {};
  for (const j of op.jobs || []) state[j.id] = j.state;
  const isDone = (j) => ["succeeded", "skipped", "already_satisfied", "recovered", "manually_fixed"].includes(state[j.id]);
  const isFailed = (j) => ["failed", "cancelled"].includes(state[j.id]);
  return h("div", {}, h("dt", {}, "Waves"), h("dd", { "data-testid": "run-waves" }, plan.rollouts.map((r) => {
    const mine = (plan.jobs || []).filter((j) => j.job === r.job && j.wave);
    const waves = r.waves.map((_, i) => mine.filter((j) => j.wave === i + 1));
    let k = waves.findIndex((js) => !js.every((j) => isDone(j) || isFailed(j)));
    if (k < 0) k = waves.length - 1;
    const js = waves[k] || [];
    const done = js.filter(isDone).length;
    const failed = js.filter(isFailed).length;
    const left = Math.max(0, r.max_failures - mine.filter(isFailed).length);
    const text = `wave ${k + 1}/${waves.length}: ${done}/${js.length} done, ${failed} failed, budget ${left} left`;
    return h("div", { "data-testid": "run-wave", "data-job": r.job }, `${r.job}: ${text} `,
      h("progress", { max: js.length || 1, value: done + failed, "aria-label": `${r.job} ${text}` }));
  })));
}

// The resolved capability graph: each requirement, how it was resolved and every candidate
// rejected with its reason.
function capabilityView(ctx) {
  const res = (ctx.plan && (ctx.plan.capability_bindings || ctx.plan.resolution)) || [];
  if (!res.length) return h("p", { class: "muted", "data-testid": "capabilities" }, "The plan requires no capabilities from outside its own jobs.");
  // A scope's binding (`outcome: bind` with `resources[]`) names each resource of the scope; a
  // gate's options are objects with a label.
  const boundTo = (r) => {
    if (Array.isArray(r.resources)) return `${r.resources.join(", ") || "(no resource)"}${r.provider ? " via " + r.provider : ""}`;
    switch (r.outcome) {
      case "bind": return `${r.resource}${r.provider ? " via " + r.provider : ""}${r.because ? " (" + r.because + ")" : ""}`;
      case "create": return `created by ${r.provider} through ${r.create.pack} ${r.create.action} (sub-operation)`;
      case "gate": return `gate ${r.gate}: ${(r.options || []).map((o) => (typeof o === "string" ? o : o.label || o.kind)).join(" / ")}`;
      default: return r.reason || "";
    }
  };
  return h("table", { "data-testid": "capabilities" },
    h("thead", {}, h("tr", {}, ["Requirement", "Required by", "Outcome", "Binding", "Rejected candidates"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, res.map((r) => h("tr", { "data-testid": "capability", "data-capability": r.requirement },
      h("td", {}, r.requirement, r.scope ? ` @ ${r.scope}` : ""),
      h("td", {}, (r.required_by || []).join(", ")),
      h("td", {}, h("span", { class: "outcome outcome-" + r.outcome }, r.outcome)),
      h("td", {}, boundTo(r)),
      h("td", {}, (r.rejected || []).length
        ? h("ul", {}, r.rejected.map((x) => h("li", {}, h("strong", {}, x.candidate), ": ", x.reason)),
            r.rejected_total > r.rejected.length ? h("li", { class: "muted" }, `and ${r.rejected_total - r.rejected.length} more`) : null)
        : h("span", { class: "muted" }, "none"))))));
}

// Artifacts by sensitivity: secret content is never fetched unless revealed by a role allowed to
// (the server audits the reveal before it answers).
function artifactsView(op) {
  const list = op.artifacts || [];
  if (!list.length) return h("p", { class: "muted" }, "No artifacts.");
  return h("table", { "data-testid": "artifacts" },
    h("thead", {}, h("tr", {}, ["Artifact", "Job", "Sensitivity", "Size", "Content"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, list.map((a) => {
      const out = h("div", { "data-testid": "artifact-content" });
      const secret = a.sensitivity === "secret";
      const key = safeId(`${a.job}-${a.id}`);
      let act;
      if (!secret) {
        act = h("button", { type: "button", id: "show-" + key, onclick: async () => {
          try {
            const text = await api("GET", `/api/v1/operations/${enc(op.id)}/artifacts/${enc(a.id)}`, undefined, true);
            out.replaceChildren(h("pre", {}, text));
          } catch (e) { out.replaceChildren(h("p", { class: "fail" }, e.message)); }
        } }, `Show ${a.id}`);
      } else if (may("reveal_secrets")) {
        const reason = h("input", { id: "reason-" + key, type: "text", required: true, autocomplete: "off" });
        act = h("form", { class: "reveal", onsubmit: async (ev) => {
          ev.preventDefault();
          try {
            const text = await api("POST", `/api/v1/operations/${enc(op.id)}/artifacts/${enc(a.id)}/reveal`, { reason: reason.value }, true);
            out.replaceChildren(h("pre", { class: "secret" }, text), h("p", { class: "muted" }, "Revealed to you; the reveal is in the audit log."));
          } catch (e) { out.replaceChildren(h("p", { class: "fail" }, e.message)); }
        } }, h("label", { for: "reason-" + key }, `Why reveal ${a.id}?`), reason, h("button", { type: "submit", id: "reveal-" + key, "data-testid": "reveal" }, "Reveal (audited)"));
      } else {
        act = h("p", { class: "muted", "data-testid": "secret-hidden" }, "Secret: the content is not shown; revealing it needs reveal_secrets.");
      }
      return h("tr", { "data-testid": "artifact", "data-artifact": a.id, "data-sensitivity": a.sensitivity },
        h("td", {}, a.id, h("br"), h("small", { class: "muted" }, a.reference)),
        h("td", {}, a.job),
        h("td", {}, h("span", { class: "sensitivity sensitivity-" + a.sensitivity }, a.sensitivity)),
        h("td", {}, a.size === undefined ? "" : `${a.size} B`),
        h("td", {}, act, out));
    })));
}

function timelineView(op) {
  return [h("h3", { id: "timeline-h" }, "Timeline"),
    h("ol", { class: "timeline", "data-testid": "timeline" }, (op.timeline || []).map((e) =>
      h("li", {}, h("time", {}, e.at), ` ${e.actor} ${e.event}`, e.to ? ` → ${e.to}` : "", e.reason ? `: ${e.reason}` : "")))];
}

async function operationPage(id) {
  const gen = generation;
  const view = $("view");
  const sec = (name, label) => h("section", { id: "sec-" + name, "data-testid": "sec-" + name, "aria-labelledby": label });
  const parts = {
    head: h("div", { id: "op-head" }),
    diagnosis: sec("diagnosis", "diagnosis-h"),
    gates: sec("gates", "gates-h"),
    patches: sec("patches", "patches-h"),
    progress: sec("progress", "progress-h"),
    dag: sec("dag", "dag-h"),
    gantt: sec("gantt", "gantt-h"),
    panel: h("aside", { id: "sec-panel", "data-testid": "node-panel", "aria-labelledby": "panel-h", class: "panel" }),
    caps: sec("caps", "caps-h"),
    artifacts: sec("artifacts", "artifacts-h"),
    act: h("div", { id: "op-act" }),
    timeline: sec("timeline", "timeline-h"),
  };
  view.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← All operations")),
    h("nav", { class: "toc", "aria-label": "Sections of the operation" }, h("ul", {},
      [["diagnosis", "Diagnosis"], ["gates", "Gates"], ["patches", "Patches"], ["progress", "Progress"], ["dag", "DAG"], ["gantt", "Attempts"], ["caps", "Capabilities"], ["artifacts", "Artifacts"], ["timeline", "Timeline"]]
        .map(([k, t]) => h("li", {}, h("a", { href: "#/operations/" + enc(id), "data-section": k, onclick: (ev) => { ev.preventDefault(); $("sec-" + k).scrollIntoView(); } }, t))))),
    parts.head, parts.diagnosis, parts.gates, parts.patches,
    h("div", { class: "console" }, h("div", {}, parts.dag, parts.gantt), parts.panel),
    parts.progress, parts.caps, parts.artifacts, parts.act, parts.timeline);
  // What the page knows (the last answers of the API) and what the person is doing on it (forms
  // half filled, a question asked): `paint` draws the sections from it without asking the API,
  // `load` asks the API, one call at a time, then paints.
  const ctx = {
    op: null, plan: null, revision: null, pack: null, patches: [],
    confirmCancel: false, cancelReason: "", focus: null, logs: {}, selected: null, zoom: { k: 1, x: 0, y: 0 }, collapsed: new Set(),
    iv: { open: false, job: "", note: "", checks: "", result: null },
    draft: { open: false, text: null, result: null },
  };
  // `force`: draw every section again, changed or not.
  const paint = (force) => {
    const op = ctx.op;
    if (!op || !current(gen)) return;
    if (force === true) Object.values(parts).forEach((p) => { delete p.dataset.key; });
    const who = me && me.actor;
    patchSection(parts.head, JSON.stringify([op.state, op.detail, op.plan_revision, ctx.revision, who, ctx.confirmCancel, op.jobs, op.updated_at]), () => [
      h("h2", {}, "Operation ", h("span", { "data-testid": "op-id" }, op.id)),
      headerFacts(op, ctx),
      h("p", { class: "muted" }, `${op.pack || ""} · resource `, op.resource ? h("a", { href: "#/resources/" + enc(op.resource) }, op.resource) : "-",
        ` · by ${op.actor} · revision ${ctx.plan && ctx.plan.revision ? ctx.plan.revision.number : op.plan_revision}`),
      controlsSection(op, ctx, paint)]);
    patchSection(parts.diagnosis, JSON.stringify([ctx.diagnosis, op.state, who]), () => diagnosisSection(op, ctx));
    patchSection(parts.gates, JSON.stringify([op.gates, op.plan_revision, who, op.state]), () => gatesSection(op, ctx));
    patchSection(parts.patches, JSON.stringify([ctx.patches, op.gates, op.state, op.plan_revision, who, op.jobs.map((j) => j.state), ctx.draft.result]),
      () => patchesSection(op, ctx));
    patchSection(parts.progress, JSON.stringify([advanced, op.jobs, op.stages, op.evidence, op.plan_revision, ctx.logs]), () => [
      h("h3", { id: "progress-h" }, advanced ? "Jobs" : "Stages", " ",
        h("button", { type: "button", id: "mode-toggle", "data-testid": "mode-toggle", "aria-pressed": advanced ? "true" : "false",
          onclick: () => { advanced = !advanced; paint(); } }, advanced ? "Simple view" : "Advanced view")),
      advanced ? advancedView(op, ctx) : simpleView(op)]);
    patchSection(parts.dag, JSON.stringify([ctx.revision, op.jobs.map((j) => j.state), op.gates.map((g) => g.answer), ctx.selected, [...ctx.collapsed]]), () => [
      h("h3", { id: "dag-h" }, "DAG"), h("div", { class: "dag-wrap" }, dagView(op, ctx))]);
    patchSection(parts.gantt, JSON.stringify([op.timeline.length, op.state, ctx.selected]), () => [
      h("h3", { id: "gantt-h" }, "Attempts over time"), ganttView(op, ctx)]);
    parts.panel.hidden = !ctx.selected;
    parts.panel.parentNode.classList.toggle("with-panel", !!ctx.selected);
    patchSection(parts.panel, JSON.stringify([ctx.selected, op.jobs, op.evidence, op.artifacts, op.timeline, op.gates, ctx.logs[ctx.selected]]), () => panelView(op, ctx));
    patchSection(parts.caps, JSON.stringify(ctx.revision), () => [h("h3", { id: "caps-h" }, "Capability graph"), capabilityView(ctx)]);
    patchSection(parts.artifacts, JSON.stringify([op.artifacts, who]), () => [h("h3", { id: "artifacts-h" }, "Artifacts"), artifactsView(op)]);
    patchSection(parts.act, JSON.stringify([op.state, who, op.jobs.map((j) => [j.id, j.state]), ctx.iv.result]), () => interventionSection(op, ctx));
    patchSection(parts.timeline, JSON.stringify(op.timeline), () => timelineView(op));
    if (ctx.focus && $(ctx.focus)) {
      $(ctx.focus).focus();
      ctx.focus = null;
    }
  };
  ctx.paint = paint;
  const load = ctx.reload = serial(async () => {
    let op;
    try {
      op = await api("GET", "/api/v1/operations/" + enc(id));
      if (ctx.revision !== op.plan_revision) {
        ctx.plan = await api("GET", `/api/v1/operations/${enc(id)}/plan`).catch(() => null);
        // Large fan-outs start collapsed (more than 4 instances); a person's choice is kept.
        if (ctx.plan && !ctx.grouped) {
          ctx.grouped = true;
          for (const [base, ids] of Object.entries(fanOut(ctx.plan))) if (ids.length > 4) ctx.collapsed.add(base);
        }
        ctx.revision = op.plan_revision;
      }
      if (!ctx.pack) ctx.pack = await packDetail(op.pack);
      ctx.patches = (await api("GET", `/api/v1/operations/${enc(id)}/patches`)).patches || [];
      // A failed run's diagnosis, asked again only when the operation changed.
      if (op.state !== "failed") ctx.diagnosis = null;
      else if (!ctx.diagnosis || ctx.diagnosedAt !== op.updated_at) {
        ctx.diagnosis = (await api("GET", `/api/v1/operations/${enc(id)}/diagnosis`).catch(() => ({ diagnosis: [] }))).diagnosis || [];
        ctx.diagnosedAt = op.updated_at;
      }
      ctx.op = ctx.op || op;
      await refreshLogs(ctx);
    } catch (e) {
      if (!current(gen)) return;
      status("Could not load the operation: " + e.message, true);
      // Nothing of another page stays on screen: a missing operation is said so.
      if (!ctx.op) view.replaceChildren(notFound("operation", id, e, "#/", "All operations"));
      return;
    }
    ctx.op = op;
    paint();
  });
  await load();
  if (!ctx.op || !current(gen)) return;
  // The tail of the open logs of running jobs, every second (a job's output makes no event).
  const tail = setInterval(async () => {
    if (!current(gen)) { clearInterval(tail); return; }
    const since = $("run-duration-value");
    if (since && since.dataset.since) since.textContent = fmtDuration(Date.now() - Date.parse(since.dataset.since));
    const running = new Set((ctx.op.jobs || []).filter((j) => j.state === "running").map((j) => j.id));
    const open = Object.keys(ctx.logs).filter((j) => running.has(j));
    if (!open.length) return;
    await Promise.all(open.map((j) => fetchLogs(ctx, j)));
    paint();
  }, 1000);
  follow(`/api/v1/operations/${enc(id)}/events`, debounce(load), gen);
}

// ---- Resources ----

async function resourcesPage() {
  const gen = generation;
  const view = $("view");
  const body = h("div", {});
  view.replaceChildren(h("h2", {}, "Resources"), body);
  const draw = serial(async () => {
    const list = await listFor(gen, "/api/v1/resources", "resources", "resources");
    if (!list) return;
    patchSection(body, JSON.stringify(list), () => list.length === 0 ? h("p", { class: "muted" }, "No resources recorded yet.") :
      h("table", { "data-testid": "resources" },
        h("thead", {}, h("tr", {}, ["Resource", "Status", "Health", "Observed", "Explained by", "Updated"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, list.map((r) => h("tr", { "data-testid": "resource-row", "data-id": r.id },
          h("td", {}, h("a", { href: "#/resources/" + enc(r.id) }, r.id)),
          h("td", {}, stateEl(String(r.status || "-"))),
          h("td", {}, h("span", { class: "health health-" + r.health }, String(r.health || "-"))),
          h("td", {}, h("code", {}, r.observed_state ? show(r.observed_state) : "-")),
          h("td", {}, r.last_operation ? h("a", { href: "#/operations/" + enc(r.last_operation) }, r.last_operation) : "-"),
          h("td", {}, r.updated_at || ""))))));
  });
  await draw();
  follow("/api/v1/events", debounce(draw), gen);
}

async function resourcePage(id) {
  const gen = generation;
  const view = $("view");
  let r;
  try {
    r = await api("GET", "/api/v1/resources/" + id.split("/").map(enc).join("/"));
  } catch (e) {
    if (!current(gen)) return;
    status("Could not load the resource: " + e.message, true);
    view.replaceChildren(notFound("resource", id, e, "#/resources", "All resources"));
    return;
  }
  if (!current(gen)) return;
  const doc = r.resource || {};
  const desired = Object.fromEntries(Object.entries(doc).filter(([k]) => !["observed_state", "health", "status"].includes(k)));
  view.replaceChildren(
    h("p", {}, h("a", { href: "#/resources" }, "← All resources")),
    h("h2", {}, "Resource ", h("span", { "data-testid": "resource-id" }, r.id)),
    h("p", {}, "Status: ", stateEl(String(doc.status || "-")), " · health: ", h("span", { class: "health health-" + doc.health, "data-testid": "resource-health" }, String(doc.health || "-")),
      " · ", h("span", { "data-testid": "resource-verified" }, lastVerified(r))),
    h("div", { class: "columns" },
      h("section", { "aria-labelledby": "desired-h" }, h("h3", { id: "desired-h" }, "Desired"), h("pre", { "data-testid": "desired" }, JSON.stringify(desired, null, 2))),
      h("section", { "aria-labelledby": "observed-h" }, h("h3", { id: "observed-h" }, "Observed"), h("pre", { "data-testid": "observed" }, typeof doc.observed_state === "string" ? doc.observed_state : JSON.stringify(doc.observed_state || null, null, 2)))),
    historyView(r),
    h("section", { "aria-labelledby": "ops-h" }, h("h3", { id: "ops-h" }, "Operations that explain it"),
      h("ul", { "data-testid": "resource-ops" }, (r.operations || []).map((o) =>
        h("li", {}, h("a", { href: "#/operations/" + enc(o.id) }, o.id), " ", stateEl(o.state), ` ${o.detail} · by ${o.actor} · ${o.created_at}`)))));
}

// When the resource's evidence was last checked (a `verified` entry of its history).
function lastVerified(r) {
  const v = (r.history || []).filter((e) => e.kind === "verified").pop();
  return v ? `last verified ${new Date(v.at).toLocaleString([], { hour12: false })}: ${v.summary}` : "never verified";
}

// A resource's history, newest first: each operation that changed it and each verification, with
// the status it left and the operation that explains it.
function historyView(r) {
  const list = (r.history || []).slice().reverse();
  return h("section", { "aria-labelledby": "history-h" }, h("h3", { id: "history-h" }, "History"),
    list.length ? h("table", { "data-testid": "resource-history" },
      h("thead", {}, h("tr", {}, ["When", "What", "Status after", "Operation", "Summary", "By"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, list.map((e) => h("tr", {},
        h("td", {}, h("time", { datetime: e.at }, new Date(e.at).toLocaleString([], { hour12: false }))),
        h("td", {}, e.kind),
        h("td", {}, stateEl(e.status)),
        h("td", {}, e.operation ? h("a", { href: "#/operations/" + enc(e.operation) }, e.operation) : "-"),
        h("td", {}, e.summary),
        h("td", {}, e.actor)))))
      : h("p", { class: "muted" }, "Nothing recorded yet."));
}

// The page of something the API could not give (missing, or refused): what and why, and a way
// back. Nothing of the page before stays.
function notFound(kind, id, e, back, backText) {
  return h("div", { "data-testid": "not-found", "data-status": e.status || "" },
    h("p", {}, h("a", { href: back }, "← " + backText)),
    h("h2", { id: "not-found-h", tabindex: "-1" }, e.status === 404 ? `No ${kind} ${id}` : `The ${kind} ${id} cannot be shown`),
    h("p", { class: "fail" }, e.message));
}

// Each render is one generation: a page whose render was superseded (another navigation, a
// sign-out) while it waited for the API neither draws nor opens a stream.
let generation = 0;
const current = (gen) => gen === generation;

async function render() {
  const gen = ++generation;
  stopStream();
  if (!sessionStorage.getItem(KEY)) return showSignIn();
  if (!me && !(await signIn(sessionStorage.getItem(KEY)))) return showSignIn();
  if (!current(gen)) return;
  $("signin").hidden = true;
  $("signout").hidden = false;
  $("nav").hidden = false;
  $("whoami").textContent = `Signed in as ${me.name} (${(me.roles || []).join(", ")})`;
  // Filing an operation needs `apply`: nobody else is offered the form.
  $("nav-new").hidden = !may("apply");
  $("view").replaceChildren(h("p", { class: "muted", "data-testid": "loading" }, "Loading…"));
  const hash = location.hash;
  let m;
  if ((m = hash.match(/^#\/operations\/(.+)$/))) await operationPage(decodeURIComponent(m[1]));
  else if ((m = hash.match(/^#\/resources\/(.+)$/))) await resourcePage(decodeURIComponent(m[1]));
  else if (hash === "#/resources") await resourcesPage();
  else if (hash === "#/new") await newPage();
  else await listPage();
}

// A failure nobody caught is shown, not swallowed.
window.addEventListener("unhandledrejection", (e) => status("Something failed: " + (e.reason && e.reason.stack || e.reason), true));
window.addEventListener("error", (e) => status("Something failed: " + e.message, true));

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
