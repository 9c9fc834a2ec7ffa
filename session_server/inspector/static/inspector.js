// Memory Inspector: reads an agent's memory over the server's WebSocket JSON-RPC.
// Plain JavaScript, no dependencies. Every value from the server reaches the DOM through
// textContent (never innerHTML). The page only calls reading methods (memory.search too).
"use strict";

const TOKEN_KEY = "session-server.inspector.token";
const PAGE_SIZE = 20;
const EVENT_LIMIT = 500;
const FOLD_CHARS = 1200;
const FOLD_LINES = 24;
const PREVIEW_LINES = 10;
const TABS = ["conversation", "context", "episodic", "semantic", "raw", "blocks", "compactions", "usage"];
const HISTORY_LIMIT = 50;
const DIFF_MAX_LINES = 2000;
const RECONNECT_MAX_MS = 10000;
// Used when the token may not call adapters.list (it touches no session, but a token
// limited to sessions may call nothing else server-wide).
const KNOWN_ADAPTERS = ["anthropic", "openai-chat", "openai-responses", "workers-ai"];

// ---------------------------------------------------------------- small DOM helpers

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(text, kind, title) {
  return el("span", { class: "badge " + (kind || ""), title: title || null, text });
}

function empty(text) { return el("p", { class: "empty", text }); }

function json(value) {
  if (typeof value === "string") return value;
  try { return JSON.stringify(value, null, 2); } catch (_) { return String(value); }
}

function oneLine(value, width) {
  const text = (typeof value === "string" ? value : JSON.stringify(value)) || "";
  const flat = text.replace(/\s+/g, " ");
  return flat.length > width ? flat.slice(0, width - 1) + "…" : flat;
}

// Long text: a preview, and the whole text behind a disclosure.
function folded(text, cls) {
  const value = text === null || text === undefined ? "" : String(text);
  const lines = value.split("\n");
  if (value.length <= FOLD_CHARS && lines.length <= FOLD_LINES) {
    return el(cls === "pre" ? "pre" : "div", { class: cls === "pre" ? null : "text", text: value });
  }
  const preview = lines.slice(0, PREVIEW_LINES).join("\n").slice(0, FOLD_CHARS / 2);
  const wrap = el("div", { class: "folded" });
  wrap.append(el(cls === "pre" ? "pre" : "div", { class: cls === "pre" ? null : "text", text: preview + " …" }));
  const details = el("details", { class: "fold" },
    el("summary", { text: `Show all (${value.length.toLocaleString()} characters, ${lines.length} lines)` }),
    el("pre", { text: value }));
  wrap.append(details);
  return wrap;
}

function fmtTime(ms) {
  if (!ms && ms !== 0) return "";
  const d = new Date(ms);
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

function relTime(iso) {
  if (!iso) return "never";
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return iso;
  const s = Math.max(0, Math.round((Date.now() - then) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(then).toLocaleDateString();
}

function refocus(selector) {
  const node = document.querySelector(selector);
  if (node) node.focus();
}

function num(n) { return typeof n === "number" ? n.toLocaleString() : "—"; }

// ---------------------------------------------------------------- JSON-RPC over WebSocket

class RpcError extends Error {
  constructor(error) {
    super(error.message || "error");
    this.code = error.code;
    this.data = error.data;
  }
}

class Rpc {
  // path: "/v1" or "/v1/agents/<quoted id>"; token: sent as the bearer subprotocol.
  constructor(path, token) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.url = `${scheme}//${location.host}${path}`;
    this.token = token;
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = [];
    this.onclose = null;
    this.ws = null;
  }

  open() {
    const protocols = ["jsonrpc"];
    if (this.token) protocols.push("bearer." + this.token);
    return new Promise((resolve, reject) => {
      let opened = false;
      const ws = new WebSocket(this.url, protocols);
      this.ws = ws;
      ws.onopen = () => { opened = true; resolve(this); };
      ws.onmessage = (msg) => this._receive(msg.data);
      ws.onclose = (ev) => {
        for (const { reject: fail } of this.pending.values()) fail(new Error("connection closed"));
        this.pending.clear();
        if (!opened) reject(new Error("refused"));
        else if (this.onclose) this.onclose(ev);
      };
    });
  }

  _receive(data) {
    let msg;
    try { msg = JSON.parse(data); } catch (_) { return; }
    for (const item of Array.isArray(msg) ? msg : [msg]) {
      if (item.id !== undefined && item.id !== null && this.pending.has(item.id)) {
        const { resolve, reject } = this.pending.get(item.id);
        this.pending.delete(item.id);
        if (item.error) reject(new RpcError(item.error));
        else resolve(item.result);
      } else if (item.method) {
        for (const listener of this.listeners) listener(item.method, item.params);
      }
    }
  }

  call(method, params) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
        reject(new Error("not connected"));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: "2.0", id, method, params: params || {} }));
    });
  }

  listen(fn) { this.listeners.push(fn); }

  close() {
    this.onclose = null;
    if (this.ws) this.ws.close(1000);
  }
}

// ---------------------------------------------------------------- state

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  authRequired: false,
  root: null,          // Rpc on /v1
  agentRpc: null,      // Rpc on /v1/agents/<agent>
  adapters: [],
  search: "",
  page: 1,
  totalPages: 0,
  agentId: null,
  sessions: [],
  sessionId: null,
  session: null,       // the session row
  strategy: null,      // memory.get_strategy result
  built: null,         // context.build result (token count, compacted/synthetic marks)
  events: [],          // events.load of the conversation
  lastSeq: 0,
  tab: "conversation",
  loaded: new Set(),   // tabs loaded for the current session
  adapter: null,       // working-context view: null = messages, else an adapter name
  rawLimit: 200,
  rawArchive: true,
  generation: 0,       // bumps on every session switch: late answers are dropped
  live: null,          // the live turn being typed: {streamId, cursor, text, reasoning, calls}
  focusSeq: null,      // the event a search hit or a summary source opened the session at
};

function setStatus(text, isError) {
  const node = $("conn-status");
  node.textContent = text;
  node.classList.toggle("error", Boolean(isError));
}

// ---------------------------------------------------------------- start and auth

async function start() {
  wireStaticControls();
  try {
    const health = await fetch("/healthz", { cache: "no-store" }).then((r) => r.json());
    state.authRequired = Boolean(health.auth_required);
  } catch (_) {
    state.authRequired = false;
  }
  if (state.authRequired && !state.token) {
    askForToken("");
    return;
  }
  await connect();
}

function askForToken(message) {
  $("app").hidden = true;
  $("token-panel").hidden = false;
  $("token-error").textContent = message;
  setStatus(message ? "token refused" : "token required", Boolean(message));
  $("token-input").focus();
}

async function connect() {
  setStatus("connecting…");
  const root = new Rpc("/v1", state.token);
  try {
    await root.open();
  } catch (_) {
    if (state.authRequired || state.token) {
      sessionStorage.removeItem(TOKEN_KEY);
      state.token = "";
      askForToken("The server refused this token. Check it and try again.");
    } else {
      setStatus("cannot reach the server", true);
    }
    return;
  }
  state.root = root;
  root.onclose = () => setStatus("disconnected: reload the page to reconnect", true);
  $("token-panel").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = !state.token;
  setStatus("connected");
  try {
    state.adapters = (await root.call("adapters.list")).adapters || [];
  } catch (_) {
    state.adapters = KNOWN_ADAPTERS;
  }
  await loadAgents();
  const wanted = fromHash();
  if (wanted.agent) await openAgent(wanted.agent, wanted.session);
  else $("agent-search").focus();
}

// The location hash names what is open (#agent=ID&session=ID): a reload or a link opens
// it again. It never holds the token.
function fromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  return { agent: params.get("agent"), session: params.get("session") };
}

function toHash() {
  const params = new URLSearchParams();
  if (state.agentId) params.set("agent", state.agentId);
  if (state.sessionId) params.set("session", state.sessionId);
  history.replaceState(null, "", "#" + params.toString());
}

function wireStaticControls() {
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token-input").value.trim();
    if (!token) return;
    state.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token-input").value = "";
    connect();
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  let timer = null;
  $("agent-search").addEventListener("input", (ev) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      state.search = ev.target.value;
      state.page = 1;
      loadAgents();
    }, 200);
  });
  $("open-agent").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("open-agent-id").value.trim();
    if (id) openAgent(id, null);
  });
  $("recall-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    recallSearch($("recall-input").value);
  });
  $("agents-prev").addEventListener("click", () => { state.page -= 1; loadAgents(); });
  $("agents-next").addEventListener("click", () => { state.page += 1; loadAgents(); });
  const tabs = TABS.map((name) => $("tab-" + name));
  tabs.forEach((tab, i) => {
    tab.addEventListener("click", () => selectTab(TABS[i], false));
    tab.addEventListener("keydown", (ev) => {
      let next = null;
      if (ev.key === "ArrowRight") next = (i + 1) % TABS.length;
      else if (ev.key === "ArrowLeft") next = (i - 1 + TABS.length) % TABS.length;
      else if (ev.key === "Home") next = 0;
      else if (ev.key === "End") next = TABS.length - 1;
      if (next === null) return;
      ev.preventDefault();
      selectTab(TABS[next], true);
    });
  });
}

// ---------------------------------------------------------------- agents

async function loadAgents() {
  let page;
  try {
    page = await state.root.call("memory.list_snapshots", {
      search: state.search, page: Math.max(1, state.page), page_size: PAGE_SIZE, group: "agent",
    });
  } catch (err) {
    // A token that may not list agents (listing is admin) can still open its own agent.
    const text = err.code === -32003
      ? "This token may not list agents: open one by its id below."
      : "Cannot list agents: " + err.message;
    $("agents-list").replaceChildren(el("li", { class: err.code === -32003 ? "muted" : "error", text }));
    $("open-agent").hidden = false;
    $("agents-page").textContent = "";
    $("agents-prev").disabled = true;
    $("agents-next").disabled = true;
    return;
  }
  state.page = page.page;
  state.totalPages = page.total_pages;
  const list = $("agents-list");
  list.replaceChildren();
  if (!page.entries.length) list.append(el("li", { class: "empty", text: state.search ? "No agent matches." : "No agents yet." }));
  for (const entry of page.entries) {
    const count = entry.session_count === 1 ? "1 session" : `${entry.session_count ?? "?"} sessions`;
    const button = el("button", {
      type: "button",
      class: "agent-item",
      "data-agent": entry.agent_id,
      "aria-current": entry.agent_id === state.agentId ? "true" : null,
      onclick: () => openAgent(entry.agent_id),
    },
    el("span", { class: "title", text: entry.agent_id }),
    el("span", { class: "sub", title: entry.last_updated_at || "", text: `${count} · updated ${relTime(entry.last_updated_at)}` }));
    list.append(el("li", {}, button));
  }
  $("agents-page").textContent = page.total_pages
    ? `Page ${page.page} of ${page.total_pages} · ${page.total} agents` : "";
  $("agents-prev").disabled = page.page <= 1;
  $("agents-next").disabled = page.page >= page.total_pages;
}

async function openAgent(agentId, preferSession) {
  state.generation += 1;
  if (state.agentRpc) state.agentRpc.close();
  state.agentRpc = null;
  state.agentId = agentId;
  state.sessionId = null;
  $("live-status").hidden = true;
  for (const b of document.querySelectorAll(".agent-item")) {
    b.setAttribute("aria-current", b.dataset.agent === agentId ? "true" : "false");
  }
  $("agent-summary").textContent = "Loading " + agentId + "…";
  $("sessions-list").replaceChildren();
  $("recall-hits").replaceChildren();
  $("recall-status").textContent = "";
  $("recall-form").hidden = false;
  state.focusSeq = null;
  clearSession();
  const rpc = new Rpc("/v1/agents/" + encodeURIComponent(agentId), state.token);
  try {
    await rpc.open();
  } catch (_) {
    $("agent-summary").textContent = "The server refused access to this agent.";
    return;
  }
  if (state.agentId !== agentId) { rpc.close(); return; }
  useAgentRpc(rpc, agentId);
  let sessions;
  try {
    // session.list answers pages (100 by default); follow next_cursor to the end.
    sessions = [];
    let cursor = null;
    do {
      const page = await rpc.call("session.list", cursor ? { limit: 1000, cursor } : { limit: 1000 });
      sessions.push(...page.sessions);
      cursor = page.next_cursor;
    } while (cursor);
  } catch (err) {
    $("agent-summary").textContent = "Cannot list the sessions: " + err.message;
    return;
  }
  state.sessions = sessions;
  let agentStrategy = null;
  try { agentStrategy = (await rpc.call("memory.get_strategy", {})).effective; } catch (_) { /* shown as unknown */ }
  const mode = agentStrategy && agentStrategy.mode ? agentStrategy.mode : "?";
  $("agent-summary").textContent = `${agentId}: ${sessions.length} session${sessions.length === 1 ? "" : "s"} · default strategy ${mode}`;
  renderSessions();
  toHash();
  const preferred = sessions.find((s) => s.id === preferSession);
  if (sessions.length) await openSession((preferred || sessions[0]).id);
}

// The sessions as a tree: a fork or rewind branch under the session it was forked from
// (parent_session_id, fork_seq), children in fork order; a session whose parent is gone
// (deleted) is a root.
function renderSessions() {
  const list = $("sessions-list");
  list.replaceChildren();
  if (!state.sessions.length) list.append(el("li", { class: "empty", text: "No sessions." }));
  const ids = new Set(state.sessions.map((s) => s.id));
  const children = new Map();
  const roots = [];
  for (const s of state.sessions) {
    if (s.parent_session_id && ids.has(s.parent_session_id) && s.parent_session_id !== s.id) {
      if (!children.has(s.parent_session_id)) children.set(s.parent_session_id, []);
      children.get(s.parent_session_id).push(s);
    } else {
      roots.push(s);
    }
  }
  for (const kids of children.values()) kids.sort((a, b) => (a.fork_seq || 0) - (b.fork_seq || 0));
  const seen = new Set();
  const item = (s) => {
    seen.add(s.id);
    const meta = s.metadata && Object.keys(s.metadata).length ? oneLine(s.metadata, 60) : "no metadata";
    const button = el("button", {
      type: "button",
      class: "session-item",
      "data-session": s.id,
      "aria-current": s.id === state.sessionId ? "true" : "false",
      onclick: () => { state.focusSeq = null; openSession(s.id); },
    },
    el("span", { class: "title", text: s.id }),
    s.parent_session_id ? el("span", { class: "sub branch-of", text: `branch at seq ${num(s.fork_seq)}` }) : null,
    el("span", { class: "sub", text: `${num(s.last_seq)} events · ${fmtTime(s.updated_at)}` }),
    el("span", { class: "sub", text: meta }));
    const li = el("li", {}, button);
    const kids = (children.get(s.id) || []).filter((k) => !seen.has(k.id));
    if (kids.length) {
      li.append(el("ul", { class: "branches", role: "group", "aria-label": `Branches of ${s.id}` }, ...kids.map(item)));
    }
    return li;
  };
  for (const s of roots) list.append(item(s));
}

// The agent connection: when it ends (the server's idle timeout or a restart, the
// network), the page connects again with backoff and subscribes again after the last seq
// it has, so the events committed meanwhile arrive as notifications and the session keeps
// following. A token that is no longer valid (1008) is not retried.
function useAgentRpc(rpc, agentId) {
  state.agentRpc = rpc;
  rpc.listen(onNotification);
  rpc.onclose = (ev) => {
    if (state.agentRpc !== rpc) return;
    $("live-status").hidden = true;
    if (ev && ev.code === 1008) {
      setStatus("agent connection closed: " + (ev.reason || "the token is no longer valid"), true);
      return;
    }
    setStatus("agent connection lost: reconnecting…", true);
    reconnectAgent(rpc, agentId, 0);
  };
}

async function reconnectAgent(lost, agentId, attempt) {
  const delay = attempt === 0 ? 100 : Math.min(RECONNECT_MAX_MS, 500 * 2 ** (attempt - 1));
  await new Promise((resolve) => setTimeout(resolve, delay));
  if (state.agentRpc !== lost || state.agentId !== agentId) return;  // the user moved on
  const rpc = new Rpc("/v1/agents/" + encodeURIComponent(agentId), state.token);
  try {
    await rpc.open();
  } catch (_) {
    setStatus(`agent connection lost: reconnecting (attempt ${attempt + 2})…`, true);
    reconnectAgent(lost, agentId, attempt + 1);
    return;
  }
  if (state.agentRpc !== lost || state.agentId !== agentId) { rpc.close(); return; }
  useAgentRpc(rpc, agentId);
  setStatus("connected");
  if (!state.sessionId) return;
  const generation = state.generation;
  try {
    // The replay: every event after the last one the page has, then live ones.
    // ... and every chunk of the live turn after the last one it has.
    const params = { session_id: state.sessionId, after_seq: state.lastSeq };
    if (state.live) params.stream_cursor = state.live.cursor;
    await rpc.call("events.subscribe", params);
  } catch (err) {
    if (generation === state.generation) setStatus("cannot follow the session: " + err.message, true);
    return;
  }
  if (generation !== state.generation) return;
  $("live-status").hidden = false;
  // Tabs drawn from what the page missed are drawn again when shown.
  for (const tab of TABS) if (tab !== "conversation") state.loaded.delete(tab);
  if (!state.loaded.has(state.tab)) loadTab(state.tab, generation);
}

// ---------------------------------------------------------------- one session

function clearSession() {
  state.live = null;
  state.session = null;
  state.built = null;
  state.events = [];
  state.loaded = new Set();
  $("session-title").textContent = "Session";
  $("session-meta").replaceChildren();
  for (const name of TABS) $("panel-" + name).replaceChildren();
}

async function openSession(sessionId) {
  const rpc = state.agentRpc;
  if (!rpc) return;
  if (state.sessionId && state.sessionId !== sessionId) {
    rpc.call("events.unsubscribe", { session_id: state.sessionId }).catch(() => {});
  }
  state.generation += 1;
  const generation = state.generation;
  clearSession();
  state.sessionId = sessionId;
  for (const b of document.querySelectorAll(".session-item")) {
    b.setAttribute("aria-current", b.dataset.session === sessionId ? "true" : "false");
  }
  $("session-title").textContent = "Session " + sessionId;
  toHash();
  try {
    const [row, strategy, sub] = await Promise.all([
      rpc.call("session.get", { session_id: sessionId }),
      rpc.call("memory.get_strategy", { session_id: sessionId }),
      rpc.call("events.subscribe", { session_id: sessionId }),
    ]);
    if (generation !== state.generation) return;
    state.session = row;
    state.strategy = strategy;
    state.lastSeq = sub.last_seq;
    $("live-status").hidden = false;
  } catch (err) {
    $("session-meta").replaceChildren(el("p", { class: "error", text: "Cannot open the session: " + err.message }));
    return;
  }
  renderMeta();
  await refreshBuild(generation);
  await loadTab(state.tab, generation);
}

// context.build: the working context the model gets under the effective strategy.
async function refreshBuild(generation) {
  try {
    const built = await state.agentRpc.call("context.build", { session_id: state.sessionId, override_budget: true });
    if (generation !== state.generation) return;
    state.built = built;
  } catch (err) {
    state.built = { error: err.message };
  }
  renderMeta();
}

function renderMeta() {
  const s = state.session;
  if (!s) return;
  const effective = state.strategy ? state.strategy.effective || {} : {};
  const built = state.built && !state.built.error ? state.built : null;
  const items = [
    ["Events (last seq)", num(state.lastSeq)],
    ["Tokens in context", built ? num(built.token_count) : "…"],
    ["Messages in context", built ? num(built.messages.length) : "…"],
    ["Strategy", effective.mode || "none"],
    ["Created", fmtTime(s.created_at)],
    ["Updated", fmtTime(s.updated_at)],
  ];
  const nodes = items.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v })));
  if (s.parent_session_id) {
    const parent = s.parent_session_id;
    const known = state.sessions.some((x) => x.id === parent);
    const link = known
      ? el("button", { type: "button", class: "link parent-link", onclick: () => openSession(parent), text: parent })
      : el("span", { class: "mono", text: `${parent} (deleted)` });
    nodes.push(el("div", {}, el("dt", { text: "Branch of" }), el("dd", {}, link, el("span", { text: ` at seq ${num(s.fork_seq)}` }))));
  }
  if (s.metadata && Object.keys(s.metadata).length) {
    nodes.push(el("div", { style: null }, el("dt", { text: "Metadata" }), el("dd", { class: "mono", text: oneLine(s.metadata, 200) })));
  }
  $("session-meta").replaceChildren(...nodes);
}

function selectTab(name, focus) {
  state.tab = name;
  for (const tab of TABS) {
    const button = $("tab-" + tab);
    const on = tab === name;
    button.setAttribute("aria-selected", on ? "true" : "false");
    button.tabIndex = on ? 0 : -1;
    $("panel-" + tab).hidden = !on;
  }
  if (focus) $("tab-" + name).focus();
  if (state.sessionId && !state.loaded.has(name)) loadTab(name, state.generation);
}

async function loadTab(name, generation) {
  if (!state.sessionId) return;
  const panel = $("panel-" + name);
  if (!panel.childNodes.length) panel.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
  try {
    const render = await LOADERS[name]();
    if (generation !== state.generation) return;
    state.loaded.add(name);
    panel.replaceChildren(...render);
    if (name === "conversation" && state.focusSeq) markFocus(panel, state.focusSeq);
  } catch (err) {
    if (generation !== state.generation) return;
    panel.replaceChildren(el("p", { class: "error", text: err.message }));
  }
}

const LOADERS = {
  async conversation() {
    if (state.focusSeq) {
      // A search hit or a summary's source: the events from a little before it.
      const from = Math.max(0, state.focusSeq - 10);
      const { events } = await state.agentRpc.call("events.load", {
        session_id: state.sessionId, limit: EVENT_LIMIT, tail: false, after_seq: from,
      });
      state.events = events;
      return [el("p", { class: "muted", text: `Showing the events from #${from + 1} (opened at #${state.focusSeq}).` }),
        ...renderConversation()];
    }
    const { events } = await state.agentRpc.call("events.load", {
      session_id: state.sessionId, limit: EVENT_LIMIT, tail: true,
    });
    // Events notified while the load was on its way, and not in its answer, stay.
    const last = events.length ? events[events.length - 1].seq : 0;
    const newer = state.events.filter((e) => e.seq > last);
    state.events = events.concat(newer).slice(-EVENT_LIMIT);
    return renderConversation();
  },
  async context() {
    return renderContext();
  },
  async episodic() {
    const view = await memoryView({ include_episodic: true });
    return renderMemory(view.episodic, "summary", "No episodic memory for this session yet.");
  },
  async semantic() {
    const view = await memoryView({ include_semantic: true });
    return renderMemory(view.semantic, "fact", "No semantic memory for this session yet.");
  },
  async raw() {
    const view = await memoryView({
      include_raw_traces: true, include_archive: state.rawArchive, raw_trace_limit: state.rawLimit,
    });
    const traces = view.raw_traces || [];
    return renderRaw(traces, await traceSeqs(traces));
  },
  async compactions() {
    const { events } = await state.agentRpc.call("events.load", {
      session_id: state.sessionId, actions: ["compaction"], limit: 200, tail: true,
    });
    return renderCompactions(events);
  },
  async blocks() {
    const { blocks } = await state.agentRpc.call("memory.blocks.list", { session_id: state.sessionId });
    const histories = await Promise.all(blocks.map((b) => state.agentRpc.call("memory.blocks.history", {
      label: b.label, session_id: b.session_id || state.sessionId, limit: HISTORY_LIMIT,
    }).then((h) => h.revisions, () => [])));
    return renderBlocks(blocks, histories);
  },
  async usage() {
    const [chart, agent] = await Promise.all([
      state.agentRpc.call("memory.usage_chart", { session_id: state.sessionId, limit: 500 }),
      state.agentRpc.call("memory.usage", {}),
    ]);
    return renderUsage(chart, agent);
  },
};

function memoryView(parts) {
  return state.agentRpc.call("memory.view", Object.assign({
    session_id: state.sessionId,
    include_working_context: false,
    include_episodic: false,
    include_semantic: false,
    include_conversation: false,
    include_raw_traces: false,
    include_archive: false,
  }, parts));
}

// ---------------------------------------------------------------- conversation

// Marks from the built context: which tool results are placeholders there, and which
// results the build made up for calls that never got one.
function contextMarks() {
  const placeholders = new Map();
  const synthetic = new Map();
  const built = state.built && !state.built.error ? state.built : null;
  for (const m of built ? built.messages : []) {
    if (m.role !== "tool" || !m.tool_call_id) continue;
    if (m.synthetic || (typeof m.content === "string" && m.content.startsWith("⟦missing:"))) {
      synthetic.set(m.tool_call_id, m);
    } else if (m.compacted) {
      placeholders.set(m.tool_call_id, m);
    }
  }
  return { placeholders, synthetic };
}

function renderConversation() {
  const events = state.events;
  if (!events.length && !state.live) return [empty("No events in this session yet.")];
  const results = new Map();
  for (const e of events) if (e.action === "tool_result" && e.tool_call_id) results.set(e.tool_call_id, e);
  const called = new Set();
  for (const e of events) for (const c of e.tool_calls || []) called.add(c.id);
  const marks = contextMarks();
  const out = [];
  if (events.length >= EVENT_LIMIT) out.push(el("p", { class: "muted", text: `Showing the last ${EVENT_LIMIT} events.` }));
  for (const e of events) {
    if (e.action === "user_message") out.push(message("user", e));
    else if (e.action === "agent_message") out.push(message("assistant", e));
    else if (e.action === "system_instruction") out.push(message("system", e));
    else if (e.action === "tool_call_request") {
      if (e.content) out.push(message("assistant", e));
      for (const call of e.tool_calls || []) out.push(toolCall(call, results.get(call.id), marks, e));
    } else if (e.action === "tool_result" && !called.has(e.tool_call_id)) {
      out.push(orphanResult(e));
    } else if (e.action === "compaction") {
      const rec = e.compaction || {};
      out.push(el("div", { class: "divider", role: "separator", "data-seq": e.seq },
        `compaction · ${rec.strategy || "?"} · ${num(e.compacted_event_count)} events before seq ${rec.boundary_seq ?? "?"}`));
    }
  }
  if (state.live) out.push(liveReply());
  return out;
}

// The reply being streamed (stream.chunk notifications), typed as it comes; it goes
// when the stream closes (the stored turn arrived just before).
function liveReply() {
  const live = state.live;
  const head = el("div", { class: "head" },
    el("span", { class: "role", text: "assistant" }),
    el("span", { class: "typing", text: "typing…" }));
  const node = el("div", { class: "entry assistant live", id: "live-reply", "aria-live": "polite" }, head,
    el("div", { class: "text", text: live.text }));
  if (live.reasoning) {
    node.append(el("details", { class: "fold" }, el("summary", { text: "Reasoning" }), el("pre", { text: live.reasoning })));
  }
  for (const [i, call] of [...live.calls.entries()].sort((a, b) => a[0] - b[0])) {
    node.append(el("pre", { class: "muted", text: `${call.name || "tool"}(${call.arguments}) #${i}` }));
  }
  return node;
}

function onStreamChunk(params) {
  const chunks = params.chunks || [];
  let live = state.live;
  if (!live || live.streamId !== params.stream_id) {
    live = state.live = { streamId: params.stream_id, cursor: params.cursor - chunks.length, text: "", reasoning: "", calls: new Map() };
  }
  // A replay after a reconnection may repeat chunks the page has: keep each cursor once.
  const first = params.cursor - chunks.length + 1;
  for (let i = Math.max(0, live.cursor - first + 1); i < chunks.length; i++) {
    const c = chunks[i];
    if (c.type === "text") live.text += c.text;
    else if (c.type === "reasoning") live.reasoning += c.text;
    else if (c.type === "tool_call") {
      const call = live.calls.get(c.index || 0) || { name: "", arguments: "" };
      if (c.name) call.name += c.name;
      call.arguments += c.arguments || "";
      live.calls.set(c.index || 0, call);
    }
  }
  live.cursor = Math.max(live.cursor, params.cursor);
  drawLive();
}

function drawLive() {
  if (state.tab !== "conversation" || !state.loaded.has("conversation")) return;
  const panel = $("panel-conversation");
  const old = $("live-reply");
  if (!state.live) { if (old) old.remove(); return; }
  const node = liveReply();
  if (old) old.replaceWith(node);
  else {
    const none = panel.querySelector(":scope > p.empty");
    if (none) none.remove();
    panel.append(node);
  }
}

function message(role, e) {
  const head = el("div", { class: "head" },
    el("span", { class: "role", text: role }),
    el("span", { text: `#${e.seq}` }),
    el("span", { text: fmtTime(e.timestamp) }),
    e.model ? el("span", { text: e.model }) : null);
  const node = el("div", { class: "entry " + role, "data-seq": e.seq }, head, folded(e.content));
  if (e.reasoning) {
    node.append(el("details", { class: "fold" }, el("summary", { text: "Reasoning" }), el("pre", { text: e.reasoning })));
  }
  return node;
}

function toolCall(call, result, marks, request) {
  const badges = [];
  if (!result) {
    if (marks.synthetic.has(call.id)) badges.push(badge("synthetic result", "synthetic", "No result was recorded; the built context carries a synthetic one (repair)."));
    else badges.push(badge("no result", "error"));
  } else if (result.is_success === false) {
    badges.push(badge("error", "error"));
  } else {
    badges.push(badge("ok", "ok"));
  }
  if (marks.placeholders.has(call.id)) badges.push(badge("placeholder in context", "placeholder", "A compaction replaced this result by a placeholder in the working context."));
  const body = el("div", { class: "body" },
    el("div", { class: "label", text: "Arguments" }),
    folded(json(call.arguments), "pre"));
  if (result) {
    body.append(el("div", { class: "label", text: `Result · #${result.seq}` }), folded(result.content, "pre"));
  }
  const placeholder = marks.placeholders.get(call.id);
  if (placeholder) body.append(el("div", { class: "label", text: "In the working context" }), el("pre", { text: placeholder.content }));
  const synthetic = marks.synthetic.get(call.id);
  if (synthetic) body.append(el("div", { class: "label", text: "Synthetic result in the working context" }), el("pre", { text: synthetic.content }));
  return el("details", { class: "tool-call", "data-seq": request.seq, "data-call-id": call.id },
    el("summary", {},
      el("span", { class: "badge", text: "tool" }),
      el("span", { class: "name", text: call.name }),
      el("span", { class: "args", text: oneLine(call.arguments, 80) }),
      ...badges),
    body);
}

function orphanResult(e) {
  return el("details", { class: "tool-call", "data-seq": e.seq },
    el("summary", {},
      el("span", { class: "badge", text: "tool result" }),
      el("span", { class: "name", text: e.tool_name || "?" }),
      badge("result without a call", "error")),
    el("div", { class: "body" }, folded(e.content, "pre")));
}

// ---------------------------------------------------------------- working context

async function renderContext() {
  const built = state.built;
  if (!built) return [empty("Not built yet.")];
  if (built.error) return [el("p", { class: "error", text: built.error })];
  const effective = state.strategy ? state.strategy.effective || {} : {};
  const toolbar = el("div", { class: "toolbar", role: "group", "aria-label": "Show the context as" },
    el("span", { class: "count", text: `${num(built.token_count)} tokens` }),
    el("span", { class: "muted", text: `${built.messages.length} messages · base seq ${built.base_seq} · strategy ${effective.mode || "none"}` }));
  const views = [null, ...state.adapters];
  for (const name of views) {
    toolbar.append(el("button", {
      type: "button",
      class: "view-switch",
      "data-adapter": name || "messages",
      "aria-pressed": state.adapter === name ? "true" : "false",
      onclick: () => {
        state.adapter = name;
        state.loaded.delete("context");
        // The toolbar is drawn again: keep the keyboard focus on the chosen switch.
        loadTab("context", state.generation).then(() => refocus(`.view-switch[data-adapter="${name || "messages"}"]`));
      },
    }, name ? name : "messages"));
  }
  const out = [toolbar];
  if (state.adapter) {
    const rendered = await state.agentRpc.call("context.render", { session_id: state.sessionId, adapter: state.adapter, override_budget: true });
    out.push(el("p", { class: "muted", text: `Request body part for ${rendered.adapter} (${num(rendered.token_count)} tokens):` }));
    out.push(el("pre", { class: "payload", text: json(rendered.payload) }));
    return out;
  }
  for (const text of built.system_instructions || []) {
    out.push(el("div", { class: "entry system" }, el("div", { class: "head" }, el("span", { class: "role", text: "system" })), folded(text)));
  }
  if (!built.messages.length) out.push(empty("The context is empty."));
  for (const m of built.messages) {
    const badges = [];
    if (m.compacted) badges.push(badge("placeholder", "placeholder", "A compaction replaced this payload."));
    if (m.synthetic) badges.push(badge("synthetic", "synthetic", "Made up by the build: no result was recorded."));
    if (m.is_error) badges.push(badge("error", "error"));
    const head = el("div", { class: "head" },
      el("span", { class: "role", text: m.role }),
      m.name ? el("span", { text: m.name }) : null,
      m.tool_call_id ? el("span", { text: "call " + m.tool_call_id }) : null,
      ...badges);
    const node = el("div", { class: "entry context-message " + m.role }, head);
    if (m.content) node.append(folded(m.content));
    for (const c of m.tool_calls || []) node.append(el("pre", { text: `${c.name}(${json(c.arguments)})` }));
    out.push(node);
  }
  return out;
}

// ---------------------------------------------------------------- memory and traces

function renderMemory(items, key, none) {
  if (!items || !items.length) return [empty(none)];
  return items.map((item) => {
    const rest = Object.assign({}, item);
    delete rest[key];
    delete rest.id;
    delete rest.sources;
    return el("div", { class: "memory-item" },
      el("div", { class: "head muted", text: item.id || "" }),
      el("div", { class: "text", text: item[key] === undefined ? json(item) : String(item[key]) }),
      sourceLinks(item.sources),
      Object.keys(rest).length ? el("details", { class: "fold" }, el("summary", { text: "Details" }), el("pre", { text: json(rest) })) : null);
  });
}

// A raw trace's own ``seq`` counts lines within its turn (the reference layout); the
// session seq of the event a line came from is read from the events themselves: those
// created since the oldest line shown (a second earlier, for rounding), by id. A line's id
// is its event's, with ":N" or ":text" added for the further lines of one tool-call event.
async function traceSeqs(traces) {
  const seqs = new Map();
  if (!traces.length) return seqs;
  const oldest = Math.min(...traces.map((t) => (typeof t.ts === "number" ? t.ts : Infinity)));
  const params = { session_id: state.sessionId, tail: false, limit: traces.length * 2 + 100 };
  if (Number.isFinite(oldest)) params.since = Math.max(0, Math.floor(oldest * 1000) - 1000);
  try {
    const { events } = await state.agentRpc.call("events.load", params);
    for (const e of events) seqs.set(e.id, e.seq);
  } catch (_) {
    // Too many or too large to read: the column shows "—".
  }
  return seqs;
}

function traceSeq(trace, seqs) {
  const id = String(trace.id ?? "");
  if (seqs.has(id)) return seqs.get(id);
  const cut = id.lastIndexOf(":");
  return cut > 0 && seqs.has(id.slice(0, cut)) ? seqs.get(id.slice(0, cut)) : null;
}

function renderRaw(traces, seqs) {
  const limit = el("input", { type: "number", id: "raw-limit", min: 1, max: 10000, value: state.rawLimit, "aria-label": "Trace limit" });
  const archive = el("input", { type: "checkbox", id: "raw-archive", checked: state.rawArchive });
  const reload = el("button", {
    type: "button",
    id: "raw-apply",
    onclick: () => {
      const n = parseInt(limit.value, 10);
      state.rawLimit = Number.isFinite(n) && n > 0 ? Math.min(n, 10000) : 200;
      state.rawArchive = archive.checked;
      state.loaded.delete("raw");
      loadTab("raw", state.generation).then(() => refocus("#raw-apply"));
    },
  }, "Apply");
  const toolbar = el("div", { class: "toolbar" },
    el("label", { for: "raw-limit", text: "Newest" }), limit,
    el("label", {}, archive, " include archived"), reload,
    el("span", { class: "muted", text: `${traces.length} traces` }));
  if (!traces.length) return [toolbar, empty("No raw traces.")];
  const rows = traces.map((t) => el("tr", {},
    el("td", { class: "mono", text: traceSeq(t, seqs) ?? "—" }),
    el("td", { class: "mono", text: t.turn_id }),
    el("td", { class: "mono", text: t.seq }),
    el("td", { text: t.trace_type }),
    el("td", { class: "content" }, folded(t.tool_name
      ? `${t.tool_name} ${t.tool_args ? oneLine(t.tool_args, 200) : ""}${t.tool_result !== null && t.tool_result !== undefined ? "\n→ " + json(t.tool_result) : ""}${t.tool_error ? "\n✗ " + t.tool_error : ""}`
      : t.content || "")),
    el("td", { text: fmtTime(t.ts * 1000) })));
  const table = el("table", {},
    el("thead", {}, el("tr", {}, ...RAW_COLUMNS.map(([h, title]) => el("th", { scope: "col", title, text: h })))),
    el("tbody", {}, rows));
  return [toolbar, table];
}

const RAW_COLUMNS = [
  ["event seq", "The seq of the event this line came from, in the session"],
  ["turn", "The turn of the reference layout"],
  ["line in turn", "The line's seq in the reference layout: it counts from 1 in each turn"],
  ["type", null],
  ["content", null],
  ["time", null],
];

function renderCompactions(events) {
  if (!events.length) return [empty("No compaction in this session.")];
  const items = events.slice().reverse().map((e) => {
    const rec = e.compaction || {};
    const before = rec.tokens_before;
    const after = rec.tokens_after;
    const saved = typeof before === "number" && typeof after === "number" && before > 0
      ? ` (−${Math.round((1 - after / before) * 100)}%)` : "";
    const triggers = (rec.triggers || []).join(", ") || "—";
    return el("li", { class: "compaction", "data-seq": e.seq },
      el("div", {}, badge(rec.strategy || "?", "mode"), " ", el("span", { class: "muted", text: `#${e.seq} · ${fmtTime(e.timestamp)}` })),
      el("div", { class: "figures", text: `tokens ${num(before)} → ${num(after)}${saved}` }),
      el("div", { text: `boundary: seq ${rec.boundary_seq ?? "?"}${rec.boundary_turn !== undefined ? ` (turn ${rec.boundary_turn})` : ""} · ${num(e.compacted_event_count)} events covered` }),
      el("div", { text: `reason: ${triggers}${rec.new_items !== undefined ? ` · ${rec.new_items} new placeholders` : ""}${rec.summarizer ? ` · summarizer ${rec.summarizer}` : ""}` }),
      el("div", { class: "muted", text: e.content }));
  });
  return [el("ol", { class: "timeline", "aria-label": "Compactions, newest first" }, items)];
}

// ---------------------------------------------------------------- memory blocks

// Line diff of two texts (longest common subsequence): [kind, line] with kind " ", "-"
// or "+"; null when either side is too long to diff here.
function lineDiff(before, after) {
  const a = before.split("\n");
  const b = after.split("\n");
  if (a.length > DIFF_MAX_LINES || b.length > DIFF_MAX_LINES) return null;
  const rows = a.length + 1;
  const cols = b.length + 1;
  const lcs = new Uint32Array(rows * cols);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * cols + j] = a[i] === b[j] ? lcs[(i + 1) * cols + j + 1] + 1
        : Math.max(lcs[(i + 1) * cols + j], lcs[i * cols + j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (lcs[(i + 1) * cols + j] >= lcs[i * cols + j + 1]) { out.push(["-", a[i]]); i++; }
    else { out.push(["+", b[j]]); j++; }
  }
  while (i < a.length) out.push(["-", a[i++]]);
  while (j < b.length) out.push(["+", b[j++]]);
  return out;
}

function renderDiff(before, after) {
  const diff = lineDiff(before, after);
  if (diff === null) return el("p", { class: "muted", text: "Too long to diff here." });
  const lines = diff.map(([kind, line]) => el("span", {
    class: kind === "+" ? "ins" : kind === "-" ? "del" : null,
    text: `${kind} ${line}\n`,
  }));
  return el("pre", { class: "diff", "aria-label": "Changes from the previous revision" }, lines);
}

function usage(block) {
  const pct = block.max_tokens ? Math.round((100 * block.tokens) / block.max_tokens) : 0;
  return `[${block.label} · ${pct}% of ${block.max_tokens.toLocaleString("en-US")} tokens]`;
}

function renderRevision(rev, previous) {
  const who = rev.author + (rev.tool_call_id ? ` · tool call ${rev.tool_call_id}` : "");
  const node = el("li", { class: "revision", "data-revision": rev.revision },
    el("div", {}, badge(`r${rev.revision}`, "mode"), " ", badge(rev.author, "author"), " ",
      el("span", { class: "muted", text: `${fmtTime(rev.created_at)} · ${who}` +
        (rev.session_id ? ` · at seq ${rev.session_seq}` : "") })),
    rev.reason ? el("div", { text: `reason: ${rev.reason}` }) : null);
  if (previous) {
    node.append(el("details", { class: "fold" },
      el("summary", { text: `Diff from r${previous.revision}` }), renderDiff(previous.value, rev.value)));
  } else {
    node.append(el("details", { class: "fold" }, el("summary", { text: "Value" }), el("pre", { text: rev.value })));
  }
  return node;
}

function renderBlocks(blocks, histories) {
  if (!blocks.length) return [empty("No memory blocks for this session or its agent.")];
  return blocks.map((block, k) => {
    const revisions = histories[k] || [];
    const items = revisions.map((rev, n) => renderRevision(rev, revisions[n + 1]));
    return el("article", { class: "block", "data-label": block.label, "aria-label": `Block ${block.label}` },
      el("h3", {}, el("span", { class: "mono", text: usage(block) }), " ",
        badge(block.session_id ? "session" : "agent", "scope")),
      block.description ? el("p", { class: "muted", text: block.description }) : null,
      folded(block.value, "pre"),
      el("details", { class: "fold history" },
        el("summary", { text: `History (${revisions.length}${revisions.length >= HISTORY_LIMIT ? "+" : ""} revisions)` }),
        el("ol", { class: "timeline", "aria-label": `Revisions of ${block.label}, newest first` }, items)));
  });
}

// ---------------------------------------------------------------- usage

// The SVG namespace as the HTML parser gave it to the page's own <svg> (no URL here).
const SVG_NS = document.getElementById("svg-namespace").namespaceURI;

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

function money(n) { return typeof n === "number" ? n.toLocaleString(undefined, { maximumFractionDigits: 6 }) : "—"; }

function usageTable(title, totals, cls) {
  const rows = [
    ["Turns", num(totals.turns)],
    ["Input (prompt) tokens", num(totals.input_tokens)],
    ["  of which cached", num(totals.cached_input_tokens)],
    ["  of which cache writes", num(totals.cache_write_tokens)],
    ["Output tokens", num(totals.output_tokens)],
    ["  of which reasoning", num(totals.reasoning_tokens)],
    ["Total tokens", num(totals.total_tokens)],
    ["Cost", "cost" in totals ? money(totals.cost) : "unknown (no price for a model)"],
  ];
  return el("section", { class: "usage-totals " + cls, "aria-label": title },
    el("h3", { text: title }),
    el("dl", { class: "meta" }, rows.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v })))));
}

// Tokens per turn: prompt (input), cached part, output, one point per turn in order;
// dashed verticals where a compaction was recorded (between the turns around its seq),
// so the sawtooth of the prompt is visible.
function perTurnChart(turns, compactions) {
  const W = 720, H = 220, L = 56, R = 12, T = 12, B = 28;
  const max = Math.max(1, ...turns.map((t) => t.input_tokens), ...turns.map((t) => t.output_tokens));
  const x = (i) => L + (turns.length === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (turns.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const line = (key, cls) => svg("polyline", {
    class: "series " + cls, "data-series": key, fill: "none",
    points: turns.map((t, i) => `${x(i).toFixed(1)},${y(t[key]).toFixed(1)}`).join(" "),
  });
  const marks = compactions.map((seq) => {
    let i = turns.findIndex((t) => t.seq > seq);
    if (i < 0) i = turns.length - 1;
    const px = i > 0 ? (x(i - 1) + x(i)) / 2 : x(0);
    return svg("line", { class: "compaction-mark", "data-seq": seq, x1: px, x2: px, y1: T, y2: H - B },
      svg("title", {}, document.createTextNode(`compaction at seq ${seq}`)));
  });
  const ticks = [0, 0.5, 1].map((f) => svg("text", { class: "tick", x: L - 6, y: y(max * f) + 4, "text-anchor": "end" },
    document.createTextNode(Math.round(max * f).toLocaleString())));
  const points = turns.map((t, i) => svg("circle", { class: "point", cx: x(i), cy: y(t.input_tokens), r: 2.5, "data-seq": t.seq },
    svg("title", {}, document.createTextNode(`turn ${t.turn} (seq ${t.seq}): prompt ${num(t.input_tokens)}, cached ${num(t.cached_input_tokens)}, output ${num(t.output_tokens)}${t.model ? ", " + t.model : ""}`))));
  return svg("svg", { id: "usage-chart", class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `Tokens per turn over ${turns.length} turns, ${compactions.length} compactions marked` },
    svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
    svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }),
    ticks, marks, line("input_tokens", "prompt"), line("cached_input_tokens", "cached"), line("output_tokens", "output"), points);
}

// The running total (input + output) with the budget line when a token budget is set.
function cumulativeChart(turns, budget) {
  const W = 720, H = 140, L = 56, R = 12, T = 12, B = 20;
  let sum = 0;
  const totals = turns.map((t) => (sum += t.input_tokens + t.output_tokens));
  const limit = budget && typeof budget.max_total_tokens === "number" ? budget.max_total_tokens : null;
  const max = Math.max(1, sum, limit || 0);
  const x = (i) => L + (turns.length === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (turns.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const parts = [
    svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
    svg("polyline", { class: "series total", "data-series": "total", fill: "none", points: totals.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ") }),
    svg("text", { class: "tick", x: L - 6, y: y(max) + 4, "text-anchor": "end" }, document.createTextNode(Math.round(max).toLocaleString())),
  ];
  if (limit !== null) {
    parts.push(svg("line", { id: "budget-line", class: "budget-line", x1: L, x2: W - R, y1: y(limit), y2: y(limit), "data-limit": limit },
      svg("title", {}, document.createTextNode(`budget: ${num(limit)} tokens`))));
  }
  return svg("svg", { id: "usage-total-chart", class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Total tokens so far" + (limit !== null ? `, budget ${limit}` : "") }, parts);
}

function renderUsage(chart, agent) {
  const turns = chart.turns || [];
  const budget = chart.budget || chart.agent_budget || null;
  const facts = el("dl", { class: "meta" },
    el("div", {}, el("dt", { text: "Session budget" }), el("dd", { id: "usage-budget", text: chart.budget ? oneLine(chart.budget, 120) : "none" })),
    el("div", {}, el("dt", { text: "Agent budget" }), el("dd", { text: chart.agent_budget ? oneLine(chart.agent_budget, 120) : "none" })),
    el("div", {}, el("dt", { text: "Expires" }), el("dd", { id: "usage-expiry", text: chart.expires_at ? fmtTime(chart.expires_at) : "never" })));
  const out = [facts];
  if (!turns.length) {
    out.push(empty("No usage recorded for this session (turn.persist with usage)."));
  } else {
    out.push(el("h3", { text: `Tokens per turn (last ${turns.length})` }),
      el("p", { class: "legend" }, badge("prompt", "prompt"), " ", badge("cached", "cached"), " ", badge("output", "output"), " ", badge("compaction", "compaction")),
      perTurnChart(turns, chart.compactions || []),
      el("h3", { text: "Total so far" }),
      cumulativeChart(turns, budget));
  }
  out.push(usageTable("This session", chart.totals, "session"), usageTable("This agent", agent.totals, "agent"));
  return out;
}

// ---------------------------------------------------------------- live

let refreshTimer = null;

function onNotification(method, params) {
  if (!params || params.session_id !== state.sessionId) return;
  if (method === "events.gap") {
    // The page fell behind (events were dropped for it): read the session again.
    state.lastSeq = Math.max(state.lastSeq, params.to_seq || 0);
    state.loaded = new Set();
    loadTab(state.tab, state.generation);
    return;
  }
  if (method === "stream.chunk") { onStreamChunk(params); return; }
  if (method === "stream.closed") {
    if (state.live && state.live.streamId === params.stream_id) { state.live = null; drawLive(); }
    return;
  }
  if (method === "session.rewound") {
    // The session continues from to_seq (its tail left for a branch, or was erased):
    // the agent's sessions and this one are read again.
    openAgent(state.agentId, state.sessionId);
    return;
  }
  if (method !== "events.appended") return;
  // A replay after a reconnection may repeat events the page has: keep each seq once.
  const known = new Set(state.events.map((e) => e.seq));
  const fresh = (params.events || []).filter((e) => !known.has(e.seq));
  if (!fresh.length) return;
  state.lastSeq = Math.max(state.lastSeq, ...fresh.map((e) => e.seq));
  const live = $("live-status");
  live.classList.remove("pulse");
  void live.offsetWidth;
  live.classList.add("pulse");
  // The conversation grows in place (also while it loads: the load keeps what is newer
  // than its answer); other tabs reload when shown again.
  state.events = state.events.concat(fresh).sort((a, b) => a.seq - b.seq).slice(-EVENT_LIMIT);
  for (const tab of TABS) if (tab !== "conversation") state.loaded.delete(tab);
  if (state.tab === "conversation" && state.loaded.has("conversation")) {
    const panel = $("panel-conversation");
    panel.replaceChildren(...renderConversation());
    for (const e of fresh) {
      const node = panel.querySelector(`[data-seq="${e.seq}"]`);
      if (node) node.classList.add("new");
    }
  }
  renderMeta();
  const session = state.sessions.find((s) => s.id === state.sessionId);
  if (session) { session.last_seq = state.lastSeq; renderSessions(); }
  // The token count and the conversation's marks follow once the burst is over.
  clearTimeout(refreshTimer);
  const generation = state.generation;
  refreshTimer = setTimeout(async () => {
    await refreshBuild(generation);
    if (generation !== state.generation) return;
    if (state.tab === "conversation" && state.loaded.has("conversation")) {
      $("panel-conversation").replaceChildren(...renderConversation());
    } else if (!state.loaded.has(state.tab)) {
      loadTab(state.tab, generation);
    }
  }, 400);
}

start();

// ---------------------------------------------------------------- recall

// A snippet from memory.search marks the matched words with « and »: shown as <mark>,
// every piece through textContent.
function highlighted(snippet) {
  const out = [];
  const parts = String(snippet).split(/([\u00ab\u00bb])/);
  let inside = false;
  for (const part of parts) {
    if (part === "\u00ab") { inside = true; continue; }
    if (part === "\u00bb") { inside = false; continue; }
    if (part) out.push(inside ? el("mark", { text: part }) : document.createTextNode(part));
  }
  return out;
}

async function recallSearch(query) {
  const rpc = state.agentRpc;
  const list = $("recall-hits");
  list.replaceChildren();
  if (!rpc || !query.trim()) { $("recall-status").textContent = ""; return; }
  $("recall-status").textContent = "Searching…";
  let found;
  try {
    found = await rpc.call("memory.search", { query, limit: 20 });
  } catch (err) {
    $("recall-status").textContent = "Search failed: " + err.message;
    return;
  }
  const n = found.hits.length;
  $("recall-status").textContent = `${n} result${n === 1 ? "" : "s"}` +
    (found.indexing ? " (the index is still being built: older events may be missing)" : "");
  for (const hit of found.hits) {
    const where = hit.in_context ? "in context" : "compacted away";
    list.append(el("li", {}, el("button", {
      type: "button",
      class: "recall-hit",
      "data-session": hit.session_id,
      "data-seq": String(hit.seq),
      onclick: () => openAt(hit.session_id, hit.seq),
    },
    el("span", { class: "snippet" }, ...highlighted(hit.snippet)),
    el("span", { class: "sub", text: `${hit.session_id} · #${hit.seq} · ${hit.action} · ${where}` }))));
  }
}

// Open a session at an event: the conversation from a little before it, the event marked.
async function openAt(sessionId, seq) {
  state.focusSeq = seq;
  if (sessionId !== state.sessionId) {
    state.tab = "conversation";
    await openSession(sessionId);
    selectTab("conversation", false);
  } else {
    state.loaded.delete("conversation");
    selectTab("conversation", false);
  }
}

function markFocus(panel, seq) {
  let best = null;
  for (const node of panel.querySelectorAll("[data-seq]")) {
    const at = Number(node.dataset.seq);
    if (at <= seq && (!best || at >= Number(best.dataset.seq))) best = node;
  }
  if (!best) return;
  best.classList.add("hit");
  best.scrollIntoView({ block: "center" });
}

// A summary's sources (memory.search / summarize): links opening the raw events.
function sourceLinks(sources) {
  if (!Array.isArray(sources) || !sources.length) return null;
  return el("div", { class: "sources muted" }, "Sources: ", ...sources.map((src) => el("a", {
    href: "#",
    class: "source-link",
    "data-session": src.session_id,
    "data-seq": String(src.from_seq),
    text: `#${src.from_seq}–#${src.to_seq}`,
    onclick: (ev) => { ev.preventDefault(); openAt(src.session_id, src.from_seq); },
  })));
}
