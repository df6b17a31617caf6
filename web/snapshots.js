// The job page's snapshots card: every saved epoch (GET /jobs/{id}/snapshots)
// with its validation loss and accuracy, the best one (by the job's
// checkpoint_metric) marked, and per epoch a link to the model tarball and
// to its ONNX export. refresh() reloads it and resolves to the list, which
// the page also uses to tell whether the job has a model to download.

import { get, apiHref } from './api.js';
import { h, fill, fmtNumber, fmtPercent } from './ui.js';

export function snapshotsCard(jobId) {
  const note = h('p', { class: 'muted', id: 'snapshots-note' });
  const body = h('tbody', {});
  const table = h('table', { class: 'table', id: 'snapshots-table' },
    h('thead', {}, h('tr', {},
      h('th', { scope: 'col' }, 'Epoch'), h('th', { scope: 'col', class: 'num' }, 'Val loss'),
      h('th', { scope: 'col', class: 'num' }, 'Val accuracy'), h('th', { scope: 'col' }, ''),
      h('th', { scope: 'col' }, 'Download'))),
    body);
  const card = h('section', { class: 'card', id: 'snapshots-card', 'aria-labelledby': 'snapshots-title', hidden: true },
    h('div', { class: 'card-head' }, h('h2', { id: 'snapshots-title' }, 'Snapshots'), note),
    h('div', { class: 'table-wrap' }, table));

  const num = (v, f) => (typeof v === 'number' ? f(v) : '—');
  function row(s) {
    const m = s.metrics || {};
    return h('tr', { class: s.best ? 'snapshot-best' : '', 'data-epoch': String(s.epoch) },
      h('td', {}, String(s.epoch)),
      h('td', { class: 'num' }, num(m['val/loss'], (v) => fmtNumber(v))),
      h('td', { class: 'num' }, num(m['val/accuracy'], (v) => fmtPercent(v, 2))),
      h('td', {}, s.best ? h('span', { class: 'badge badge-best', title: 'the best snapshot' }, 'best') : ''),
      h('td', { class: 'links' },
        h('a', { href: apiHref(s.downloads.tar), download: `kiln-job-${jobId}-epoch-${s.epoch}.tar` }, 'tar'),
        ' · ',
        h('a', { href: apiHref(s.downloads.onnx), download: `kiln-job-${jobId}-epoch-${s.epoch}.onnx` }, 'ONNX')));
  }

  card.refresh = async () => {
    const list = await get(`/jobs/${jobId}/snapshots`);
    const items = list.items || [];
    card.hidden = items.length === 0;
    fill(body, ...items.map(row));
    fill(note, list.best ? `best by ${list.metric}: epoch ${list.best}` : `no ${list.metric} recorded`);
    return list;
  };
  return card;
}
