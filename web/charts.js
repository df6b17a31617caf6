// Training curves drawn with uPlot (loaded as the global `uPlot` from
// /static/vendor/uPlot.iife.min.js). A chart holds several series keyed by
// metric tag; points arrive one by one (from GET /metrics, then live from SSE)
// and are redrawn at most once per animation frame.
//
// For tests and debugging, each chart's element carries data-points (the number
// of points drawn) and window.kilnCharts[name] is the chart object.

const COLORS = { train: '#2563eb', val: '#ea580c' };

export function createChart(container, { name, title, yLabel, series, yRange, xMax, yLog }) {
  const points = series.map(() => new Map());          // per series: x -> y
  const tagIndex = new Map(series.map((s, i) => [s.tag, i]));
  const wrap = document.createElement('div');
  wrap.className = 'chart-plot';
  container.append(wrap);
  container.dataset.points = '0';

  const opts = {
    title,
    width: Math.max(280, container.clientWidth || 600),
    height: 260,
    scales: {
      // From epoch 0 to the job's last epoch, so the curve grows into a fixed frame.
      x: { time: false, range: (u, min, max) => [0, Math.max(max ?? 1, (xMax && xMax()) || 1)] },
      y: yLog ? { distr: 3, log: 2 } : yRange ? { range: yRange } : { auto: true },
    },
    axes: [
      { label: 'epoch', stroke: '#4b5563', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#e5e7eb' } },
      { label: yLabel, stroke: '#4b5563', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#e5e7eb' },
        size: 56, values: (u, vals) => vals.map((v) => (v === null ? '' : formatTick(v))) },
    ],
    cursor: { drag: { x: true, y: false } },
    legend: { live: true },
    series: [
      { label: 'epoch', value: (u, v) => (v === null || v === undefined ? '—' : v.toFixed(2)) },
      ...series.map((s) => {
        const color = s.tag.startsWith('val/') ? COLORS.val : COLORS.train;
        const isVal = s.tag.startsWith('val/');
        return {
          label: s.label,
          stroke: color,
          width: isVal ? 2 : 1.5,
          spanGaps: true,
          points: { show: isVal, size: 7, fill: color, stroke: color },
          value: (u, v) => (v === null || v === undefined ? '—' : formatValue(v)),
        };
      }),
    ],
  };
  // eslint-disable-next-line no-undef
  const plot = new uPlot(opts, [[], ...series.map(() => [])], wrap);

  let pending = false;
  function redraw() {
    pending = false;
    const xs = new Set();
    for (const m of points) for (const x of m.keys()) xs.add(x);
    const xsSorted = [...xs].sort((a, b) => a - b);
    const data = [xsSorted, ...points.map((m) => xsSorted.map((x) => (m.has(x) ? m.get(x) : null)))];
    plot.setData(data);
    container.dataset.points = String(points.reduce((n, m) => n + m.size, 0));
  }

  const ro = new ResizeObserver(() => {
    const w = Math.max(280, container.clientWidth);
    if (Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height: 260 });
  });
  ro.observe(container);

  const chart = {
    /* Adds one point of a tag's series; ignored for tags this chart does not show. */
    add(tag, x, y) {
      const i = tagIndex.get(tag);
      if (i === undefined || !Number.isFinite(x) || !Number.isFinite(y)) return;
      points[i].set(x, y);
      if (!pending) { pending = true; requestAnimationFrame(redraw); }
    },
    count() { return points.reduce((n, m) => n + m.size, 0); },
    countOf(tag) { const i = tagIndex.get(tag); return i === undefined ? 0 : points[i].size; },
    data() { return plot.data; },
  };
  return register(name, chart, plot, ro);
}

// Publishes chart as window.kilnCharts[name] (what the tests read) and gives it
// a destroy() that stops its resize observer and takes it off again.
function register(name, chart, plot, ro) {
  chart.destroy = () => {
    ro.disconnect();
    plot.destroy();
    if (window.kilnCharts && window.kilnCharts[name] === chart) delete window.kilnCharts[name];
  };
  window.kilnCharts = window.kilnCharts || {};
  window.kilnCharts[name] = chart;
  return chart;
}

function formatTick(v) {
  const a = Math.abs(v);
  if (a === 0) return '0';
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
