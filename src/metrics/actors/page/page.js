// The live actor tree: polls /v2/actors every second and redraws it. No libraries.
"use strict";

const POLL_MS = 1000;
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
    "restarts (load/backend/panic)"];
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

function render() {
  if (!last) return;
  const want = filter.value.trim().toLowerCase();
  const shown = last.models.filter((m) => !want || m.name.toLowerCase().includes(want));
  tree.replaceChildren(...shown.map(model));
  tree.setAttribute("data-timestamp", String(last.timestamp_ms));
}

async function poll() {
  try {
    const r = await fetch("/v2/actors", { cache: "no-store" });
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.statusText);
    last = body;
    render();
    statusLine.className = "status";
    statusLine.textContent = `${body.models.length} model versions, updated ${new Date(body.timestamp_ms).toLocaleTimeString()}`;
  } catch (e) {
    statusLine.className = "status error";
    statusLine.textContent = "cannot reach /v2/actors: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}

filter.addEventListener("input", render);
poll();
