// dashboard.js - headroom's live dashboard: polls /dashboard/snapshot four
// times a second and draws the memory timeline (uPlot), the requests, the
// governor's decisions and the model. Loaded by dashboard.html's loader,
// which has already fetched the first snapshot (with the model's info).
//
// Each poll asks only for what is new (?h=<last sample>&d=<last decision>),
// so the server writes a few hundred bytes per call; the page keeps the
// last five minutes itself. Times are the server's monotonic seconds,
// turned into wall-clock time with the offset each snapshot carries.
(function () {
  "use strict";
  const PERIOD_MS = 250;
  const KEEP_S = 300;
  const COLORS = ["#7f9cc9", "#74b88a", "#e3b35b", "#b99ad6", "#e08585", "#6fc2c2", "#c2a36f"];
  const LEVEL_COLORS = ["rgba(46,125,50,0.55)", "rgba(224,161,0,0.8)", "rgba(198,40,40,0.85)"];
  const MARK_COLORS = { chunk: "#e07000", preempt: "#c62828", refuse: "#6a1b9a" };
  const $ = (id) => document.getElementById(id);

  const state = {
    polls: 0, errors: 0, lastHist: 0, lastDec: 0, offset: 0, names: [], info: null,
    t: [], level: [], measured: [], ceiling: [], soft: [], hard: [], cats: [],
    decisions: [], snapshot: null, chart: null,
  };

  function bytes(n) {
    if (n === undefined || n === null) return "-";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(n >= 100 ? 0 : n >= 10 ? 1 : 2) : String(n)) + " " + u[i];
  }
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const clock = (t) => new Date((t + state.offset) * 1000).toLocaleTimeString([], { hour12: false });
  const secs = (s) => (s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s");

  /* ---- the timeline ---- */

  // uPlot draws series in order, so the stack is drawn top first: series 1
  // is the sum of every category, series 2 the sum without the top one,
  // and so on; each opaque fill covers the part of the one before it that
  // belongs to the categories below.
  function chartData() {
    const n = state.t.length, k = state.names.length;
    const x = state.t.map((t) => t + state.offset);
    const stacks = [];
    for (let top = k - 1; top >= 0; top--) {
      const s = new Array(n);
      for (let i = 0; i < n; i++) {
        let sum = 0;
        for (let c = 0; c <= top; c++) sum += state.cats[c][i];
        s[i] = sum;
      }
      stacks.push(s);
    }
    return [x, ...stacks, state.measured, state.ceiling, state.hard, state.soft];
  }

  function drawBandAndMarks(u) {
    const ctx = u.ctx, b = u.bbox, n = state.t.length;
    if (!n) return;
    ctx.save();
    // The pressure level, as a band under zero (the y range leaves room for it).
    const y = Math.round(u.valToPos(0, "y", true) + 2 * devicePixelRatio);
    const h = Math.max(2, b.top + b.height - y);
    for (let i = 0; i < n; i++) {
      const x0 = u.valToPos(state.t[i] + state.offset, "x", true);
      const x1 = i + 1 < n ? u.valToPos(state.t[i + 1] + state.offset, "x", true) : b.left + b.width;
      ctx.fillStyle = LEVEL_COLORS[state.level[i]] || LEVEL_COLORS[0];
      ctx.fillRect(x0, y, Math.max(1, x1 - x0), h);
    }
    // Throttled chunks, preemptions and refusals, as ticks from the top.
    const t0 = state.t[0];
    for (const d of state.decisions) {
      const color = MARK_COLORS[d.kind];
      if (!color || d.t < t0) continue;
      const x = u.valToPos(d.t + state.offset, "x", true);
      ctx.strokeStyle = color;
      ctx.lineWidth = Math.max(1, devicePixelRatio);
      ctx.beginPath();
      ctx.moveTo(x, b.top);
      ctx.lineTo(x, b.top + (d.kind === "chunk" ? 10 : 22) * devicePixelRatio);
      ctx.stroke();
    }
    ctx.restore();
  }

  // The y scale: up to the ceiling, or (toggled by the button) up to what
  // is used, where the categories are visible even under a far ceiling.
  // Below zero, room for the pressure band.
  let fitUsage = false;
  function yRange(u, min, max) {
    let top = max;
    if (fitUsage) {
      top = 1;
      const n = state.t.length;
      for (let i = 0; i < n; i++) {
        let sum = 0;
        for (const c of state.cats) sum += c[i];
        top = Math.max(top, sum, state.measured[i]);
      }
    }
    top = Math.max(top, 1) * 1.05;
    return [-top * 0.05, top];
  }

  function makeChart() {
    const btn = $("fit");
    btn.addEventListener("click", () => {
      fitUsage = !fitUsage;
      btn.textContent = fitUsage ? "scale: to the ceiling" : "scale: to what is used";
      state.chart.setData(chartData());
    });
    const k = state.names.length;
    const raw = (c) => (u, v, si, i) => (i === null || i === undefined ? "-" : bytes(state.cats[c][i]));
    const series = [{ value: (u, v) => (v === null ? "-" : clock(v - state.offset)) }];
    for (let top = k - 1; top >= 0; top--)
      series.push({ label: state.names[top], stroke: COLORS[top % COLORS.length], fill: COLORS[top % COLORS.length],
                    width: 1, points: { show: false }, value: raw(top) });
    series.push({ label: "measured", stroke: "#1d1d1b", width: 2, points: { show: false }, value: (u, v) => bytes(v) });
    series.push({ label: "ceiling", stroke: "#c62828", width: 2, points: { show: false }, value: (u, v) => bytes(v) });
    series.push({ label: "hard", stroke: "#c62828", dash: [6, 4], width: 1, points: { show: false }, value: (u, v) => bytes(v) });
    series.push({ label: "soft", stroke: "#e0a100", dash: [6, 4], width: 1, points: { show: false }, value: (u, v) => bytes(v) });
    const el = $("chart");
    const opts = {
      width: Math.max(320, el.clientWidth || 800), height: 340,
      series,
      scales: { x: { time: true }, y: { range: yRange } },
      axes: [{}, { size: 70, values: (u, vals) => vals.map(bytes) }],
      legend: { live: true },
      hooks: { draw: [drawBandAndMarks] },
    };
    state.chart = new uPlot(opts, chartData(), el);
    window.addEventListener("resize", () => state.chart.setSize({ width: Math.max(320, el.clientWidth), height: 340 }));
  }

  /* ---- the panels ---- */

  function describe(d) {
    const who = d.request ? "request " + d.request : "a request";
    switch (d.kind) {
      case "pressure":
        return `pressure ${d.from} → ${d.to} (current ${bytes(d.current)}, soft ${bytes(d.soft)}, hard ${bytes(d.hard)}, ceiling ${bytes(d.ceiling)})`;
      case "chunk":
        return `${who}: prefill chunk ${d.asked} → ${d.chosen} tokens (kv_len ${d.kv_len}, headroom ${bytes(d.headroom)}, planned ${bytes(d.planned)})`;
      case "preempt":
        return `${who} preempted: KV ${d.kv_used} of ${d.kv_total} blocks in use; resumes by recomputing ${d.recompute} tokens`;
      case "resume":
        return `${who} resumed after ${secs(d.paused_s)}`;
      case "refuse":
        return d.m ? `${who} refused: ${d.why} (needs ${bytes(d.estimated)}, limit ${bytes(d.limit)}; N ${d.n}, M ${d.m})`
                   : `${who} refused: ${d.why}`;
      case "reclaim":
        return `reclaimed ${d.blocks} idle prefix-cache blocks (${bytes(d.bytes)})`;
    }
    return d.kind;
  }

  function renderFeed(fresh) {
    const feed = $("feed");
    if (!fresh.length) return;
    if (feed.firstChild && feed.firstChild.classList && feed.firstChild.classList.contains("empty")) feed.textContent = "";
    for (const d of fresh) {
      const div = document.createElement("div");
      div.className = "k-" + d.kind;
      div.dataset.kind = d.kind;
      div.dataset.request = d.request;
      div.innerHTML = `<span class="t">${esc(clock(d.t))}</span>${esc(describe(d))}`;
      feed.insertBefore(div, feed.firstChild);
    }
    while (feed.childNodes.length > 300) feed.removeChild(feed.lastChild);
  }

  function preemptWhy(id) {
    for (let i = state.decisions.length - 1; i >= 0; i--) {
      const d = state.decisions[i];
      if (d.kind === "preempt" && d.request === id)
        return `paused for memory: KV ${d.kv_used}/${d.kv_total} blocks, recomputes ${d.recompute} tokens`;
    }
    return "paused for memory";
  }

  function renderRequests(reqs) {
    const body = $("req-body");
    if (!reqs.length) { body.innerHTML = '<tr><td colspan="9" class="empty">no requests</td></tr>'; return; }
    body.innerHTML = reqs.map((r) => {
      const total = r.n_prompt + (r.state === "preempted" || r.n_prefilled > r.n_prompt ? r.n_generated : 0);
      const done = Math.min(r.n_prefilled, total);
      let progress = "";
      if (r.state === "prefill" || r.state === "preempted") {
        const pct = total ? (100 * done) / total : 0;
        progress = `<span class="bar" data-id="${r.id}" data-done="${done}" data-total="${total}"><span style="width:${pct.toFixed(1)}%"></span></span> ` +
                   `${done} / ${total}` + (r.chunk ? ` (chunk ${r.chunk})` : "");
        if (r.state === "preempted") progress += `<br>${esc(preemptWhy(r.id))}`;
      } else if (r.state === "decode") {
        progress = `decoding`;
      } else {
        progress = "waiting for a slot or memory";
      }
      return `<tr data-id="${r.id}" data-state="${r.state}"><td>#${r.id}</td><td>${esc(r.api)}</td><td>${esc(r.model)}</td>` +
             `<td>${esc(r.state)}${r.preempts ? " (" + r.preempts + "x preempted)" : ""}</td><td class="wide">${progress}</td>` +
             `<td>${r.n_cached}</td><td>${r.n_generated}</td><td>${r.tokens_per_s ? r.tokens_per_s.toFixed(1) : "-"}</td><td>${secs(r.age_s)}</td></tr>`;
    }).join("");
  }

  function renderFinished(fin) {
    const body = $("fin-body");
    const recent = fin.filter((f) => f.ago_s <= KEEP_S);
    if (!recent.length) { body.innerHTML = '<tr><td colspan="10" class="empty">none yet</td></tr>'; return; }
    body.innerHTML = recent.map((f) =>
      `<tr><td>${f.id ? "#" + f.id : "-"}</td><td>${esc(f.api)}</td><td>${esc(f.model)}</td><td class="wide">${esc(f.outcome)}</td>` +
      `<td>${f.n_prompt}</td><td>${f.n_cached}</td><td>${f.n_generated}</td><td>${f.ttft_s ? f.ttft_s.toFixed(2) + " s" : "-"}</td>` +
      `<td>${f.tokens_per_s ? f.tokens_per_s.toFixed(1) : "-"}</td><td>${secs(f.ago_s)}</td></tr>`).join("");
  }

  function renderInfo(i, m) {
    if (!i) return;
    const types = i.types.map((t) => `${t.type} x${t.tensors} (${bytes(t.bytes)})`).join(", ");
    const rows = [
      ["model", i.model], ["architecture", i.arch],
      ["parameters", (i.params / 1e6).toFixed(i.params < 1e8 ? 2 : 0) + " M"],
      ["weight types", types],
      ["weights", `${bytes(i.weights_bytes)}` + (i.packed_bytes ? ` (${bytes(i.packed_bytes)} packed for ${i.isa})` : " (file-backed, not packed)")],
      ["layers / embedding", `${i.n_layer} / ${i.n_embd}, heads ${i.n_head} (KV ${i.n_head_kv}), vocabulary ${i.n_vocab}`],
      ["context", `${i.n_ctx} tokens (trained ${i.n_ctx_train})`],
      ["KV cache", `${i.kv_type}, blocks of ${i.kv_block_tokens} tokens (${bytes(i.kv_block_bytes)}), ${i.kv_blocks_total} blocks of address space`],
      ["engine", `${i.backend}, ${i.threads} threads, ${i.isa} kernels; ${i.parallel} parallel, ${i.batch_tokens} tokens per step`],
      ["ceiling", m ? `${bytes(m.ceiling)} from ${m.ceiling_source}` : "-"],
      ["reserve", m ? bytes(m.reserve) : "-"],
    ];
    $("info").innerHTML = rows.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("");
    $("model-name").textContent = i.model;
  }

  /* ---- one snapshot ---- */

  function apply(s) {
    state.snapshot = s;
    state.offset = s.wall - s.now;
    if (s.info) state.info = s.info;
    if (!state.names.length) {
      state.names = s.category_names;
      state.cats = state.names.map(() => []);
    }
    if (!s.memory) return; // still loading
    const h = s.history;
    for (let i = 0; i < h.n; i++) {
      state.t.push(h.t[i]);
      state.level.push(h.level[i]);
      state.measured.push(h.measured[i]);
      state.ceiling.push(h.ceiling[i]);
      state.soft.push(h.soft[i]);
      state.hard.push(h.hard[i]);
      for (let c = 0; c < state.names.length; c++) state.cats[c].push(h.categories[c][i]);
    }
    state.lastHist = h.last_seq;
    // Keep five minutes.
    let cut = 0;
    while (cut < state.t.length && state.t[cut] < s.now - KEEP_S) cut++;
    if (cut) {
      for (const a of [state.t, state.level, state.measured, state.ceiling, state.soft, state.hard, ...state.cats]) a.splice(0, cut);
    }
    const fresh = s.decisions.items;
    state.decisions.push(...fresh);
    state.lastDec = s.decisions.last_seq;
    while (state.decisions.length && state.decisions[0].t < s.now - KEEP_S) state.decisions.shift();

    const m = s.memory;
    $("current").textContent = bytes(m.current);
    $("current").dataset.bytes = m.current;
    $("ceiling").textContent = bytes(m.ceiling);
    $("ceiling").dataset.bytes = m.ceiling;
    $("percent").textContent = m.ceiling ? ((100 * m.current) / m.ceiling).toFixed(1) + "%" : "-";
    $("level").textContent = m.level;
    $("level").className = "badge " + m.level;
    const c = s.counters;
    $("counts").textContent = `running ${s.sched.running}, queued ${s.sched.queued}; chunks ${c.prefill_chunks} (${c.throttled} throttled), ` +
      `preempted ${c.preempted}, refused ${c.refused_too_long + c.refused_overloaded}, aborted for memory ${c.aborted_for_memory}`;
    renderFeed(fresh);
    renderRequests(s.requests);
    renderFinished(s.finished);
    renderInfo(state.info, m);
    if (!state.chart) makeChart();
    else state.chart.setData(chartData());
  }

  async function poll() {
    try {
      const r = await fetch(`/dashboard/snapshot?h=${state.lastHist}&d=${state.lastDec}`,
                            { headers: window.headroomHeaders(), cache: "no-store" });
      if (!r.ok) throw new Error("HTTP " + r.status);
      apply(await r.json());
      state.polls++;
      $("conn").textContent = "";
    } catch (e) {
      state.errors++;
      $("conn").textContent = "server unreachable (" + e.message + "); retrying";
    }
    setTimeout(poll, PERIOD_MS);
  }

  window.headroomDashboard = {
    state,
    start(first) {
      apply(first);
      state.polls++;
      setTimeout(poll, PERIOD_MS);
    },
  };
})();
