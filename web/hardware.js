// The home page's hardware card: CPU, memory and load of the server, and each
// GPU's utilisation, memory, temperature, power and the job on it, with
// sparklines of the last 10 minutes. Everything from GET /api/v1/hardware
// (server/hardware.h): the whole history once, then ?since= the newest sample
// held, at the sampler's interval while the page is open. When kiln serve
// runs with a Slurm cluster, the card ends with its nodes as `sinfo --json`
// last listed them (server/cluster.h): state, CPUs and GPUs in use, memory,
// partitions and the reason a node is down or drained; or sinfo's error.
//   hardwareCard()  -> { el, stop() }
//   sparkline(values, max, label)  an inline SVG polyline (exported for tests)
//   clusterSection(cluster)  the cluster's part of the card, null without one

import { get } from './api.js';
import { h, svg, fill, fmtBytes } from './ui.js';

const W = 120;
const H = 28;

/* An inline SVG sparkline of values (nulls are gaps) scaled to [0, max]. */
export function sparkline(values, max, label) {
  const n = values.length;
  const pts = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined || !(max > 0)) return;
    const x = n > 1 ? (i / (n - 1)) * W : W;
    const y = H - 1 - Math.min(1, Math.max(0, v / max)) * (H - 2);
    pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  });
  return svg('svg', { class: 'spark', viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': label },
    svg('polyline', { points: pts.join(' '), fill: 'none', stroke: 'currentColor', 'stroke-width': 1.5 }));
}

const pct = (v) => (v === null || v === undefined ? '—' : `${Math.round(v)} %`);

function row(name, spark, value, attrs = {}) {
  return h('div', { class: 'hw-row', ...attrs }, h('span', { class: 'hw-name' }, name), spark,
    h('span', { class: 'hw-value' }, value));
}

function gpuRows(hist, g) {
  const series = (key) => hist.map((s) => {
    const x = (s.gpus || []).find((y) => y.index === g.index);
    return x ? x[key] : null;
  });
  const mem = g.memory_total_bytes ? `${fmtBytes(g.memory_used_bytes)} / ${fmtBytes(g.memory_total_bytes)}` : '—';
  const facts = [
    g.temperature_c !== null ? `${g.temperature_c} °C` : null,
    g.power_w !== null ? `${Math.round(g.power_w)} W` : null,
  ].filter(Boolean).join(' · ');
  const work = g.job_id ? h('a', { href: `#/jobs/${g.job_id}`, class: 'hw-job' }, `job ${g.job_id}`)
    : g.evaluation_id ? h('span', { class: 'hw-job' }, `evaluation ${g.evaluation_id}`)
      : h('span', { class: 'muted' }, 'idle');
  return h('div', { class: 'hw-gpu', 'data-gpu': g.index },
    h('div', { class: 'hw-gpu-head' }, h('strong', {}, `GPU ${g.index}`), h('span', { class: 'muted small hw-gpu-name' }, g.name), work),
    row('util', sparkline(series('utilization'), 100, `GPU ${g.index} utilisation`), pct(g.utilization)),
    row('memory', sparkline(series('memory_used_bytes'), g.memory_total_bytes, `GPU ${g.index} memory`), mem),
    facts ? h('div', { class: 'muted small hw-facts' }, facts) : null);
}

/* Slurm's node states as a badge's colour: free, busy, in trouble, leaving. */
const NODE_STATE_CLASS = {
  idle: 'node-free', mixed: 'node-busy', allocated: 'node-busy', completing: 'node-busy',
  down: 'node-bad', error: 'node-bad', fail: 'node-bad', future: 'node-off', unknown: 'node-off',
};
const usedOf = (used, total) => (total === null || total === undefined ? '—'
  : `${used === null || used === undefined ? '?' : used} / ${total}`);

function nodeState(n) {
  const flags = n.state_flags || [];
  const bad = flags.some((f) => /^(drain|fail|not_responding|maint|power_down|powered_down)/.test(f));
  const cls = bad && NODE_STATE_CLASS[n.state] !== 'node-bad' ? 'node-warn' : (NODE_STATE_CLASS[n.state] || 'node-off');
  return h('span', { class: `badge ${cls}`, 'data-state': n.state },
    [n.state, ...flags].join('+'));
}

function nodeRows(n) {
  const alloc = n.memory_allocated_bytes;     // fmtBytes shows 0 as a dash: none allocated is "0 B" here
  const mem = n.memory_total_bytes === null ? '—'
    : `${alloc === null ? '?' : alloc === 0 ? '0 B' : fmtBytes(alloc)} / ${fmtBytes(n.memory_total_bytes)}`;
  const rows = [h('tr', { 'data-node': n.name },
    h('td', {}, h('strong', {}, n.name || '—'),
      n.partitions.length ? h('div', { class: 'muted small' }, n.partitions.join(', ')) : null),
    h('td', {}, nodeState(n)),
    h('td', { class: 'num', 'data-col': 'cpus' }, usedOf(n.cpus_allocated, n.cpus)),
    h('td', { class: 'num', 'data-col': 'gpus' }, n.gpus === 0 ? '—' : usedOf(n.gpus_used, n.gpus)),
    h('td', { class: 'num', 'data-col': 'memory', title: n.memory_free_bytes === null ? null
      : `${fmtBytes(n.memory_free_bytes)} free on the node` }, mem))];
  if (n.reason) {
    rows.push(h('tr', { class: 'hw-node-reason', 'data-reason-of': n.name },
      h('td', { colspan: 5 }, h('span', { class: 'muted' }, 'reason: '), n.reason)));
  }
  return rows;
}

export function clusterSection(cl) {
  if (!cl) return null;
  const nodes = cl.nodes || [];
  const facts = [cl.slurm_version ? `Slurm ${cl.slurm_version}` : null,
    cl.time ? `${nodes.length} node${nodes.length === 1 ? '' : 's'}` : 'waiting for the first sinfo',
    `sinfo every ${cl.interval_seconds} s`].filter(Boolean).join(' · ');
  return h('div', { class: 'hw-cluster', id: 'hw-cluster' },
    h('div', { class: 'hw-gpu-head' }, h('strong', {}, 'Slurm cluster'), h('span', { class: 'muted small' }, facts)),
    cl.error ? h('p', { class: 'form-error small', id: 'hw-cluster-error', role: 'alert' }, cl.error) : null,
    nodes.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'table table-compact hw-nodes' },
      h('thead', {}, h('tr', {}, h('th', {}, 'node'), h('th', {}, 'state'), h('th', { class: 'num' }, 'CPUs'),
        h('th', { class: 'num' }, 'GPUs'), h('th', { class: 'num' }, 'memory'))),
      h('tbody', {}, nodes.flatMap(nodeRows)))) : null,
    cl.nodes_omitted ? h('p', { class: 'muted small' }, `and ${cl.nodes_omitted} more nodes not shown`) : null);
}

function render(body, hw, hist) {
  const c = hw.current;
  if (!c) { fill(body, h('p', { class: 'muted' }, 'No sample yet.')); return; }
  const span = hist.length * hw.interval_seconds;
  const spanText = span < 60 ? `${span} s` : `${Math.round(span / 60)} min`;
  fill(body,
    row('CPU', sparkline(hist.map((s) => s.cpu_utilization), 100, 'CPU utilisation'), pct(c.cpu_utilization),
      { id: 'hw-cpu', title: `${hw.cores} cores` }),
    row('memory', sparkline(hist.map((s) => s.memory_used_bytes), c.memory_total_bytes, 'memory used'),
      `${fmtBytes(c.memory_used_bytes)} / ${fmtBytes(c.memory_total_bytes)}`, { id: 'hw-memory' }),
    h('div', { class: 'hw-row', id: 'hw-load' }, h('span', { class: 'hw-name' }, 'load'),
      h('span', { class: 'hw-value' }, c.load.map((l) => l.toFixed(2)).join(' · '))),
    c.gpus.length ? c.gpus.map((g) => gpuRows(hist, g))
      : h('p', { class: 'muted small', id: 'hw-no-gpu' },
        hw.nvml && hw.nvml.available ? 'No GPU found.' : 'No GPU figures (NVML not available).'),
    h('p', { class: 'muted small', id: 'hw-span' }, `last ${spanText}, a sample every ${hw.interval_seconds} s`),
    clusterSection(hw.cluster));
}

export function hardwareCard() {
  const body = h('div', { class: 'hw-body' });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const el = h('section', { class: 'card', id: 'hardware-card', 'aria-labelledby': 'hardware-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'hardware-title' }, 'Hardware')), error, body);
  let alive = true;
  let timer = null;
  let hist = [];                        // the samples so far; each poll asks only for newer ones
  async function refresh() {
    let next = 5000;
    try {
      const since = hist.length ? hist.at(-1).time : 0;
      const hw = await get(`/hardware?since=${since}`);
      if (!alive) return;
      error.hidden = true;
      hist = hist.concat(hw.history || []);
      const newest = hist.length ? hist.at(-1).time : 0;
      hist = hist.filter((s) => s.time > newest - hw.history_seconds);
      render(body, hw, hist);
      next = Math.max(2000, hw.interval_seconds * 1000);
    } catch (e) {
      if (!alive) return;
      error.hidden = false;
      fill(error, e.message || String(e));
    }
    timer = setTimeout(refresh, next);
  }
  refresh();
  return { el, stop() { alive = false; clearTimeout(timer); } };
}
