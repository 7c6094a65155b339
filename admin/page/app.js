// The QueueBox admin page: reads /api/stats (the outbox's and the inbox's
// counts), /api/dead-groups and /api/blocked-keys every two seconds (the
// server samples the tables on its own interval, so any number of open
// pages costs the database nothing), and replays through POST /api/replay.
// With several outboxes it shows one (?outbox=NAME) and offers the others.
// It reads /api/destinations too (two small tables), and pauses and
// resumes destinations through POST /api/destinations/NAME/pause and
// /resume. The copies of fan-out rows (a destination that did not deliver
// in its row's pass) show per destination: their counts, their dead
// groups, and each destination's state in a row's detail. No library, no
// outside resource.
"use strict";

const $ = (sel) => document.querySelector(sel);
const REFRESH_MS = 2000;
const STATES = ["pending", "processing", "delivered", "dead"];
let lastStats = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

const num = (n) => Number(n || 0).toLocaleString("en-US");

function duration(secs) {
  if (secs === null || secs === undefined) return "–";
  const s = Math.abs(secs);
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m" + (Math.floor(s % 60) ? " " + Math.floor(s % 60) + " s" : "");
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

function ago(iso) {
  if (!iso) return "–";
  return duration((Date.now() - Date.parse(iso)) / 1000) + " ago";
}

// OUTBOX is the outbox this page shows (?outbox=NAME; the relay's first
// without it): every API call names it.
const OUTBOX = new URLSearchParams(location.search).get("outbox");
// SHOWN is the outbox the stats named (the first, without ?outbox=): a
// replay names the outbox it acts on, as the API asks with several.
let SHOWN = OUTBOX;

function withOutbox(path) {
  // A pause or resume is the relay's: it goes to every outbox's database.
  if (!SHOWN || /^\/api\/destinations\/[^/]+\/(pause|resume)$/.test(path)) return path;
  return path + (path.includes("?") ? "&" : "?") + "outbox=" + encodeURIComponent(SHOWN);
}

// renderOutboxes offers the relay's outboxes to pick from, each with its
// state and counts, when it has more than one.
function renderOutboxes(s) {
  const pick = $("#outbox");
  const list = s.outboxes || [];
  pick.hidden = list.length < 2;
  if (pick.hidden) return;
  if (!SHOWN && s.outbox) SHOWN = s.outbox;
  const label = (o) => o.name + " — " + (o.running ? num((o.rows || {}).pending) + " pending, " + num((o.rows || {}).dead) + " dead" : o.state + (o.error ? ": " + o.error : ""));
  if (pick.options.length !== list.length) {
    pick.replaceChildren(...list.map((o) => el("option", { value: o.name }, label(o))));
    pick.onchange = () => { location.search = "?outbox=" + encodeURIComponent(pick.value); };
  } else {
    list.forEach((o, i) => { pick.options[i].textContent = label(o); });
  }
  pick.value = s.outbox;
}

async function api(path, options) {
  path = withOutbox(path);
  const res = await fetch(path, Object.assign({ headers: { "Accept": "application/json" }, cache: "no-store" }, options || {}));
  if (res.status === 401) {
    location.reload(); // the session ended: the server shows the token form
    throw new Error("the admin token is needed");
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.status + " " + res.statusText);
  return body;
}

function problem(msg) {
  const p = $("#problem");
  p.hidden = !msg;
  p.textContent = msg || "";
}

function fill(tbody, rows, columns, empty) {
  tbody.replaceChildren();
  if (!rows.length) {
    tbody.append(el("tr", {}, el("td", { class: "empty", colspan: columns }, empty)));
    return;
  }
  for (const r of rows) tbody.append(r);
}

function renderStats(s) {
  lastStats = s;
  renderOutboxes(s);
  $("#version").textContent = s.version ? "version " + s.version : "";
  $("#freshness").textContent = s.countedAt
    ? "counted " + ago(s.countedAt) + " (the count took " + duration(s.countSeconds) + "; every " + duration(s.countEverySeconds) + ")"
    : "not counted yet";
  const wk = s.wakeups;
  $("#wakeups").textContent = !wk ? "" : wk.kind === "logical"
    ? "woken by logical replication"
    : "woken by probes (" + wk.state + (wk.reason ? ": " + wk.reason : "") + ")";
  $("#wakeups").title = !wk ? "" : wk.slot ? "replication slot " + wk.slot
    : wk.channel ? "through the replica that holds the slot (NOTIFY channel " + wk.channel + ")" : "";
  for (const st of STATES) $("#count-" + st).textContent = s.countedAt ? num(s.rows[st]) : "–";
  $("#card-dead").classList.toggle("nonzero", (s.rows.dead || 0) > 0);
  $("#sub-pending").textContent = num(s.scheduledLater) + " scheduled later";
  $("#oldest-due").textContent = s.oldestDuePendingSeconds > 0 ? duration(s.oldestDuePendingSeconds) : "none due";
  const rates = Object.entries(s.deliveriesPerSecond || {});
  const total = rates.reduce((a, [, v]) => a + v, 0);
  $("#rate").textContent = total.toFixed(total < 10 ? 1 : 0);
  $("#rate-by-destination").textContent = rates.length
    ? rates.map(([d, v]) => d + " " + v.toFixed(1)).join(", ")
    : "this replica";
  const other = Object.entries(s.otherStates || {});
  const o = $("#other-states");
  o.hidden = other.length === 0;
  o.textContent = other.length
    ? "Rows in states QueueBox does not know (written by hand; never claimed, replayed or deleted): " +
      other.map(([k, v]) => k + " " + num(v)).join(", ")
    : "";
  problem(s.error ? "Sampling the outbox failed: " + s.error + " (the numbers are the last ones read)" : "");
  drawChart(s.throughput);
  renderInbox(s);
  renderCopies(s);
  renderTopics(s);
  renderHeldBack(s);
  renderHorizon(s);
}

// bytes writes a size as PostgreSQL's pg_size_pretty does (steps of 1024).
function bytes(n) {
  if (n < 10 * 1024) return num(n) + " bytes";
  let f = n;
  for (const unit of ["kB", "MB", "GB"]) {
    f /= 1024;
    if (f < 10 * 1024) return f.toFixed(0) + " " + unit;
  }
  return (f / 1024).toFixed(0) + " TB";
}

// renderHorizon shows what holds the database's horizon back (as status,
// /api/stats and queuebox_horizon_held_seconds do) and the WAL the server
// keeps for the wake-up slot.
function renderHorizon(s) {
  const h = s.horizon;
  const x = h && h.holder;
  $("#horizon-holder").textContent = !h ? "–" : !x || x.openSeconds < 1 ? "nothing (that this database user may see)"
    : "a " + x.kind + (x.pid ? " (pid " + x.pid + ")" : "") + ", open " + duration(x.openSeconds) +
      (x.state ? ", " + x.state : "") + (x.application ? ", application " + JSON.stringify(x.application) : "") +
      (x.query ? ": " + x.query.replace(/\s+/g, " ") : "");
  $("#horizon-dead").textContent = !h ? "–" : h.deadRowVersions < 0 ? "not known to this database" : num(h.deadRowVersions);
  const w = s.wakeupSlot;
  $("#slot-retained").textContent = w ? bytes(w.retainedBytes) : "no slot (the relays probe)";
  $("#slot-behind").textContent = w ? "slot " + w.slot + "; its confirmed position is " + bytes(w.behindBytes) + " behind the server's WAL" : "";
}

const INBOX_STATES = ["received", "relayed"];
const INBOX_OUTCOMES = ["stored", "duplicate", "rejected"];

function renderInbox(s) {
  // No inbox object: not counted yet, or a schema without the inbox table.
  const ib = s.inbox;
  $("#inbox-none").hidden = !(s.countedAt && !ib);
  $("#inbox-body").hidden = !!(s.countedAt && !ib);
  $("#inbox-received").textContent = ib ? num(ib.rows.received) : "–";
  $("#inbox-relayed").textContent = ib ? num(ib.rows.relayed) : "–";
  $("#inbox-oldest").textContent = !ib ? "–" : ib.oldestReceivedSeconds > 0 ? duration(ib.oldestReceivedSeconds) : "none waiting";
  const other = ib ? Object.entries(ib.rows).filter(([k]) => !INBOX_STATES.includes(k)) : [];
  $("#inbox-other").hidden = other.length === 0;
  $("#inbox-other-states").textContent = other.map(([k, v]) => k + " " + num(v)).join(", ");
  const sources = ib ? Object.keys(ib.sources || {}).sort() : [];
  fill($("#inbox-sources tbody"), sources.map((name) => el("tr", {}, el("td", { class: "mono" }, name),
    ...INBOX_OUTCOMES.map((o) => el("td", { class: "num" }, num(ib.sources[name][o]))))),
  4, ib ? "no inbox source is configured on this replica" : "not counted yet");
}

// renderCopies shows the copies of fan-out rows per destination and
// state (as status and queuebox_copies do); the section is hidden while
// there are none.
function renderCopies(s) {
  const copies = s.copies || [];
  $("#copies").hidden = copies.length === 0;
  fill($("#copies-table tbody"), copies.map((c) => el("tr", { "data-destination": c.destination },
    el("td", { class: "mono" }, c.destination),
    ...STATES.map((st) => el("td", { class: "num" + (st === "dead" && c.copies.dead > 0 ? " bad" : "") }, num(c.copies[st]))),
    el("td", {}, c.oldestDuePendingSeconds > 0 ? duration(c.oldestDuePendingSeconds) : "none due"),
  )), 6, "no copies");
}

function renderTopics(s) {
  const names = Object.keys(s.topics || {}).sort();
  fill($("#topics tbody"), names.map((t) => {
    const byState = s.topics[t];
    const other = Object.entries(byState).filter(([k]) => !STATES.includes(k)).map(([k, v]) => k + " " + num(v)).join(", ");
    return el("tr", {}, el("td", { class: "mono" }, t), ...STATES.map((st) => el("td", { class: "num" }, num(byState[st]))), el("td", {}, other));
  }), 6, s.countedAt ? "no rows" : "not counted yet");
  if (s.topicsOmitted) {
    $("#topics tbody").append(el("tr", {}, el("td", { class: "empty", colspan: 6 }, num(s.topicsOmitted) + " smaller topics are not listed")));
  }
}

function renderHeldBack(s) {
  const rows = (s.heldBackBy || []).map((w) => el("tr", {},
    el("td", { class: "num" }, w.pid), el("td", {}, duration(w.openSeconds)), el("td", {}, w.state),
    el("td", {}, w.application), el("td", { class: "mono" }, w.query)));
  fill($("#held-back tbody"), rows, 5, s.heldBackByError ? s.heldBackByError : "none");
}

function drawChart(t) {
  const canvas = $("#chart");
  const steps = (t && t.steps) || [];
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = 180;
  canvas.width = w * ratio;
  canvas.height = h * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, w, h);
  const pad = { l: 44, r: 8, t: 8, b: 20 };
  const points = 180; // 15 minutes of 5 s: the x axis is fixed, now on the right
  const total = (p) => p.delivered + p.retry + p.dead;
  const max = Math.max(1, ...steps.map(total));
  const plotW = w - pad.l - pad.r, plotH = h - pad.t - pad.b;
  const y = (v) => h - pad.b - plotH * (v / max);
  ctx.strokeStyle = "#e4e7ec";
  ctx.fillStyle = "#667085";
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (const v of max >= 4 ? [0, Math.round(max / 2), max] : [0, max]) {
    ctx.beginPath();
    ctx.moveTo(pad.l, y(v));
    ctx.lineTo(w - pad.r, y(v));
    ctx.stroke();
    ctx.fillText(num(v), 4, y(v) + 4);
  }
  const stepSecs = (t && t.stepSeconds) || 5;
  $("#chart-step").textContent = "rows per " + duration(stepSecs) + " step";
  ctx.fillText(duration(points * stepSecs) + " ago", pad.l, h - 4);
  ctx.fillText("now", w - pad.r - 22, h - 4);
  // One stacked bar per step: delivered, then retry, then dead on top.
  const barW = plotW / points;
  const offset = points - steps.length;
  steps.forEach((p, i) => {
    let base = 0;
    const x0 = pad.l + (offset + i) * barW;
    for (const [field, color] of [["delivered", "#12b76a"], ["retry", "#f79009"], ["dead", "#d92d20"]]) {
      const v = p[field];
      if (v <= 0) continue;
      ctx.fillStyle = color;
      ctx.fillRect(x0, y(base + v), Math.max(1, barW - 1), y(base) - y(base + v));
      base += v;
    }
  });
}

// replayedToText is what a replay of one destination's part did: its
// copies (and rows routed to it alone) back to pending, and copies a
// backfill created; the other destinations of those rows get nothing.
function replayedToText(res, warning) {
  const copies = res.copies + (res.copies === 1 ? " copy" : " copies") + " of " + res.destination;
  return copies + (res.rows ? " and " + res.rows + (res.rows === 1 ? " row" : " rows") : "") + " back to pending" +
    (res.backfilled ? ", " + res.backfilled + " new" : "") + (warning ? ". " + warning.outcome + "." :
    ": the relay delivers them to " + res.destination + " again, and nothing to its other destinations; any that fail again go dead again and show up here.");
}

// replayedText is what a replay did. A row back to pending is tried again
// from its first try; nothing says the cause is gone, so it promises no
// delivery: rows that fail again are dead again, and show up here.
function replayedText(n, warning) {
  const rows = n + (n === 1 ? " row" : " rows");
  if (warning) return rows + " back to pending. " + warning.outcome + ".";
  if (n === 1) return rows + " back to pending: the relay tries it again from the first try; if it fails again, it goes dead again and shows up here.";
  return rows + " back to pending: the relay tries them again from the first try; any that fail again go dead again and show up here.";
}

function replayButton(label, body, onDone, warning) {
  // Two clicks: the first arms the button (and, for a group whose cause
  // persists, says what a replay will do), the second replays.
  const b = el("button", { type: "button", class: "replay" }, label);
  const armedLabel = warning ? "Confirm: replay anyway" : "Confirm: " + label.toLowerCase();
  let armed = false;
  b.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      b.classList.add("confirm");
      b.textContent = armedLabel;
      if (warning) showResult("Before you replay: " + warning.cause + ". " + warning.outcome + ".", "warning");
      setTimeout(() => { if (armed && !b.disabled) { armed = false; b.classList.remove("confirm"); b.textContent = label; } }, warning ? 15000 : 5000);
      return;
    }
    b.disabled = true;
    try {
      const res = await api("/api/replay", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      b.classList.remove("confirm");
      b.textContent = "Replayed";
      showResult(res.destination ? replayedToText(res, warning) : replayedText(res.rows, warning));
      if (onDone) onDone(res);
      setTimeout(refresh, 300);
    } catch (e) {
      showResult("The replay failed: " + e.message);
      b.disabled = false;
      b.classList.remove("confirm");
      b.textContent = label;
    }
    armed = false;
  });
  return b;
}

function showResult(msg, kind) {
  const r = $("#replay-result");
  r.hidden = false;
  r.classList.toggle("warning", kind === "warning");
  r.textContent = msg;
}

let lastGroups = "";

function renderDeadGroups(g) {
  // Leave the table alone while a replay button waits for its second click,
  // and when nothing changed.
  const seen = JSON.stringify(g) + (lastStats ? lastStats.rows.dead : "");
  if ($("#dead-groups button.confirm") || seen === lastGroups) return;
  lastGroups = seen;
  const dead = lastStats && lastStats.rows ? lastStats.rows.dead : null;
  $("#dead-window").textContent = "Grouped by destination and error, with ids and numbers taken out of the error. " +
    "The groups cover the newest " + num(g.window) + " dead rows" +
    (dead !== null && dead > g.grouped ? " (of " + num(dead) + "); older ones show once these are replayed or deleted." : ".") +
    (g.copiesGrouped ? " Groups of copies are one destination's part of fan-out rows: a replay sends them to that destination only." : "");
  // A group whose cause persists says so in its row, and its button warns
  // again before it replays.
  fill($("#dead-groups tbody"), g.groups.map((grp) => el("tr", { class: "dead-group" + (grp.copies ? " copies" : ""), "data-rows": grp.rows, "data-destination": grp.destination, "data-group": grp.id },
    el("td", {}, grp.destination || "(no route)", grp.copies ? el("div", { class: "muted" }, "copies of fan-out rows") : null,
      grp.route ? el("div", { class: "muted" }, "route " + grp.route) : null,
      el("div", { class: "muted mono", title: "queuebox replay --group " + grp.id }, grp.id)),
    el("td", { class: "err" }, grp.error || "(no error text)", el("div", { class: "muted" }, grp.topics.join(", ")),
      grp.replayWarning ? el("div", { class: "replay-warning" }, "Replaying will not help yet: " + grp.replayWarning.cause + ".") : null),
    el("td", { class: "num" }, num(grp.rows)),
    el("td", {}, ago(grp.newest)),
    el("td", { class: "mono" }, el("a", { onclick: () => showRow(grp.example.id) }, grp.example.id.slice(0, 8)), el("div", { class: "muted" }, grp.example.topic)),
    el("td", {}, replayButton("Replay " + num(grp.ids.length),
      grp.copies ? { ids: grp.ids, states: ["dead"], destination: grp.destination } : { ids: grp.ids, states: ["dead"] }, null, grp.replayWarning)),
  )), 6, g.countedAt ? "no dead rows" : "not counted yet");
}

const BLOCKED_SHOWN = 20;

function renderBlocked(b) {
  fill($("#blocked-keys tbody"), b.keys.slice(0, BLOCKED_SHOWN).map((k) => el("tr", {},
    el("td", { class: "mono" }, k.key), el("td", {}, k.destination || "(no route)"),
    el("td", {}, duration(k.waitingSeconds)), el("td", {}, "in " + duration(k.nextAttemptInSeconds)),
    el("td", { class: "num" }, k.nextTry + " of " + k.maxTries),
    el("td", { class: "num" }, num(k.behind) + (k.behind >= b.behindCap ? "+" : "")),
    el("td", { class: "err" }, el("a", { onclick: () => showRow(k.headId) }, k.headId.slice(0, 8)), " ", k.lastError || ""),
  )), 7, b.countedAt ? "none" : "not counted yet");
  if (b.keys.length > BLOCKED_SHOWN) {
    $("#blocked-keys tbody").append(el("tr", {}, el("td", { class: "empty", colspan: 7 },
      num(b.keys.length - BLOCKED_SHOWN) + " more in GET /api/blocked-keys (it lists the " + num(b.keys.length) + " longest waiting)")));
  }
}

// tries words a row's attempt as everywhere else (the CLI, the docs): the
// try running, next or last (attempt + 1) of at most max_attempts + 1, and
// its attempt as the destination sees it (X-Attempt).
function tries(r) {
  const n = "try " + r.try + " of " + r.maxTries + ", attempt " + r.attempt;
  switch (r.state) {
    case "pending": return n + " (the next one)";
    case "processing": return n + " (running)";
    case "dead": return n + " (the last one)";
    default: return n;
  }
}

// pretty shows a payload or headers column: indented JSON, or the text.
function pretty(v) {
  return typeof v === "string" ? v : JSON.stringify(v, null, 2);
}

// tryText is an attempt's try with its marks, as `rows show` prints it:
// "2 (probe, not counted)", "1 (from the row)".
function tryText(a) {
  const marks = [a.probe ? "probe" : null, a.uncounted ? "not counted" : null, a.fromRow ? "from the row" : null].filter(Boolean);
  return a.try + (marks.length ? " (" + marks.join(", ") + ")" : "");
}

// attemptsTable lists a row's attempts, oldest first: each with when,
// how long, how it ended, what the destination answered, and its error
// and response excerpt under it; and its replays, with who replayed,
// where the count of its tries starts again. A delivery the row tells and
// the history does not record (fromRow: a first try that succeeded) shows
// what it cannot know as unknown.
function attemptsTable(r) {
  if (!r.attempts.length && r.matchedNoRouteAt) {
    return el("p", { class: "muted", id: "row-attempts" }, "None: no route matched the topic " + JSON.stringify(r.topic) +
      " when the relay took the row (" + r.matchedNoRouteAt + "), so it went dead without one. Add a route and replay it.");
  }
  if (!r.attempts.length) {
    return el("p", { class: "muted", id: "row-attempts" }, "No attempt recorded: none made yet, the attempt history is off (outbox.history), or its retention deleted them.");
  }
  const body = el("tbody");
  for (const a of r.attempts) {
    if (a.outcome === "replayed") {
      body.append(el("tr", { class: "replay" },
        el("td", {}, "–"), el("td", {}, "–"),
        el("td", { title: a.at }, a.at.replace("T", " ").replace(/\.\d+Z$/, "Z") + " (" + ago(a.at) + ")"),
        el("td", {}, "–"), el("td", {}, el("span", { class: "tag paused" }, "replayed")),
        el("td", { colspan: 3 }, "by " + a.replayedBy + "; the tries count from 1 again")));
      continue;
    }
    if (a.fromRow) {
      body.append(el("tr", { class: "attempt " + a.outcome + " from-row" },
        el("td", { class: "num" }, tryText(a)),
        el("td", { class: "num" }, a.attempt),
        el("td", { title: a.at }, a.at.replace("T", " ").replace(/\.\d+Z$/, "Z") + " (" + ago(a.at) + ")"),
        el("td", { class: "muted" }, "unknown"),
        el("td", {}, el("span", { class: "tag ok" }, a.outcome)),
        el("td", { class: "muted" }, "unknown"),
        el("td", { class: "muted" }, "unknown"),
        el("td", { class: "muted" }, "told by the row, not recorded: the time is when the delivery was written")));
      continue;
    }
    body.append(el("tr", { class: "attempt " + a.outcome + (a.probe ? " probe" : "") + (a.uncounted ? " uncounted" : "") },
      el("td", { class: "num" }, tryText(a)),
      el("td", { class: "num" }, a.attempt),
      el("td", { title: a.at }, a.at.replace("T", " ").replace(/\.\d+Z$/, "Z") + " (" + ago(a.at) + ")"),
      el("td", { class: "num" }, a.durationMs < 1000 ? a.durationMs.toFixed(1) + " ms" : (a.durationMs / 1000).toFixed(2) + " s"),
      el("td", {}, el("span", { class: "tag " + (a.outcome === "delivered" ? "ok" : a.outcome === "dead" ? "open" : "paused") }, a.outcome)),
      el("td", {}, a.destination),
      el("td", { class: "mono" }, a.status || "(no answer)"),
      el("td", { class: "err" }, a.error ? el("div", {}, a.error) : "", a.response ? el("div", { class: "muted" }, "response: " + a.response) : "")));
  }
  return el("table", { id: "row-attempts" },
    el("thead", {}, el("tr", {}, ...["try", "attempt", "at", "took", "outcome", "destination", "status", "error / response"].map((h) => el("th", {}, h)))),
    body);
}

// destinationsTable lists each destination of a fan-out row: its copy's
// state, tries, due time and last error, or "delivered (with the row)"
// for a destination delivered in the row's pass (it has no copy). A dead
// or delivered copy can be replayed on its own.
function destinationsTable(r) {
  const body = el("tbody");
  for (const d of r.destinations) {
    let state = d.state;
    if (d.withRow) state = d.state === "delivered" ? "delivered (with the row)" : d.state + " (with the row: not tried yet)";
    if (d.notRouted) state += ", no longer a destination of the route";
    const tag = d.state === "delivered" ? "ok" : d.state === "dead" ? "open" : "paused";
    body.append(el("tr", { class: "row-destination", "data-destination": d.destination, "data-state": d.state },
      el("td", { class: "mono" }, d.destination),
      el("td", {}, el("span", { class: "tag " + tag }, state)),
      el("td", {}, d.withRow ? "–" : tries(d)),
      el("td", {}, d.dueAt ? d.dueAt + " (" + (Date.parse(d.dueAt) > Date.now() ? "in " + duration((Date.parse(d.dueAt) - Date.now()) / 1000) : "due") + ")" : "–"),
      el("td", { class: "err" }, d.lastError || ""),
      el("td", {}, !d.withRow && (d.state === "dead" || d.state === "delivered")
        ? replayButton("Replay to " + d.destination, { ids: [r.id], states: [d.state], destination: d.destination }, () => setTimeout(() => showRow(r.id), 300))
        : null)));
  }
  return el("table", { id: "row-destinations" },
    el("thead", {}, el("tr", {}, ...["destination", "state", "tries", "due", "last error", ""].map((h) => el("th", {}, h)))),
    body);
}

async function showRow(id) {
  $("#row-id").value = id;
  const out = $("#row-detail");
  out.replaceChildren();
  try {
    let r;
    try {
      r = await api("/api/rows/" + encodeURIComponent(id.trim()));
    } catch (e) {
      if (/no row has the id/.test(e.message)) {
        out.append(el("p", { class: "muted" }, "No row has this id (it may have been deleted by retention)."));
        return;
      }
      throw e;
    }
    const fields = [["id", r.id], ["state", r.state], ["topic", r.topic], ["key", r.key ?? "(none)"],
      ["destination", r.destinations ? r.destinations.filter((d) => !d.notRouted).map((d) => d.destination).join(", ") : r.destination || "(no route)"],
      ["tries", r.matchedNoRouteAt ? "none: no route matched its topic at " + r.matchedNoRouteAt + "; nothing was sent"
        : r.destinations ? "each destination's own (below)" : tries(r)], ["sequence", r.sequence],
      ["created", r.createdAt], ["updated", r.updatedAt + " (" + ago(r.updatedAt) + ")"], ["scheduled", r.scheduledAt],
      ["last error", r.lastError ?? "(none)"]];
    out.append(el("dl", { class: "row" }, ...fields.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { class: k === "last error" ? "err" : "" }, v)])));
    if (r.state === "dead" || r.state === "delivered") {
      out.append(replayButton(r.destinations ? "Replay this row to every destination" : "Replay this row", { ids: [r.id], states: [r.state] }, () => setTimeout(() => showRow(r.id), 300)));
    }
    if (r.destinations) out.append(el("h3", {}, "Destinations (each on its own)"), destinationsTable(r));
    out.append(el("h3", {}, "Headers"), el("pre", { id: "row-headers" }, pretty(r.headers)),
      el("h3", {}, "Payload"), el("pre", { id: "row-payload" }, pretty(r.payload)),
      el("h3", {}, "Attempts" + (r.moreAttempts ? " (the newest " + r.attempts.length + ")" : "")), attemptsTable(r));
  } catch (e) {
    out.append(el("p", { class: "problem" }, e.message));
  }
}

function destinationState(d) {
  const parts = [];
  if (d.paused) parts.push(el("span", { class: "tag paused" }, "paused"), " " + (d.since ? ago(d.since) : ""),
    d.pauseReason ? el("div", { class: "muted" }, d.pauseReason) : null);
  for (const c of d.openCircuits) {
    parts.push(el("div", {}, el("span", { class: "tag open" }, "circuit open"), " on " + c.replica + ", " + ago(c.openedAt),
      el("div", { class: "err" }, c.lastError)));
  }
  if (!parts.length) parts.push(el("span", { class: "tag ok" }, "delivering"));
  return parts;
}

function replicaText(r) {
  if (!r) return "–";
  const deferred = Object.entries(r.deferred || {}).filter(([, n]) => n > 0).map(([why, n]) => num(n) + " " + why);
  const parts = [];
  if (r.circuitOpen) parts.push("circuit open " + ago(r.circuitOpenedAt) + ", " + num(r.probes) + " probes");
  if (r.waiting) parts.push(num(r.waiting) + " rows waiting for the limits");
  parts.push(deferred.length ? "deferred: " + deferred.join(", ") : "nothing deferred");
  return parts.join("; ");
}

function pauseControl(d) {
  // Pause asks for a reason, then pauses on a second click; resume takes
  // two clicks, as a replay does.
  if (d.paused) return destinationButton("Resume", d.name, "resume", () => ({}));
  const box = el("span", { class: "pause" });
  const reason = el("input", { placeholder: "reason (optional)", size: 18, class: "reason", hidden: "" });
  const b = destinationButton("Pause", d.name, "pause", () => ({ reason: reason.value }), () => { reason.hidden = false; reason.focus(); });
  box.append(reason, b);
  return box;
}

function destinationButton(label, name, action, body, onArm) {
  const b = el("button", { type: "button", class: action, "data-destination": name }, label);
  let armed = false;
  b.addEventListener("click", async () => {
    if (!armed) {
      armed = true;
      b.classList.add("confirm");
      b.textContent = "Confirm: " + label.toLowerCase() + " " + name;
      if (onArm) onArm();
      return;
    }
    b.disabled = true;
    try {
      const res = await api("/api/destinations/" + encodeURIComponent(name) + "/" + action,
        { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body()) });
      const r = $("#destination-result");
      r.hidden = false;
      r.textContent = res.paused
        ? name + " is paused on every replica: its rows wait, with no attempt counted."
        : name + " is resumed: its rows flow again" + (res.changed ? "." : " (it was not paused).");
    } catch (e) {
      const r = $("#destination-result");
      r.hidden = false;
      r.textContent = "The " + action + " failed: " + e.message;
    }
    armed = false;
    b.classList.remove("confirm"); // lets the next refresh draw the table again
    lastDestinations = "";
    setTimeout(refresh, 300);
  });
  return b;
}

let lastDestinations = "";

function renderDestinations(v) {
  // Leave the table alone while a button waits for its second click.
  const seen = JSON.stringify(v);
  if ($("#destination-table button.confirm") || seen === lastDestinations) return;
  lastDestinations = seen;
  const secs = (s) => duration(s);
  fill($("#destination-table tbody"), v.destinations.map((d) => el("tr", { "data-destination": d.name },
    el("td", { class: "mono" }, d.name, el("div", { class: "muted" }, d.configured ? d.type : "not in the configuration")),
    el("td", {}, ...destinationState(d)),
    el("td", {}, d.rateLimit ? d.rateLimit.perSecond + " / s (burst " + d.rateLimit.burst + ")" : "–"),
    el("td", { class: "num" }, d.maxConcurrency || "–"),
    el("td", {}, d.circuitBreaker ? d.circuitBreaker.minAttempts + " attempts over " + secs(d.circuitBreaker.windowSeconds) +
      "; a probe every " + secs(d.circuitBreaker.probeIntervalSeconds) : "off"),
    el("td", {}, replicaText(d.replica)),
    el("td", {}, pauseControl(d)),
  )), 7, "no destination");
}

async function refresh() {
  try {
    renderStats(await api("/api/stats"));
    const [g, b, dests] = await Promise.all([api("/api/dead-groups"), api("/api/blocked-keys"), api("/api/destinations")]);
    renderDeadGroups(g);
    renderBlocked(b);
    renderDestinations(dests);
  } catch (e) {
    problem("The admin listener does not answer: " + e.message);
  }
}

$("#row-form").addEventListener("submit", (e) => {
  e.preventDefault();
  showRow($("#row-id").value);
});
window.addEventListener("resize", () => lastStats && drawChart(lastStats.throughput));
refresh();
setInterval(refresh, REFRESH_MS);
