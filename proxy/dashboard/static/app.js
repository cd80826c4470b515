/* compaction-gate dashboard: plain JS, no build step, no network beyond this proxy.
 *
 * Reads the gate's JSON API (relative to /gate/):
 *   conversations         -> list of conversations (token use vs window)
 *   conversations/{id}    -> one conversation with its timeline and events
 *   events                -> recent gate events (all conversations)
 * Every value coming from a conversation is untrusted text: it is only ever put into
 * the page with textContent / SVG text nodes, never as HTML.
 */
"use strict";

const REFRESH_MS = 5000;
const SVG_NS = "http://www.w3.org/2000/svg";
const state = { selected: null, conversations: [], timer: null };
/* Timeline kinds that are not a rewrite of history. */
const NOT_COMPACTION = new Set(["", "append", "extend", "new", "first", "none", "side_request", "identical"]);
const COMPACTION_KINDS = (kind) => !NOT_COMPACTION.has(kind);

/* ---------- tolerant field access (the API may add fields; we read what we know) ---------- */

function pick(obj, names, fallback) {
  if (!obj || typeof obj !== "object") return fallback;
  for (const n of names) {
    if (obj[n] !== undefined && obj[n] !== null) return obj[n];
  }
  return fallback;
}

function asList(data, key) {
  if (Array.isArray(data)) return data;
  const v = pick(data, [key, "items", "data"], []);
  return Array.isArray(v) ? v : [];
}

function num(v) {
  if (v === null || v === undefined || v === "" || typeof v === "boolean") return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

function convo(c) {
  const tokens = num(pick(c, ["tokens", "tokens_total", "token_count", "last_tokens"], null));
  const window_ = num(pick(c, ["window", "context_window", "max_context", "window_tokens"], null));
  let share = num(pick(c, ["share_of_window", "window_share", "share"], null));
  if (share === null && tokens !== null && window_) share = tokens / window_;
  const timeline = asList(pick(c, ["timeline"], []), "timeline");
  const events = asList(pick(c, ["events"], []), "events");
  let compactions = num(pick(c, ["compactions", "compaction_count"], null));
  if (compactions === null && timeline.length) {
    compactions = timeline.map(point).filter((p) => COMPACTION_KINDS(p.kind)).length;
  }
  let destructive = num(pick(c, ["destructive", "destructive_count", "destructive_compactions"], null));
  if (destructive === null && events.length) {
    destructive = new Set(events.map(ev).filter((e) => e.verdict === "destructive")
      .map((e) => e.requestSeq ?? e.id)).size;
  }
  return {
    id: String(pick(c, ["id", "conversation_id"], "")),
    model: String(pick(c, ["model"], "") || ""),
    messages: num(pick(c, ["message_count", "messages_count", "n_messages"], null)),
    tokens, window: window_, share,
    compactions, destructive, timeline, events,
    eventCount: num(pick(c, ["event_count"], null)) ?? (events.length || null),
    requests: num(pick(c, ["requests"], null)),
    tenant: String(pick(c, ["tenant", "tenant_hash"], "") || ""),
  };
}

function point(t, i) {
  const kind = String(pick(t, ["transition", "transition_kind", "kind"], "append") || "append");
  return {
    index: num(pick(t, ["seq", "index", "request", "n"], null)) ?? i + 1,
    tokens: num(pick(t, ["tokens", "tokens_sent", "prompt_tokens", "estimated_tokens"], 0)) || 0,
    kind,
    destructive: Boolean(pick(t, ["destructive"], false)) ||
      String(pick(t, ["verdict"], "")) === "destructive",
  };
}

function binding(b) {
  if (typeof b === "string") return { value: b, kind: "", source: "" };
  const src = pick(b, ["where", "source", "origin"], "");
  let source = "";
  if (typeof src === "string") source = src;
  else if (src && typeof src === "object") {
    source = [pick(src, ["role"], ""), pick(src, ["tool_name", "tool"], ""),
              pick(src, ["part", "where"], "")].filter(Boolean).join(" · ");
    const idx = pick(src, ["message_index", "index"], null);
    if (idx !== null) source += (source ? " · " : "") + "message " + idx;
  }
  return {
    value: String(pick(b, ["value", "before", "original"], "")),
    now: pick(b, ["altered_to", "after", "now", "seen_as"], null),
    kind: String(pick(b, ["kind"], "") || ""),
    source,
    required: pick(b, ["required"], null),
  };
}

function ev(e) {
  // Events are {seq, at, kind, action, request_seq, message, details}; the analysis
  // (verdict, transition, dropped, altered, reinjected …) lives in details. Older or
  // flatter shapes (fields at top level, or under "analysis") are read too.
  const d = Object.assign({}, pick(e, ["analysis"], {}) || {}, pick(e, ["details"], {}) || {});
  const get = (names, fb) => pick(e, names, pick(d, names, fb));
  let transition = get(["transition", "transition_kind"], "");
  if (transition && typeof transition === "object") transition = pick(transition, ["kind"], "");
  let verdict = String(get(["verdict"], "") || "");
  if (!verdict && get(["destructive"], null) === true) verdict = "destructive";
  return {
    id: String(pick(e, ["id", "event_id", "seq"], "")),
    conversation: String(pick(e, ["conversation_id", "conversation"], "") || ""),
    requestSeq: num(pick(e, ["request_seq", "request"], null)),
    at: pick(e, ["at", "time", "timestamp", "ts", "created_at"], null),
    type: String(pick(e, ["kind", "type", "stage", "event"], "") || ""),
    action: String(get(["action"], "") || ""),
    verdict,
    transition: String(transition || ""),
    dropped: asList(get(["dropped"], []), "dropped").map(binding),
    altered: asList(get(["altered"], []), "altered").map(binding),
    reinjected: asList(get(["reinjected", "re_injected", "restored"], []), "reinjected").map(binding),
    hallucinated: asList(get(["hallucinated", "hallucinations"], []), "hallucinated").map(binding),
    note: String(pick(e, ["message", "reason", "note", "summary"], "") || ""),
  };
}

/* ---------- DOM helpers ---------- */

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmtInt(n) { return n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US"); }
function fmtPct(s) { return s === null || s === undefined ? "–" : (s * 100).toFixed(1) + "%"; }
function shortId(id) { return id.length > 22 ? id.slice(0, 10) + "…" + id.slice(-8) : id; }

function fmtTime(at) {
  if (at === null || at === undefined || at === "") return "";
  const d = typeof at === "number" ? new Date(at < 1e12 ? at * 1000 : at) : new Date(String(at));
  return Number.isNaN(d.getTime()) ? String(at) : d.toISOString().replace("T", " ").slice(0, 19) + "Z";
}

async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin", headers: { accept: "application/json" } });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

/* ---------- conversations table ---------- */

function renderConversations(list) {
  const tbody = document.querySelector("#conversations tbody");
  tbody.replaceChildren();
  document.getElementById("no-conversations").hidden = list.length > 0;
  for (const c of list) {
    const bar = el("span", { class: "bar" + (c.share >= 0.9 ? " hot" : c.share >= 0.75 ? " warn" : "") },
                   el("span"));
    bar.firstChild.style.width = Math.min(100, Math.max(0, (c.share || 0) * 100)).toFixed(1) + "%";
    const row = el("tr", { "data-id": c.id },
      el("td", {}, el("code", { text: shortId(c.id), title: c.id })),
      el("td", { text: c.model || "–" }),
      el("td", { class: "num", text: fmtInt(c.messages) }),
      el("td", { class: "num", text: fmtInt(c.tokens) }),
      el("td", {}, bar, el("span", { class: "pct", text: fmtPct(c.share) + (c.window ? " of " + fmtInt(c.window) : "") })),
      el("td", { class: "num", text: fmtInt(c.compactions) }),
      el("td", { class: "num", text: fmtInt(c.eventCount ?? 0) }));
    if (c.id === state.selected) row.classList.add("selected");
    row.addEventListener("click", () => select(c.id));
    tbody.append(row);
  }
}

/* ---------- chart: tokens per request, compactions marked ---------- */

function renderChart(c) {
  const box = document.getElementById("chart");
  box.replaceChildren();
  const pts = c.timeline.map(point);
  const W = 960, H = 260, L = 64, R = 16, T = 22, B = 34;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, "data-points": pts.length });
  if (!pts.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "tick" }, "no requests yet"));
    box.append(root);
    return;
  }
  const maxTokens = Math.max(1, ...pts.map((p) => p.tokens), c.window && c.window < 4 * Math.max(...pts.map((p) => p.tokens)) ? c.window : 0);
  const yMax = maxTokens * 1.08;
  const x = (i) => L + (pts.length === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (pts.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / yMax);
  root.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  root.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (let k = 0; k <= 4; k++) {
    const v = (yMax * k) / 4;
    root.append(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, fmtInt(v)));
    if (k) root.append(svg("line", { x1: L, y1: y(v), x2: W - R, y2: y(v), class: "axis", "stroke-dasharray": "2 4" }));
  }
  const step = Math.max(1, Math.ceil(pts.length / 12));
  pts.forEach((p, i) => {
    if (i % step === 0 || i === pts.length - 1)
      root.append(svg("text", { x: x(i), y: H - B + 16, "text-anchor": "middle", class: "tick" }, String(p.index)));
  });
  root.append(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "tick" }, "request"));
  if (c.window && c.window <= yMax) {
    root.append(svg("line", { x1: L, y1: y(c.window), x2: W - R, y2: y(c.window), class: "window-line" }));
    root.append(svg("text", { x: W - R, y: y(c.window) - 4, "text-anchor": "end", class: "tick" }, "window " + fmtInt(c.window)));
  }
  const destructiveSeq = new Set();
  for (const e of c.events.map(ev)) {
    if (e.verdict === "destructive" && e.requestSeq !== null) destructiveSeq.add(e.requestSeq);
  }
  pts.forEach((p) => { if (destructiveSeq.has(p.index)) p.destructive = true; });
  pts.forEach((p, i) => {
    if (!COMPACTION_KINDS(p.kind) && !p.destructive) return;
    const cls = "compaction" + (p.destructive ? " destructive" : "");
    const mark = svg("line", { x1: x(i), y1: T, x2: x(i), y2: H - B, class: cls, "data-kind": p.kind });
    mark.append(svg("title", {}, `request ${p.index}: ${p.kind}${p.destructive ? " (destructive)" : ""}`));
    root.append(mark);
    const nearRight = x(i) > W - R - 120;
    root.append(svg("text", { x: nearRight ? x(i) - 4 : x(i) + 4, y: T + 10,
                              "text-anchor": nearRight ? "end" : "start",
                              class: "marker-label" + (p.destructive ? " destructive" : "") },
                    p.kind + (p.destructive ? " (destructive)" : "")));
  });
  const path = pts.map((p, i) => (i ? "L" : "M") + x(i).toFixed(1) + " " + y(p.tokens).toFixed(1)).join(" ");
  root.append(svg("path", { d: path, class: "tokens-line" }));
  pts.forEach((p, i) => {
    const dot = svg("circle", { cx: x(i), cy: y(p.tokens), r: 3, class: "tokens-dot" });
    dot.append(svg("title", {}, `request ${p.index}: ${fmtInt(p.tokens)} tokens (${p.kind})`));
    root.append(dot);
  });
  box.append(root);
}

/* ---------- events with identifier diffs ---------- */

function diffColumn(cls, title, items) {
  const ul = el("ul");
  if (!items.length) ul.append(el("li", { class: "none", text: "none" }));
  const ordered = items.slice().sort((a, b) => (b.required === true) - (a.required === true));
  for (const b of ordered) {
    const li = el("li", { class: b.required === false ? "not-required" : "required" },
                  el("code", { class: "value", text: b.value }));
    if (b.now !== null && b.now !== undefined && b.now !== "") li.append(" → ", el("code", { text: String(b.now) }));
    if (b.kind) li.append(el("span", { class: "kind", text: b.kind }));
    if (b.source) li.append(el("span", { class: "src", text: b.source }));
    ul.append(li);
  }
  return el("div", { class: "diff-col " + cls }, el("h3", { text: title + " (" + items.length + ")" }), ul);
}

/* A re-injection is recorded as its own event for the same request as the compaction
 * it repairs; show them as one card: dropped / altered / re-injected side by side. */
function mergeRepairs(list) {
  const byRequest = new Map();
  for (const e of list) {
    if (e.type === "compaction" && e.requestSeq !== null) byRequest.set(e.conversation + "#" + e.requestSeq, e);
  }
  return list.filter((e) => {
    if (e.type !== "reinject" || e.requestSeq === null) return true;
    const target = byRequest.get(e.conversation + "#" + e.requestSeq);
    if (!target) return true;
    target.reinjected = target.reinjected.concat(e.reinjected);
    return false;
  });
}

function renderEvents(events, title) {
  const box = document.getElementById("events");
  document.getElementById("events-title").textContent = title;
  box.replaceChildren();
  const list = mergeRepairs(events.map(ev)).reverse();
  document.getElementById("no-events").hidden = list.length > 0;
  for (const e of list) {
    const destructive = e.verdict === "destructive";
    const head = el("div", { class: "event-head" },
      el("span", { class: "when", text: fmtTime(e.at) }));
    if (e.type) head.append(el("span", { class: "badge", text: e.type }));
    if (e.transition) head.append(el("span", { class: "badge", text: e.transition }));
    if (e.verdict) head.append(el("span", { class: "badge " + e.verdict, text: e.verdict }));
    if (e.action) head.append(el("span", { class: "badge " + e.action, text: "action: " + e.action }));
    if (e.conversation && e.conversation !== state.selected) {
      const link = el("a", { href: "#c=" + encodeURIComponent(e.conversation) }, el("code", { text: shortId(e.conversation) }));
      head.append(link);
    }
    const card = el("div", { class: "event" + (destructive ? " destructive" : ""), "data-event": e.id }, head);
    if (e.note) card.append(el("p", { class: "event-note", text: e.note }));
    const cols = [diffColumn("dropped", "dropped", e.dropped), diffColumn("altered", "altered", e.altered),
                  diffColumn("reinjected", "re-injected", e.reinjected)];
    if (e.hallucinated.length) cols[1] = diffColumn("altered", "hallucinated", e.hallucinated);
    card.append(el("div", { class: "diff" }, ...cols));
    box.append(card);
  }
}

/* ---------- loading ---------- */

async function loadConversation(id) {
  const c = convo(await getJSON("conversations/" + encodeURIComponent(id)));
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-id").textContent = c.id;
  const meta = [c.model && "model " + c.model, c.messages !== null && fmtInt(c.messages) + " messages",
                c.tokens !== null && fmtInt(c.tokens) + " tokens",
                c.window && fmtPct(c.share) + " of a " + fmtInt(c.window) + "-token window",
                c.tenant && "tenant " + c.tenant].filter(Boolean);
  document.getElementById("detail-meta").textContent = meta.join(" · ");
  renderChart(c);
  renderEvents(c.events, "Events of this conversation");
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const list = asList(await getJSON("conversations"), "conversations").map(convo);
    const recent = asList(await getJSON("events?limit=1000"), "events").map(ev);
    const flagged = new Set(recent.filter((e) => e.verdict === "destructive").map((e) => e.conversation));
    state.conversations = list;
    const fromHash = decodeURIComponent((location.hash.match(/c=([^&]+)/) || [])[1] || "");
    if (fromHash) state.selected = fromHash;
    if (!state.selected && list.length) {
      // open the most recent conversation with a destructive compaction, else the latest
      state.selected = (list.find((c) => flagged.has(c.id)) || list[0]).id;
    }
    renderConversations(list);
    for (const row of document.querySelectorAll("#conversations tbody tr")) {
      if (flagged.has(row.dataset.id)) row.classList.add("flagged");
    }
    const destructive = recent.filter((e) => e.verdict === "destructive").length;
    const nearFull = list.filter((c) => c.share !== null && c.share >= 0.75).length;
    document.getElementById("summary").replaceChildren(
      el("span", {}, el("b", { text: String(list.length) }), " conversations"),
      el("span", {}, el("b", { text: String(nearFull) }), " above 75% of window"),
      el("span", {}, el("b", { text: String(destructive) }), " destructive compactions"));
    if (state.selected) await loadConversation(state.selected);
    else renderEvents(recent.length ? asList(await getJSON("events"), "events") : [], "Events");
    status.textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    document.body.dataset.ready = "1";
  } catch (err) {
    status.textContent = "error: " + err.message;
  }
}

function select(id) {
  state.selected = id;
  if (location.hash !== "#c=" + encodeURIComponent(id)) location.hash = "c=" + encodeURIComponent(id);
  refresh();
}

window.addEventListener("hashchange", refresh);
window.addEventListener("DOMContentLoaded", () => {
  refresh();
  state.timer = setInterval(refresh, REFRESH_MS);
});
