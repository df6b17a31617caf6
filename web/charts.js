// Training curves drawn with uPlot (loaded as the global `uPlot` from
// /static/vendor/uPlot.iife.min.js). A chart holds several series, each keyed
// (a metric tag on the job page, a run on the comparison page); a series'
// points are metrics {step, epoch, wall, value}, arriving one by one (from GET
// /metrics, then live) and redrawn at most once per animation frame.
//
// The view -- what x is (step, epoch, or wall time since the run's start),
// the smoothing and a log y scale -- is one object that the controls bar
// (chartControls) edits and every chart of a page shares; the transforms
// (smoothEma, the x of a point) live here only.
//
// A chart out of view redraws once it comes into view (setView on a page of
// 20 charts costs only the visible ones). For tests and debugging, each
// chart's element carries data-points (the number of points held) and
// window.kilnCharts[name] is the chart object (flush() draws it now).

const COLORS = { train: '#2563eb', val: '#ea580c' };
const FEW_POINTS = 40;         // series of at most this many points get dots (dots: 'auto')

/* The x-axis choices: a point's x under each, and the axis label. */
export const X_AXES = {
  step: { label: 'step', of: (p) => p.step },
  epoch: { label: 'epoch', of: (p) => p.epoch },
  wall: { label: 'wall time', of: (p, t0) => p.wall - t0 },
};

export const DEFAULT_VIEW = Object.freeze({ x: 'epoch', smoothing: 0, log: false });

/* TensorBoard's smoothing: a debiased exponential moving average with weight
 * w in [0, 1): s_i = a_i / (1 - w^k), a_i = w * a_(i-1) + (1 - w) * y_i, where
 * k counts the finite values so far. Non-finite values and null pass through
 * unchanged (and do not count); a constant series is returned as it is (as
 * TensorBoard does). Returns a new array. */
export function smoothEma(ys, w) {
  if (!(w > 0) || ys.length === 0) return ys.slice();
  const first = ys[0];
  if (ys.every((y) => y === first)) return ys.slice();
  const out = new Array(ys.length);
  let last = 0;
  let k = 0;
  for (let i = 0; i < ys.length; i++) {
    const y = ys[i];
    if (typeof y !== 'number' || !Number.isFinite(y)) { out[i] = y; continue; }
    last = last * w + (1 - w) * y;
    k += 1;
    out[i] = w === 1 ? last : last / (1 - w ** k);
  }
  return out;
}

/* A series' [xs, ys] under view: x by view.x (wall time from t0), sorted by
 * x, y smoothed; with view.log, values <= 0 become null (no place on a log scale). */
export function seriesXY(points, view, t0 = 0) {
  const of = (X_AXES[view.x] || X_AXES.epoch).of;
  const pts = points.map((p) => [of(p, t0), p.value]).filter(([x]) => Number.isFinite(x));
  pts.sort((a, b) => a[0] - b[0]);
  let ys = smoothEma(pts.map((p) => p[1]), view.smoothing || 0);
  if (view.log) ys = ys.map((y) => (y > 0 ? y : null));
  return [pts.map((p) => p[0]), ys];
}

/* Series [xs, ys] pairs on one x: the sorted union of their xs, each y array
 * holding null where its series has no point (uPlot's aligned data). */
export function alignSeries(tables) {
  const all = new Set();
  for (const [xs] of tables) for (const x of xs) all.add(x);
  const xs = [...all].sort((a, b) => a - b);
  if (tables.length === 1) return [tables[0][0], tables[0][1]];
  const at = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...tables.map(([sx, sy]) => {
    const ys = new Array(xs.length).fill(null);
    for (let i = 0; i < sx.length; i++) ys[at.get(sx[i])] = sy[i];
    return ys;
  })];
}

/* "45s", "12m", "1.5h": a wall-time tick. */
export function fmtWall(sec) {
  if (sec === null || sec === undefined) return '';
  const a = Math.abs(sec);
  if (a < 120) return `${+sec.toFixed(a < 10 ? 1 : 0)}s`;
  if (a < 7200) return `${+(sec / 60).toFixed(a < 600 ? 1 : 0)}m`;
  return `${+(sec / 3600).toFixed(1)}h`;
}

/* The controls bar that sets a page's chart view: x-axis (step, epoch, wall
 * time), smoothing (0..0.999), log scale. onChange(view) runs on each change
 * (the slider's at most once per frame). Returns {el, view()}. */
export function chartControls(idPrefix, initial, onChange) {
  const view = { ...DEFAULT_VIEW, ...initial };
  const mk = (tag, attrs, ...kids) => {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) if (v !== false && v !== undefined) el.setAttribute(k, v === true ? '' : v);
    el.append(...kids);
    return el;
  };
  const axis = mk('select', { id: `${idPrefix}-x` },
    ...Object.entries(X_AXES).map(([k, a]) => mk('option', { value: k, selected: k === view.x }, a.label)));
  const smooth = mk('input', { id: `${idPrefix}-smoothing`, type: 'range', min: '0', max: '0.999', step: '0.001',
    value: String(view.smoothing) });
  const smoothOut = mk('output', { for: `${idPrefix}-smoothing`, id: `${idPrefix}-smoothing-value` },
    view.smoothing.toFixed(3));
  const log = mk('input', { id: `${idPrefix}-log`, type: 'checkbox', checked: view.log });
  let frame = 0;
  const changed = () => {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; onChange({ ...view }); });
  };
  axis.addEventListener('change', () => { view.x = axis.value; changed(); });
  smooth.addEventListener('input', () => {
    view.smoothing = Math.min(0.999, Math.max(0, Number(smooth.value) || 0));
    smoothOut.value = view.smoothing.toFixed(3);
    changed();
  });
  log.addEventListener('change', () => { view.log = log.checked; changed(); });
  const el = mk('div', { class: 'chart-controls', role: 'group', 'aria-label': 'chart settings' },
    mk('label', { for: axis.id }, 'X axis'), axis,
    mk('label', { for: smooth.id }, 'Smoothing'), smooth, smoothOut,
    mk('span', { class: 'check' }, log, mk('label', { for: log.id }, 'Log scale')));
  return { el, view: () => ({ ...view }) };
}

/* A line chart of keyed series. series: [{key, label, color?, width?, dots?,
 * run?, start?}]: dots true, false or 'auto' (dots on a series of few
 * points); run, the key of the run whose start is wall time 0 (default the
 * series' own key); start, when that run started (unix seconds; else, or if
 * later, its earliest point). xMax(axis): the x the frame reaches at least
 * (or null: the data's). yLog: always a log scale (a number: its base, 2 for
 * a loss scale; the view's log applies otherwise); yRange: fixed y on a
 * linear scale. legend: uPlot's legend under the chart. */
export function createChart(container, {
  name, title, yLabel, series, yRange, xMax, yLog, view = DEFAULT_VIEW, height = 260, legend = true,
}) {
  const points = series.map(() => new Map());          // per series: step -> point
  const keyIndex = new Map(series.map((s, i) => [s.key ?? s.tag, i]));
  const wrap = document.createElement('div');
  wrap.className = 'chart-plot';
  container.append(wrap);
  container.dataset.points = '0';
  let cur = { ...view };
  let plot = null;
  let sizes = series.map(() => 0);                      // points per series, as last drawn

  function options() {
    const log = yLog || cur.log;
    const axisName = cur.x;
    const fmtX = axisName === 'wall' ? fmtWall : (v) => (Number.isInteger(v) ? String(v) : v.toFixed(2));
    return {
      title,
      width: Math.max(280, container.clientWidth || 600),
      height,
      scales: {
        // From 0 to the job's last epoch or step, so the curve grows into a fixed frame.
        // (from the data's own ends: uPlot widens a single x to about 0..2x)
        x: { time: false, range: (u) => {
          const xs = u.data[0];
          const lo = xs.length ? Math.min(0, xs[0]) : 0;
          const hi = Math.max(xs.length ? xs[xs.length - 1] : 0, (xMax && xMax(axisName)) || 0);
          return [lo, hi > lo ? hi : lo + 1];
        } },
        y: log ? { distr: 3, log: typeof yLog === 'number' && !cur.log ? yLog : 10 } : yRange ? { range: yRange } : { auto: true },
      },
      axes: [
        { label: X_AXES[axisName].label, stroke: '#4b5563', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#e5e7eb' },
          values: (u, vals) => vals.map((v) => (v === null ? '' : axisName === 'wall' ? fmtWall(v) : formatTick(v))) },
        { label: yLabel, stroke: '#4b5563', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#e5e7eb' },
          size: 56, values: (u, vals) => vals.map((v) => (v === null ? '' : formatTick(v))) },
      ],
      cursor: { drag: { x: true, y: false } },
      legend: { show: legend, live: true },
      series: [
        { label: X_AXES[axisName].label, value: (u, v) => (v === null || v === undefined ? '—' : fmtX(v)) },
        ...series.map((s) => {
          const isVal = (s.tag || '').startsWith('val/');
          const color = s.color || (isVal ? COLORS.val : COLORS.train);
          const dots = s.dots ?? isVal;
          return {
            label: s.label,
            stroke: color,
            width: s.width ?? (isVal ? 2 : 1.5),
            spanGaps: true,
            // 'auto': dots where a series has few points (a line needs two)
            points: { show: dots === 'auto' ? (u, si) => (sizes[si - 1] || 0) <= FEW_POINTS : dots,
              size: dots === 'auto' ? 5 : 7, fill: color, stroke: color },
            value: (u, v) => (v === null || v === undefined ? '—' : formatValue(v)),
          };
        }),
      ],
    };
  }

  /* The runs' wall-time origins: each run's start (a series' `start`, unix
   * seconds) or its earliest point, whichever is earlier. */
  function origins() {
    const t0 = new Map();
    series.forEach((s, i) => {
      const run = s.run ?? s.key ?? s.tag;
      if (Number.isFinite(s.start) && !(t0.get(run) <= s.start)) t0.set(run, s.start);
      for (const p of points[i].values()) {
        if (Number.isFinite(p.wall) && !(t0.get(run) <= p.wall)) t0.set(run, p.wall);
      }
    });
    return t0;
  }

  function build() {
    const t0 = cur.x === 'wall' ? origins() : null;
    const tables = series.map((s, i) => seriesXY([...points[i].values()], cur,
      t0 ? t0.get(s.run ?? s.key ?? s.tag) ?? 0 : 0));
    sizes = tables.map(([xs]) => xs.length);
    if (tables.length === 0) return [[]];
    return alignSeries(tables);
  }

  function make() {
    if (plot) plot.destroy();
    // eslint-disable-next-line no-undef
    plot = new uPlot(options(), build(), wrap);
  }
  make();

  // A chart out of view (with a margin) is brought up to date when it comes
  // into view: a page of many charts redraws only the ones on screen.
  let pending = false;
  const box = container.getBoundingClientRect();
  let visible = box.bottom > -200 && box.top < window.innerHeight + 200;
  let stale = null;              // null, 'data' or 'plot' (the axis or scale changed)
  function redraw(force) {
    pending = false;
    container.dataset.points = String(points.reduce((n, m) => n + m.size, 0));
    if (!visible && !force) { stale = stale || 'data'; return; }
    plot.setData(build());
  }
  function later() { if (!pending) { pending = true; requestAnimationFrame(() => redraw(false)); } }
  const io = new IntersectionObserver((entries) => {
    visible = entries[entries.length - 1].isIntersecting;
    if (!visible || !stale) return;
    if (stale === 'plot') make(); else redraw(true);
    stale = null;
  }, { rootMargin: '200px' });
  io.observe(container);

  const ro = new ResizeObserver(() => {
    const w = Math.max(280, container.clientWidth);
    if (Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height });
  });
  ro.observe(container);

  const chart = {
    /* Adds one point {step, epoch, wall, value} of a series (by key; on the
     * job page the tag), replacing one at the same step; ignored for keys this
     * chart does not show and for non-finite values. */
    add(key, p) {
      const i = keyIndex.get(key);
      if (i === undefined || !Number.isFinite(p.value) || !Number.isFinite(p.step)) return;
      points[i].set(p.step, p);
      later();
    },
    /* Adds many points of a series, then draws once (now: the time a caller measures). */
    addAll(key, ps) {
      const i = keyIndex.get(key);
      if (i === undefined) return;
      for (const p of ps) if (Number.isFinite(p.value) && Number.isFinite(p.step)) points[i].set(p.step, p);
      later();
    },
    /* A new view: the axis or the log scale rebuild the plot, smoothing redraws it. */
    setView(v) {
      const rebuild = v.x !== cur.x || !!v.log !== !!cur.log;
      cur = { ...v };
      if (!visible) stale = rebuild || stale === 'plot' ? 'plot' : 'data';
      else if (rebuild) make();
      else redraw(true);
    },
    /* Draws now, in view or not (not waiting for the next frame). */
    flush() { if (stale === 'plot') make(); stale = null; redraw(true); },
    count() { return points.reduce((n, m) => n + m.size, 0); },
    countOf(key) { const i = keyIndex.get(key); return i === undefined ? 0 : points[i].size; },
    data() { if (stale || pending) chart.flush(); return plot.data; },
    labels() { return series.map((s) => s.label); },
    series: () => series.length,
    plot: () => plot,
  };
  return register(name, chart, () => plot, { disconnect() { ro.disconnect(); io.disconnect(); } });
}

// Publishes chart as window.kilnCharts[name] (what the tests read) and gives it
// a destroy() that stops its resize observer and takes it off again.
function register(name, chart, plot, ro) {
  chart.destroy = () => {
    ro.disconnect();
    (typeof plot === 'function' ? plot() : plot).destroy();
    if (window.kilnCharts && window.kilnCharts[name] === chart) delete window.kilnCharts[name];
  };
  window.kilnCharts = window.kilnCharts || {};
  window.kilnCharts[name] = chart;
  return chart;
}

function formatTick(v) {
  const a = Math.abs(v);
  if (a === 0) return '0';
  if (a >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (a >= 1e5) return `${+(v / 1e3).toFixed(0)}k`;
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(a >= 10 ? 1 : 2).replace(/\.?0+$/, '');
  return v.toPrecision(2).replace(/\.?0+$/, '');
}

function formatValue(v) {
  return Math.abs(v) >= 100 ? v.toFixed(1) : v.toPrecision(4);
}

// A grouped bar chart of counts per category (the dataset page's images per
// class): categories along x, one series of bars per group (a split), drawn by
// a small paths function so that any number of groups sits side by side. With
// many categories only every k-th label is written, so the axis stays
// legible; the legend names the category under the cursor.
// window.kilnCharts[name] is the chart; the container carries data-series and
// data-categories.

const GROUP_COLORS = ['#2563eb', '#ea580c', '#15803d', '#7c3aed'];

export function createBarChart(container, { name, title, categories, series, yLabel = 'images', height = 260 }) {
  const n = categories.length;
  const k = Math.max(1, series.length);
  const wrap = document.createElement('div');
  wrap.className = 'chart-plot';
  container.append(wrap);
  const short = (s) => (String(s).length > 12 ? `${String(s).slice(0, 11)}…` : String(s));

  // Bars of group g: each category's slot is 80% filled by the k groups.
  const bars = (g) => (u, si, i0, i1) => {
    const path = new Path2D();
    const slot = u.bbox.width / Math.max(1, n);
    const bw = (slot * 0.8) / k;
    const y0 = u.valToPos(0, 'y', true);
    for (let i = i0; i <= i1; i++) {
      const v = u.data[si][i];
      if (v === null || v === undefined) continue;
      const x = u.valToPos(i, 'x', true) - slot * 0.4 + g * bw;
      const y = u.valToPos(v, 'y', true);
      path.rect(Math.round(x), Math.round(y), Math.max(1, Math.round(bw) - (bw > 4 ? 1 : 0)), Math.max(0, Math.round(y0 - y)));
    }
    return { stroke: path, fill: path };
  };
  // Every step-th category gets a label, step chosen so that labels do not collide.
  const labelPx = 7 * Math.max(1, ...categories.map((c) => short(c).length)) + 12;
  const splits = (u) => {
    const room = Math.max(1, Math.floor(u.bbox.width / devicePixelRatio / labelPx));
    const step = Math.max(1, Math.ceil(n / room));
    return categories.map((_, i) => i).filter((i) => i % step === 0);
  };
  const most = Math.max(1, ...series.flatMap((s) => s.values));
  const opts = {
    title,
    width: Math.max(280, container.clientWidth || 600),
    height,
    scales: { x: { time: false, range: () => [-0.5, n - 0.5] }, y: { range: () => [0, most * 1.08] } },
    axes: [
      { stroke: '#4b5563', grid: { show: false }, ticks: { show: false }, splits,
        values: (u, vals) => vals.map((i) => short(categories[i] ?? '')) },
      { label: yLabel, stroke: '#4b5563', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#e5e7eb' }, size: 56,
        values: (u, vals) => vals.map((v) => (Number.isInteger(v) ? v.toLocaleString('en-US') : '')) },
    ],
    cursor: { drag: { x: false, y: false }, points: { show: false } },
    legend: { live: true },
    series: [
      { label: 'class', value: (u, v) => (v === null || v === undefined ? '—' : categories[v] ?? '—') },
      ...series.map((s, g) => ({
        label: s.label,
        stroke: GROUP_COLORS[g % GROUP_COLORS.length],
        fill: GROUP_COLORS[g % GROUP_COLORS.length],
        width: 0,
        paths: bars(g),
        points: { show: false },
        value: (u, v) => (v === null || v === undefined ? '—' : v.toLocaleString('en-US')),
      })),
    ],
  };
  // eslint-disable-next-line no-undef
  const plot = new uPlot(opts, [categories.map((_, i) => i), ...series.map((s) => s.values)], wrap);
  container.dataset.series = String(series.length);
  container.dataset.categories = String(n);

  const ro = new ResizeObserver(() => {
    const w = Math.max(280, container.clientWidth);
    if (Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height });
  });
  ro.observe(container);
  const chart = {
    plot,
    series: () => plot.series.length - 1,
  };
  return register(name, chart, plot, ro);
}
