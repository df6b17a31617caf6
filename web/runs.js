// What the comparison page (web/compare.js) computes from runs, apart from
// drawing: the run ids its URL names, a job's config flattened to dotted
// keys, the keys whose values differ between runs, and a metric's final and
// best values. No imports and no DOM, so that node:test checks it as it is
// (tests/unit/web_compare.test.mjs).

/* The most runs one comparison page shows. */
export const MAX_RUNS = 50;

/* The run ids of "#/compare?runs=3,1,7": positive integers, first
 * occurrence kept, at most MAX_RUNS; anything else in the list is ignored. */
export function parseRuns(query) {
  const m = /(?:^|[?&])runs=([^&]*)/.exec(query || '');
  const ids = [];
  if (!m) return ids;
  let list;
  try {
    list = decodeURIComponent(m[1]);
  } catch {
    list = m[1];      // a stray '%' (typed by hand): the ids around it still count
  }
  for (const part of list.split(',')) {
    const t = part.trim();
    if (!/^\d+$/.test(t)) continue;
    const id = Number(t);
    if (id > 0 && Number.isSafeInteger(id) && !ids.includes(id) && ids.length < MAX_RUNS) ids.push(id);
  }
  return ids;
}

/* A config object flattened to {"solver.lr": 0.01, "input": "[1,28,28]", ...}:
 * objects recurse with dotted keys, arrays of objects with their index
 * ("network.layers.0.type"), arrays of plain values are one value (their
 * JSON), and an empty object or array is one value too. */
export function flattenConfig(obj, prefix = '', out = {}) {
  const isObj = (v) => v !== null && typeof v === 'object';
  if (!isObj(obj)) { if (prefix) out[prefix] = obj; return out; }
  const entries = Array.isArray(obj) ? obj.map((v, i) => [String(i), v]) : Object.entries(obj);
  const plainArray = Array.isArray(obj) && !obj.some(isObj);
  if (prefix && (entries.length === 0 || plainArray)) { out[prefix] = JSON.stringify(obj); return out; }
  for (const [k, v] of entries) flattenConfig(v, prefix ? `${prefix}.${k}` : k, out);
  return out;
}

/* The keys of flats (flattened configs, one per run) whose values are not
 * the same in all of them (a key missing from some counts as differing),
 * sorted; none with fewer than two runs. skip: keys never listed. */
export function differingKeys(flats, skip = []) {
  if (flats.length < 2) return [];
  const keys = new Set();
  for (const f of flats) for (const k of Object.keys(f)) keys.add(k);
  const same = (k) => {
    const first = JSON.stringify(flats[0][k]);
    return flats.every((f) => k in f && JSON.stringify(f[k]) === first);
  };
  return [...keys].filter((k) => !skip.includes(k) && !same(k)).sort();
}

/* Whether a smaller value of tag is better: tags naming a loss. */
export function lowerIsBetter(tag) { return tag.includes('loss'); }

/* A series' final value (the one at its last step) and best (min for a loss
 * tag, max otherwise) among finite values; null for each when there is none.
 * points: [{step, value}] in any order. */
export function finalAndBest(tag, points) {
  let last = null;
  let best = null;
  const lower = lowerIsBetter(tag);
  for (const p of points) {
    if (!Number.isFinite(p.value)) continue;
    if (!last || p.step >= last.step) last = p;
    if (best === null || (lower ? p.value < best : p.value > best)) best = p.value;
  }
  return { final: last ? last.value : null, best };
}

/* Tags in the order the page shows them: losses, accuracies, then the rest alphabetically. */
const TAG_ORDER = ['train/loss', 'val/loss', 'train/epoch_loss', 'train/accuracy', 'val/accuracy',
  'train/epoch_accuracy', 'lr', 'perf/images_per_sec'];
export function sortTags(tags) {
  const rank = (t) => { const i = TAG_ORDER.indexOf(t); return i < 0 ? TAG_ORDER.length : i; };
  return [...tags].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
}
