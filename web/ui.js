// Small DOM and formatting helpers shared by the dashboard's views.
// Text always goes in as text nodes, never as HTML.

/* h('div', {class: 'x', onclick: fn}, child, 'text', ...) -> element */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k in el && typeof v !== 'string') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

/* svg('polyline', {points: '0,0 1,1'}) -> an SVG element (attributes only). */
export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/* Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

const STATUS_LABELS = {
  queued: 'queued', running: 'running', done: 'done', failed: 'failed',
  cancelled: 'cancelled', importing: 'importing', ready: 'ready',
};

export function statusBadge(status) {
  const s = STATUS_LABELS[status] ? status : 'unknown';
  return h('span', { class: `badge badge-${s}`, 'data-status': s }, status || 'unknown');
}

/* A labelled progress bar; fraction in 0..1. */
export function progressBar(fraction, label) {
  const pct = Math.max(0, Math.min(1, Number(fraction) || 0)) * 100;
  return h('div', {
    class: 'bar', role: 'progressbar', 'aria-label': label || 'progress',
    'aria-valuemin': '0', 'aria-valuemax': '100', 'aria-valuenow': pct.toFixed(0),
  }, h('div', { class: 'bar-fill', style: `width: ${pct.toFixed(1)}%` }));
}

export function setProgress(bar, fraction) {
  const pct = Math.max(0, Math.min(1, Number(fraction) || 0)) * 100;
  bar.setAttribute('aria-valuenow', pct.toFixed(0));
  bar.firstChild.style.width = `${pct.toFixed(1)}%`;
}

export function fmtPercent(x, digits = 1) {
  return typeof x === 'number' && Number.isFinite(x) ? `${(x * 100).toFixed(digits)}%` : '—';
}

export function fmtNumber(x, digits = 4) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return '—';
  return Math.abs(x) >= 1000 ? Math.round(x).toLocaleString('en-US') : Number(x.toPrecision(digits)).toString();
}

export function fmtCount(n) {
  return typeof n === 'number' ? n.toLocaleString('en-US') : '—';
}

export function fmtBytes(n) {
  if (!(n > 0)) return '—';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(n >= 10 || i === 0 ? 0 : 1)} ${u[i]}`;
}

export function fmtDuration(s) {
  if (typeof s !== 'number' || !Number.isFinite(s) || s < 0) return '—';
  s = Math.round(s);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
}

/* "2026-11-22T08:00:00Z" -> "Nov 22, 08:00" in the viewer's zone, with the full time as title. */
export function fmtTime(iso) {
  if (!iso) return h('span', {}, '—');
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return h('span', {}, iso);
  const text = d.toLocaleString('en-US', { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hour12: false });
  return h('time', { datetime: iso, title: d.toString() }, text);
}

export function fmtShape(shape) {
  return Array.isArray(shape) && shape.length === 3 ? `${shape[0]}×${shape[1]}×${shape[2]}` : '—';
}

// ---- a field of GET /api/v1/schema (the job form, the upload form) ----------

/* "from 0 to below 1", "above 0, at most 10": a schema field's range in words. */
export function rangeText(r) {
  const lo = r.minimum !== undefined ? `from ${r.minimum}`
    : r.exclusiveMinimum !== undefined ? `above ${r.exclusiveMinimum}` : '';
  const hi = r.maximum !== undefined ? `${lo.startsWith('from') ? 'to' : 'at most'} ${r.maximum}`
    : r.exclusiveMaximum !== undefined ? `${lo.startsWith('from') ? 'to below' : 'below'} ${r.exclusiveMaximum}` : '';
  return [lo, hi].filter(Boolean).join(lo.startsWith('from') ? ' ' : ', ');
}

/* "The base learning rate: a number above 0, at most 10; default 0.01" (a field's tooltip). */
function ruleText(r) {
  const range = rangeText(r);
  const what = `${r.type === 'integer' ? 'a whole number' : 'a number'}${range ? ` ${range}` : ''}`;
  const def = r.default !== undefined && r.default !== null ? `; default ${r.default}` : '';
  return `${r.description ? `${r.description[0].toUpperCase()}${r.description.slice(1)}: ` : ''}${what}${def}`;
}

/* Gives a number input a schema field's bounds: the inclusive min and max
 * attributes, an exclusive bound as the attribute too (the nearest HTML can
 * say; the tooltip and the server tell the difference), a step of 1 for
 * integers. */
export function limit(input, r) {
  const lo = r.minimum ?? r.exclusiveMinimum;
  const hi = r.maximum ?? r.exclusiveMaximum;
  if (input.type === 'number') {
    if (lo !== undefined) input.min = String(lo); else input.removeAttribute('min');
    if (hi !== undefined) input.max = String(hi); else input.removeAttribute('max');
    input.step = r.type === 'integer' ? '1' : 'any';
  }
  input.inputMode = r.type === 'integer' ? 'numeric' : 'decimal';
  input.title = ruleText(r);
}
