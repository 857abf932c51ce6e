// Junction web console: plain JavaScript over the REST API (/api/v1).
// Everything is built with DOM calls and textContent, never innerHTML,
// so names and message bodies cannot inject markup.
"use strict";

const API = "/api/v1";
const POLL_MS = 2000;
const HISTORY = 150; // samples kept for the rate chart: 5 minutes at 2 s
const QUEUE_PAGE = 50;
const BROWSE_PAGE = 50;
const ADDRESS_ROWS = 200; // addresses shown at most; the filter finds the others

const state = {
  view: "overview",
  queues: { offset: 0, sort: "name", desc: false, filter: "", total: 0 },
  addresses: { filter: "" },
  browse: { queue: "", offset: 0, total: 0 },
  samples: [], // {t, enq, deq}
  busy: false,
};

const $ = (id) => document.getElementById(id);

// ---- API ----

async function api(method, path, body) {
  const opts = { method, headers: { Accept: "application/json" } };
  if (method === "POST") {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body === undefined ? {} : body);
  }
  const res = await fetch(API + path, opts);
  if (res.status === 204) return null;
  let data = null;
  try { data = await res.json(); } catch (e) { /* not JSON */ }
  if (!res.ok) throw new Error((data && data.error) || res.status + " " + res.statusText);
  return data;
}

const enc = encodeURIComponent;

// ---- small helpers ----

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function fmtNum(n) { return Number(n).toLocaleString("en-US"); }
function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function fmtDuration(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + (s % 60) + "s";
  return s + "s";
}
function fmtAge(iso) {
  if (!iso) return "";
  return fmtDuration(Math.max(0, (Date.now() - Date.parse(iso)) / 1000));
}

let noticeTimer = 0;
function notice(text, isError) {
  const n = $("notice");
  n.textContent = text;
  n.className = isError ? "error" : "";
  n.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { n.hidden = true; }, isError ? 8000 : 3000);
}

// confirmDialog shows the in-page confirmation (#confirm, answered by
// #confirm-ok or #confirm-cancel) and resolves to true or false. It never
// uses window.confirm, so a browser test just clicks #confirm-ok.
function confirmDialog(text) {
  return new Promise((resolve) => {
    const box = $("confirm");
    $("confirm-text").textContent = text;
    box.hidden = false;
    const done = (answer) => {
      box.hidden = true;
      $("confirm-ok").onclick = null;
      $("confirm-cancel").onclick = null;
      resolve(answer);
    };
    $("confirm-ok").onclick = () => done(true);
    $("confirm-cancel").onclick = () => done(false);
    $("confirm-ok").focus();
  });
}

// ---- views ----

function route() {
  const h = location.hash.slice(1) || "overview";
  let view = h;
  if (h.startsWith("browse/")) {
    view = "browse";
    const q = decodeURIComponent(h.slice("browse/".length));
    if (q !== state.browse.queue) state.browse = { queue: q, offset: 0, total: 0 };
  }
  if (!$("view-" + view)) view = "overview";
  state.view = view;
  for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
  refresh();
}

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const qs = state.queues;
    const queuePath = state.view === "queues"
      ? "/queues?offset=" + qs.offset + "&limit=" + QUEUE_PAGE + "&sort=" + (qs.desc ? "-" : "") + qs.sort + "&filter=" + enc(qs.filter)
      : "/queues?limit=1";
    const [broker, queues] = await Promise.all([api("GET", "/broker"), api("GET", queuePath).catch((e) => e)]);
    renderRole(broker.ha);
    if (broker.ha && broker.ha.role === "backup") {
      // A backup serves no queues until it takes over.
      renderOverview(broker, { queues: 0, depth: 0 });
      return;
    }
    if (queues instanceof Error) throw queues;
    sample(queues.totals);
    renderOverview(broker, queues.totals);
    if (state.view === "queues") renderQueues(queues);
    else if (state.view === "addresses") renderAddresses(await api("GET", "/addresses?filter=" + enc(state.addresses.filter)));
    else if (state.view === "connections") renderConnections(await api("GET", "/connections"));
    else if (state.view === "events") renderEvents(await api("GET", "/events?limit=200"));
    else if (state.view === "settings") renderSettings(await api("GET", "/config").catch((e) => e), await api("GET", "/diverts"));
    else if (state.view === "browse") await refreshBrowse();
  } catch (e) {
    notice(e.message, true);
  } finally {
    state.busy = false;
  }
}

// ---- overview ----

// renderRole shows the broker's role in a shared-store group (absent
// without one): "live, holding the store lock since …" or "backup,
// waiting for the store lock held since … by …".
function renderRole(ha) {
  const r = $("ha-role");
  r.hidden = !ha;
  if (!ha) return;
  r.textContent = ha.status;
  r.className = ha.role;
}

function sample(totals) {
  state.samples.push({ t: Date.now(), enq: totals.enqueued, deq: totals.dequeued });
  if (state.samples.length > HISTORY + 1) state.samples.shift();
}

function rates() {
  const out = [];
  const s = state.samples;
  for (let i = 1; i < s.length; i++) {
    const dt = (s[i].t - s[i - 1].t) / 1000;
    if (dt <= 0) continue;
    // A deleted queue takes its counts with it: never show a negative rate.
    out.push({ in: Math.max(0, (s[i].enq - s[i - 1].enq) / dt), out: Math.max(0, (s[i].deq - s[i - 1].deq) / dt) });
  }
  return out;
}

function drawChart() {
  const r = rates();
  const W = 600, H = 160, top = 16;
  const max = Math.max(1, ...r.map((p) => Math.max(p.in, p.out)));
  const pts = (key) => r.map((p, i) => {
    const x = W - (r.length - 1 - i) * (W / HISTORY);
    const y = H - (p[key] / max) * (H - top);
    return x.toFixed(1) + "," + y.toFixed(1);
  }).join(" ");
  $("rate-in").setAttribute("points", pts("in"));
  $("rate-out").setAttribute("points", pts("out"));
  $("rate-max").textContent = "max " + fmtNum(Math.round(max)) + "/s";
  const last = r[r.length - 1];
  $("rate-now").textContent = last ? "now: " + fmtNum(Math.round(last.in)) + " in/s, " + fmtNum(Math.round(last.out)) + " out/s" : "";
}

function renderOverview(b, totals) {
  $("version").textContent = b.version ? "v" + b.version : "";
  $("ov-uptime").textContent = fmtDuration(b.uptimeSeconds);
  $("ov-queues").textContent = fmtNum(totals.queues);
  $("ov-depth").textContent = fmtNum(totals.depth);
  $("ov-connections").textContent = fmtNum(b.totals.connections);
  $("ov-heap").textContent = fmtBytes(b.memory.heapInuse);
  drawChart();

  const pt = $("protocols-table").tBodies[0];
  pt.replaceChildren(...b.protocols.map((p) => el("tr", {},
    el("td", { text: p.protocol }), el("td", { class: "num", text: fmtNum(p.connections) }),
    el("td", { class: "num", text: fmtNum(p.connectionsTotal) }),
    el("td", { class: "num", text: fmtNum(p.messagesIn) }), el("td", { class: "num", text: fmtNum(p.messagesOut) }))));
  if (!b.protocols.length) pt.append(el("tr", {}, el("td", { text: "no connections yet", colSpan: 5 })));

  const jt = $("journal-table").tBodies[0];
  const j = b.journal;
  if (!j) jt.replaceChildren(el("tr", {}, el("td", { text: "persistence off" })));
  else {
    const row = (k, v) => el("tr", {}, el("th", { text: k }), el("td", { class: "num", text: v }));
    jt.replaceChildren(
      row("files", fmtNum(j.files)), row("size", fmtBytes(j.bytes)), row("appends", fmtNum(j.appends)),
      row("syncs", fmtNum(j.syncs)),
      row("records per batch", j.batches ? (j.batchRecords / j.batches).toFixed(1) : "–"),
      row("mean sync", j.syncs ? (1000 * j.syncSeconds / j.syncs).toFixed(2) + " ms" : "–"),
      row("compactions", fmtNum(j.compactions)));
  }
  const lt = $("listeners-table").tBodies[0];
  lt.replaceChildren(...Object.keys(b.listeners).sort().map((k) =>
    el("tr", {}, el("th", { text: k }), el("td", { text: b.listeners[k] }))));
}

// ---- queues ----

function queueCells(tr, q) {
  const cells = [
    ["name", q.name], ["address", q.address], ["routing", q.routingType + (q.nonDestructive ? ", non-destructive" : "")], ["durable", q.durable ? "yes" : ""],
    ["depth num", fmtNum(q.depth)], ["inflight num", fmtNum(q.inFlight)], ["paged num", fmtNum(q.paged || 0)],
    ["scheduled num", fmtNum(q.scheduled || 0)],
    ["consumers num", fmtNum(q.consumers)],
    ["enqueued num", fmtNum(q.enqueued)], ["dequeued num", fmtNum(q.dequeued)],
    ["replaced num", fmtNum(q.replaced || 0)], ["dropped num", fmtNum(q.dropped || 0)], ["oldest", fmtAge(q.oldestMessage)],
  ];
  if (!tr.cells.length) {
    for (const [cls] of cells) tr.append(el("td", { class: cls }));
    tr.append(el("td", { class: "actions" },
      el("button", { type: "button", class: "browse", text: "browse" }),
      el("button", { type: "button", class: "move", text: "move" }),
      el("button", { type: "button", class: "purge", text: "purge" }),
      el("button", { type: "button", class: "delete", text: "delete" })));
  }
  cells.forEach(([, v], i) => { if (tr.cells[i].textContent !== v) tr.cells[i].textContent = v; });
}

// renderQueues updates the visible page in place: a row keeps its element
// (tr[data-queue=NAME]) from one refresh to the next.
function renderQueues(page) {
  const qs = state.queues;
  qs.total = page.total;
  const body = $("queues-table").tBodies[0];
  const old = new Map([...body.rows].map((tr) => [tr.dataset.queue, tr]));
  const rows = page.queues.map((q) => {
    let tr = old.get(q.name);
    old.delete(q.name);
    if (!tr) tr = el("tr", { "data-queue": q.name });
    queueCells(tr, q);
    return tr;
  });
  for (const tr of old.values()) tr.remove();
  rows.forEach((tr, i) => { if (body.rows[i] !== tr) body.insertBefore(tr, body.rows[i] || null); });
  const first = page.total ? qs.offset + 1 : 0;
  $("queue-count").textContent = fmtNum(page.total) + " queues";
  $("queue-page").textContent = first + "–" + (qs.offset + page.queues.length);
  $("queue-prev").disabled = qs.offset === 0;
  $("queue-next").disabled = qs.offset + QUEUE_PAGE >= page.total;
  for (const th of document.querySelectorAll("#queues-table th[data-sort]")) {
    th.classList.toggle("sorted-asc", th.dataset.sort === qs.sort && !qs.desc);
    th.classList.toggle("sorted-desc", th.dataset.sort === qs.sort && qs.desc);
  }
}

async function queueAction(name, action) {
  try {
    if (action === "browse") {
      location.hash = "#browse/" + enc(name);
      return;
    }
    if (action === "move") {
      $("move-from").textContent = name;
      $("move-form").dataset.queue = name;
      $("move").hidden = false;
      $("move-to").focus();
      return;
    }
    if (action === "purge") {
      if (!await confirmDialog("Purge every waiting message of " + name + "?")) return;
      const r = await api("POST", "/queues/" + enc(name) + "/purge");
      notice("purged " + fmtNum(r.purged) + " messages from " + name);
    } else if (action === "delete") {
      if (!await confirmDialog("Delete queue " + name + " and its messages?")) return;
      await api("DELETE", "/queues/" + enc(name));
      notice("deleted " + name);
    }
  } catch (e) {
    notice(e.message, true);
  }
  refresh();
}

// ---- addresses ----

function routingOf(a) {
  const r = [a.anycast ? "anycast" : "", a.multicast ? "multicast" : ""].filter(Boolean).join(", ") || "none";
  return a.temporary ? r + ", temporary" : r;
}

// renderAddresses lists the addresses (sorted by name by the API), each
// row tr[data-address=NAME] with its duplicate count in td.duplicates.
function renderAddresses(page) {
  const shown = page.addresses.slice(0, ADDRESS_ROWS);
  $("address-count").textContent = fmtNum(page.total) + " addresses" +
    (page.total > shown.length ? ", first " + fmtNum(shown.length) + " shown: filter to find the others" : "");
  const body = $("addresses-table").tBodies[0];
  body.replaceChildren(...shown.map((a) => el("tr", { "data-address": a.name },
    el("td", { class: "name", text: a.name }), el("td", { class: "routing", text: routingOf(a) }),
    el("td", { class: "queues num", text: fmtNum(a.queues.length), title: a.queues.join(", ") }),
    el("td", { class: "routed num", text: fmtNum(a.routed) }), el("td", { class: "unrouted num", text: fmtNum(a.unrouted) }),
    el("td", { class: "duplicates num", text: fmtNum(a.duplicates || 0) }))));
  if (!shown.length) body.append(el("tr", {}, el("td", { text: "no addresses", colSpan: 6 })));
}

// ---- browse ----

async function refreshBrowse() {
  const b = state.browse;
  $("browse-queue").textContent = b.queue;
  const page = await api("GET", "/queues/" + enc(b.queue) + "/messages?offset=" + b.offset + "&limit=" + BROWSE_PAGE);
  b.total = page.total;
  $("browse-count").textContent = page.total
    ? (b.offset + 1) + "–" + (b.offset + page.messages.length) + " of " + fmtNum(page.total)
    : "no messages";
  $("browse-prev").disabled = b.offset === 0;
  $("browse-next").disabled = b.offset + BROWSE_PAGE >= page.total;
  $("browse-list").replaceChildren(...page.messages.map(messageCard));
  // Repeating messages (AMQ_SCHEDULED_REPEAT, AMQ_SCHEDULED_CRON) sent
  // to the queue's address, each cancellable.
  const sched = await api("GET", "/queues/" + enc(b.queue) + "/scheduled?limit=1");
  $("browse-jobs").replaceChildren(...(sched.jobs.length ? [el("h3", { text: "Repeating messages sent to " + sched.jobs[0].address })] : []),
    ...sched.jobs.map(jobCard));
}

function jobCard(j) {
  const what = j.cron ? "cron " + j.cron + (j.repeat ? ", then " + j.repeat + " more " + j.periodMs + " ms apart" : "")
    : (j.repeat + 1) + " copies " + j.periodMs + " ms apart";
  return el("div", { class: "message", "data-scheduled": String(j.id) },
    el("div", {}, el("b", { text: "#" + j.id }), " " + what + " ", el("span", { class: "badge", text: "repeating" }),
      " ", el("button", { type: "button", class: "cancel-scheduled", text: "cancel" })),
    el("div", { class: "hint", text: "next " + j.next + ", " + fmtNum(j.sent) + " sent" }),
    el("pre", { class: "body", text: j.message.body }));
}

async function cancelScheduled(e) {
  const card = e.target.closest("[data-scheduled]");
  if (!card || !e.target.closest("button.cancel-scheduled")) return;
  const id = card.dataset.scheduled;
  if (!await confirmDialog("Cancel scheduled message " + id + "?")) return;
  try {
    await api("DELETE", "/queues/" + enc(state.browse.queue) + "/scheduled/" + enc(id));
    notice("cancelled scheduled message " + id);
  } catch (err) { notice(err.message, true); }
  refresh();
}

function messageCard(m) {
  const dl = el("dl");
  const add = (k, v) => { if (v !== undefined && v !== "" && v !== null) dl.append(el("dt", { text: k }), el("dd", { text: String(v) })); };
  add("priority", m.priority);
  add("durable", m.durable ? "yes" : "no");
  add("timestamp", m.timestamp);
  add("expiration", m.expiration);
  add("delivery time", m.deliveryTime);
  add("delivery count", m.deliveryCount);
  add("content type", m.contentType);
  add("correlation id", m.correlationId);
  add("reply to", m.replyTo);
  add("group id", m.groupId);
  add("user", m.userId);
  for (const k of Object.keys(m.properties).sort()) add(k, JSON.stringify(m.properties[k]));
  const head = el("div", {}, el("b", { text: "#" + m.id }), " " + m.address + " ",
    m.inFlight ? el("span", { class: "badge", text: "in flight" }) : null,
    m.scheduled ? el("span", { class: "badge", text: "scheduled" }) : null,
    m.scheduled && !m.inFlight ? el("button", { type: "button", class: "cancel-scheduled", text: "cancel" }) : null);
  const what = fmtBytes(m.size) + (m.bodyEncoding === "base64" ? ", binary (base64)" : "") + (m.truncated ? ", first 1 KiB shown" : "");
  const attrs = { class: "message", "data-message": String(m.id) };
  if (m.scheduled) attrs["data-scheduled"] = String(m.id);
  return el("div", attrs, head, dl,
    el("div", { class: "hint", text: "body: " + what }), el("pre", { class: "body", text: m.body }));
}

// ---- connections ----

function renderConnections(page) {
  const body = $("connections-table").tBodies[0];
  body.replaceChildren(...page.connections.map((c) => el("tr", { "data-connection": String(c.id) },
    el("td", { text: c.id }), el("td", { text: c.protocol }), el("td", { text: c.remoteAddr }),
    el("td", { text: c.user }), el("td", { text: c.clientId }), el("td", { text: fmtAge(c.opened) }),
    el("td", { class: "num", text: fmtNum(c.consumers) }),
    el("td", { class: "num", text: fmtNum(c.messagesIn) }), el("td", { class: "num", text: fmtNum(c.messagesOut) }),
    el("td", {}, el("button", { type: "button", class: "close", text: "close" })))));
  if (!page.connections.length) body.append(el("tr", {}, el("td", { text: "no connections", colSpan: 10 })));
}

// ---- events ----

function renderEvents(page) {
  $("events-summary").textContent = page.enabled
    ? "Published to " + page.address + ": " + fmtNum(page.published) + " events, " + fmtNum(page.dropped) + " dropped (buffer full). Newest first."
    : "Broker events are off (notifications.enabled).";
  const body = $("events-table").tBodies[0];
  body.replaceChildren(...page.events.map((e) => el("tr", {},
    el("td", { text: new Date(e.time).toLocaleTimeString() }), el("td", { text: e.type }),
    el("td", { text: e.address || "" }), el("td", { text: e.queue || "" }), el("td", { text: e.user || "" }),
    el("td", { text: e.remoteAddress || "" }), el("td", { text: e.protocol || "" }), el("td", { text: e.reason || "" }))));
  if (!page.events.length) body.append(el("tr", {}, el("td", { text: "no events yet", colSpan: 8 })));
}

// ---- settings ----

function describeReload(r) {
  if (!r) return "No reload since the start.";
  const when = new Date(r.time).toLocaleString() + " (" + r.trigger + ")";
  if (r.error) return "Last reload " + when + " failed, nothing changed: " + r.error;
  if (r.note) return "Last reload " + when + ": " + r.note; // no configuration file
  return "Last reload " + when + ": applied " + (r.applied.join(", ") || "nothing") +
    "; restart required for " + (r.restartRequired.join(", ") || "nothing") + ".";
}

function renderSettings(cfg, diverts) {
  $("config-diverts").textContent = JSON.stringify(diverts, null, 2);
  if (cfg instanceof Error) {
    $("config-summary").textContent = cfg.message;
    $("config-json").textContent = "";
    return;
  }
  $("config-summary").textContent = (cfg.file ? "From " + cfg.file + ", watched every " + cfg.watchInterval + ". " : "") +
    "Reloadable live: " + cfg.reloadable.join(", ") + "; the rest needs a restart.";
  $("config-last").textContent = describeReload(cfg.lastReload);
  $("config-json").textContent = JSON.stringify(cfg.config, null, 2);
}

// ---- wiring ----

function init() {
  window.addEventListener("hashchange", route);

  let filterTimer = 0;
  $("queue-filter").addEventListener("input", (e) => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => { state.queues.filter = e.target.value; state.queues.offset = 0; refresh(); }, 250);
  });
  let addressTimer = 0;
  $("address-filter").addEventListener("input", (e) => {
    clearTimeout(addressTimer);
    addressTimer = setTimeout(() => { state.addresses.filter = e.target.value; refresh(); }, 250);
  });
  $("queue-prev").addEventListener("click", () => { state.queues.offset = Math.max(0, state.queues.offset - QUEUE_PAGE); refresh(); });
  $("queue-next").addEventListener("click", () => { state.queues.offset += QUEUE_PAGE; refresh(); });
  for (const th of document.querySelectorAll("#queues-table th[data-sort]")) {
    th.addEventListener("click", () => {
      const qs = state.queues;
      if (qs.sort === th.dataset.sort) qs.desc = !qs.desc;
      else { qs.sort = th.dataset.sort; qs.desc = !["name", "address", "routingType"].includes(qs.sort); }
      qs.offset = 0;
      refresh();
    });
  }
  $("queues-table").tBodies[0].addEventListener("click", (e) => {
    const btn = e.target.closest("button");
    const tr = e.target.closest("tr[data-queue]");
    if (btn && tr) queueAction(tr.dataset.queue, btn.className);
  });
  $("create-queue").addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = $("create-queue-name").value.trim();
    try {
      await api("POST", "/queues", { name, routingType: $("create-queue-rt").value });
      notice("created " + name);
      $("create-queue-name").value = "";
    } catch (err) { notice(err.message, true); }
    refresh();
  });

  $("move-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const from = $("move-form").dataset.queue;
    $("move").hidden = true;
    try {
      const r = await api("POST", "/queues/" + enc(from) + "/move", { to: $("move-to").value.trim(), max: Number($("move-max").value) || 0 });
      notice("moved " + fmtNum(r.moved) + " messages to " + r.to);
    } catch (err) { notice(err.message, true); }
    refresh();
  });
  $("move-cancel").addEventListener("click", () => { $("move").hidden = true; });

  $("browse-prev").addEventListener("click", () => { state.browse.offset = Math.max(0, state.browse.offset - BROWSE_PAGE); refresh(); });
  $("browse-next").addEventListener("click", () => { state.browse.offset += BROWSE_PAGE; refresh(); });
  $("browse-refresh").addEventListener("click", refresh);
  $("browse-list").addEventListener("click", cancelScheduled);
  $("browse-jobs").addEventListener("click", cancelScheduled);

  $("connections-table").tBodies[0].addEventListener("click", async (e) => {
    const tr = e.target.closest("tr[data-connection]");
    if (!tr || !e.target.closest("button.close")) return;
    const id = tr.dataset.connection;
    if (!await confirmDialog("Close connection " + id + "?")) return;
    try {
      await api("DELETE", "/connections/" + enc(id));
      notice("closed connection " + id);
    } catch (err) { notice(err.message, true); }
    refresh();
  });

  $("config-reload").addEventListener("click", async () => {
    try {
      const r = await api("POST", "/config/reload", {});
      notice(describeReload(r));
    } catch (err) { notice(err.message, true); }
    refresh();
  });

  $("send-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const msg = {
      address: $("send-address").value.trim(),
      routingType: $("send-rt").value,
      body: $("send-body").value,
      contentType: $("send-content-type").value.trim(),
      durable: $("send-durable").checked,
    };
    // An empty priority field means the default (4), not 0.
    const prio = $("send-priority").value.trim();
    if (prio !== "") msg.priority = Number(prio);
    const props = $("send-properties").value.trim();
    try {
      if (props) msg.properties = JSON.parse(props);
      const r = await api("POST", "/send", msg);
      $("send-result").textContent = "sent message " + r.id + " to " + r.address;
    } catch (err) {
      $("send-result").textContent = "";
      notice(err.message, true);
    }
  });

  route();
  setInterval(refresh, POLL_MS);
}

document.addEventListener("DOMContentLoaded", init);
