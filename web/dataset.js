// The dataset view (#/datasets/ID): what GET /api/v1/datasets/{id} says of one
// dataset: its status, shape and counts, and an archive's import report
// (images read and left out, the first problems by path and reason, how the
// shape was chosen, the images per class of each split). Samples and the mean
// image are later work (issue 13).

import { get } from './api.js';
import { h, fill, statusBadge, fmtCount, fmtShape, fmtTime, fmtPercent } from './ui.js';

const SPLITS = ['train', 'val', 'test'];

export function renderDataset(root, id) {
  let alive = true;
  let timer = null;
  const title = h('h1', { class: 'page-title' }, `Dataset ${id}`);
  const badge = h('span', { id: 'dataset-status', 'aria-live': 'polite' });
  const subtitle = h('p', { class: 'muted', id: 'dataset-subtitle' });
  const errorBox = h('div', { class: 'error-box', role: 'alert', id: 'dataset-error', hidden: true });
  const facts = h('dl', { class: 'config', id: 'dataset-facts' });
  const report = h('div', { id: 'dataset-report' });
  const classes = h('div', { id: 'dataset-classes' });

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ', `Dataset ${id}`),
    h('div', { class: 'page-head' }, h('div', {}, h('div', { class: 'title-row' }, title, badge), subtitle)),
    errorBox,
    h('section', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'facts-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'facts-title' }, 'Dataset')), facts),
      h('section', { class: 'card', 'aria-labelledby': 'report-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'report-title' }, 'Import report')), report)),
    h('section', { class: 'card', 'aria-labelledby': 'classes-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'classes-title' }, 'Images per class')), classes));

  async function load() {
    try {
      const d = await get(`/datasets/${id}`);
      if (!alive) return;
      show(d);
      if (d.status === 'importing') timer = setTimeout(load, 1000);
    } catch (e) {
      if (!alive) return;
      errorBox.hidden = false;
      fill(errorBox, e.message);
    }
  }

  function show(d) {
    fill(title, d.name);
    fill(badge, statusBadge(d.status));
    root.dataset.status = d.status;
    fill(subtitle, `Dataset #${d.id} · created `, fmtTime(d.created_at));
    const row = (k, v) => [h('dt', {}, k), h('dd', {}, v)];
    const c = d.counts || {};
    fill(facts,
      ...row('Status', d.status === 'importing' ? `importing, ${fmtPercent(d.progress, 0)}` : d.status),
      ...row('Shape', d.shape ? fmtShape(d.shape) : '—'),
      ...row('Classes', String((d.classes || []).length)),
      ...row('Train', fmtCount(c.train || 0)),
      ...row('Val', fmtCount(c.val || 0)),
      ...(c.test ? row('Test', fmtCount(c.test)) : []),
      ...(d.error ? row('Error', d.error) : []));
    showReport(d.report);
    showClasses(d);
  }

  function showReport(r) {
    if (!r) {
      fill(report, h('p', { class: 'muted' }, 'No import report: the dataset was not imported from an archive, or before reports existed.'));
      return;
    }
    const kv = (k, v, cls) => h('div', { class: `kv ${cls || ''}` }, h('span', { class: 'muted' }, k), ' ', h('strong', {}, v));
    fill(report,
      h('div', { class: 'kvs', id: 'report-counts' },
        kv('images read', fmtCount(r.images)), kv('unreadable', fmtCount(r.unreadable), r.unreadable ? 'warn' : ''),
        kv('skipped', fmtCount(r.skipped)), kv('outside a class folder', fmtCount(r.outside_classes))),
      r.shape_chosen ? h('p', { class: 'hint', id: 'report-shape' }, `Shape: ${r.shape_chosen}.`) : null,
      r.problems && r.problems.length
        ? h('table', { class: 'table', id: 'report-problems' },
          h('thead', {}, h('tr', {}, h('th', {}, 'File'), h('th', {}, 'What'), h('th', {}, 'Why'))),
          h('tbody', {}, r.problems.map((p) => h('tr', {}, h('td', { class: 'mono' }, p.path), h('td', {}, p.what), h('td', {}, p.why)))))
        : h('p', { class: 'muted', id: 'report-problems' }, 'No problems: every file was read.'));
  }

  /* Per class, its images in each split, with a bar against the largest class. */
  function showClasses(d) {
    const names = d.classes || [];
    const per = (d.report && d.report.per_class) || null;
    if (!names.length) { fill(classes, h('p', { class: 'muted' }, 'No classes yet.')); return; }
    if (!per) { fill(classes, h('p', { class: 'muted' }, names.join(', '))); return; }
    const splits = SPLITS.filter((s) => per[s] && Object.values(per[s]).some((n) => n > 0));
    const total = (k) => splits.reduce((a, s) => a + (per[s][k] || 0), 0);
    const most = Math.max(1, ...names.map(total));
    fill(classes, h('table', { class: 'table', id: 'class-histogram' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Class'), ...splits.map((s) => h('th', { class: 'num' }, s)), h('th', {}, ''))),
      h('tbody', {}, names.map((k) => h('tr', { 'data-class': k },
        h('td', {}, k),
        ...splits.map((s) => h('td', { class: 'num' }, fmtCount(per[s][k] || 0))),
        h('td', { class: 'bar-cell' }, h('span', { class: 'hbar', style: `width: ${(100 * total(k) / most).toFixed(1)}%` })))))));
  }

  load();
  return () => { alive = false; if (timer) clearTimeout(timer); };
}
