// Hyper-parameter sweeps in the dashboard (issue 16):
//   sweepsCard()           the home page's "Sweeps" section: the list, and "New sweep"
//   renderNewSweep(root)   #/sweeps/new: the job form's settings as the base, a
//                          space editor and the method's fields
//   renderSweep(root, id)  #/sweep/ID: trials sorted by the metric, the best
//                          highlighted with its job's link, parameters against
//                          the metric (one small scatter per parameter), the
//                          trials' curves of the metric overlaid, Cancel; live
//                          while the sweep runs (polled)
// Everything goes through GET/POST/DELETE /api/v1/sweeps and the trials' job routes.

import { get, post, del } from './api.js';
import { buildJobForm } from './jobform.js';
import { h, svg, fill, fmtTime, fmtNumber } from './ui.js';

const REFRESH_MS = 2000;
const PATHS = ['solver.lr', 'solver.momentum', 'solver.weight_decay', 'batch_size', 'seed',
  'solver.type', 'precision', 'augmentation.crop', 'solver.label_smoothing'];
const METRICS = ['val/accuracy', 'val/loss', 'train/epoch_accuracy', 'train/epoch_loss'];
const COLORS = ['#2563eb', '#ea580c', '#15803d', '#7c3aed', '#db2777', '#0891b2', '#ca8a04', '#4b5563',
  '#dc2626', '#65a30d'];

const STATE_BADGE = { running: 'running', waiting: 'queued', done: 'done', stopped: 'cancelled', failed: 'failed', cancelled: 'cancelled' };

function stateBadge(state) {
  return h('span', { class: `badge badge-${STATE_BADGE[state] || 'unknown'}`, 'data-state': state }, state);
}

function sweepBadge(status) {
  return h('span', { class: `badge badge-${status === 'running' ? 'running' : status === 'done' ? 'done' : status === 'failed' ? 'failed' : 'cancelled'}`,
    'data-status': status }, status);
}

const fmtMetric = (s, v) => (v === null || v === undefined ? '—'
  : s.metric.endsWith('accuracy') ? `${(100 * v).toFixed(2)}%` : fmtNumber(v));

const fmtParam = (v) => (typeof v === 'number' ? (Math.abs(v) < 0.001 && v !== 0 ? v.toExponential(2) : String(+v.toPrecision(4))) : String(v));

function doneCount(s) {
  const c = s.counts || {};
  return (c.done || 0) + (c.stopped || 0) + (c.failed || 0) + (c.cancelled || 0);
}

// ---- home: the list ----------------------------------------------------------

/* The home page's sweeps section; .stop() ends its refreshing. */
export function sweepsCard() {
  const body = h('tbody');
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const el = h('section', { class: 'card', id: 'sweeps-card', 'aria-labelledby': 'sweeps-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'sweeps-title' }, 'Sweeps'),
      h('a', { class: 'btn', href: '#/sweeps/new', id: 'new-sweep' }, 'New sweep')),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'sweeps-table' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Sweep'), h('th', { scope: 'col' }, 'Method'),
        h('th', { scope: 'col' }, 'Status'), h('th', { scope: 'col', class: 'num' }, 'Trials'),
        h('th', { scope: 'col', class: 'num' }, 'Best'), h('th', { scope: 'col' }, 'Created'))),
      body)));
  let alive = true;
  async function refresh() {
    try {
      const r = await get('/sweeps');
      if (!alive) return;
      error.hidden = true;
      if (!r.items.length) {
        fill(body, h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No sweeps yet: search learning rates and more with "New sweep".')));
        return;
      }
      fill(body, r.items.map((s) => h('tr', { 'data-sweep-id': s.id },
        h('td', {}, h('a', { href: `#/sweep/${s.id}` }, s.name || `Sweep ${s.id}`)),
        h('td', {}, s.method),
        h('td', {}, sweepBadge(s.status)),
        h('td', { class: 'num' }, `${doneCount(s)}/${s.trials_planned}`),
        h('td', { class: 'num' }, s.best ? `${fmtMetric(s, s.best.metric)}` : '—'),
        h('td', { class: 'nowrap' }, fmtTime(s.created_at)))));
    } catch (e) {
      if (!alive) return;
      error.textContent = `Could not load the sweeps: ${e.message}`;
      error.hidden = false;
    }
  }
  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  return { el, stop() { alive = false; clearInterval(timer); } };
}

// ---- #/sweeps/new -------------------------------------------------------------

/* One row of the space editor: a path, a distribution, its values or range. */
function spaceRow(onRemove, init = {}) {
  const n = spaceRow.count = (spaceRow.count || 0) + 1;
  const path = h('input', { type: 'text', class: 'space-path', list: 'sweep-paths', value: init.path || '',
    placeholder: 'solver.lr', 'aria-label': `parameter ${n} path`, autocomplete: 'off' });
  const dist = h('select', { class: 'space-dist', 'aria-label': `parameter ${n} distribution` },
    ['values', 'uniform', 'log_uniform', 'int_uniform'].map((d) => h('option', { value: d }, d.replace('_', '-'))));
  dist.value = init.dist || 'values';
  const values = h('input', { type: 'text', class: 'space-values', value: init.values || '',
    placeholder: '0.01, 0.1 (or lo, hi for a range)', 'aria-label': `parameter ${n} values`, autocomplete: 'off' });
  const remove = h('button', { type: 'button', class: 'link-btn', 'aria-label': `remove parameter ${n}` }, 'remove');
  const el = h('div', { class: 'space-row' }, path, dist, values, remove);
  remove.addEventListener('click', () => { el.remove(); onRemove(); });
  return {
    el,
    /* [path, {dist: [...]}], or throws naming what is wrong */
    read() {
      const p = path.value.trim();
      if (!p) throw Object.assign(new Error('Give each parameter a path, like solver.lr.'), { input: path });
      const parts = values.value.split(',').map((x) => x.trim()).filter((x) => x !== '');
      const parsed = parts.map((x) => (x !== '' && Number.isFinite(Number(x)) ? Number(x)
        : x === 'true' ? true : x === 'false' ? false : x));
      if (dist.value === 'values') {
        if (!parsed.length) throw Object.assign(new Error(`${p}: list one or more values, separated by commas.`), { input: values });
        return [p, { values: parsed }];
      }
      if (parsed.length !== 2 || parsed.some((x) => typeof x !== 'number'))
        throw Object.assign(new Error(`${p}: a ${dist.value} range is two numbers, lo, hi.`), { input: values });
      return [p, { [dist.value]: parsed }];
    },
  };
}

export function renderNewSweep(root) {
  const state = { datasets: [], networks: [{ name: 'lenet' }], alive: true };
  const jobForm = buildJobForm(state);
  const jobSubmit = jobForm.el.querySelector('#job-submit');
  if (jobSubmit) jobSubmit.hidden = true;          // the sweep's button starts it

  const rows = h('div', { id: 'sweep-space' });
  const list = [];
  const addRow = (init) => {
    const r = spaceRow(() => list.splice(list.indexOf(r), 1), init);
    list.push(r);
    rows.append(r.el);
  };
  addRow({ path: 'solver.lr', dist: 'values', values: '0.003, 0.01, 0.03' });
  addRow({ path: 'solver.momentum', dist: 'values', values: '0.8, 0.9' });
  const add = h('button', { type: 'button', class: 'btn', id: 'sweep-add-param' }, 'Add parameter');
  add.addEventListener('click', () => addRow());

  const name = h('input', { id: 'sweep-name', type: 'text', placeholder: 'optional', autocomplete: 'off' });
  const method = h('select', { id: 'sweep-method' },
    h('option', { value: 'grid' }, 'grid: every combination of the lists'),
    h('option', { value: 'random' }, 'random: sample trials'),
    h('option', { value: 'asha' }, 'asha: sample, stop the worse early'));
  const num = (id, value) => h('input', { id, type: 'number', min: 1, step: 1, value });
  const trials = num('sweep-trials', 9);
  const parallel = num('sweep-parallel', 2);
  const minEpochs = num('sweep-min-epochs', 1);
  const maxEpochs = num('sweep-max-epochs', 9);
  const eta = num('sweep-eta', 3);
  const metric = h('select', { id: 'sweep-metric' }, METRICS.map((m) => h('option', { value: m }, m)));
  const mode = h('select', { id: 'sweep-mode' }, h('option', { value: '' }, 'automatic'),
    h('option', { value: 'max' }, 'max'), h('option', { value: 'min' }, 'min'));
  const field = (label, control, id) => h('div', { class: 'field', id }, h('label', { for: control.id }, label), control);
  const trialsField = field('Trials', trials, 'sweep-trials-field');
  const ashaFields = h('div', { class: 'field-row field-row-3', id: 'sweep-asha-fields' },
    field('Min epochs', minEpochs), field('Max epochs', maxEpochs), field('Reduction factor (eta)', eta));
  const showMethod = () => {
    trialsField.hidden = method.value === 'grid';
    ashaFields.hidden = method.value !== 'asha';
  };
  method.addEventListener('change', showMethod);
  showMethod();

  const error = h('p', { class: 'form-error', role: 'alert', id: 'sweep-error', hidden: true });
  const start = h('button', { type: 'button', class: 'btn btn-primary', id: 'sweep-submit' }, 'Start sweep');

  async function submit() {
    error.hidden = true;
    let body;
    try {
      const base = jobForm.requestBody();
      const space = Object.fromEntries(list.map((r) => r.read()));
      if (!Object.keys(space).length) throw new Error('Add at least one parameter to search.');
      body = { base, space, method: method.value, parallel: Number(parallel.value), metric: metric.value };
      if (name.value.trim()) body.name = name.value.trim();
      if (mode.value) body.mode = mode.value;
      if (method.value !== 'grid') body.trials = Number(trials.value);
      if (method.value === 'asha') {
        Object.assign(body, { min_epochs: Number(minEpochs.value), max_epochs: Number(maxEpochs.value), eta: Number(eta.value) });
        delete base.epochs;                          // the rungs set each trial's epochs
      }
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      if (e.input) e.input.focus();
      return;
    }
    start.disabled = true;
    try {
      const s = await post('/sweeps', body);
      location.hash = `#/sweep/${s.id}`;
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
    } finally {
      start.disabled = false;
    }
  }
  start.addEventListener('click', submit);
  // Enter in the job form's fields submits the sweep, never a lone job.
  const baseWrap = h('div', { id: 'sweep-base' }, jobForm.el);
  baseWrap.addEventListener('submit', (ev) => { ev.preventDefault(); ev.stopPropagation(); submit(); }, true);

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ', 'New sweep'),
    h('div', { class: 'page-head' }, h('div', {}, h('h1', { class: 'page-title' }, 'New sweep'),
      h('p', { class: 'muted' }, 'Each trial is an ordinary job: the settings below with the trial\'s values set.'))),
    h('section', { class: 'grid' },
      h('section', { class: 'card', id: 'sweep-search', 'aria-labelledby': 'sweep-search-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'sweep-search-title' }, 'Search')),
        h('div', { class: 'field' }, h('label', { for: 'sweep-name' }, 'Name'), name),
        h('div', { class: 'field' }, h('label', {}, 'Space'), rows,
          h('datalist', { id: 'sweep-paths' }, PATHS.map((p) => h('option', { value: p }))),
          h('p', { class: 'hint' }, 'A job field\'s path; a list of values (grid), or a range (random, asha).'),
          h('div', { class: 'actions actions-left' }, add)),
        h('div', { class: 'field-row' }, field('Method', method), field('Run at once', parallel)),
        trialsField,
        ashaFields,
        h('div', { class: 'field-row' }, field('Metric', metric), field('Better is', mode)),
        error,
        h('div', { class: 'actions' }, start)),
      h('section', { class: 'card', 'aria-labelledby': 'sweep-base-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'sweep-base-title' }, 'Base job')),
        baseWrap)));

  Promise.all([get('/datasets'), get('/networks').catch(() => null), get('/info').catch(() => null)])
    .then(([ds, nets, info]) => {
      if (!state.alive) return;
      state.datasets = ds.items;
      jobForm.setDatasets(ds.items);
      if (nets && nets.items && nets.items.length) { state.networks = nets.items; jobForm.setNetworks(nets.items); }
      if (info) jobForm.setDevices(info.devices || []);
    })
    .catch((e) => { error.textContent = `Could not load the datasets: ${e.message}`; error.hidden = false; });
  return () => { state.alive = false; };
}

// ---- #/sweep/ID ----------------------------------------------------------------

/* A small SVG scatter of one parameter against the metric; log x when the
 * values are positive and span more than 10x; strings as categories. */
function scatter(s, path, trials, bestTrial) {
  const W = 280, H = 180, L = 50, R = 16, T = 14, B = 36;
  const pts = trials.filter((t) => t.metric !== null && t.params[path] !== undefined);
  const xs = pts.map((t) => t.params[path]);
  const numeric = xs.every((x) => typeof x === 'number');
  const cats = numeric ? null : [...new Set(xs.map(String))];
  const pos = numeric && xs.length && xs.every((x) => x > 0);
  const lo = numeric ? Math.min(...xs) : 0, hi = numeric ? Math.max(...xs) : cats.length - 1;
  const log = pos && hi / lo > 10;
  const fx = (x) => {
    if (!numeric) return L + 8 + (cats.length > 1 ? cats.indexOf(String(x)) / (cats.length - 1) : 0.5) * (W - L - R - 16);
    const a = log ? Math.log(lo) : lo, b = log ? Math.log(hi) : hi, v = log ? Math.log(x) : x;
    return L + 8 + (b > a ? (v - a) / (b - a) : 0.5) * (W - L - R - 16);
  };
  const ms = pts.map((t) => t.metric);
  const mlo = Math.min(...ms), mhi = Math.max(...ms);
  const fy = (m) => T + 6 + (mhi > mlo ? 1 - (m - mlo) / (mhi - mlo) : 0.5) * (H - T - B - 12);
  const tick = (x) => (typeof x === 'number' ? fmtParam(x) : x);
  return h('figure', { class: 'sweep-scatter', 'data-path': path, 'data-points': String(pts.length) },
    svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
      'aria-label': `${s.metric} against ${path}` },
    svg('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#d1d5db' }),
    svg('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#d1d5db' }),
    pts.length ? [
      svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end', 'font-size': 10, fill: '#6b7280' }, fmtMetric(s, mhi)),
      svg('text', { x: L - 4, y: H - B, 'text-anchor': 'end', 'font-size': 10, fill: '#6b7280' }, fmtMetric(s, mlo)),
      svg('text', { x: L, y: H - B + 14, 'font-size': 10, fill: '#6b7280' }, tick(numeric ? lo : cats[0])),
      svg('text', { x: W - R, y: H - B + 14, 'text-anchor': 'end', 'font-size': 10, fill: '#6b7280' },
        tick(numeric ? hi : cats[cats.length - 1])),
    ] : null,
    svg('text', { x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle', 'font-size': 11, fill: '#374151' },
      `${path}${log ? ' (log)' : ''}`),
    pts.map((t) => svg('circle', { cx: fx(t.params[path]).toFixed(1), cy: fy(t.metric).toFixed(1),
      r: t.trial === bestTrial ? 6 : 4, fill: t.trial === bestTrial ? '#ea580c' : '#2563eb',
      'fill-opacity': t.state === 'stopped' ? 0.45 : 0.85 },
    svg('title', {}, `trial ${t.trial}: ${path} = ${tick(t.params[path])}, ${s.metric} ${fmtMetric(s, t.metric)}`)))));
}

/* The trials' curves of the metric by epoch, overlaid (uPlot). */
function curvesChart(container) {
  let plot = null, keys = '';
  const wrap = h('div', { class: 'chart-plot' });
  container.append(wrap);
  const ro = new ResizeObserver(() => {
    if (plot) plot.setSize({ width: Math.max(280, container.clientWidth), height: 280 });
  });
  ro.observe(container);
  return {
    /* series: [{label, points: [[epoch, value], ...]}] */
    set(metric, series) {
      const k = series.map((x) => `${x.label}${x.best ? '*' : ''}`).join('|');
      const xs = [...new Set(series.flatMap((x) => x.points.map((p) => p[0])))].sort((a, b) => a - b);
      const data = [xs, ...series.map((x) => { const m = new Map(x.points); return xs.map((e) => (m.has(e) ? m.get(e) : null)); })];
      container.dataset.series = String(series.length);
      container.dataset.points = String(series.reduce((n, x) => n + x.points.length, 0));
      if (plot && k === keys) { plot.setData(data); return; }
      if (plot) plot.destroy();
      keys = k;
      // eslint-disable-next-line no-undef
      plot = new uPlot({
        width: Math.max(280, container.clientWidth || 600), height: 280,
        scales: { x: { time: false } },
        axes: [{ label: 'epoch', stroke: '#4b5563', grid: { stroke: '#eef0f3' } },
          { label: metric, stroke: '#4b5563', grid: { stroke: '#eef0f3' }, size: 56 }],
        legend: { live: true },
        series: [{ label: 'epoch' }, ...series.map((x, i) => ({
          label: x.label, stroke: COLORS[i % COLORS.length], width: x.best ? 3 : 1.5, spanGaps: true,
          points: { show: true, size: 5 },
        }))],
      }, data, wrap);
    },
    destroy() { ro.disconnect(); if (plot) plot.destroy(); },
  };
}

export function renderSweep(root, id) {
  const st = { alive: true, timer: null, sweep: null, curves: new Map() };   // job id -> {points, done}
  const title = h('h1', { class: 'page-title' }, `Sweep ${id}`);
  const badge = h('span', { id: 'sweep-status', 'aria-live': 'polite' });
  const subtitle = h('p', { class: 'muted', id: 'sweep-subtitle' });
  const cancelBtn = h('button', { type: 'button', class: 'btn btn-danger', id: 'sweep-cancel', hidden: true }, 'Cancel');
  const deleteBtn = h('button', { type: 'button', class: 'btn btn-danger', id: 'sweep-delete', hidden: true,
    title: 'Delete the sweep; its trials stay as jobs' }, 'Delete');
  const actionError = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const best = h('div', { class: 'notice-box', id: 'sweep-best', hidden: true });
  const stats = h('dl', { class: 'stats', id: 'sweep-stats' });
  const thead = h('thead');
  const tbody = h('tbody');
  const scatters = h('div', { class: 'sweep-scatters', id: 'sweep-scatters' });
  const curvesBox = h('div', { class: 'chart', id: 'sweep-curves', role: 'img', 'aria-label': 'the trials\' metric by epoch' });
  const chart = curvesChart(curvesBox);

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ', `Sweep ${id}`),
    h('div', { class: 'page-head' },
      h('div', {}, h('div', { class: 'title-row' }, title, badge), subtitle),
      h('div', { class: 'page-actions' }, cancelBtn, deleteBtn)),
    actionError,
    best,
    h('section', { class: 'card' }, stats),
    h('section', { class: 'card', 'aria-labelledby': 'trials-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'trials-title' }, 'Trials'),
        h('span', { class: 'muted', id: 'trials-order' }, 'best first')),
      h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'trials-table' }, thead, tbody))),
    h('section', { class: 'grid charts' },
      h('section', { class: 'card', 'aria-labelledby': 'scatter-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'scatter-title' }, 'Parameters against the metric')), scatters),
      h('section', { class: 'card', 'aria-labelledby': 'curves-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'curves-title' }, 'Curves')), curvesBox)));

  const stat = (label, value) => h('div', { class: 'stat' }, h('dt', {}, label), h('dd', {}, value));

  function show(s) {
    title.textContent = s.name || `Sweep ${s.id}`;
    document.title = `${s.name || `Sweep ${s.id}`} · kiln`;
    fill(badge, sweepBadge(s.status));
    root.dataset.status = s.status;
    const base = s.spec.base || {};
    const net = typeof base.network === 'string' ? base.network : (base.network && base.network.name) || 'custom';
    fill(subtitle, `${s.method}${s.method === 'asha' ? ` (rungs ${s.rungs.join('/')} epochs, eta ${s.spec.eta})` : ''}`,
      ` · ${net} on dataset ${base.dataset_id} · ${s.metric} (${s.mode}) · created `, fmtTime(s.created_at));
    cancelBtn.hidden = s.status !== 'running';
    deleteBtn.hidden = s.status === 'running';
    const c = s.counts;
    fill(stats, stat('Trials', `${doneCount(s)}/${s.trials_planned}`), stat('Running', c.running),
      stat('Stopped early', c.stopped), stat('Failed', c.failed), stat('Epochs spent', s.epochs_spent),
      stat('Best', s.best ? fmtMetric(s, s.best.metric) : '—'));
    if (s.best) {
      fill(best, 'Best: ', h('a', { href: `#/jobs/${s.best.job_id}`, id: 'sweep-best-link' },
        `trial ${s.best.trial} (job ${s.best.job_id})`), ` · ${s.metric} ${fmtMetric(s, s.best.metric)} · `,
      Object.entries(s.best.params).map(([k, v]) => `${k} = ${fmtParam(v)}`).join(', '));
      best.hidden = false;
    } else {
      best.hidden = true;
    }
    const paths = Object.keys(s.spec.space);
    fill(thead, h('tr', {}, h('th', { scope: 'col', class: 'num' }, '#'), h('th', { scope: 'col' }, 'Trial'),
      paths.map((p) => h('th', { scope: 'col', class: 'num' }, p)), h('th', { scope: 'col' }, 'State'),
      h('th', { scope: 'col', class: 'num' }, 'Epochs'), h('th', { scope: 'col', class: 'num' }, s.metric),
      h('th', { scope: 'col' }, 'Job')));
    if (!s.trials.length) {
      fill(tbody, h('tr', {}, h('td', { colspan: paths.length + 6, class: 'empty' }, 'No trials yet.')));
    } else {
      fill(tbody, s.trials.map((t, i) => h('tr', {
        'data-trial': t.trial, class: s.best && t.trial === s.best.trial ? 'row-best' : null,
      },
      h('td', { class: 'num muted' }, t.metric !== null ? i + 1 : ''),
      h('td', {}, `trial ${t.trial}`),
      paths.map((p) => h('td', { class: 'num' }, t.params[p] !== undefined ? fmtParam(t.params[p]) : '—')),
      h('td', { title: t.message || '' }, stateBadge(t.state),
        t.message ? h('span', { class: 'muted small trial-message' }, ` ${t.message}`) : null),
      h('td', { class: 'num' }, `${t.epoch}/${t.epochs}`),
      h('td', { class: 'num' }, fmtMetric(s, t.metric)),
      h('td', {}, t.job_id ? h('a', { href: `#/jobs/${t.job_id}` }, `Job ${t.job_id}`) : '—'))));
    }
    fill(scatters, paths.map((p) => scatter(s, p, s.trials, s.best ? s.best.trial : -1)));
  }

  async function loadCurves(s) {
    const jobs = s.trials.filter((t) => t.job_id);
    await Promise.all(jobs.map(async (t) => {
      const have = st.curves.get(t.job_id);
      if (have && have.final) return;
      try {
        const r = await get(`/jobs/${t.job_id}/metrics?tag=${encodeURIComponent(s.metric)}`);
        const pts = r.items.filter((m) => m.tag === s.metric).map((m) => [m.epoch, m.value]);
        st.curves.set(t.job_id, { points: pts, final: t.state !== 'running' && s.status !== 'running' });
      } catch { /* a deleted job: no curve */ }
    }));
    if (!st.alive) return;
    const series = jobs.filter((t) => st.curves.has(t.job_id)).sort((a, b) => a.trial - b.trial)
      .map((t) => ({ label: `trial ${t.trial}`, points: st.curves.get(t.job_id).points, best: s.best && s.best.trial === t.trial }));
    chart.set(s.metric, series);
  }

  async function refresh() {
    try {
      const s = await get(`/sweeps/${id}`);
      if (!st.alive) return;
      st.sweep = s;
      show(s);
      await loadCurves(s);
      if (s.status !== 'running' && st.timer) { clearInterval(st.timer); st.timer = null; }
    } catch (e) {
      if (!st.alive) return;
      actionError.textContent = e.status === 404 ? `There is no sweep ${id}.` : `Could not load the sweep: ${e.message}`;
      actionError.hidden = false;
    }
  }

  cancelBtn.addEventListener('click', async () => {
    cancelBtn.disabled = true;
    try { await post(`/sweeps/${id}/cancel`); await refresh(); } catch (e) {
      actionError.textContent = e.message; actionError.hidden = false;
    } finally { cancelBtn.disabled = false; }
  });
  deleteBtn.addEventListener('click', async () => {
    if (!window.confirm('Delete this sweep? Its trials stay as ordinary jobs.')) return;
    try { await del(`/sweeps/${id}`); location.hash = '#/'; } catch (e) {
      actionError.textContent = e.message; actionError.hidden = false;
    }
  });

  refresh();
  st.timer = setInterval(refresh, REFRESH_MS);
  return () => { st.alive = false; if (st.timer) clearInterval(st.timer); chart.destroy(); };
}
