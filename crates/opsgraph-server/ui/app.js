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
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
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
    const diags = (e.details && e.details.diagnostics) || [];
    const err = new Error(`${r.status} ${e.code || ""}: ${e.message || text}${diags.length ? " — " + diags.join("; ") : ""}`);
    err.status = r.status;
    throw err;
  }
  return raw ? text : json;
}

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

async function listPage() {
  const gen = generation;
  const view = $("view");
  const body = h("div", { id: "ops-body" });
  view.replaceChildren(
    h("h2", {}, "Operations"),
    may("apply") ? h("p", {}, h("a", { href: "#/new", id: "new-op", class: "button", "data-testid": "new-op" }, "New operation")) : "",
    body);
  const draw = serial(async () => {
    let ops;
    try {
      ops = (await api("GET", "/api/v1/operations")).operations || [];
    } catch (e) {
      if (current(gen)) status("Could not load operations: " + e.message, true);
      return;
    }
    if (!current(gen)) return;
    patchSection(body, JSON.stringify(ops), () => {
      const rows = ops.map((o) =>
        h("tr", { "data-testid": "op-row", "data-id": o.id },
          h("td", {}, h("a", { href: "#/operations/" + enc(o.id), "data-testid": "op-link" }, o.id)),
          h("td", {}, stateEl(o.state)),
          h("td", {}, o.detail),
          h("td", {}, o.resource ? h("a", { href: "#/resources/" + enc(o.resource) }, o.resource) : ""),
          h("td", {}, o.actor)));
      return ops.length === 0 ? h("p", { class: "muted" }, "No operations yet.") :
        h("table", { id: "operations", "data-testid": "operations" },
          h("caption", { class: "muted" }, `${ops.length} operation(s), live`),
          h("thead", {}, h("tr", {}, ["Operation", "State", "Detail", "Resource", "By"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, rows));
    });
  });
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
      spec.enum.map((v, i) => h("option", { value: String(i), selected: JSON.stringify(v) === JSON.stringify(dflt) }, JSON.stringify(v))));
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

// ---- A new operation: pack, action, parameters; preview, then apply ----

async function newPage() {
  const gen = generation;
  const view = $("view");
  let packs;
  try {
    packs = (await api("GET", "/api/v1/packs")).packs || [];
  } catch (e) {
    if (current(gen)) status("Could not load the packs: " + e.message, true);
    return;
  }
  if (!current(gen)) return;
  const packSel = h("select", { id: "new-pack", name: "pack", required: true },
    packs.map((p) => h("option", { value: p.reference }, `${p.title || p.id} (${p.reference})`)));
  const actionSel = h("select", { id: "new-template", name: "template", required: true });
  const typeSel = h("select", { id: "new-type", name: "target_resource_type", required: true });
  const name = h("input", { id: "new-name", name: "name", type: "text", required: true, autocomplete: "off", pattern: "[a-z0-9][a-z0-9\\-]*" });
  const env = h("input", { id: "new-env", name: "environment", type: "text", value: "dev", autocomplete: "off" });
  const params = h("fieldset", { id: "new-params", "data-testid": "params" });
  const preview = h("section", { id: "preview", "data-testid": "preview", "aria-live": "polite" });
  let fields = [];
  let targets = [];
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
    fields = Object.entries(t.parameters || {}).map(([n, spec]) => ({ name: n, ...paramField("param", n, spec) }));
    targets = Object.entries(t.scopes || {}).map(([n, sc]) => {
      const id = safeId("target-" + n);
      const input = h("input", { id, name: "target-" + n, type: "text", autocomplete: "off", placeholder: `${sc.resource_type} ids, comma-separated` });
      return { name: n, input, el: h("div", { class: "field" }, h("label", { for: id }, `Targets: ${n} `, h("span", { class: "muted" }, `(${sc.resource_type})`)), input) };
    });
    params.replaceChildren(h("legend", {}, "Parameters"),
      ...(fields.length ? fields.map((f) => f.el) : [h("p", { class: "muted" }, "This action takes no parameters.")]),
      ...targets.map((x) => x.el));
  };
  const intent = () => {
    const p = pack();
    const t = p.templates.find((x) => x.id === actionSel.value);
    const doc = { target_resource_type: typeSel.value, action: t.action, pack: p.id, name: name.value.trim() };
    if (env.value.trim()) doc.environment = env.value.trim();
    const values = {};
    for (const f of fields) {
      const v = f.read();
      if (v !== undefined) values[f.name] = v;
    }
    if (Object.keys(values).length) doc.parameters = values;
    const tg = {};
    for (const x of targets) {
      const ids = x.input.value.split(",").map((v) => v.trim()).filter(Boolean);
      if (ids.length) tg[x.name] = ids;
    }
    if (Object.keys(tg).length) doc.targets = tg;
    return { intent: doc };
  };
  const doPreview = async (ev) => {
    ev.preventDefault();
    let body;
    try { body = intent(); } catch (e) { status(e.message, true); return; }
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
        may("apply")
          ? h("button", { type: "button", class: "primary", id: "apply", "data-testid": "apply", disabled: blocked ? true : null,
              onclick: () => doApply(body) }, "Apply this plan")
          : h("p", { class: "muted" }, "Applying needs the apply permission."));
      $("preview-h").focus();
    } catch (e) {
      preview.replaceChildren(h("p", { class: "fail", "data-testid": "preview-error" }, e.message));
      status("The plan was refused: " + e.message, true);
    }
  };
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
    params,
    h("button", { type: "submit", id: "preview-btn", "data-testid": "preview-btn" }, "Preview the plan"));
  // Any change voids the preview: a person applies exactly what they previewed.
  form.addEventListener("input", () => { lastPreview = null; const a = $("apply"); if (a) a.disabled = true; });
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
  const initial = `plan_patch:\n  reason: \n  changes:\n    - retry: {job: ${failedNow[0] || ""}}\n`;
  const result = draft.result
    ? h("p", { id: "patch-result", tabindex: "-1", "data-testid": "patch-result", role: draft.result.ok ? "status" : "alert",
        class: draft.result.ok ? "pass" : "fail" }, draft.result.text)
    : null;
  let propose = null;
  if ((op.state === "failed" || op.state === "paused") && may("patch")) {
    const text = h("textarea", { id: "patch-yaml", rows: 8, required: true, spellcheck: "false", "aria-describedby": "patch-help",
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
  if (may("apply") && !terminal && !["paused", "failed"].includes(op.state)) buttons.push(control("pause", "Pause"));
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
        onclick: () => { ctx.confirmCancel = true; ctx.focus = "op-cancel-yes"; paint(); } }, "Cancel operation"));
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
  const job = ((ctx.pack && ctx.pack.jobs) || {})[instance.split("@")[0]];
  if (!job) return h("span", { class: "muted" }, "not available");
  const inputs = job.inputs || {};
  const outputs = job.outputs || {};
  const name = (x) => (typeof x === "string" ? x : x && x.capability ? x.capability + (x.scope ? " @ " + x.scope : "") : JSON.stringify(x));
  const list = (v) => (v && v.length ? v.map(name).join(", ") : "-");
  const req = inputs.requires || {};
  const prov = outputs.provides || {};
  const params = Object.entries(inputs.parameters || {}).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  return h("dl", { class: "contract" },
    h("dt", {}, "parameters"), h("dd", {}, params.length ? params.join(", ") : "-"),
    h("dt", {}, "requires"), h("dd", {}, list(req.capabilities), req.artifacts && req.artifacts.length ? " · artifacts " + list(req.artifacts) : ""),
    h("dt", {}, "provides"), h("dd", {}, list(prov.capabilities), outputs.artifacts && outputs.artifacts.length ? " · artifacts " + list(outputs.artifacts) : ""),
    h("dt", {}, "evidence"), h("dd", {}, list(outputs.evidence)));
}

async function showLogs(op, job, target) {
  try {
    const logs = (await api("GET", `/api/v1/operations/${enc(op.id)}/logs?job=${enc(job)}`)).logs || [];
    target.replaceChildren(...(logs.length ? logs.map((l) => h("div", {}, h("strong", {}, `attempt ${l.attempt}`),
      h("pre", { class: "log" }, l.output === null ? "(no output captured)" : l.output))) : [h("p", { class: "muted" }, "No attempts yet.")]));
  } catch (e) {
    target.replaceChildren(h("p", { class: "fail" }, e.message));
  }
}

function advancedView(op, ctx) {
  const evidence = op.evidence || [];
  return h("table", { "data-testid": "jobs" },
    h("thead", {}, h("tr", {}, ["Job", "Contract", "State", "Attempts", "Outcome", "Evidence", "Logs"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, (op.jobs || []).map((j) => {
      const logs = h("div", { "data-testid": "logs" });
      return h("tr", { "data-testid": "job", "data-job": j.id },
        h("td", {}, j.id),
        h("td", {}, contractView(ctx, j.id)),
        h("td", {}, stateEl(j.state)),
        h("td", {}, String(j.attempts)),
        h("td", {}, h("pre", {}, j.outcome === null ? "" : JSON.stringify(j.outcome, null, 1))),
        h("td", {}, h("ul", {}, evidence.filter((e) => e.job === j.id).map((e) =>
          h("li", { class: e.passed ? "pass" : "fail" },
            `${e.check}: ${e.passed ? "passed" : "failed"} (expected ${JSON.stringify(e.expected)}, observed ${JSON.stringify(e.observed)})`)))),
        h("td", {}, h("button", { type: "button", id: "logs-" + safeId(j.id), onclick: () => showLogs(op, j.id, logs) }, `Logs of ${j.id}`), logs));
    })));
}

// The DAG: jobs and gates of the plan in layers (each node one layer after everything it waits
// for), edges from dependencies, nodes coloured by their live state.
function dagView(op, ctx) {
  const plan = ctx.plan;
  if (!plan) return h("p", { class: "muted" }, "The plan is not available.");
  const jobs = jobIndex(op);
  const gates = {};
  for (const g of op.gates || []) gates[g.id] = g;
  const nodes = {};
  for (const j of plan.jobs || []) nodes[j.id] = { id: j.id, kind: "job", deps: j.depends_on || [], title: j.title || j.job };
  for (const g of plan.gates || []) if (!nodes[g.id]) nodes[g.id] = { id: g.id, kind: "gate", deps: [], title: g.reason };
  for (const n of Object.values(nodes)) n.deps = n.deps.filter((d) => nodes[d]);
  const layer = {};
  const depth = (id, seen) => {
    if (id in layer) return layer[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    const d = nodes[id].deps.reduce((m, x) => Math.max(m, depth(x, seen) + 1), 0);
    layer[id] = d;
    return d;
  };
  Object.keys(nodes).forEach((id) => depth(id, new Set()));
  const cols = [];
  for (const id of Object.keys(nodes)) (cols[layer[id]] = cols[layer[id]] || []).push(id);
  const W = 200, H = 46, GX = 60, GY = 18;
  const pos = {};
  cols.forEach((ids, c) => ids.forEach((id, r) => { pos[id] = { x: 10 + c * (W + GX), y: 10 + r * (H + GY) }; }));
  const width = 20 + cols.length * (W + GX) - GX;
  const height = 20 + Math.max(1, ...cols.map((c) => c.length)) * (H + GY) - GY;
  const stateOf = (n) => {
    if (n.kind === "gate") {
      const g = gates[n.id];
      return !g ? "pending" : g.answer ? "answered" : "open";
    }
    return jobs[n.id] ? jobs[n.id].state : "pending";
  };
  const edges = [];
  for (const n of Object.values(nodes)) for (const d of n.deps) {
    const a = pos[d], b = pos[n.id];
    edges.push(s("path", { class: "edge", d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}`, "marker-end": "url(#arrow)" }));
  }
  const shapes = Object.values(nodes).map((n) => {
    const st = stateOf(n);
    const p = pos[n.id];
    const label = n.id.length > 26 ? n.id.slice(0, 25) + "…" : n.id;
    return s("g", { class: `node node-${n.kind} node-${st}`, "data-testid": "dag-node", "data-node": n.id, "data-state": st, role: "listitem", "aria-label": `${n.kind} ${n.id}: ${st}` },
      s("title", {}, `${n.kind} ${n.id}: ${st}${n.title ? " — " + n.title : ""}`),
      s("rect", { x: p.x, y: p.y, width: W, height: H, rx: n.kind === "gate" ? 18 : 6 }),
      s("text", { x: p.x + 10, y: p.y + 19, class: "name" }, label),
      s("text", { x: p.x + 10, y: p.y + 36, class: "st" }, `${n.kind === "gate" ? "gate · " : ""}${st}`));
  });
  return s("svg", { class: "dag", "data-testid": "dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "list", "aria-label": "Jobs and gates of the plan, in the order they run" },
    s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))),
    edges, shapes);
}

// The resolved capability graph: each requirement, how it was resolved and every candidate
// rejected with its reason.
function capabilityView(ctx) {
  const res = (ctx.plan && (ctx.plan.capability_bindings || ctx.plan.resolution)) || [];
  if (!res.length) return h("p", { class: "muted", "data-testid": "capabilities" }, "The plan requires no capabilities from outside its own jobs.");
  const boundTo = (r) => {
    switch (r.outcome) {
      case "bind": return `${r.resource}${r.provider ? " via " + r.provider : ""}${r.because ? " (" + r.because + ")" : ""}`;
      case "bind_scope": return (r.resources || []).join(", ");
      case "create": return `created by ${r.provider} through ${r.create.pack} ${r.create.action} (sub-operation)`;
      case "gate": return `gate ${r.gate}: ${(r.options || []).join(" / ")}`;
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
    gates: sec("gates", "gates-h"),
    patches: sec("patches", "patches-h"),
    progress: sec("progress", "progress-h"),
    dag: sec("dag", "dag-h"),
    caps: sec("caps", "caps-h"),
    artifacts: sec("artifacts", "artifacts-h"),
    act: h("div", { id: "op-act" }),
    timeline: sec("timeline", "timeline-h"),
  };
  view.replaceChildren(h("p", {}, h("a", { href: "#/" }, "← All operations")),
    h("nav", { class: "toc", "aria-label": "Sections of the operation" }, h("ul", {},
      [["gates", "Gates"], ["patches", "Patches"], ["progress", "Progress"], ["dag", "DAG"], ["caps", "Capabilities"], ["artifacts", "Artifacts"], ["timeline", "Timeline"]]
        .map(([k, t]) => h("li", {}, h("a", { href: "#/operations/" + enc(id), "data-section": k, onclick: (ev) => { ev.preventDefault(); $("sec-" + k).scrollIntoView(); } }, t))))),
    ...Object.values(parts));
  // What the page knows (the last answers of the API) and what the person is doing on it (forms
  // half filled, a question asked): `paint` draws the sections from it without asking the API,
  // `load` asks the API, one call at a time, then paints.
  const ctx = {
    op: null, plan: null, revision: null, pack: null, patches: [],
    confirmCancel: false, cancelReason: "", focus: null,
    iv: { open: false, job: "", note: "", checks: "", result: null },
    draft: { open: false, text: null, result: null },
  };
  // `force`: draw every section again, changed or not.
  const paint = (force) => {
    const op = ctx.op;
    if (!op || !current(gen)) return;
    if (force === true) Object.values(parts).forEach((p) => { delete p.dataset.key; });
    const who = me && me.actor;
    patchSection(parts.head, JSON.stringify([op.state, op.detail, op.plan_revision, who, ctx.confirmCancel]), () => [
      h("h2", {}, "Operation ", h("span", { "data-testid": "op-id" }, op.id)),
      h("p", {}, "State: ", stateEl(op.state, "op-state"), " ", h("span", { class: "muted", "data-testid": "op-detail" }, op.detail)),
      h("p", { class: "muted" }, `${op.pack || ""} · resource `, op.resource ? h("a", { href: "#/resources/" + enc(op.resource) }, op.resource) : "-",
        ` · by ${op.actor} · revision ${ctx.plan && ctx.plan.revision ? ctx.plan.revision.number : op.plan_revision}`),
      controlsSection(op, ctx, paint)]);
    patchSection(parts.gates, JSON.stringify([op.gates, op.plan_revision, who, op.state]), () => gatesSection(op, ctx));
    patchSection(parts.patches, JSON.stringify([ctx.patches, op.gates, op.state, op.plan_revision, who, op.jobs.map((j) => j.state), ctx.draft.result]),
      () => patchesSection(op, ctx));
    patchSection(parts.progress, JSON.stringify([advanced, op.jobs, op.stages, op.evidence, op.plan_revision]), () => [
      h("h3", { id: "progress-h" }, advanced ? "Jobs" : "Stages", " ",
        h("button", { type: "button", id: "mode-toggle", "data-testid": "mode-toggle", "aria-pressed": advanced ? "true" : "false",
          onclick: () => { advanced = !advanced; paint(); } }, advanced ? "Simple view" : "Advanced view")),
      advanced ? advancedView(op, ctx) : simpleView(op)]);
    patchSection(parts.dag, JSON.stringify([ctx.revision, op.jobs.map((j) => j.state), op.gates.map((g) => g.answer)]), () => [
      h("h3", { id: "dag-h" }, "DAG"), h("div", { class: "dag-wrap" }, dagView(op, ctx))]);
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
        ctx.revision = op.plan_revision;
      }
      if (!ctx.pack) ctx.pack = await packDetail(op.pack);
      ctx.patches = (await api("GET", `/api/v1/operations/${enc(id)}/patches`)).patches || [];
    } catch (e) {
      if (current(gen)) status("Could not load the operation: " + e.message, true);
      return;
    }
    ctx.op = op;
    paint();
  });
  await load();
  follow(`/api/v1/operations/${enc(id)}/events`, debounce(load), gen);
}

// ---- Resources ----

async function resourcesPage() {
  const gen = generation;
  const view = $("view");
  const body = h("div", {});
  view.replaceChildren(h("h2", {}, "Resources"), body);
  const draw = serial(async () => {
    let list;
    try {
      list = (await api("GET", "/api/v1/resources")).resources || [];
    } catch (e) {
      if (current(gen)) status("Could not load resources: " + e.message, true);
      return;
    }
    if (!current(gen)) return;
    patchSection(body, JSON.stringify(list), () => list.length === 0 ? h("p", { class: "muted" }, "No resources recorded yet.") :
      h("table", { "data-testid": "resources" },
        h("thead", {}, h("tr", {}, ["Resource", "Status", "Health", "Observed", "Explained by", "Updated"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, list.map((r) => h("tr", { "data-testid": "resource-row", "data-id": r.id },
          h("td", {}, h("a", { href: "#/resources/" + enc(r.id) }, r.id)),
          h("td", {}, stateEl(String(r.status || "-"))),
          h("td", {}, h("span", { class: "health health-" + r.health }, String(r.health || "-"))),
          h("td", {}, h("code", {}, r.observed_state ? JSON.stringify(r.observed_state) : "-")),
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
    if (current(gen)) status("Could not load the resource: " + e.message, true);
    return;
  }
  if (!current(gen)) return;
  const doc = r.resource || {};
  const desired = Object.fromEntries(Object.entries(doc).filter(([k]) => !["observed_state", "health", "status"].includes(k)));
  view.replaceChildren(
    h("p", {}, h("a", { href: "#/resources" }, "← All resources")),
    h("h2", {}, "Resource ", h("span", { "data-testid": "resource-id" }, r.id)),
    h("p", {}, "Status: ", stateEl(String(doc.status || "-")), " · health: ", h("span", { class: "health health-" + doc.health, "data-testid": "resource-health" }, String(doc.health || "-"))),
    h("div", { class: "columns" },
      h("section", { "aria-labelledby": "desired-h" }, h("h3", { id: "desired-h" }, "Desired"), h("pre", { "data-testid": "desired" }, JSON.stringify(desired, null, 2))),
      h("section", { "aria-labelledby": "observed-h" }, h("h3", { id: "observed-h" }, "Observed"), h("pre", { "data-testid": "observed" }, JSON.stringify(doc.observed_state || null, null, 2)))),
    h("section", { "aria-labelledby": "ops-h" }, h("h3", { id: "ops-h" }, "Operations that explain it"),
      h("ul", { "data-testid": "resource-ops" }, (r.operations || []).map((o) =>
        h("li", {}, h("a", { href: "#/operations/" + enc(o.id) }, o.id), " ", stateEl(o.state), ` ${o.detail} · by ${o.actor} · ${o.created_at}`)))));
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
