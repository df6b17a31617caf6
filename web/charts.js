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
    destroy() {
      ro.disconnect();
      plot.destroy();
      if (window.kilnCharts && window.kilnCharts[name] === chart) delete window.kilnCharts[name];
    },
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
