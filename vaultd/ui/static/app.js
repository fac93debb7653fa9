// vaultd's page: search as you type, a note with its connections, the daemon's health live.
// No framework and no build step: plain DOM, every text set as text (never as HTML).
"use strict";

const vault = document.body.dataset.vault;
const $ = (id) => document.getElementById(id);
const api = async (method, route, body) => {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const answer = await fetch("/api" + route, init);
  const data = await answer.json();
  if (!answer.ok) throw new Error((data.error && data.error.message) || answer.statusText);
  return data;
};
const el = (tag, text, cls) => {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
};
const notePath = (path) => "/v1/notes/" + path.split("/").map(encodeURIComponent).join("/");
const obsidian = (path) =>
  "obsidian://open?vault=" + encodeURIComponent(vault) + "&file=" + encodeURIComponent(path.replace(/\.md$/, ""));

// A hit's text with its highlights as <mark>, the rest as text: the text is the note's own, so
// its `**bold**` is shown as written and never taken for a match. The API counts the ranges in
// code points; a JavaScript string counts UTF-16 units, where a character above U+FFFF is two.
function marked(text, highlights) {
  const unit = [0]; // the UTF-16 index of each code point, and of the end
  for (const char of text) unit.push(unit[unit.length - 1] + char.length);
  const at = (point) => unit[Math.max(0, Math.min(point, unit.length - 1))];
  const out = document.createDocumentFragment();
  let done = 0;
  for (const [start, end] of highlights || []) {
    const from = at(start), to = at(end);
    if (from < done || to <= from) continue;
    if (from > done) out.append(document.createTextNode(text.slice(done, from)));
    out.append(el("mark", text.slice(from, to)));
    done = to;
  }
  out.append(document.createTextNode(text.slice(done)));
  return out;
}

// -- search as you type -----------------------------------------------------------------------
let inFlight = null;
let asked = 0;
window.vaultdTimings = [];

async function search() {
  const query = $("q").value.trim();
  const mine = ++asked;
  if (inFlight) inFlight.abort();
  if (!query) { $("hits").replaceChildren(); $("correction").hidden = true; return; }
  const body = { query, k: 20, snippets: true };
  if ($("f-tag").value.trim()) body.tags = [$("f-tag").value.trim().replace(/^#/, "")];
  if ($("f-folder").value.trim()) body.path_prefix = $("f-folder").value.trim();
  if ($("f-since").value) body.since = $("f-since").value;
  const controller = new AbortController();
  inFlight = controller;
  const sent = performance.now();
  let data;
  try {
    const answer = await fetch("/api/v1/search", {
      method: "POST", body: JSON.stringify(body), signal: controller.signal,
      headers: { "Content-Type": "application/json" },
    });
    data = await answer.json();
    if (!answer.ok) throw new Error(data.error ? data.error.message : answer.statusText);
  } catch (error) {
    if (error.name !== "AbortError" && mine === asked) {
      $("hits").replaceChildren(el("li", String(error.message), "small"));
    }
    return;
  }
  if (mine !== asked) return;
  const kind = $("f-kind").value;
  drawHits(data, kind);
  const now = performance.now();
  window.vaultdTimings.push({ query, ms: now - sent, sinceKey: now - window.vaultdLastKey });
  window.vaultdDrawnAt = now;
  document.body.dataset.lastQuery = query;
}

function drawHits(data, kind) {
  const list = $("hits");
  const items = [];
  for (const hit of data.hits) {
    if (kind && hit.kind !== kind) continue;
    const li = el("li");
    const title = el("a", hit.title || hit.path, "hit-title");
    title.href = "#note/" + encodeURIComponent(hit.path);
    li.append(title, el("span", hit.kind, "kind"));
    const open = el("a", "open in Obsidian", "small");
    open.href = obsidian(hit.path);
    li.append(" ", open);
    const where = [hit.path, hit.section].filter(Boolean).join(" › ");
    li.append(el("div", where + (hit.page ? " · page " + hit.page : ""), "section"));
    const snippet = el("div", null, "snippet");
    snippet.append(marked(hit.snippet ?? hit.text ?? "", hit.highlights));
    li.append(snippet);
    items.push(li);
  }
  list.replaceChildren(...items);
  const corrections = data.corrections || [];
  const note = $("correction");
  if (data.did_you_mean) {
    // The query as typed was searched; the correction is offered as a link that searches it.
    const offer = el("a", data.did_you_mean, "did-you-mean");
    offer.href = "#";
    offer.addEventListener("click", (event) => {
      event.preventDefault();
      $("q").value = data.did_you_mean;
      search();
    });
    note.replaceChildren("Did you mean ", offer, "?");
    note.hidden = false;
  } else if (data.showing || corrections.length) {
    note.textContent = data.showing
      ? "Showing results for " + data.showing
      // Without a passage on the page that spells a correction there is only the index's
      // stem of it ("photographi"), which reads as another typo: name what was typed.
      : "Also searched words close to " + corrections.map((c) => c.word).join(", ");
    note.hidden = false;
  } else {
    note.hidden = true;
  }
}

window.vaultdLastKey = 0;
$("q").addEventListener("keydown", () => { window.vaultdLastKey = performance.now(); });
for (const id of ["q", "f-tag", "f-folder", "f-kind", "f-since"]) {
  $(id).addEventListener("input", search);
}

// -- a note with its connections --------------------------------------------------------------
function linkTo(path, extra) {
  const li = el("li");
  const a = el("a", path);
  a.href = "#note/" + encodeURIComponent(path);
  li.append(a);
  if (extra) li.append(el("div", extra, "small"));
  return li;
}

async function showNote(path) {
  $("note-title").textContent = path;
  $("note-path").textContent = path;
  $("note-open").href = obsidian(path);
  for (const id of ["note-outline", "note-chunks", "note-related", "note-backlinks", "note-links", "note-mentions"]) {
    $(id).replaceChildren();
  }
  const base = notePath(path);
  const note = await api("GET", base).catch((e) => ({ error: e }));
  if (note.error) { $("note-chunks").append(el("p", String(note.error.message))); return; }
  $("note-title").textContent = note.title;
  for (const chunk of note.chunks || []) {
    const div = el("div", chunk.text, "chunk");
    $("note-chunks").append(div);
  }
  for (const link of note.links || []) {
    const target = link.path || link.target;
    $("note-links").append(link.path ? linkTo(link.path) : el("li", String(target) + " (not in the vault)", "small"));
  }
  const [outline, related, backlinks, mentions] = await Promise.all([
    api("GET", base + "/outline").catch(() => ({ headings: [] })),
    api("GET", base + "/related?k=8").catch(() => ({ related: [] })),
    api("GET", base + "/backlinks").catch(() => ({ backlinks: [] })),
    api("GET", base + "/mentions?k=20").catch(() => ({ mentions: [] })),
  ]);
  for (const h of outline.headings || []) {
    const li = el("li", h.text || "", "small");
    li.style.marginLeft = ((h.level || 1) - 1) + "em";
    $("note-outline").append(li);
  }
  for (const r of related.related || []) {
    const tie = (r.target && r.target.text) || (r.source && r.source.text) || "";
    $("note-related").append(linkTo(r.path, String(tie).slice(0, 160)));
  }
  for (const b of backlinks.backlinks || []) $("note-backlinks").append(linkTo(b.path));
  for (const m of mentions.mentions || []) $("note-mentions").append(linkTo(m.path, (m.text || m.snippet || "").slice(0, 160)));
  document.body.dataset.noteShown = path;
}

// -- health, live -------------------------------------------------------------------------------
const lags = [];
function drawChart() {
  const hour = Date.now() / 1000 - 3600;
  while (lags.length && lags[0].t < hour) lags.shift();
  const max = Math.max(1, ...lags.map((p) => p.lag));
  const points = lags.map((p) => `${((p.t - hour) / 3600) * 300},${60 - (p.lag / max) * 56}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  $("h-chart").replaceChildren(line);
}

function fill(id, entries, text) {
  $(id).replaceChildren(...entries.map((e) => el("li", text(e))));
  if (!entries.length) $(id).append(el("li", "none", "small"));
}

async function refreshHealth() {
  const s = await api("GET", "/v1/status").catch(() => null);
  if (!s) return;
  $("h-status").textContent = s.status || "?";
  $("h-status").className = s.status || "";
  $("h-reason").textContent = Object.values(s.reasons || {}).join("; ");
  $("h-notes").textContent = `${s.notes} notes · ${s.chunks} chunks`;
  $("h-embedded").textContent = s.awaiting ? `${s.awaiting} chunks awaiting vectors` : "all embedded";
  $("h-model").textContent = s.model;
  $("h-store").textContent = (s.store && s.store.data_dir) || "";
  $("h-socket").textContent = document.body.dataset.socket;
  $("h-queue").textContent = s.queue_depth;
  const lag = s.lag_seconds || {};
  $("h-lag").textContent = lag.p50 == null ? "no edits yet" : `p50 ${(lag.p50 * 1000).toFixed(0)} ms · p95 ${(lag.p95 * 1000).toFixed(0)} ms`;
  drawProgress(s.progress);
  fill("h-failed", s.failed || [], (f) => `${f.path}: ${f.reason}`);
  fill("h-quarantined", s.quarantined || [], (q) => `${q.path}: ${q.reason}`);
  fill("h-leftout", s.left_out || [], (l) => `${l.path}: ${l.kind} (${l.reason})`);
  fill("h-inpart", s.in_part || [], (p) => `${p.path}: ${p.reason}`);
  document.body.dataset.healthNotes = String(s.notes);
}

function drawProgress(p) {
  if (!p) { $("h-phase").textContent = "idle"; $("h-progress").value = 0; $("h-eta").textContent = ""; return; }
  $("h-phase").textContent = `${p.phase}: ${p.percent == null ? "…" : p.percent + "%"}`;
  $("h-progress").value = p.percent || 0;
  $("h-eta").textContent = `${p.done} / ${p.total} ${p.unit}` + (p.eta_s == null ? "" : ` · ${Math.round(p.eta_s)} s left`);
}

let refreshQueued = false;
function soon() {
  if (refreshQueued) return;
  refreshQueued = true;
  setTimeout(() => { refreshQueued = false; refreshHealth(); }, 300);
}

function listen() {
  const source = new EventSource("/api/v1/events");
  source.onopen = () => $("live").classList.add("on");
  source.onerror = () => {
    $("live").classList.remove("on");
    // A refused stream (no daemon yet, or it restarted) is not retried by the browser itself.
    if (source.readyState === EventSource.CLOSED) setTimeout(listen, 1000);
  };
  const log = (event) => {
    const data = JSON.parse(event.data);
    const line = el("li", `${new Date(data.time * 1000).toLocaleTimeString()} ${data.kind} ${data.path || ""} ${data.reason || ""}`);
    $("h-events").prepend(line);
    while ($("h-events").childElementCount > 50) $("h-events").lastChild.remove();
    document.body.dataset.events = String(Number(document.body.dataset.events || 0) + 1);
    return data;
  };
  for (const kind of ["note_indexed", "note_failed", "note_deleted"]) {
    source.addEventListener(kind, (e) => { log(e); soon(); });
  }
  source.addEventListener("phase", (e) => { const d = log(e); drawProgress(d.progress); });
  source.addEventListener("pass_done", (e) => {
    const d = log(e);
    if (d.lag_seconds != null) { lags.push({ t: d.time, lag: d.lag_seconds }); drawChart(); }
    drawProgress(null);
    soon();
  });
}

$("h-reindex").addEventListener("click", () => api("POST", "/v1/reindex", {}).then(soon));

// -- views ----------------------------------------------------------------------------------
function route() {
  const hash = decodeURIComponent(location.hash.slice(1));
  const view = hash.startsWith("note/") ? "note" : hash === "health" ? "health" : "search";
  for (const name of ["search", "note", "health"]) $("view-" + name).hidden = name !== view;
  if (view === "note") showNote(hash.slice(5));
  if (view === "health") refreshHealth();
  if (view === "search") $("q").focus();
}
window.addEventListener("hashchange", route);
route();
listen();
