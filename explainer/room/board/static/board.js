// The room board: draws /api/board's state; live from /api/events (server-sent events), polling as a fallback.
// Every text goes in with textContent: seat names and failing checks come from the room, never as HTML.
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  const xsrf = document.querySelector('meta[name="xsrf"]').content;   // a hub's board: its cookie's check value
  const q = "?token=" + encodeURIComponent(token) + (xsrf ? "&_xsrf=" + encodeURIComponent(xsrf) : "");
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => { const e = document.createElement(tag); if (cls) e.className = cls;
                                   if (text !== undefined) e.textContent = text; return e; };
  const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");
  let how = "connecting", lastSeq = -1, lastVersion = -1, pollTimer = null;

  function card(ex, s, seats) {
    const c = el("article", "ex"); c.dataset.exercise = ex.id;
    c.append(el("h2", "", ex.id), el("p", "fn", ex.function + "  ·  " + ex.minutes + " min"));
    const counts = el("p", "counts");
    counts.append(el("span", "pass", "✓ " + s.passed + " passed"),
                  el("span", "fail", "✗ " + (s.tried - s.passed) + " not yet"),
                  el("span", "none", "– " + Math.max(0, seats - s.tried) + " not started"));
    c.append(counts, el("p", "tried", s.tried + " of " + plural(seats, "seat") + " tried"));
    const top = el("p", "top");
    if (s.top_failure) {
      top.append("stuck at: ", el("strong", "", plural(s.top_failure.count, "seat") + ": " + s.top_failure.check));
    } else { top.textContent = s.tried ? "no seat stuck" : "no reports yet"; }
    c.append(top);
    return c;
  }

  function cell(c) {
    if (!c) { const td = el("td", "none", "– not started"); td.dataset.state = "none"; return td; }
    const td = el("td", c.passed ? "pass" : "fail", c.passed ? "✓ passed" : "✗ " + (c.failure || "failed"));
    td.dataset.state = c.passed ? "pass" : "fail";
    td.append(el("span", "n", "×" + c.attempts));
    return td;
  }

  function draw(state) {
    if (state.version < lastVersion) return;             // an older state arriving late (polling and live at once)
    lastSeq = state.seq; lastVersion = state.version;
    const seats = state.summary.seats;
    $("exercises").replaceChildren(...state.exercises.map((ex) => card(ex, state.summary.exercises[ex.id], seats)));
    const head = [el("th", "", "seat")].concat(state.exercises.map((ex) => el("th", "", ex.id)));
    head.forEach((th) => th.setAttribute("scope", "col"));
    $("seats-head").replaceChildren(...head);
    $("seats-body").replaceChildren(...state.seats.map((row) => {
      const tr = el("tr"); tr.dataset.seat = row.seat;
      const th = el("th", "", row.seat); th.setAttribute("scope", "row"); tr.append(th);
      state.exercises.forEach((ex) => { const td = cell(row.cells[ex.id]); td.dataset.exercise = ex.id; tr.append(td); });
      return tr;
    }));
    $("empty").hidden = state.seats.length > 0;
    document.body.dataset.seq = String(state.seq);
    status();
  }

  function status() {
    const t = new Date().toLocaleTimeString();
    $("status").textContent = (how === "live" ? "● live" : how === "polling" ? "↻ polling every 2 s" : "… " + how) +
      " · " + plural(Math.max(0, lastSeq), "report") + " · updated " + t;
  }

  async function poll() {
    try {
      const r = await fetch("api/board" + q, { cache: "no-store" });
      if (r.status === 401 || r.status === 403) { how = "wrong or missing room token"; status(); return; }
      draw(await r.json());
    } catch (e) { how = "board not reachable, retrying"; status(); }
    pollTimer = setTimeout(poll, 2000);
  }

  function live() {
    if (!window.EventSource) { how = "polling"; return poll(); }
    const es = new EventSource("api/events" + q);
    es.onopen = () => { how = "live"; if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; } status(); };
    es.onmessage = (m) => { how = "live"; draw(JSON.parse(m.data)); };
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) { es.close(); how = "polling"; if (!pollTimer) poll(); }
      else { how = "reconnecting"; status(); }
    };
  }
  live();
})();
