// vaultd's page: the vault at a glance, search as you type, a note with its connections, the
// daemon's health live. No framework and no build step: plain DOM. Text from the vault is set as
// text, except the `*_html` fields, which `vaultd ui` rendered and sanitized on the server
// (vaultd.ui.render: an allow-list of tags and attributes, no script, no inline style).
"use strict";

const vault = document.body.dataset.vault;
const startCommand = document.body.dataset.start;
const $ = (id) => document.getElementById(id);
const el = (tag, text, cls) => {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
};
// The server's rendering, parsed inertly (a <template> runs nothing) and moved in.
const html = (markup, cls) => {
  const template = document.createElement("template");
  template.innerHTML = markup || "";
  const node = el("div", null, cls);
  node.append(template.content);
  return node;
};
const encodePath = (path) => path.split("/").map(encodeURIComponent).join("/");
const notePath = (path) => "/v1/notes/" + encodePath(path);
const noteHash = (path) => "#note/" + encodeURIComponent(path);
const obsidian = (path, page) => {
  let file = /\.md$/.test(path) ? path.replace(/\.md$/, "") : path;
  if (page) file += "#page=" + page; // Obsidian opens a PDF at the page its link names
  return "obsidian://open?vault=" + encodeURIComponent(vault) + "&file=" + encodeURIComponent(file);
};

// -- the daemon, and whether it answers -------------------------------------------------------
// Every view says at once when the daemon is gone: a banner with the command that starts it,
// the views dimmed and the health marked unreachable; when it answers again, the view in hand
// is fetched anew and the event stream reopened, with no reload.
class DaemonGone extends Error {}
let daemonUp = null;

async function api(method, route, body, signal) {
  const init = { method, headers: {}, signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let answer;
  try {
    answer = await fetch("/api" + route, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    setDaemon(false);
    throw new DaemonGone("the page's server does not answer: is vaultd ui still running?");
  }
  const data = await answer.json().catch(() => ({}));
  if (answer.status === 502) {
    setDaemon(false);
    throw new DaemonGone((data.error && data.error.message) || "the daemon does not answer");
  }
  if (!answer.ok) throw new Error((data.error && data.error.message) || answer.statusText);
  return data;
}

function setDaemon(up) {
  if (up === daemonUp) return;
  const wasDown = daemonUp === false;
  daemonUp = up;
  $("gone").hidden = up;
  document.body.classList.toggle("daemon-down", !up);
  document.body.dataset.daemon = up ? "up" : "down";
  drawLive();
  if (!up) {
    for (const id of ["h-status", "home-status"]) {
      $(id).textContent = "unreachable";
      $(id).className = "unreachable";
    }
  }
  if (up && wasDown) { route(); listen(); }
}

// The corner's word for the daemon: stopped, live (its event stream open), or on the way.
let streamOpen = false;
function drawLive() {
  const [text, state] = daemonUp === false ? ["daemon stopped", "down"] : streamOpen ? ["live", "on"] : ["connecting…", ""];
  $("live").textContent = text;
  $("live").className = "live " + state;
}

async function watchDaemon() {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 1500);
  try {
    await api("GET", "/v1/health", undefined, controller.signal);
    setDaemon(true);
  } catch (error) {
    setDaemon(false);
  } finally {
    clearTimeout(timer);
    setTimeout(watchDaemon, 1000);
  }
}

// A hit's snippet: rendered by the server with exactly the API's match ranges marked.
function snippetNode(hit) {
  if (hit.snippet_html !== undefined) return html(hit.snippet_html, "snippet");
  return el("div", hit.snippet ?? hit.text ?? "", "snippet");
}

// -- search as you type -----------------------------------------------------------------------
let inFlight = null;
let asked = 0;
let selected = -1;
window.vaultdTimings = [];

function searchBody(query) {
  const body = { query, k: 20, snippets: true };
  if ($("f-tag").value.trim()) body.tags = [$("f-tag").value.trim().replace(/^#/, "")];
  if ($("f-folder").value.trim()) body.path_prefix = $("f-folder").value.trim();
  if ($("f-since").value) body.since = $("f-since").value;
  if ($("f-kind").value) body.kinds = [$("f-kind").value];
  if ($("f-package").value.trim()) body.packages = [$("f-package").value.trim()];
  return body;
}

function showSearchError(message) {
  $("search-error").textContent = message || "";
  $("search-error").hidden = !message;
}

async function search() {
  const query = $("q").value.trim();
  const mine = ++asked;
  if (inFlight) inFlight.abort();
  remember(query);
  if (!query) { drawHits({ hits: [] }); showSearchError(""); return; }
  const controller = new AbortController();
  inFlight = controller;
  const sent = performance.now();
  let data;
  try {
    data = await api("POST", "/v1/search", searchBody(query), controller.signal);
  } catch (error) {
    // An error is said beside the results, never drawn as one of them.
    if (error.name !== "AbortError" && mine === asked) showSearchError(String(error.message));
    return;
  }
  if (mine !== asked) return;
  showSearchError("");
  drawHits(data);
  const now = performance.now();
  window.vaultdTimings.push({ query, ms: now - sent, sinceKey: now - window.vaultdLastKey });
  window.vaultdDrawnAt = now;
  document.body.dataset.lastQuery = query;
}

function hitMedia(hit) {
  // A PDF hit shows the page it was found on; an image hit, the image with its read text.
  let src = null;
  if (hit.kind === "pdf" && hit.page) src = `/pdf-page/${encodePath(hit.path)}?page=${hit.page}`;
  if (hit.kind === "image") src = "/file/" + encodePath(hit.path);
  if (!src) return null;
  const img = el("img", null, "thumb");
  img.src = src;
  img.loading = "lazy";
  img.alt = hit.kind === "pdf" ? `page ${hit.page} of ${hit.title || hit.path}` : hit.title || hit.path;
  return img;
}

function cardName(hit) {
  const first = (hit.snippet ?? hit.text ?? "").replace(/^…\s*/, "").split("\n")[0];
  return short(first.replace(/^#+\s*/, "").replace(/[*_=`[\]]/g, "").trim() || hit.node, 60);
}

function hitItem(hit, index) {
  const li = el("li");
  li.id = "hit-" + index;
  const title = el("a", hit.title || hit.path, "hit-title");
  title.href = noteHash(hit.path);
  li.append(title, el("span", hit.kind, "kind"));
  const open = el("a", "open in Obsidian", "hit-actions");
  open.href = obsidian(hit.path, hit.kind === "pdf" ? hit.page : null);
  li.append(" ", open);
  const where = [hit.path, hit.section].filter(Boolean);
  if (hit.page) where.push(hit.page_end && hit.page_end !== hit.page ? `pages ${hit.page}–${hit.page_end}` : `page ${hit.page}`);
  // A canvas card has an id, not a name: it is named by its first line, as a reader sees it.
  if (hit.node && hit.kind === "canvas") where.push("card “" + cardName(hit) + "”");
  if (hit.symbol) where.push(hit.symbol);
  // A source passage's package, as its nearest manifest names it.
  if (hit.package) where.push("package " + hit.package);
  li.append(el("div", where.join(" › "), "section"));
  const media = hitMedia(hit);
  if (media) {
    const row = el("div", null, "hit-media");
    row.append(media, snippetNode(hit));
    li.append(row);
  } else {
    li.append(snippetNode(hit));
  }
  li.addEventListener("mouseenter", () => select(index, false));
  return li;
}

function drawHits(data) {
  const kind = $("f-kind").value;
  const hits = (data.hits || []).filter((hit) => !kind || hit.kind === kind);
  $("hits").replaceChildren(...hits.map(hitItem));
  selected = -1;
  const shortNote = $("search-short");
  shortNote.hidden = !(data.short && hits.length);
  if (data.short === "exhausted") shortNote.textContent = `Only ${hits.length} notes match.`;
  else if (data.short === "depth") shortNote.textContent = "More may match than a search looks through; narrow it with a filter.";
  if (!hits.length && $("q").value.trim()) $("hits").append(el("li", "Nothing matches.", "small"));
  drawCorrection(data);
}

function drawCorrection(data) {
  const note = $("correction");
  const corrections = data.corrections || [];
  if (data.did_you_mean) {
    // The query as typed was searched; the correction is offered as a link that searches it.
    const offer = el("a", data.did_you_mean, "did-you-mean");
    offer.href = "#search";
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

function select(index, scroll = true) {
  const items = [...$("hits").querySelectorAll(":scope > li[id]")];
  if (!items.length) return;
  selected = Math.max(0, Math.min(index, items.length - 1));
  items.forEach((item, i) => item.classList.toggle("selected", i === selected));
  if (scroll) items[selected].scrollIntoView({ block: "nearest" });
}

// The search in hand lives in the address (#search?q=...), so Back returns to it.
function remember(query) {
  const hash = query ? "#search?q=" + encodeURIComponent(query) : "#search";
  if (location.hash.startsWith("#search") && location.hash !== hash) history.replaceState(null, "", hash);
}

window.vaultdLastKey = 0;
$("q").addEventListener("keydown", (event) => {
  window.vaultdLastKey = performance.now();
  if (event.key === "ArrowDown") { event.preventDefault(); select(selected + 1); }
  else if (event.key === "ArrowUp") { event.preventDefault(); select(selected - 1); }
  else if (event.key === "Enter") {
    event.preventDefault();
    const chosen = $("hits").querySelector(":scope > li.selected .hit-title") || $("hits").querySelector(".hit-title");
    if (chosen) location.hash = chosen.getAttribute("href");
  } else if (event.key === "Escape") { $("q").value = ""; search(); }
});
for (const id of ["q", "f-tag", "f-folder", "f-kind", "f-package", "f-since"]) $(id).addEventListener("input", search);
for (const id of ["search-form", "home-form"]) $(id).addEventListener("submit", (event) => event.preventDefault());
$("home-q").addEventListener("input", () => {
  $("q").value = $("home-q").value;
  location.hash = "#search?q=" + encodeURIComponent($("q").value);
});

document.addEventListener("keydown", (event) => {
  const typing = /^(INPUT|SELECT|TEXTAREA)$/.test(document.activeElement.tagName);
  if (event.key === "/" && !typing) {
    event.preventDefault();
    // Shown at once (a hash change would show it only after this keystroke is done).
    if (!location.hash.startsWith("#search")) { history.pushState(null, "", "#search"); route(); }
    $("q").focus();
    $("q").select(); // typing replaces the last query
  } else if (event.key === "Escape" && location.hash.startsWith("#note/")) {
    history.length > 1 ? history.back() : (location.hash = "#search");
  }
});

// -- a note with its connections --------------------------------------------------------------
function linkTo(path, title, extra) {
  const li = el("li");
  const a = el("a", title || path);
  a.href = noteHash(path);
  li.append(a);
  if (title && title !== path) li.append(el("div", path, "small"));
  if (extra) li.append(extra instanceof Node ? extra : el("div", extra, "small"));
  return li;
}

function fillList(id, items) {
  $(id).replaceChildren(...items);
  if (!items.length) $(id).append(el("li", "none", "small"));
}

function drawPassages(note) {
  const box = $("note-chunks");
  box.replaceChildren();
  let section = "";
  for (const chunk of note.chunks || []) {
    const div = chunk.html !== undefined ? html(chunk.html, "chunk md") : el("div", chunk.text, "chunk");
    // Where the passage is in the note, said once a section: its headings' path.
    const where = (chunk.headings || []).join(" › ");
    if (where && where !== section) div.prepend(el("div", where, "passage-where"));
    section = where;
    div.id = "passage-" + chunk.start_line;
    if (chunk.anchor) div.dataset.anchor = chunk.anchor;
    div.dataset.start = chunk.start_line;
    div.dataset.end = chunk.end_line;
    box.append(div);
  }
}

// A link inside the note (a heading of it, a footnote) scrolls to it; it is no view of its own.
$("note-chunks").addEventListener("click", (event) => {
  const link = event.target.closest("a[href^='#']");
  const href = link && link.getAttribute("href");
  if (!href || href.startsWith("#note/") || href.startsWith("#search")) return;
  event.preventDefault();
  const id = href.slice(1);
  const box = $("note-chunks");
  const target = box.querySelector(`[id="${CSS.escape(id)}"]`) || box.querySelector(`[data-anchor="${CSS.escape(id)}"]`);
  if (target) target.scrollIntoView({ block: "start" });
  document.body.dataset.inNoteTarget = target ? id : "";
});

// The passage a heading opens: the first that starts at or after its line and within its
// section, else the one holding the line.
function passageAt(line, end) {
  let holding = null;
  for (const div of $("note-chunks").children) {
    const start = Number(div.dataset.start);
    if (start >= line && start <= end) return div;
    if (start <= line) holding = div;
  }
  return holding || $("note-chunks").firstElementChild;
}

function drawOutline(path, headings) {
  const items = headings.map((h) => {
    const li = el("li");
    li.style.paddingLeft = ((h.level || 1) - 1) * 0.9 + "em";
    const a = el("a", h.text || "(untitled)");
    a.href = noteHash(path);
    a.addEventListener("click", (event) => {
      event.preventDefault();
      const target = passageAt(h.start_line, h.end_line ?? h.start_line);
      if (!target) return;
      for (const div of $("note-chunks").children) div.classList.remove("target");
      target.classList.add("target");
      target.scrollIntoView({ block: "start" });
      document.body.dataset.outlineTarget = target.id;
    });
    li.append(a);
    return li;
  });
  fillList("note-outline", items);
}

// Each note once, this one left out, in first-seen order.
function unique(paths, self) {
  return [...new Set(paths.filter((p) => p && p !== self))];
}

async function showNote(path) {
  $("note-title").textContent = path;
  $("note-path").textContent = path;
  $("note-open").href = obsidian(path);
  $("note-error").hidden = true;
  for (const id of ["note-outline", "note-chunks", "note-related", "note-backlinks", "note-links", "note-mentions"]) {
    $(id).replaceChildren();
  }
  drawGraph(path, [], [], []);
  const base = notePath(path);
  let note;
  try {
    note = await api("GET", base);
  } catch (error) {
    $("note-error").textContent = String(error.message);
    $("note-error").hidden = false;
    return;
  }
  $("note-title").textContent = note.title || path;
  drawPassages(note);
  const links = unique((note.links || []).map((l) => l.path), path);
  const unresolved = [...new Set((note.links || []).filter((l) => !l.path).map((l) => l.target))];
  fillList("note-links", [
    ...links.map((p) => linkTo(p)),
    ...unresolved.map((t) => el("li", t + " (not in the vault)", "small")),
  ]);
  const [outline, related, backlinks, mentions] = await Promise.all([
    api("GET", base + "/outline").catch(() => ({ headings: [] })),
    api("GET", base + "/related?k=8").catch(() => ({ related: [] })),
    api("GET", base + "/backlinks").catch(() => ({ backlinks: [] })),
    api("GET", base + "/mentions?k=20").catch(() => ({ mentions: [] })),
  ]);
  drawOutline(path, outline.headings || []);
  const relatedNotes = (related.related || []).filter((r) => r.path !== path);
  fillList("note-related", relatedNotes.map((r) => linkTo(r.path, r.title, r.tie)));
  const back = backlinks.backlinks || [];
  const backPaths = unique(back.map((b) => (typeof b === "string" ? b : b.path)), path);
  const titles = Object.fromEntries(back.filter((b) => typeof b !== "string").map((b) => [b.path, b.title]));
  fillList("note-backlinks", backPaths.map((p) => linkTo(p, titles[p])));
  const seen = new Set();
  const mentionItems = [];
  for (const m of mentions.mentions || []) {
    if (m.path === path || seen.has(m.path)) continue;
    seen.add(m.path);
    mentionItems.push(linkTo(m.path, m.title, m.tie || m.text));
  }
  fillList("note-mentions", mentionItems);
  drawGraph(path, links, backPaths, relatedNotes.map((r) => r.path), { ...titles, [path]: note.title });
  document.body.dataset.noteShown = path;
}

// -- the note's neighbourhood, drawn -----------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";
const svg = (tag, attrs) => {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
};
const baseName = (path) => path.split("/").pop().replace(/\.md$/, "");
const short = (text, n) => (text.length > n ? text.slice(0, n - 1) + "…" : text);

function drawGraph(path, links, backlinks, related, titles = {}) {
  const graph = $("note-graph");
  const title = graph.querySelector("title");
  graph.replaceChildren(title);
  const kinds = new Map();
  for (const p of links) kinds.set(p, "link");
  for (const p of backlinks) kinds.set(p, kinds.has(p) ? "both" : "backlink");
  for (const p of related) if (!kinds.has(p)) kinds.set(p, "related");
  const neighbours = [...kinds.entries()].slice(0, 24);
  const [cx, cy, r] = [160, 130, 95];
  const edges = svg("g");
  const nodes = svg("g");
  neighbours.forEach(([p, kind], i) => {
    const angle = (2 * Math.PI * i) / neighbours.length - Math.PI / 2;
    const x = cx + r * Math.cos(angle), y = cy + r * 0.95 * Math.sin(angle);
    edges.append(svg("line", { x1: cx, y1: cy, x2: x, y2: y, class: kind }));
    const a = svg("a", { href: noteHash(p), class: kind, "aria-label": `${kind}: ${titles[p] || baseName(p)}` });
    a.dataset.path = p;
    const label = svg("text", { x: x, y: y + (y < cy ? -8 : 14), "text-anchor": "middle" });
    label.textContent = short(titles[p] || baseName(p), 18);
    a.append(svg("circle", { cx: x, cy: y, r: 6 }), label);
    nodes.append(a);
  });
  const center = svg("g", { class: "center" });
  const label = svg("text", { x: cx, y: cy + 20, "text-anchor": "middle" });
  label.textContent = short(titles[path] || baseName(path), 24);
  center.append(svg("circle", { cx, cy, r: 9 }), label);
  graph.append(edges, nodes, center);
  graph.dataset.nodes = String(neighbours.length);
}

// -- home: the index at a glance and what changed lately ----------------------------------------
async function showHome() {
  const [status, recent] = await Promise.all([
    api("GET", "/v1/status").catch(() => null),
    api("GET", "/v1/recent?k=15").catch(() => ({ notes: [] })),
  ]);
  if (status) {
    $("home-notes").textContent = `${status.notes} notes · ${status.chunks} passages`;
    $("home-kinds").textContent = Object.entries(status.by_kind || {}).map(([k, n]) => `${n} ${k}`).join(" · ");
    const p = status.progress;
    $("home-state").textContent = p ? `${p.phase}: ${p.done} / ${p.total} ${p.unit}` : status.awaiting ? `${status.awaiting} passages awaiting vectors` : "up to date";
    $("home-progress").value = p ? p.percent || 0 : 100;
    $("home-eta").textContent = p && p.eta_s != null ? `about ${Math.round(p.eta_s)} s left` : "";
    $("home-status").textContent = status.status;
    $("home-status").className = status.status;
    $("home-reason").textContent = Object.values(status.reasons || {}).join("; ");
  }
  fillList("home-recent", (recent.notes || []).map((n) => linkTo(n.path, n.title, n.modified ? "changed " + new Date(n.modified).toLocaleString() : "")));
  document.body.dataset.homeShown = "1";
}

// -- health, live -------------------------------------------------------------------------------
const lags = [];
function drawChart() {
  const now = Date.now() / 1000, hour = now - 3600;
  while (lags.length && lags[0].t < hour) lags.shift();
  const max = Math.max(0.001, ...lags.map((p) => p.lag));
  const x = (t) => 30 + ((t - hour) / 3600) * 265;
  const y = (lag) => 68 - (lag / max) * 60;
  const parts = [
    svg("line", { x1: 30, y1: 68, x2: 295, y2: 68 }),
    svg("line", { x1: 30, y1: 8, x2: 30, y2: 68 }),
  ];
  const top = svg("text", { x: 0, y: 12 });
  top.textContent = max < 1 ? `${Math.round(max * 1000)} ms` : `${max.toFixed(1)} s`;
  const bottom = svg("text", { x: 0, y: 70 });
  bottom.textContent = "0";
  const left = svg("text", { x: 30, y: 79 });
  left.textContent = "1 h ago";
  const right = svg("text", { x: 295, y: 79, "text-anchor": "end" });
  right.textContent = "now";
  parts.push(top, bottom, left, right);
  if (lags.length > 1) parts.push(svg("polyline", { points: lags.map((p) => `${x(p.t)},${y(p.lag)}`).join(" ") }));
  for (const p of lags) parts.push(svg("circle", { cx: x(p.t), cy: y(p.lag), r: 2.5 }));
  $("h-chart").replaceChildren(...parts);
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
  $("h-notes").textContent = `${s.notes} notes · ${s.chunks} passages`;
  $("h-embedded").textContent = s.awaiting ? `${s.awaiting} passages awaiting vectors` : "all embedded";
  $("h-model").textContent = s.model;
  $("h-store").textContent = (s.store && s.store.data_dir) || "";
  $("h-socket").textContent = document.body.dataset.socket;
  $("h-queue").textContent = s.queue_depth;
  const lag = s.lag_seconds || {};
  $("h-lag").textContent = lag.p50 == null ? "no edits yet" : `p50 ${(lag.p50 * 1000).toFixed(0)} ms · p95 ${(lag.p95 * 1000).toFixed(0)} ms`;
  drawProgress(s.progress);
  drawChart();
  fill("h-failed", s.failed || [], (f) => `${f.path}: ${f.reason}`);
  fill("h-quarantined", s.quarantined || [], (q) => `${q.path}: ${q.reason}`);
  fill("h-leftout", s.left_out || [], (l) => `${l.path}: ${l.kind} (${l.reason})`);
  fill("h-inpart", s.in_part || [], (p) => `${p.path}: ${p.reason}`);
  document.body.dataset.healthNotes = String(s.notes);
}

function progressText(p) {
  return `${p.phase}: ${p.done} / ${p.total} ${p.unit}` + (p.percent == null ? "" : ` (${p.percent}%)`);
}

function drawProgress(p) {
  if (!p) { $("h-phase").textContent = "idle"; $("h-progress").value = 0; $("h-eta").textContent = ""; return; }
  $("h-phase").textContent = progressText(p);
  $("h-progress").value = p.percent || 0;
  $("h-eta").textContent = p.eta_s == null ? "" : `about ${Math.round(p.eta_s)} s left`;
}

// What an event says, in a line: which note, which phase and how far, how long it took.
function describe(data) {
  const parts = [new Date(data.time * 1000).toLocaleTimeString(), data.kind];
  if (data.progress) parts.push(progressText(data.progress));
  if (data.path) parts.push(data.path);
  if (data.reason) parts.push(data.reason);
  if (data.lag_seconds != null) parts.push(`lag ${(data.lag_seconds * 1000).toFixed(0)} ms`);
  if (data.notes != null) parts.push(`${data.notes} notes`);
  return parts.join(" · ");
}

let refreshQueued = false;
function soon() {
  if (refreshQueued) return;
  refreshQueued = true;
  setTimeout(() => {
    refreshQueued = false;
    if (currentView === "health") refreshHealth();
    if (currentView === "home") showHome();
  }, 300);
}

let source = null;
function listen() {
  if (source) source.close();
  streamOpen = false;
  source = new EventSource("/api/v1/events");
  const mine = source;
  source.onopen = () => { streamOpen = true; drawLive(); };
  source.onerror = () => {
    if (mine !== source) return;
    streamOpen = false;
    drawLive();
    // A refused stream (no daemon yet, or it restarted) is not retried by the browser itself.
    if (source.readyState === EventSource.CLOSED) setTimeout(() => { if (mine === source) listen(); }, 1000);
  };
  const log = (event) => {
    const data = JSON.parse(event.data);
    $("h-events").prepend(el("li", describe(data)));
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

$("h-reindex").addEventListener("click", () => api("POST", "/v1/reindex", {}).then(soon).catch(() => {}));

// -- views ----------------------------------------------------------------------------------
let currentView = null;
function route() {
  const hash = decodeURIComponent(location.hash.slice(1));
  const view = hash.startsWith("note/") ? "note" : hash.startsWith("search") ? "search" : hash === "health" ? "health" : "home";
  currentView = view;
  for (const name of ["home", "search", "note", "health"]) $("view-" + name).hidden = name !== view;
  for (const name of ["home", "search", "health"]) {
    const link = $("nav-" + name);
    if (name === view) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  if (view === "note") showNote(hash.slice(5));
  if (view === "health") refreshHealth();
  if (view === "home") { showHome(); $("home-q").value = ""; }
  if (view === "search") {
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    if (params.has("tag")) {
      // A tag followed from a note starts a search of its own: that tag, nothing else.
      $("f-tag").value = params.get("tag");
      if (!params.has("q")) $("q").value = "";
      $("f-kind").value = "";
    }
    if (params.has("q") && params.get("q") !== $("q").value) $("q").value = params.get("q");
    $("q").focus();
    if ($("q").value) search();
    else if (params.has("tag")) {
      // A tag followed from a note: the filter is set, the words are the reader's to type.
      $("search-short").textContent = `Searching the notes tagged #${params.get("tag")}: type what to look for.`;
      $("search-short").hidden = false;
    }
  }
  document.body.dataset.view = view;
}
window.addEventListener("hashchange", route);
route();
listen();
watchDaemon();
