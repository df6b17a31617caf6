// The dataset view (#/datasets/ID): what GET /api/v1/datasets/{id} says of one
// dataset (status, shape, counts, the options it was made with, the import
// report), and once it is ready the explorer: per class a grid of sample
// images of the chosen split (GET .../samples, the PNGs exactly as the loader
// sees them), the images per class of every split as a bar chart and a table,
// and the mean image of the training split (GET .../mean.png).

import { get, API, apiHref } from './api.js';
import { h, fill, statusBadge, fmtCount, fmtShape, fmtTime, fmtPercent } from './ui.js';
import { createBarChart } from './charts.js';

const SPLITS = ['train', 'val', 'test'];
const MEAN_RETRIES = 30;          // GET mean.png answers 503 while another mean is computed

/* Samples per class in the grid: fewer as the classes grow, so a page of 100
 * classes stays a page. */
function perClass(nclasses) {
  if (nclasses <= 10) return 10;
  if (nclasses <= 20) return 8;
  if (nclasses <= 50) return 6;
  return 4;
}

/* Display size of a w x h image: small images scaled up by a whole factor
 * (drawn pixelated), large ones down to about `big` pixels wide. */
function displaySize(w, h, small, big) {
  const f = w >= big ? big / w : Math.max(1, Math.round(small / w));
  return [Math.round(w * f), Math.round(h * f), f > 1];
}

export function renderDataset(root, id) {
  let alive = true;
  let timer = null;
  let explored = false;
  let chart = null;
  const title = h('h1', { class: 'page-title' }, `Dataset ${id}`);
  const badge = h('span', { id: 'dataset-status', 'aria-live': 'polite' });
  const subtitle = h('p', { class: 'muted', id: 'dataset-subtitle' });
  const errorBox = h('div', { class: 'error-box', role: 'alert', id: 'dataset-error', hidden: true });
  const facts = h('dl', { class: 'config', id: 'dataset-facts' });
  const report = h('div', { id: 'dataset-report' });
  const splitChooser = h('div', { class: 'segmented', id: 'samples-split', role: 'group', 'aria-label': 'split' });
  const samples = h('div', { id: 'samples-grid', class: 'samples' }, h('p', { class: 'muted' }, 'Samples show once the dataset is ready.'));
  const chartBox = h('div', { class: 'chart', id: 'class-chart' });
  const classes = h('div', { id: 'dataset-classes' });
  const mean = h('div', { id: 'dataset-mean', class: 'mean' }, h('p', { class: 'muted' }, 'The mean image shows once the dataset is ready.'));

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ', `Dataset ${id}`),
    h('div', { class: 'page-head' }, h('div', {}, h('div', { class: 'title-row' }, title, badge), subtitle)),
    errorBox,
    h('section', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'facts-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'facts-title' }, 'Dataset')), facts),
      h('section', { class: 'card', 'aria-labelledby': 'report-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'report-title' }, 'Import report')), report)),
    h('section', { class: 'card', 'aria-labelledby': 'samples-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'samples-title' }, 'Samples'), splitChooser), samples),
    h('section', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'classes-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'classes-title' }, 'Images per class')), chartBox, classes),
      h('section', { class: 'card', 'aria-labelledby': 'mean-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'mean-title' }, 'Mean image')), mean)));

  async function load() {
    try {
      const d = await get(`/datasets/${id}`);
      if (!alive) return;
      show(d);
      if (d.status === 'importing') timer = setTimeout(load, 1000);
      else if (d.status === 'ready' && !explored) { explored = true; explore(d); }
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
    // The options it was made with, as far as the record holds them.
    const o = d.options || {};
    const opt = (k) => (o[k] !== undefined && o[k] !== null ? o[k] : d[k]);
    const has = (k) => opt(k) !== undefined && opt(k) !== null && opt(k) !== '';
    const meanText = Array.isArray(d.mean) && d.mean.length
      ? d.mean.map((m) => (typeof m === 'number' ? m.toFixed(1) : String(m))).join(', ') : null;
    const source = typeof d.source === 'string' ? d.source : d.source && d.source.type;
    fill(facts,
      ...row('Status', d.status === 'importing' ? `importing, ${fmtPercent(d.progress, 0)}` : d.status),
      ...row('Shape', d.shape ? `${fmtShape(d.shape)} (channels × height × width)` : '—'),
      ...row('Classes', String((d.classes || []).length)),
      ...row('Train', fmtCount(c.train || 0)),
      ...row('Val', fmtCount(c.val || 0)),
      ...(c.test ? row('Test', fmtCount(c.test)) : []),
      ...(source ? row('Source', source) : []),
      ...(has('resize') ? row('Resize', String(opt('resize'))) : []),
      ...(has('encoding') ? row('Encoding', String(opt('encoding'))) : []),
      ...(has('val_percent') ? row('Validation %', String(opt('val_percent'))) : []),
      ...(has('test_percent') ? row('Test %', String(opt('test_percent'))) : []),
      ...(has('seed') ? row('Split seed', String(opt('seed'))) : []),
      ...(meanText ? row('Mean per channel', meanText) : []),
      ...(d.error ? row('Error', d.error) : []));
    showReport(d.report);
    if (d.status !== 'ready') showClassTable(d, null);
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

  /* Per class, its images in each split, with a bar against the largest
   * class. counts: {split: [per class]} from the samples API, or null (then
   * the import report's per_class, when there is one). */
  function showClassTable(d, counts) {
    const names = d.classes || [];
    if (!names.length) { fill(classes, h('p', { class: 'muted' }, 'No classes yet.')); return; }
    let per = null;
    if (counts) {
      per = {};
      for (const [s, arr] of Object.entries(counts)) per[s] = Object.fromEntries(names.map((k, i) => [k, arr[i] || 0]));
    } else if (d.report && d.report.per_class) {
      per = d.report.per_class;
    }
    if (!per) { fill(classes, h('p', { class: 'muted' }, names.join(', '))); return; }
    const splits = SPLITS.filter((s) => per[s] && Object.values(per[s]).some((n) => n > 0));
    const total = (k) => splits.reduce((a, s) => a + (per[s][k] || 0), 0);
    const most = Math.max(1, ...names.map(total));
    const table = h('table', { class: 'table table-compact', id: 'class-histogram' },
      h('thead', {}, h('tr', {}, h('th', {}, 'Class'), ...splits.map((s) => h('th', { class: 'num' }, s)), h('th', {}, ''))),
      h('tbody', {}, names.map((k) => h('tr', { 'data-class': k },
        h('td', {}, k),
        ...splits.map((s) => h('td', { class: 'num' }, fmtCount(per[s][k] || 0))),
        h('td', { class: 'bar-cell' }, h('span', { class: 'hbar', style: `width: ${(100 * total(k) / most).toFixed(1)}%` }))))));
    fill(classes, h('div', { class: 'table-wrap class-table' }, table));
  }

  /* The explorer of a ready dataset: samples of every split that has images
   * (their class_counts draw the chart), the grid of the first, the mean. */
  async function explore(d) {
    const c = d.counts || {};
    const avail = SPLITS.filter((s) => (c[s] || 0) > 0);
    const n = perClass((d.classes || []).length);
    showMean(d);
    if (!avail.length) { fill(samples, h('p', { class: 'muted' }, 'This dataset has no images.')); return; }
    let got;
    try {
      got = await Promise.all(avail.map((s) => get(`/datasets/${id}/samples?split=${s}&n=${n}`)));
    } catch (e) {
      if (!alive) return;
      fill(samples, h('p', { class: 'error-text' }, `The samples could not be read: ${e.message}`));
      showClassTable(d, null);
      return;
    }
    if (!alive) return;
    const bySplit = Object.fromEntries(avail.map((s, i) => [s, got[i]]));
    const counts = Object.fromEntries(avail.map((s) => [s, bySplit[s].class_counts]));
    showClassTable(d, counts);
    drawChart(d, avail, counts);
    let current = avail[0];
    const buttons = avail.map((s) => h('button', {
      type: 'button', class: 'seg', 'data-split': s, 'aria-pressed': String(s === current),
      onclick: () => {
        current = s;
        for (const b of buttons) b.setAttribute('aria-pressed', String(b.dataset.split === s));
        showSamples(bySplit[s]);
      },
    }, `${s} · ${fmtCount(c[s])}`));
    fill(splitChooser, ...buttons);
    showSamples(bySplit[current]);
    root.dataset.explored = 'true';
  }

  /* One row per class: its name and count, then its first images. */
  function showSamples(sm) {
    const [, ih, iw] = sm.shape;
    const [dw, dh, up] = displaySize(iw, ih, 56, 96);
    const byClass = new Map();
    for (const it of sm.items) {
      if (!byClass.has(it.label)) byClass.set(it.label, []);
      byClass.get(it.label).push(it);
    }
    const lazy = sm.classes.length > 30;
    // Classes side by side where their strips leave room (many classes, few samples each).
    const widest = Math.max(1, ...[...byClass.values()].map((l) => l.length));
    samples.style.gridTemplateColumns = `repeat(auto-fill, minmax(${Math.max(180, widest * (dw + 4))}px, 1fr))`;
    fill(samples, sm.classes.map((name, k) => {
      const items = byClass.get(k) || [];
      return h('div', { class: 'sample-class', 'data-class': name, 'data-label': String(k) },
        h('div', { class: 'sample-caption', title: name }, h('strong', {}, name), ' ',
          h('span', { class: 'muted small' }, `${fmtCount(sm.class_counts[k] || 0)} ${sm.split}`)),
        h('div', { class: 'sample-strip' }, items.length
          ? items.map((it) => h('img', {
            class: `sample${up ? ' pixelated' : ''}`, src: apiHref(it.url), width: dw, height: dh, loading: lazy ? 'lazy' : 'eager',
            alt: `${name}, ${sm.split} image ${it.index}`, title: `${name} · ${sm.split} #${it.index}`,
            'data-index': String(it.index),
            onerror: (ev) => ev.target.classList.add('broken'),
          }))
          : h('span', { class: 'muted small' }, `no ${sm.split} images`)));
    }));
    samples.dataset.split = sm.split;
  }

  function drawChart(d, avail, counts) {
    if (chart) chart.destroy();
    fill(chartBox);
    chart = createBarChart(chartBox, {
      name: 'class-histogram', title: 'Images per class',
      categories: d.classes || [],
      series: avail.map((s) => ({ label: s, values: counts[s] })),
    });
  }

  function showMean(d) {
    const [ch, ih, iw] = d.shape || [1, 1, 1];
    const [dw, dh, up] = displaySize(iw, ih, 160, 192);
    const img = h('img', {
      id: 'mean-image', class: up ? 'pixelated' : '', width: dw, height: dh,
      alt: `the mean of the ${fmtCount((d.counts || {}).train || 0)} training images`,
    });
    const note = h('p', { class: 'hint', id: 'mean-note' },
      `Per-pixel mean of the ${fmtCount((d.counts || {}).train || 0)} training images, ${iw}×${ih}, ${ch === 1 ? 'grey' : 'colour'}.`);
    let tries = 0;
    const src = `${API}/datasets/${id}/mean.png`;
    img.addEventListener('error', async () => {
      // 503 while another mean is being computed: ask again; anything else is shown.
      let status = 0;
      try { status = (await fetch(src, { method: 'HEAD' })).status; } catch { status = 0; }
      if (!alive) return;
      if (status === 503 && tries++ < MEAN_RETRIES) { setTimeout(() => { img.src = `${src}?try=${tries}`; }, 1000); return; }
      img.classList.add('broken');
      fill(note, `The mean image could not be made${status ? ` (HTTP ${status})` : ''}.`);
    });
    img.src = src;
    fill(mean, h('div', { class: 'mean-frame' }, img), note);
  }

  load();
  return () => {
    alive = false;
    if (timer) clearTimeout(timer);
    if (chart) chart.destroy();
  };
}
