// The comparison page (#/compare?runs=1,2,3): runs side by side. Every metric
// tag the runs have gets one chart with one series per run (web/charts.js,
// with the shared x-axis, smoothing and log-scale controls); a parameter table
// shows the job fields that differ between the runs (web/runs.js) and each
// run's final and best value of each tag. The URL names the runs, so the page
// can be shared; adding or removing a run rewrites it.
//
// Fetching: per run GET /jobs/{id} and GET /jobs/{id}/metrics?max_points=N
// (the server keeps each tag's first, last, and per bucket its min and max, so
// spikes, final and best survive). Runs that are queued or running are polled
// every POLL_MS for their new points (?since=), which are appended as they are.
//
// For tests: main[data-compare] is "loading", then "ready"; window.kilnCharts
// ["compare:TAG"] is each tag's chart; window.kilnCompare.loadMs is the time
// from the page's start to its first complete drawing, fetchMs its fetching
// part, renderMs the building of the charts and the table after it.

import { get, ApiError } from './api.js';
import { createChart, chartControls } from './charts.js';
import { h, fill, statusBadge, fmtNumber } from './ui.js';
import { parseRuns, flattenConfig, differingKeys, finalAndBest, lowerIsBetter, sortTags, MAX_RUNS } from './runs.js';

/* Points per tag and run that the page asks for: 250 min/max buckets, about
 * one point to a pixel of a half-page chart (more costs drawing time with 20
 * runs; bench/compare_page.mjs measures it). */
export const MAX_POINTS = 500;
const POLL_MS = 5000;
const LEGEND_RUNS = 8;                 // charts of more runs show no legend of their own
const LIVE = new Set(['queued', 'running']);
// 20 colours that stay apart (Tableau 10 and its lighter/darker partners)
const RUN_COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
  '#bcbd22', '#17becf', '#0b3d6b', '#a05a00', '#145a14', '#7a1516', '#5b3c7a', '#c49c94', '#a0287a',
  '#3d3d3d', '#6b6b0f', '#0e7c88'];
const SKIP_KEYS = ['id', 'name'];      // the columns already name the runs

/* "name" or "#id network": how a run is named in legends and headings. */
export function runLabel(run) {
  const c = (run.job && run.job.config) || {};
  if (c.name) return String(c.name);
  return `#${run.id}${run.job && run.job.network ? ` ${run.job.network}` : ''}`;
}

export function renderCompare(root, query) {
  const st = {
    alive: true, runs: new Map(), order: [], charts: new Map(), timer: null, view: null, started: performance.now(),
  };
  window.kilnCompare = { loadMs: null };
  root.dataset.compare = 'loading';

  const controls = chartControls('compare', { x: 'step' }, (view) => {
    st.view = view;
    for (const c of st.charts.values()) c.setView(view);
  });
  st.view = controls.view();
  const runsBar = h('ul', { class: 'run-chips', id: 'compare-runs', 'aria-label': 'runs compared' });
  const addInput = h('input', { id: 'compare-add-id', type: 'number', min: '1', step: '1', placeholder: 'job id',
    inputmode: 'numeric' });
  const addBtn = h('button', { type: 'submit', class: 'btn', id: 'compare-add' }, 'Add run');
  const addForm = h('form', { class: 'compare-add', id: 'compare-add-form' },
    h('label', { for: addInput.id }, 'Add a run by job id'), addInput, addBtn);
  const message = h('p', { class: 'form-error', role: 'alert', id: 'compare-error', hidden: true });
  const chartsGrid = h('section', { class: 'grid charts', id: 'compare-charts', 'aria-label': 'metrics by tag' });
  const paramsTable = h('table', { class: 'table params', id: 'compare-params' });
  const paramsNote = h('p', { class: 'muted', id: 'compare-params-note' });

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ', 'Compare'),
    h('div', { class: 'page-head' }, h('div', {}, h('h1', { class: 'page-title' }, 'Compare runs'),
      h('p', { class: 'muted' }, 'Every metric of the runs overlaid; the table lists the settings that differ.'))),
    h('section', { class: 'card', 'aria-label': 'runs' }, runsBar, addForm, message),
    controls.el,
    chartsGrid,
    h('section', { class: 'card', 'aria-labelledby': 'compare-params-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'compare-params-title' }, 'Parameters and results')),
      paramsNote, h('div', { class: 'table-wrap' }, paramsTable)));

  const say = (text) => { message.hidden = !text; fill(message, text || ''); };

  /* One run's state: its job and, per tag, its points by step. */
  function newRun(id) {
    const used = new Set([...st.runs.values()].map((r) => r.color));
    const color = RUN_COLORS.find((c) => !used.has(c)) || RUN_COLORS[st.order.length % RUN_COLORS.length];
    return { id, job: null, error: null, color, tags: new Map(), lastStep: -1 };
  }

  function putPoints(run, items) {
    const fresh = new Map();         // tag -> points added now
    for (const m of items) {
      if (!m || typeof m.tag !== 'string' || !Number.isFinite(m.step)) continue;
      let series = run.tags.get(m.tag);
      if (!series) { series = new Map(); run.tags.set(m.tag, series); }
      const p = { step: m.step, epoch: m.epoch, wall: m.wall_time, value: m.value };
      series.set(m.step, p);
      if (!fresh.has(m.tag)) fresh.set(m.tag, []);
      fresh.get(m.tag).push(p);
      if (m.step > run.lastStep) run.lastStep = m.step;
    }
    return fresh;
  }

  async function loadRun(run) {
    try {
      const [job, m] = await Promise.all([get(`/jobs/${run.id}`), get(`/jobs/${run.id}/metrics?max_points=${MAX_POINTS}`)]);
      run.job = job;
      run.tags = new Map();
      run.lastStep = -1;
      putPoints(run, m.items || []);
      run.error = null;
    } catch (e) {
      run.error = e instanceof ApiError && e.status === 404 ? `There is no job ${run.id}.` : e.message;
    }
  }

  function setUrl() {
    const hash = st.order.length ? `#/compare?runs=${st.order.join(',')}` : '#/compare';
    if (location.hash !== hash) history.replaceState(null, '', hash);
  }

  function renderRuns() {
    fill(runsBar, st.order.map((id) => {
      const run = st.runs.get(id);
      const remove = h('button', { type: 'button', class: 'chip-x', 'aria-label': `Remove run ${id}`,
        title: 'Remove from the comparison', onclick: () => removeRun(id) }, '×');
      return h('li', { class: 'run-chip', 'data-run-id': String(id) },
        h('span', { class: 'swatch', style: `background:${run.color}` }),
        h('a', { href: `#/jobs/${id}` }, runLabel(run)),
        run.job ? statusBadge(run.job.status) : null,
        run.error ? h('span', { class: 'chip-error' }, run.error) : null,
        remove);
    }));
  }

  function allTags() {
    const tags = new Set();
    for (const run of st.runs.values()) for (const t of run.tags.keys()) tags.add(t);
    return sortTags(tags);
  }

  /* Every chart's frame reaches the longest run's last step or epoch. */
  function xMax(axis) {
    const key = axis === 'step' ? 'steps' : axis === 'epoch' ? 'epochs' : null;
    if (!key) return null;
    return Math.max(0, ...[...st.runs.values()].map((r) => (r.job && r.job[key]) || 0)) || null;
  }

  function renderCharts() {
    for (const c of st.charts.values()) c.destroy();
    st.charts.clear();
    const tags = allTags();
    const cards = tags.map((tag) => {
      const slug = tag.replace(/[^a-z0-9]+/gi, '-');
      const box = h('div', { class: 'chart', id: `compare-chart-${slug}`, 'data-tag': tag, role: 'img',
        'aria-label': `${tag} of each run` });
      return { tag, box, card: h('section', { class: 'card', 'aria-labelledby': `compare-title-${slug}` },
        h('div', { class: 'card-head' }, h('h2', { id: `compare-title-${slug}` }, tag)), box) };
    });
    fill(chartsGrid, cards.map((c) => c.card),
      tags.length ? null : h('p', { class: 'muted' }, st.order.length ? 'No metrics recorded yet.' : 'No runs chosen.'));
    for (const { tag, box } of cards) {
      const runs = st.order.map((id) => st.runs.get(id)).filter((r) => r.tags.has(tag));
      const chart = createChart(box, {
        // past LEGEND_RUNS runs the chips above (swatch and name) are the legend
        name: `compare:${tag}`, yLabel: tag.split('/').pop(), view: st.view, xMax, legend: runs.length <= LEGEND_RUNS,
        series: runs.map((r) => ({ key: r.id, label: runLabel(r), color: r.color, width: 1, dots: 'auto',
          start: r.job.started_at ? Date.parse(r.job.started_at) / 1000 : undefined })),
      });
      for (const r of runs) chart.addAll(r.id, r.tags.get(tag).values());   // drawn in view
      st.charts.set(tag, chart);
    }
  }

  function fmtValue(v) {
    if (v === undefined) return '—';
    if (v === null) return 'null';
    return typeof v === 'number' ? fmtNumber(v) : String(v);
  }

  function renderParams() {
    const runs = st.order.map((id) => st.runs.get(id)).filter((r) => r.job);
    const flats = runs.map((r) => flattenConfig({ network: r.job.network, dataset_id: r.job.dataset_id,
      ...(r.job.config || {}) }));
    const keys = differingKeys(flats, SKIP_KEYS);
    const head = h('tr', {}, h('th', { scope: 'col' }, 'Field'),
      runs.map((r) => h('th', { scope: 'col', 'data-run-id': String(r.id) },
        h('span', { class: 'swatch', style: `background:${r.color}` }), runLabel(r))));
    const rows = [h('tr', { 'data-key': 'status' }, h('th', { scope: 'row' }, 'status'),
      runs.map((r) => h('td', {}, statusBadge(r.job.status))))];
    for (const [i, k] of keys.entries()) {
      rows.push(h('tr', { 'data-key': k, class: i === 0 ? 'group-start' : null }, h('th', { scope: 'row' }, k),
        flats.map((f) => h('td', {}, fmtValue(f[k])))));
    }
    for (const tag of allTags()) {
      const fb = runs.map((r) => finalAndBest(tag, r.tags.has(tag) ? r.tags.get(tag).values() : []));
      for (const which of ['final', 'best']) {
        const vals = fb.map((x) => x[which]).filter((v) => v !== null);
        const top = vals.length > 1 ? (lowerIsBetter(tag) ? Math.min(...vals) : Math.max(...vals)) : null;
        rows.push(h('tr', { 'data-key': `${which}:${tag}`, class: tag === allTags()[0] && which === 'final' ? 'group-start' : null },
          h('th', { scope: 'row' }, `${tag} (${which})`),
          fb.map((x) => h('td', { class: x[which] !== null && x[which] === top ? 'best' : null },
            x[which] === null ? '—' : fmtNumber(x[which])))));
      }
    }
    fill(paramsTable, h('thead', {}, head), h('tbody', {}, rows));
    fill(paramsNote, runs.length < 2 ? 'Add another run to see the settings that differ.'
      : keys.length ? `${keys.length} setting${keys.length === 1 ? ' differs' : 's differ'}; the others are the same in every run.`
        : 'The runs have the same settings.');
  }

  function renderAll() {
    renderRuns();
    renderCharts();
    renderParams();
  }

  async function addRun(id) {
    if (st.runs.has(id)) { say(`Run ${id} is already compared.`); return; }
    if (st.order.length >= MAX_RUNS) { say(`At most ${MAX_RUNS} runs can be compared at once.`); return; }
    say('');
    const run = newRun(id);
    st.runs.set(id, run);
    st.order.push(id);
    setUrl();
    await loadRun(run);
    if (!st.alive) return;
    renderAll();
    schedulePoll();
  }

  function removeRun(id) {
    st.runs.delete(id);
    st.order = st.order.filter((x) => x !== id);
    setUrl();
    renderAll();
  }

  addForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = Number(addInput.value);
    if (!Number.isSafeInteger(id) || id < 1) { say('A job id is a whole number from 1.'); return; }
    addInput.value = '';
    addRun(id);
  });

  /* Running and queued runs: their new points since their last step (again
   * from that step, whose other tags may have come after the last poll). A
   * run whose series grew past 3 x MAX_POINTS is fetched downsampled again. */
  async function poll() {
    st.timer = null;
    const live = st.order.map((id) => st.runs.get(id)).filter((r) => r.job && LIVE.has(r.job.status));
    let rebuild = false;
    for (const run of live) {
      try {
        const job = await get(`/jobs/${run.id}`);
        const m = await get(`/jobs/${run.id}/metrics?since=${Math.max(-1, run.lastStep - 1)}`);
        if (!st.alive || !st.runs.has(run.id)) return;
        run.job = job;
        const before = new Set(run.tags.keys());
        const fresh = putPoints(run, m.items || []);
        if ([...run.tags.values()].some((s) => s.size > 3 * MAX_POINTS)) { await loadRun(run); rebuild = true; }
        for (const [tag, pts] of fresh) {
          if (!before.has(tag)) rebuild = true;
          else if (st.charts.has(tag)) st.charts.get(tag).addAll(run.id, pts);
        }
      } catch { /* the next poll tries again */ }
    }
    if (!st.alive) return;
    if (rebuild) renderCharts();
    if (live.length) { renderRuns(); renderParams(); }
    schedulePoll();
  }

  function schedulePoll() {
    if (st.timer || !st.alive) return;
    if (![...st.runs.values()].some((r) => r.job && LIVE.has(r.job.status))) return;
    st.timer = setTimeout(poll, POLL_MS);
  }

  (async () => {
    const ids = parseRuns(query);
    for (const id of ids) { st.runs.set(id, newRun(id)); st.order.push(id); }
    setUrl();
    await Promise.all(ids.map((id) => loadRun(st.runs.get(id))));
    if (!st.alive) return;
    window.kilnCompare.fetchMs = performance.now() - st.started;
    renderAll();
    window.kilnCompare.renderMs = performance.now() - st.started - window.kilnCompare.fetchMs;
    requestAnimationFrame(() => {
      if (!st.alive) return;
      window.kilnCompare.loadMs = performance.now() - st.started;
      root.dataset.compare = 'ready';
    });
    schedulePoll();
  })();

  return () => {
    st.alive = false;
    if (st.timer) clearTimeout(st.timer);
    for (const c of st.charts.values()) c.destroy();
  };
}
