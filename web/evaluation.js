// The job page's "Evaluate" card: evaluate the job's model (final, best or a
// snapshot) on a dataset's split through POST /api/v1/jobs/ID/evaluations
// (the request curl makes), list the job's evaluations, and show one's
// result: headline figures, the confusion matrix as a heat map whose cells
// open the misclassified images of that (true, predicted) pair, and a
// per-class table of precision, recall, F1 and support.

import { get, post, request, apiHref } from './api.js';
import { h, fill, fmtPercent, fmtNumber, fmtCount, statusBadge, progressBar } from './ui.js';

const POLL_MS = 1000;
const SPLITS = ['val', 'test', 'train'];

const active = (e) => e.status === 'queued' || e.status === 'running';

/* The cell's colour: the share of its row (the true class), blue on the
 * diagonal, orange off it. */
function cellStyle(count, rowTotal, diagonal) {
  const share = rowTotal ? count / rowTotal : 0;
  if (!count) return '';
  const a = Math.max(0.08, Math.min(1, diagonal ? share : Math.sqrt(share)));
  const rgb = diagonal ? '37, 99, 235' : '194, 65, 12';
  const dark = a > 0.55;
  return `background: rgba(${rgb}, ${a.toFixed(3)}); color: ${dark ? '#fff' : 'inherit'}`;
}

/* The confusion matrix as a table; onCell(t, p) for a misclassified cell. */
function heatMap(res, onCell) {
  const n = res.classes.length;
  const rows = res.confusion_matrix.map((r) => r.reduce((a, b) => a + b, 0));
  const head = h('tr', {}, h('th', { class: 'cm-corner', scope: 'col' }, 'true \\ predicted'),
    ...res.classes.map((c) => h('th', { scope: 'col', title: `predicted ${c}` }, c)));
  const body = res.confusion_matrix.map((row, t) => h('tr', {},
    h('th', { scope: 'row', title: `true ${res.classes[t]}` }, res.classes[t]),
    ...row.map((v, p) => {
      const title = `true ${res.classes[t]}, predicted ${res.classes[p]}: ${v} (${fmtPercent(rows[t] ? v / rows[t] : 0, 1)} of the row)`;
      const attrs = { style: cellStyle(v, rows[t], t === p), title, 'data-true': t, 'data-predicted': p,
        class: `cm-cell${t === p ? ' cm-diag' : ''}` };
      if (t !== p && v > 0) {
        return h('td', attrs, h('button', { type: 'button', class: 'cm-open', onclick: () => onCell(t, p),
          'aria-label': `${title}: show the images` }, String(v)));
      }
      return h('td', attrs, v ? String(v) : '');
    })));
  return h('div', { class: 'cm-wrap' },
    h('table', { class: 'cm', id: 'eval-matrix', style: `--cm-n: ${n}` }, h('thead', {}, head), h('tbody', {}, ...body)));
}

function perClassTable(res) {
  const pct = (x) => fmtPercent(x, 1);
  const rows = res.per_class.map((c) => h('tr', {},
    h('td', {}, c.class), h('td', { class: 'num' }, pct(c.precision)), h('td', { class: 'num' }, pct(c.recall)),
    h('td', { class: 'num' }, pct(c.f1)), h('td', { class: 'num' }, fmtCount(c.support)),
    h('td', { class: 'num' }, fmtCount(c.predicted))));
  const avg = (label, a) => h('tr', { class: 'eval-avg' }, h('td', {}, label), h('td', { class: 'num' }, pct(a.precision)),
    h('td', { class: 'num' }, pct(a.recall)), h('td', { class: 'num' }, pct(a.f1)),
    h('td', { class: 'num' }, fmtCount(res.count)), h('td', {}));
  return h('table', { class: 'table eval-classes', id: 'eval-classes' },
    h('thead', {}, h('tr', {}, h('th', {}, 'class'), h('th', { class: 'num' }, 'precision'), h('th', { class: 'num' }, 'recall'),
      h('th', { class: 'num' }, 'F1'), h('th', { class: 'num' }, 'support'), h('th', { class: 'num' }, 'predicted'))),
    h('tbody', {}, ...rows, avg('macro average', res.macro_avg), avg('weighted average', res.weighted_avg)));
}

/* The misclassified images of one pair (those the result kept). */
function missGallery(res, t, p) {
  const items = res.misclassified.filter((x) => x.true_index === t && x.predicted_index === p);
  const count = res.confusion_matrix[t][p];
  const note = items.length < count
    ? ` (the first ${items.length} of ${count}: an evaluation keeps up to ${res.misclassified_limits.per_pair} a pair)` : '';
  return h('div', { class: 'eval-misses', id: 'eval-misses' },
    h('h3', {}, `True ${res.classes[t]}, predicted ${res.classes[p]}: ${count} image${count === 1 ? '' : 's'}${note}`),
    h('ul', { class: 'eval-miss-list' }, ...items.map((x) => h('li', { class: 'eval-miss' },
      h('a', { href: apiHref(x.url), target: '_blank', rel: 'noopener', title: `image ${x.index} of the ${res.split} split` },
        h('img', { src: apiHref(x.url), alt: `image ${x.index}: true ${x.true_label}, predicted ${x.predicted_label}`, loading: 'lazy' })),
      h('span', {}, `#${x.index}`),
      h('span', { class: 'muted', title: 'predicted class and its probability' }, `as ${x.predicted_label}, ${fmtPercent(x.probability, 0)}`)))));
}

/* One evaluation's result, whole. */
function resultView(ev) {
  const res = ev.result;
  const stat = (label, value) => h('div', { class: 'stat' }, h('dt', {}, label), h('dd', {}, value));
  const misses = h('div', { id: 'eval-misses-box' },
    h('p', { class: 'muted' }, 'Click an orange cell to see the images of that (true, predicted) pair.'));
  const matrix = heatMap(res, (t, p) => {
    for (const td of matrix.querySelectorAll('td.cm-selected')) td.classList.remove('cm-selected');
    const td = matrix.querySelector(`td[data-true="${t}"][data-predicted="${p}"]`);
    if (td) td.classList.add('cm-selected');
    fill(misses, missGallery(res, t, p));
  });
  return h('div', { class: 'eval-result', id: 'eval-result', 'data-evaluation': ev.id },
    h('h3', {}, `Evaluation ${ev.id}: ${res.split} split of dataset ${ev.dataset_id}, epoch ${res.epoch}${res.final ? ' (final)' : ''}`),
    h('dl', { class: 'stats' },
      stat('Images', fmtCount(res.count)), stat('Top-1', fmtPercent(res.top1_accuracy, 2)),
      stat(`Top-${res.top_k}`, fmtPercent(res.top5_accuracy, 2)), stat('Loss', fmtNumber(res.loss, 4)),
      stat('Misclassified', fmtCount(res.misclassified_total))),
    h('div', { class: 'eval-panels' },
      h('div', {}, h('h4', {}, 'Confusion matrix'), matrix),
      h('div', {}, h('h4', {}, 'Per class'), perClassTable(res))),
    misses);
}

/* The card. Its refresh() is called by the job page when the job has
 * (new) weights; job() gives the job's latest representation. */
export function evaluationCard(jobId, job) {
  const dataset = h('select', { id: 'eval-dataset' });
  const split = h('select', { id: 'eval-split' });
  const weights = h('select', { id: 'eval-epoch' }, h('option', { value: '' }, 'final model'));
  const go = h('button', { type: 'button', class: 'btn btn-primary', id: 'eval-start' }, 'Evaluate');
  const error = h('p', { class: 'form-error', role: 'alert', id: 'eval-error', hidden: true });
  const list = h('tbody', {});
  const listTable = h('table', { class: 'table eval-list', id: 'eval-list', hidden: true },
    h('thead', {}, h('tr', {}, h('th', {}, 'id'), h('th', {}, 'dataset / split'), h('th', {}, 'weights'),
      h('th', {}, 'status'), h('th', { class: 'num' }, 'top-1'), h('th', { class: 'num' }, 'top-5'), h('th', {}))),
    list);
  const detail = h('div', { id: 'eval-detail' });
  const card = h('section', { class: 'card', id: 'eval-card', 'aria-labelledby': 'eval-title', hidden: true },
    h('div', { class: 'card-head' }, h('h2', { id: 'eval-title' }, 'Evaluate')),
    h('div', { class: 'classify-controls eval-controls' },
      h('label', {}, 'Dataset ', dataset), h('label', {}, 'Split ', split), h('label', {}, 'Weights ', weights), go),
    error, listTable, detail);

  let datasets = [];
  let shown = null;           // the evaluation whose result is open
  let timer = null;

  function showError(e) {
    fill(error, e.message);
    error.hidden = false;
  }

  function fillSplits() {
    const ds = datasets.find((d) => String(d.id) === dataset.value);
    const keep = split.value;
    const have = SPLITS.filter((s) => ds && ds.counts && ds.counts[s] > 0);
    fill(split, ...have.map((s) => h('option', { value: s }, `${s} (${fmtCount(ds.counts[s])})`)));
    if (have.includes(keep)) split.value = keep;
  }
  dataset.addEventListener('change', fillSplits);

  async function open(id) {
    try {
      const ev = await get(`/evaluations/${id}`);
      shown = id;
      fill(detail, ev.status === 'done' ? resultView(ev)
        : h('p', { class: ev.error ? 'form-error' : 'muted' }, `Evaluation ${id} ${ev.status}${ev.error ? `: ${ev.error}` : ''}`));
    } catch (e) { showError(e); }
  }

  function row(ev) {
    const r = ev.result;
    const actions = [];
    if (ev.status === 'done') actions.push(h('button', { type: 'button', class: 'btn', onclick: () => open(ev.id) }, 'Show'));
    if (active(ev)) {
      actions.push(h('button', { type: 'button', class: 'btn btn-danger', onclick: async () => {
        try { await post(`/evaluations/${ev.id}/cancel`); await load(); } catch (e) { showError(e); }
      } }, 'Cancel'));
    } else {
      actions.push(h('button', { type: 'button', class: 'btn btn-danger', onclick: async () => {
        try {
          await request('DELETE', `/evaluations/${ev.id}`);
          if (shown === ev.id) { fill(detail); shown = null; }
          await load();
        } catch (e) { showError(e); }
      } }, 'Delete'));
    }
    const status = active(ev)
      ? h('div', { class: 'eval-progress' }, statusBadge(ev.status), progressBar(ev.progress, `evaluation ${ev.id} progress`))
      : h('div', { title: ev.error || '' }, statusBadge(ev.status));
    return h('tr', { 'data-evaluation': ev.id, 'data-status': ev.status },
      h('td', {}, String(ev.id)), h('td', {}, `${ev.dataset_id} / ${ev.split}`),
      h('td', {}, ev.selection === 'final' ? `final (epoch ${ev.epoch ?? '?'})`
        : ev.selection === 'best' ? `best (epoch ${ev.epoch ?? '?'})` : `epoch ${ev.selection}`),
      h('td', {}, status),
      h('td', { class: 'num' }, r ? fmtPercent(r.top1_accuracy, 2) : ''),
      h('td', { class: 'num' }, r ? fmtPercent(r.top5_accuracy, 2) : ''),
      h('td', { class: 'eval-actions' }, ...actions));
  }

  async function load() {
    clearTimeout(timer);
    const body = await get(`/jobs/${jobId}/evaluations`);
    listTable.hidden = body.items.length === 0;
    fill(list, ...body.items.map(row));
    const wasShown = body.items.find((e) => e.id === shown);
    if (body.items.some(active)) timer = setTimeout(() => load().catch(showError), POLL_MS);
    // an evaluation that was running when opened: show its result once done
    if (wasShown && wasShown.status === 'done' && !detail.querySelector('#eval-result')) open(shown);
    return body.items;
  }

  go.addEventListener('click', async () => {
    error.hidden = true;
    go.disabled = true;
    try {
      const body = { dataset_id: Number(dataset.value), split: split.value };
      if (weights.value) body.epoch = /^\d+$/.test(weights.value) ? Number(weights.value) : weights.value;
      const ev = await post(`/jobs/${jobId}/evaluations`, body);
      shown = ev.id;
      fill(detail, h('p', { class: 'muted' }, `Evaluation ${ev.id} ${ev.status}…`));
      await load();
    } catch (e) {
      showError(e);
    } finally {
      go.disabled = false;
    }
  });

  card.refresh = async () => {
    card.hidden = false;
    try {
      const j = job();
      const all = (await get('/datasets')).items.filter((d) => d.status === 'ready');
      datasets = all;
      const keep = dataset.value || String(j ? j.dataset_id : '');
      fill(dataset, ...all.map((d) => h('option', { value: String(d.id) }, `${d.name} (#${d.id})`)));
      if ([...dataset.options].some((o) => o.value === keep)) dataset.value = keep;
      fillSplits();
      const opts = [h('option', { value: '' }, 'final model'), h('option', { value: 'best' }, 'best snapshot')];
      try {
        const snaps = await get(`/jobs/${jobId}/snapshots`);
        for (const s of snaps.items) opts.push(h('option', { value: String(s.epoch) }, `epoch ${s.epoch}${s.best ? ' (best)' : ''}`));
      } catch { /* no snapshot list: the final model and "best" stay */ }
      const w = weights.value;
      fill(weights, ...opts);
      if ([...weights.options].some((o) => o.value === w)) weights.value = w;
      const items = await load();
      if (shown === null) {
        const done = items.find((e) => e.status === 'done');
        if (done) await open(done.id);
      }
    } catch (e) {
      showError(e);
    }
  };
  card.stop = () => clearTimeout(timer);
  return card;
}
