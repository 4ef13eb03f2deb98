// The live actor tree: follows /v2/actors/events (one tree a second, server-sent events) and
// redraws it with each, and with it one page of a sequence model's live conversations from
// /v2/actors/conversations. `/actors?follow=poll` polls /v2/actors every second instead (for a
// client without EventSource, or a headless browser's virtual time, which never ends while a
// stream is open). No libraries.
"use strict";

const POLL_MS = 1000;
const FOLLOW = new URLSearchParams(location.search).get("follow") === "poll" ? "poll" : "events";
const tree = document.getElementById("tree");
const statusLine = document.getElementById("status");
const filter = document.getElementById("filter");
let last = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function share(v) {
  return v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%";
}

function figure(label, value, id, alert) {
  return el("span", {}, label + " ", el("b", { "data-figure": id, class: alert ? "alert" : "" }, value));
}

// Cumulative Prometheus buckets → per-bucket counts, drawn as bars.
function histogram(h) {
  const counts = [];
  let prev = 0;
  for (const b of h.buckets) { counts.push([String(b.le), b.count - prev]); prev = b.count; }
  counts.push(["+Inf", h.count - prev]);
  while (counts.length > 1 && counts[counts.length - 1][1] === 0) counts.pop();
  const max = Math.max(1, ...counts.map((c) => c[1]));
  const bars = el("div", { class: "hist" });
  const labels = el("div", { class: "hist-labels" });
  for (const [le, n] of counts) {
    bars.append(el("div", { style: `height:${(100 * n) / max}%`, title: `≤ ${le}: ${n}` }));
    labels.append(el("span", {}, le));
  }
  return el("div", {}, bars, labels);
}

function instancesTable(m) {
  const seq = m.sequence !== null;
  const head = ["instance", "state", "executions", "busy 1 s", "busy 60 s", "mailbox",
    "batch now / last", "restarts (load/backend/panic)"];
  if (seq) head.push("slots used");
  const t = el("table", { class: "instances" }, el("tr", {}, ...head.map((h) => el("th", {}, h))));
  for (const i of m.instances) {
    const r = i.restarts;
    const row = el("tr", { "data-instance": i.name },
      el("td", {}, i.name),
      el("td", { class: i.alive ? "" : "alert" }, i.state),
      el("td", { "data-figure": "executions" }, i.executions),
      el("td", {}, el("span", { class: "bar", style: `width:${40 * (i.busy_share_1s || 0)}px` }), " ", share(i.busy_share_1s)),
      el("td", {}, share(i.busy_share_60s)),
      el("td", {}, i.mailbox),
      el("td", { "data-figure": "batch_size" }, `${i.current_batch_size} / ${i.last_batch_size}`),
      el("td", { class: r.total > 0 ? "alert" : "", "data-figure": "restarts" },
        `${r.total} (${r.load_failed}/${r.backend_failed}/${r.panicked})`));
    if (seq) row.append(el("td", {}, i.sequence_slots_used));
    t.append(row);
  }
  return t;
}

function model(m) {
  const s = m.scheduler;
  const sup = m.supervisor;
  const down = sup.live_instances < sup.instances;
  const evicted = m.sequence && m.sequence.evictions > 0;
  const alert = sup.restarts.total > 0 || down || evicted;
  const id = `${m.namespace}/${m.name}/${m.version}`;
  const box = el("section", { class: "model" + (alert ? " flagged" : ""), "data-model": m.name, "data-version": m.version, id },
    el("h2", {}, `${m.namespace ? m.namespace + " " : ""}${m.name} v${m.version}`,
      el("span", { class: "kind" }, m.scheduler_kind + (m.decoupled ? ", decoupled" : ""))),
    el("h3", {}, "supervisor"),
    el("div", { class: "figures" },
      figure("instances", `${sup.live_instances}/${sup.instances} live`, "live", down),
      figure("restarts", sup.restarts.total, "restarts", sup.restarts.total > 0),
      figure("load failed", sup.restarts.load_failed, "load_failed", sup.restarts.load_failed > 0),
      figure("backend failed", sup.restarts.backend_failed, "backend_failed", sup.restarts.backend_failed > 0),
      figure("panicked", sup.restarts.panicked, "panicked", sup.restarts.panicked > 0)),
    instancesTable(m),
    el("h3", {}, "scheduler"),
    el("div", { class: "figures" },
      figure("pending", s.pending, "pending"),
      figure("queue", s.queue_length, "queue_length"),
      figure("mailbox", s.mailbox, "mailbox"),
      figure("batches", s.batches, "batches"),
      figure("items", s.items, "items"),
      figure("success", m.statistics.success, "success"),
      figure("in flight", m.statistics.in_flight, "in_flight")));
  if (s.batches > 0) box.append(el("div", {}, "batch sizes"), histogram(s.batch_size));
  if (m.sequence) {
    const q = m.sequence;
    box.append(el("h3", {}, `sequence actor (${q.strategy})`),
      el("div", { class: "figures" },
        figure("live conversations", `${q.live}/${q.slots}`, "live_sequences"),
        figure("backlog", q.backlog, "backlog", q.backlog > 0),
        figure("state bytes", q.state_bytes + (q.state_bytes_limit ? ` / ${q.state_bytes_limit}` : ""), "state_bytes"),
        figure("idle releases", q.idle_releases, "idle_releases"),
        figure("evictions", q.evictions, "evictions", q.evictions > 0)));
  }
  if (m.ensemble) {
    const t = el("table", {}, el("tr", {}, el("th", {}, "step"), el("th", {}, "model"), el("th", {}, "runs"), el("th", {}, "mean µs")));
    for (const st of m.ensemble.steps) {
      const h = st.latency_us;
      t.append(el("tr", {}, el("td", {}, st.step), el("td", {}, st.model), el("td", {}, h.count),
        el("td", {}, h.count ? (h.sum / h.count).toFixed(0) : "–")));
    }
    box.append(el("h3", {}, "ensemble steps"), t);
  }
  return box;
}

// The conversations panel: its controls are made once (typing is never interrupted); only its
// model list and its rows are redrawn.
const PAGE_ROWS = 25;
const conv = {
  panel: document.getElementById("conversations"),
  model: document.getElementById("conv-model"),
  search: document.getElementById("conv-search"),
  prev: document.getElementById("conv-prev"),
  next: document.getElementById("conv-next"),
  range: document.getElementById("conv-range"),
  link: document.getElementById("conv-link"),
  body: document.querySelector("#conv-table tbody"),
  heads: document.querySelectorAll("#conv-table th[data-sort]"),
  offset: 0,
  sort: "id",
  order: "asc",
  matched: 0,
  picked: false,
};

function idle(us) {
  if (us < 1000) return `${us} µs`;
  if (us < 1e6) return `${(us / 1000).toFixed(1)} ms`;
  return `${(us / 1e6).toFixed(1)} s`;
}

function conversationModels() {
  const seqs = last ? last.models.filter((m) => m.sequence) : [];
  const want = seqs.map((m) => `${m.name}|${m.version}`);
  const have = [...conv.model.options].map((o) => o.value);
  if (want.join("\n") !== have.join("\n")) {
    const chosen = conv.model.value;
    conv.model.replaceChildren(...seqs.map((m) => el("option", { value: `${m.name}|${m.version}` }, `${m.name} v${m.version}`)));
    if (want.includes(chosen)) conv.model.value = chosen;
  }
  // Until someone picks one, the model with the most live conversations.
  if (!conv.picked && seqs.length > 0) {
    const busiest = seqs.reduce((a, b) => (b.sequence.live > a.sequence.live ? b : a));
    conv.model.value = `${busiest.name}|${busiest.version}`;
  }
  conv.panel.hidden = seqs.length === 0;
}

function conversationsUrl() {
  const [model, version] = conv.model.value.split("|");
  const q = new URLSearchParams({ model, version, offset: conv.offset, limit: PAGE_ROWS, sort: conv.sort, order: conv.order });
  const search = conv.search.value.trim();
  if (search) q.set("q", search);
  return "/v2/actors/conversations?" + q.toString();
}

async function pollConversations() {
  conversationModels();
  if (conv.panel.hidden || !conv.model.value) return;
  const url = conversationsUrl();
  conv.link.href = url;
  const r = await fetch(url, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  if (body.offset > 0 && body.offset >= body.matched) {
    conv.offset = Math.max(0, Math.floor((body.matched - 1) / PAGE_ROWS) * PAGE_ROWS);
    return pollConversations();
  }
  conv.matched = body.matched;
  conv.body.replaceChildren(...body.conversations.map((c) => el("tr", { "data-id": c.id },
    el("td", {}, c.id),
    el("td", {}, c.instance === null ? "–" : c.instance + (c.slot === null ? "" : ` / ${c.slot}`)),
    el("td", {}, c.status),
    el("td", {}, c.turns),
    el("td", {}, c.queued),
    el("td", {}, c.state_bytes),
    el("td", {}, idle(c.idle_us)))));
  const end = body.offset + body.conversations.length;
  conv.range.textContent = body.matched === 0
    ? `none of ${body.total}`
    : `${body.offset + 1}–${end} of ${body.matched}` + (body.matched < body.total ? ` (of ${body.total} live)` : "");
  conv.range.className = "";
  conv.range.setAttribute("data-model", body.model);
  conv.range.setAttribute("data-total", String(body.total));
  conv.range.setAttribute("data-matched", String(body.matched));
  conv.prev.disabled = body.offset === 0;
  conv.next.disabled = end >= body.matched;
  for (const h of conv.heads) {
    h.className = h.dataset.sort === conv.sort ? `sorted-${conv.order}` : "";
  }
}

function refreshConversations() {
  pollConversations().catch((e) => {
    conv.range.textContent = "cannot read /v2/actors/conversations: " + e.message;
    conv.range.className = "alert";
  });
}

conv.model.addEventListener("change", () => { conv.picked = true; conv.offset = 0; refreshConversations(); });
conv.search.addEventListener("input", () => { conv.offset = 0; refreshConversations(); });
conv.prev.addEventListener("click", () => { conv.offset = Math.max(0, conv.offset - PAGE_ROWS); refreshConversations(); });
conv.next.addEventListener("click", () => { conv.offset += PAGE_ROWS; refreshConversations(); });
for (const h of conv.heads) {
  h.addEventListener("click", () => {
    if (conv.sort === h.dataset.sort) conv.order = conv.order === "asc" ? "desc" : "asc";
    else { conv.sort = h.dataset.sort; conv.order = h.dataset.sort === "id" || h.dataset.sort === "instance" ? "asc" : "desc"; }
    conv.offset = 0;
    refreshConversations();
  });
}

function render() {
  if (!last) return;
  const want = filter.value.trim().toLowerCase();
  const shown = last.models.filter((m) => !want || m.name.toLowerCase().includes(want));
  tree.replaceChildren(...shown.map(model));
  tree.setAttribute("data-timestamp", String(last.timestamp_ms));
}

function shown(body) {
  last = body;
  render();
  statusLine.className = "status";
  statusLine.textContent = `${body.models.length} model versions, updated ${new Date(body.timestamp_ms).toLocaleTimeString()}`
    + (FOLLOW === "events" ? " (live)" : "");
}

function unreachable(message) {
  statusLine.className = "status error";
  statusLine.textContent = "cannot reach the actors: " + message;
}

async function poll() {
  try {
    const r = await fetch("/v2/actors", { cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    shown(body);
    await pollConversations();
  } catch (e) {
    unreachable(e.message);
  }
  setTimeout(poll, POLL_MS);
}

// With each tree event, the conversations' page is asked again, unless the last ask is still out.
let asking = false;
function follow() {
  const events = new EventSource("/v2/actors/events");
  events.addEventListener("tree", (e) => {
    shown(JSON.parse(e.data));
    if (asking) return;
    asking = true;
    pollConversations().catch((err) => {
      conv.range.textContent = "cannot read /v2/actors/conversations: " + err.message;
      conv.range.className = "alert";
    }).finally(() => { asking = false; });
  });
  // The connection dropped: EventSource reconnects by itself.
  events.addEventListener("error", () => unreachable("the event stream dropped; reconnecting"));
}

filter.addEventListener("input", render);
document.body.setAttribute("data-follow", FOLLOW);
if (FOLLOW === "events") follow(); else poll();
