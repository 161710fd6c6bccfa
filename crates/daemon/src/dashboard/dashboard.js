// The mfsched dashboard: polls GET /v1/history for the ticks and events it has
// not seen and GET /v1/policies for what can be switched to, draws the charts
// on canvases, and switches the active policy with the API token. No library,
// nothing fetched from elsewhere. Every array it keeps is bounded.
"use strict";

(() => {
  const TOKEN_KEY = "mfsched.api-token";
  // The page keeps at most as many ticks as the daemon does (and never more than this).
  const MAX_TICKS = 600;
  const MAX_EVENTS = 100;
  const POLICIES_EVERY = 5; // polls between two reads of /v1/policies
  const MIN_POLL_MS = 500;
  const MAX_POLL_MS = 2000;
  const MAX_BACKOFF_MS = 10000;
  const COLORS = ["#0969da", "#bf3989", "#1a7f37", "#bc4c00", "#8250df", "#0a7ea4", "#9a6700"];
  const LEVELS = ["low", "medium", "high", "burst"];

  const view = {
    run: null, // run_started_ms of the daemon the arrays came from
    since: null, // newest tick held
    eventsSince: 0,
    ticks: [],
    events: [],
    meta: null, // the last /v1/history answer, without its ticks and events
    policies: null, // the last /v1/policies answer
    polls: 0,
    backoffMs: 0,
  };

  const $ = (id) => document.getElementById(id);

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function authHeaders(extra) {
    const headers = Object.assign({}, extra);
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    return headers;
  }

  class HttpError extends Error {
    constructor(path, status, detail) {
      super(`${path}: HTTP ${status}${detail ? ": " + detail : ""}`);
      this.status = status;
    }
  }

  async function errorDetail(response) {
    try {
      const body = await response.json();
      return typeof body.error === "string" ? body.error : "";
    } catch (_) {
      return "";
    }
  }

  async function getJson(path) {
    const response = await fetch(path, { headers: authHeaders(), cache: "no-store" });
    if (!response.ok) throw new HttpError(path, response.status, await errorDetail(response));
    return response.json();
  }

  function setStatus(text, ok) {
    const el = $("status");
    el.textContent = text;
    el.className = "status " + (ok ? "ok" : "bad");
  }

  function forgetRun(run) {
    view.run = run;
    view.since = null;
    view.eventsSince = 0;
    view.ticks = [];
    view.events = [];
  }

  // One poll; answers how long to wait before the next. Only the fetches are
  // caught: a fault in the page itself reaches the console.
  async function poll() {
    let answer;
    let policies = view.policies;
    try {
      const query = new URLSearchParams();
      if (view.since !== null) query.set("since", String(view.since));
      query.set("events_since", String(view.eventsSince));
      answer = await getJson("/v1/history?" + query);
      if (policies === null || view.polls % POLICIES_EVERY === 0) {
        policies = await getJson("/v1/policies");
      }
    } catch (error) {
      if (error instanceof HttpError && error.status === 401) {
        setStatus("this daemon needs the API token to be read", false);
        return MAX_POLL_MS;
      }
      view.backoffMs = Math.min(MAX_BACKOFF_MS, view.backoffMs ? view.backoffMs * 2 : 500);
      setStatus(`disconnected (${error.message}); retrying in ${(view.backoffMs / 1000).toFixed(1)} s`, false);
      return view.backoffMs;
    }
    view.policies = policies;
    view.polls += 1;
    view.backoffMs = 0;
    if (answer.run_started_ms !== view.run) {
      // Another daemon (restarted): its tick numbers may start over.
      const had = view.run !== null;
      forgetRun(answer.run_started_ms);
      if (had) return 0;
    }
    if (answer.dropped_ticks) view.ticks = []; // a gap: start the charts over
    const keep = Math.min(MAX_TICKS, answer.ticks_kept || MAX_TICKS);
    const fresh = answer.ticks.filter((t) => view.since === null || t.tick > view.since);
    view.ticks = view.ticks.concat(fresh).slice(-keep);
    if (view.ticks.length) view.since = view.ticks[view.ticks.length - 1].tick;
    const news = answer.events.filter((e) => e.seq > view.eventsSince);
    view.events = view.events.concat(news).slice(-MAX_EVENTS);
    if (view.events.length) view.eventsSince = view.events[view.events.length - 1].seq;
    delete answer.ticks;
    delete answer.events;
    view.meta = answer;
    setStatus("live", true);
    render();
    return Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, answer.period_ms || 0));
  }

  // One poll at a time: asking for one while another runs (a new token, a
  // switch) runs it as soon as that one ends, so no tick is taken twice.
  let timer = null;
  let polling = false;
  let pollAgain = false;
  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(pollLoop, ms);
  }
  async function pollLoop() {
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    const delay = await poll();
    polling = false;
    schedule(pollAgain ? 0 : delay);
    pollAgain = false;
  }

  // --- Rendering -----------------------------------------------------------

  function cell(row, text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function fmt(value, digits) {
    return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "—";
  }

  function render() {
    const meta = view.meta;
    const last = view.ticks[view.ticks.length - 1];
    const info = $("tick-info");
    info.textContent = last
      ? `tick ${last.tick} · ${view.ticks.length} shown · ${LEVELS.indexOf(last.level) >= 0 ? last.level : "?"} load · scored with ${last.utility}`
      : "no tick yet";
    info.dataset.ticks = String(view.ticks.length);
    renderFallback(meta, last);
    renderSettling(last);
    renderModels(meta, last);
    renderPolicies(meta, last);
    renderEvents();
    renderCharts(meta);
  }

  function activePoint(tick) {
    return tick && tick.policies.length ? tick.policies[0] : null;
  }

  // A tick whose active answer was not used keeps the last valid
  // configuration (or, before any, the one running): say so where the running
  // configurations are shown, with how often and why.
  function renderFallback(meta, last) {
    const el = $("fallback");
    const active = activePoint(last);
    if (!last || !last.kept_last_valid) {
      el.hidden = true;
      el.textContent = "";
      return;
    }
    const kept = view.ticks.filter((t) => t.kept_last_valid).length;
    const why = active && active.failure ? active.failure : "no reason recorded";
    el.textContent = `The active policy's answers are not being used: ${kept} of the last ` +
      `${view.ticks.length} ticks kept the last valid configuration (before any, the one running). ` +
      `${active ? active.policy : meta.active}: ${why}`;
    el.hidden = false;
  }

  // While a server reloads or restarts, and a period after, the tick decides
  // on the last state read before (a reading over a reconfiguration is the
  // reconfiguration's): say so, with how often.
  function renderSettling(last) {
    const el = $("settling");
    if (!last || !last.state_held) {
      el.hidden = true;
      el.textContent = "";
      return;
    }
    const held = view.ticks.filter((t) => t.state_held).length;
    el.textContent = `A reconfiguration is settling: this tick decided on the last steady state ` +
      `(${held} of the last ${view.ticks.length} ticks).`;
    el.hidden = false;
  }

  function renderModels(meta, last) {
    const body = $("models").tBodies[0];
    body.replaceChildren();
    const active = activePoint(last);
    meta.models.forEach((model, i) => {
      const row = body.insertRow();
      cell(row, model.name);
      cell(row, last ? last.running[i] || "—" : "—");
      const predicted = active && active.throughput ? active.throughput[i] : null;
      // Predictions are held to the enforced floor (the declared one raised
      // by its conformal margin), measurements to the declared one.
      const enforced = typeof model.enforced_floor === "number" ? model.enforced_floor : model.floor;
      const under = typeof predicted === "number" && enforced > 0 && predicted < enforced;
      cell(row, `${fmt(predicted, 1)} ${model.unit}`, "num" + (under ? " bad" : ""));
      // A floor no configuration is predicted to meet is held at the edge
      // of the model's reach for the tick (`[floors] out_of_reach`).
      const held = Boolean(last && last.floors_held && last.floors_held[i]);
      cell(row, model.floor > 0
        ? `${fmt(model.floor, 1)} ${model.unit}` + (enforced > model.floor ? ` (enforced ${fmt(enforced, 1)})` : "") +
          (held ? ", out of reach: held at its reach" : "")
        : "none", "num" + (held ? " bad" : ""));
      const measured = last && last.measured_throughput ? last.measured_throughput[i] : null;
      const short = typeof measured === "number" && model.floor > 0 && measured < model.floor;
      cell(row, typeof measured === "number" ? `${fmt(measured, 1)} ${model.unit}` : "not measured",
        typeof measured === "number" ? "num" + (short ? " bad" : "") : "");
      // The online correction's factor on the running configuration; a model
      // whose measurements left the bundle's error bound drifts.
      const factor = last && last.correction ? last.correction[i] : null;
      const drifting = Boolean(last && last.drifting && last.drifting[i]);
      cell(row, typeof factor === "number" ? `×${fmt(factor, 2)}${drifting ? ", drifting" : ""}` : "none",
        typeof factor === "number" ? "num" + (drifting ? " bad" : "") : "");
    });
  }

  function renderPolicies(meta, last) {
    const body = $("policies").tBodies[0];
    body.replaceChildren();
    // Now active, now shadows, then every other policy the shown ticks asked,
    // with the role it had when last asked: a switch or a removed shadow does
    // not drop a policy from the table while its ticks are on the charts.
    const roles = new Map([[meta.active, "active"]]);
    meta.shadows.forEach((name) => roles.set(name, "shadow"));
    for (let t = view.ticks.length - 1; t >= 0; t--) {
      view.ticks[t].policies.forEach((p, i) => {
        if (!roles.has(p.policy)) roles.set(p.policy, i === 0 ? "was active" : "was shadow");
      });
    }
    roles.forEach((role, name) => {
      const totals = meta.totals[name] || {};
      const point = last ? last.policies.find((p) => p.policy === name) : null;
      const row = body.insertRow();
      cell(row, role);
      cell(row, name);
      cell(row, String(totals.decisions || 0), "num");
      cell(row, fmt(totals.cumulative_utility, 2), "num");
      cell(row, role === "shadow" || role === "was shadow" ? String(totals.differing || 0) : "—", "num");
      cell(row, String(totals.failures || 0), "num" + (totals.failures ? " bad" : ""));
      cell(row, totals.last_failure || "—", totals.last_failure ? "bad" : "");
      cell(row, point ? fmt(point.latency_us / 1000, 2) : "—", "num");
    });
    const select = $("switch-policy");
    const policies = view.policies;
    if (!policies) return;
    const choices = policies.available.filter((p) => !policies.shadows.includes(p));
    const current = Array.from(select.options).map((o) => o.value).join("\n");
    if (current !== choices.join("\n")) {
      const keep = select.value;
      select.replaceChildren(...choices.map((p) => new Option(p, p)));
      select.value = choices.includes(keep) ? keep : policies.active;
    }
  }

  function renderEvents() {
    const list = $("events");
    list.replaceChildren();
    for (let i = view.events.length - 1; i >= 0; i--) {
      const event = view.events[i];
      const item = document.createElement("li");
      const kind = document.createElement("span");
      kind.className = "kind " + (event.kind === "failing" || event.kind === "reload-rejected" ? "bad" : "ok");
      kind.textContent = event.kind;
      item.append(new Date(event.unix_ms).toLocaleTimeString() + " ", kind, " " + event.message);
      list.appendChild(item);
    }
  }

  function series(label, values, extra) {
    return Object.assign({ label, values }, extra);
  }

  function policySeries(pick) {
    const names = [];
    for (const tick of view.ticks) {
      for (const p of tick.policies) if (!names.includes(p.policy)) names.push(p.policy);
    }
    return names.map((name) =>
      series(
        name,
        view.ticks.map((tick) => {
          const p = tick.policies.find((q) => q.policy === name);
          return p ? pick(p) : null;
        }),
      ),
    );
  }

  function renderCharts(meta) {
    const ticks = view.ticks;
    drawChart($("chart-vram"), [
      series("used", ticks.map((t) => t.vram_used_mib)),
      series("cap", ticks.map(() => meta.vram_cap_mib), { dash: true }),
    ], { min: 0 });
    const util = [series("utilisation", ticks.map((t) => t.utilization))];
    // The contention reading (memory-controller or run-queue), where the sampler gives one.
    if (ticks.some((t) => t.contention !== undefined)) {
      util.push(series("contention", ticks.map((t) => t.contention ?? null), { dash: true }));
    }
    drawChart($("chart-util"), util, { min: 0, max: 1 });
    drawChart($("chart-load"), [
      series("regime", ticks.map((t) => LEVELS.indexOf(t.level)), { step: true }),
      series("observed", ticks.map((t) => t.load_observed)),
      series("forecast", ticks.map((t) => t.load_forecast), { dash: true }),
    ], { min: 0 });
    drawChart($("chart-utility"), policySeries((p) => p.utility), {});
    drawChart($("chart-latency"), policySeries((p) => p.latency_us / 1000), { min: 0 });

    const holder = $("model-charts");
    if (holder.children.length !== meta.models.length) {
      holder.replaceChildren(...meta.models.map((model) => {
        const figure = document.createElement("figure");
        const caption = document.createElement("figcaption");
        caption.textContent = `${model.name}: predicted and measured throughput against its floor (${model.unit})`;
        figure.append(caption, document.createElement("canvas"));
        return figure;
      }));
    }
    meta.models.forEach((model, i) => {
      const lines = [series("predicted", ticks.map((t) => {
        const active = activePoint(t);
        return active && active.throughput ? active.throughput[i] : null;
      }))];
      const measured = ticks.map((t) => (t.measured_throughput ? t.measured_throughput[i] : null));
      if (measured.some((v) => typeof v === "number")) lines.push(series("measured", measured));
      if (model.floor > 0) lines.push(series("floor", ticks.map(() => model.floor), { dash: true }));
      if (model.enforced_floor > model.floor) {
        lines.push(series("enforced floor", ticks.map(() => model.enforced_floor), { dash: true }));
      }
      drawChart(holder.children[i].querySelector("canvas"), lines, { min: 0 });
    });
  }

  // Lines over the ticks shown (x: tick index), y scaled to the data or the
  // given bounds; null values break a line.
  function drawChart(canvas, lines, bounds) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 360;
    const height = canvas.clientHeight || 150;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(document.body);
    const fg = style.color;
    const values = lines.flatMap((l) => l.values).filter((v) => typeof v === "number" && isFinite(v));
    let min = bounds.min !== undefined ? bounds.min : Math.min(...values);
    let max = bounds.max !== undefined ? bounds.max : Math.max(...values);
    if (!values.length) { min = 0; max = 1; }
    if (bounds.max === undefined && values.length) max = Math.max(max, min) * 1.05 || 1;
    if (max <= min) max = min + 1;
    const left = 52, right = 8, top = 18, bottom = 6;
    const plotW = width - left - right, plotH = height - top - bottom;
    const n = Math.max(...lines.map((l) => l.values.length), 1);
    const x = (i) => left + (n > 1 ? (i * plotW) / (n - 1) : plotW);
    const y = (v) => top + plotH - ((v - min) * plotH) / (max - min);

    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = fg;
    ctx.strokeStyle = "rgba(128,128,128,0.35)";
    ctx.lineWidth = 1;
    for (let k = 0; k <= 2; k++) {
      const v = min + ((max - min) * k) / 2;
      ctx.beginPath();
      ctx.moveTo(left, y(v));
      ctx.lineTo(width - right, y(v));
      ctx.stroke();
      ctx.fillText(Math.abs(v) >= 1000 ? v.toFixed(0) : v.toPrecision(3), 2, y(v) + 4);
    }
    let legendX = left;
    lines.forEach((line, index) => {
      const color = COLORS[index % COLORS.length];
      ctx.strokeStyle = color;
      ctx.lineWidth = 1.5;
      ctx.setLineDash(line.dash ? [5, 4] : []);
      ctx.beginPath();
      let drawing = false;
      line.values.forEach((v, i) => {
        if (typeof v !== "number" || !isFinite(v)) { drawing = false; return; }
        if (!drawing) ctx.moveTo(x(i), y(v));
        else if (line.step) { ctx.lineTo(x(i), y(line.values[i - 1])); ctx.lineTo(x(i), y(v)); }
        else ctx.lineTo(x(i), y(v));
        drawing = true;
      });
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = color;
      ctx.fillRect(legendX, 5, 10, 3);
      ctx.fillStyle = fg;
      ctx.fillText(line.label, legendX + 14, 11);
      legendX += 22 + ctx.measureText(line.label).width;
    });
  }

  // --- Controls --------------------------------------------------------------

  function showTokenState() {
    $("token-state").textContent = token() ? "token set for this tab" : "no token: read-only";
  }

  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("token");
    const value = input.value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
    input.value = "";
    showTokenState();
    schedule(0);
  });

  $("switch-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const result = $("switch-result");
    const policy = $("switch-policy").value;
    if (!token()) {
      result.textContent = "enter the API token first";
      result.className = "bad";
      return;
    }
    result.textContent = "switching…";
    result.className = "";
    try {
      const response = await fetch("/v1/policies/active", {
        method: "POST",
        headers: authHeaders({ "Content-Type": "application/json" }),
        body: JSON.stringify({ policy }),
        cache: "no-store",
      });
      if (!response.ok) throw new HttpError("switch", response.status, await errorDetail(response));
      result.textContent = `active policy is now ${policy}`;
      result.className = "ok";
      view.policies = null; // read it again with the next poll
      schedule(0);
    } catch (error) {
      result.textContent = error.status === 401 ? "the daemon refused the token" : error.message;
      result.className = "bad";
    }
  });

  showTokenState();
  pollLoop();
})();
