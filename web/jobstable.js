// The dashboard's jobs table (issue 16): a page of GET /api/v1/jobs at a time,
// with sortable column headers, filters (status, dataset, network, precision,
// a tag chip), a debounced search box, Previous/Next paging through the API's
// next_cursor, tags as chips, and row checkboxes whose selection "Compare (n)"
// opens as #/compare?runs=1,2,3.
//
// The page re-reads its current page every refresh (the same cursor), so rows
// keep their place while jobs run; a new sort, filter or search goes back to
// the first page. The selection survives paging and refreshes.

import { get, ApiError } from './api.js';
import { h, fill, statusBadge, progressBar, fmtPercent, fmtCount, fmtTime } from './ui.js';

const SEARCH_DEBOUNCE_MS = 300;
const STATUS_CHOICES = [
  { value: '', label: 'Any status' },
  { value: 'queued,running', label: 'Active' },
  { value: 'queued', label: 'Queued' }, { value: 'running', label: 'Running' },
  { value: 'done', label: 'Done' }, { value: 'failed', label: 'Failed' }, { value: 'cancelled', label: 'Cancelled' },
];
const PRECISIONS = ['fp32', 'amp-bf16', 'amp-fp16'];
// The columns: a sort key where the API sorts by it (GET /api/v1/schema jobs_list.sort).
const COLUMNS = [
  { label: 'Job', sort: 'name' },
  { label: 'Network', sort: 'network' },
  { label: 'Dataset', sort: 'dataset' },
  { label: 'Precision' },
  { label: 'Status', sort: 'status' },
  { label: 'Progress', sort: 'progress', class: 'col-progress' },
  { label: 'Epochs', sort: 'epochs', class: 'num' },
  { label: 'Val accuracy', class: 'num' },
  { label: 'Created', sort: 'created', class: 'col-created' },
];

/* A job's display name: its name, else "#id network". */
export function jobDisplayName(j) {
  return j.name ? j.name : `#${j.id} ${j.network || ''}`.trim();
}

/* buildJobsTable() -> {el, summary, refresh(datasets), setDatasets(datasets)} */
export function buildJobsTable() {
  const st = {
    sort: 'created', order: 'desc', status: '', dataset: '', network: '', precision: '', tag: '', q: '',
    cursors: [null],          // cursors[k]: the cursor of page k (null: the first)
    page: 0, next: null, total: 0, items: [], selected: new Set(), busy: false, again: false, datasets: [],
  };

  const summary = h('span', { class: 'muted', id: 'jobs-summary' });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const tbody = h('tbody');
  const search = h('input', { type: 'search', id: 'jobs-search', placeholder: 'Search name, network, notes, tags or #id',
    'aria-label': 'search jobs', autocomplete: 'off', spellcheck: 'false' });
  const statusSel = h('select', { id: 'jobs-filter-status', 'aria-label': 'filter by status' },
    STATUS_CHOICES.map((c) => h('option', { value: c.value }, c.label)));
  const datasetSel = h('select', { id: 'jobs-filter-dataset', 'aria-label': 'filter by dataset' },
    h('option', { value: '' }, 'Any dataset'));
  const networkIn = h('input', { id: 'jobs-filter-network', 'aria-label': 'filter by network (exact name)',
    placeholder: 'Any network', list: 'jobs-networks', autocomplete: 'off', spellcheck: 'false' });
  const networkList = h('datalist', { id: 'jobs-networks' });
  const precisionSel = h('select', { id: 'jobs-filter-precision', 'aria-label': 'filter by precision' },
    h('option', { value: '' }, 'Any precision'), PRECISIONS.map((p) => h('option', { value: p }, p)));
  const tagPill = h('button', { type: 'button', class: 'tag-chip tag-filter', id: 'jobs-filter-tag', hidden: true,
    title: 'stop filtering by this tag' });
  const compareBtn = h('button', { type: 'button', class: 'btn', id: 'jobs-compare', disabled: true,
    title: 'select two or more jobs to compare their curves and settings' }, 'Compare (0)');
  const clearSel = h('button', { type: 'button', class: 'link-btn small', id: 'jobs-clear-selection', hidden: true },
    'clear selection');
  const prevBtn = h('button', { type: 'button', class: 'btn', id: 'jobs-prev', disabled: true }, '‹ Previous');
  const nextBtn = h('button', { type: 'button', class: 'btn', id: 'jobs-next', disabled: true }, 'Next ›');
  const pageText = h('span', { class: 'muted small', id: 'jobs-page' });
  const allBox = h('input', { type: 'checkbox', id: 'jobs-select-page', 'aria-label': 'select the jobs on this page' });

  const heads = COLUMNS.map((c) => {
    const th = h('th', { scope: 'col', class: c.class || null });
    if (c.sort) {
      th.dataset.sort = c.sort;
      th.append(h('button', { type: 'button', class: 'sort-btn', onclick: () => sortBy(c.sort) }, c.label,
        h('span', { class: 'sort-mark', 'aria-hidden': 'true' })));
    } else {
      th.append(c.label);
    }
    return th;
  });

  const el = h('div', { class: 'jobs-table' },
    h('div', { class: 'jobs-filters' }, search, statusSel, datasetSel, networkIn, networkList, precisionSel, tagPill),
    error,
    h('div', { class: 'table-wrap' },
      h('table', { class: 'table', id: 'jobs-table' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col', class: 'col-check' }, allBox), heads)),
        tbody)),
    h('div', { class: 'jobs-foot' },
      h('div', { class: 'jobs-select' }, compareBtn, clearSel),
      h('div', { class: 'jobs-pager' }, pageText, prevBtn, nextBtn)));

  // ---- the query ----------------------------------------------------------------

  function query() {
    const p = new URLSearchParams();
    for (const k of ['status', 'dataset', 'network', 'precision', 'tag', 'q']) if (st[k]) p.set(k, st[k]);
    p.set('sort', st.sort);
    p.set('order', st.order);
    const cur = st.cursors[st.page];
    if (cur) p.set('cursor', cur);
    return `/jobs?${p}`;
  }

  /* Reads the current page; one request at a time, the latest state wins. */
  async function load() {
    if (st.busy) { st.again = true; return; }
    st.busy = true;
    try {
      do {
        st.again = false;
        const want = query();
        try {
          const r = await get(want);
          if (st.again || want !== query()) continue;     // the state changed meanwhile: ask again
          st.items = r.items;
          st.next = r.next_cursor;
          st.total = typeof r.total === 'number' ? r.total : r.items.length;
          error.hidden = true;
          render();
        } catch (e) {
          // a cursor the server no longer takes: start again from the first page
          if (e instanceof ApiError && e.status === 400 && st.page > 0) { resetPaging(); st.again = true; continue; }
          error.hidden = false;
          fill(error, e instanceof ApiError ? e.message : String(e));
        }
      } while (st.again);
    } finally {
      st.busy = false;
    }
  }

  function resetPaging() {
    st.cursors = [null];
    st.page = 0;
  }

  function changed() {
    resetPaging();
    load();
  }

  function sortBy(key) {
    if (st.sort === key) st.order = st.order === 'asc' ? 'desc' : 'asc';
    else { st.sort = key; st.order = key === 'created' ? 'desc' : 'asc'; }
    changed();
  }

  function setTag(tag) {
    st.tag = tag;
    changed();
  }

  let searchTimer = null;
  search.addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      const q = search.value.trim();
      if (q !== st.q) { st.q = q; changed(); }
    }, SEARCH_DEBOUNCE_MS);
  });
  statusSel.addEventListener('change', () => { st.status = statusSel.value; changed(); });
  datasetSel.addEventListener('change', () => { st.dataset = datasetSel.value; changed(); });
  networkIn.addEventListener('change', () => { st.network = networkIn.value.trim(); changed(); });
  precisionSel.addEventListener('change', () => { st.precision = precisionSel.value; changed(); });
  tagPill.addEventListener('click', () => setTag(''));
  prevBtn.addEventListener('click', () => { if (st.page > 0) { st.page--; load(); } });
  nextBtn.addEventListener('click', () => {
    if (!st.next) return;
    st.cursors[st.page + 1] = st.next;
    st.cursors.length = st.page + 2;
    st.page++;
    load();
  });
  compareBtn.addEventListener('click', () => {
    if (st.selected.size < 2) return;
    location.hash = `#/compare?runs=${[...st.selected].sort((a, b) => a - b).join(',')}`;
  });
  clearSel.addEventListener('click', () => { st.selected.clear(); render(); });
  allBox.addEventListener('change', () => {
    for (const j of st.items) {
      if (allBox.checked) st.selected.add(j.id); else st.selected.delete(j.id);
    }
    render();
  });

  // ---- rendering ------------------------------------------------------------------

  function render() {
    for (const th of heads) {
      const key = th.dataset.sort;
      if (!key) continue;
      const on = key === st.sort;
      if (on) th.setAttribute('aria-sort', st.order === 'asc' ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
      fill(th.querySelector('.sort-mark'), on ? (st.order === 'asc' ? ' ▲' : ' ▼') : '');
    }
    tagPill.hidden = !st.tag;
    fill(tagPill, `tag: ${st.tag} ✕`);
    const filtered = ['status', 'dataset', 'network', 'precision', 'tag', 'q'].some((k) => st[k]);
    renderRows(filtered);
    fill(pageText, st.items.length
      ? `page ${st.page + 1} · ${fmtCount(st.items.length)} shown of ${fmtCount(st.total)}${filtered ? ' matching' : ''}`
      : '');
    prevBtn.disabled = st.page === 0;
    nextBtn.disabled = !st.next;
    const n = st.selected.size;
    fill(compareBtn, `Compare (${n})`);
    compareBtn.disabled = n < 2;
    clearSel.hidden = n === 0;
    allBox.checked = st.items.length > 0 && st.items.every((j) => st.selected.has(j.id));
    fill(summary, st.total || filtered ? `${fmtCount(st.total)} job${st.total === 1 ? '' : 's'}${filtered ? ' matching' : ''}` : '');
    const nets = new Set([...networkList.options].map((o) => o.value));
    for (const j of st.items) {
      if (j.network && !nets.has(j.network)) { nets.add(j.network); networkList.append(h('option', { value: j.network })); }
    }
  }

  function renderRows(filtered) {
    if (!st.items.length) {
      fill(tbody, h('tr', {}, h('td', { colspan: COLUMNS.length + 1, class: 'empty' },
        filtered ? 'No jobs match.' : 'No jobs yet. Start one with the form.')));
      return;
    }
    const names = new Map(st.datasets.map((d) => [d.id, d.name]));
    fill(tbody, st.items.map((j) => {
      const acc = j.metrics && j.metrics['val/accuracy'];
      const epochText = j.epochs ? `epoch ${Math.min(j.epoch ?? 0, j.epochs)}/${j.epochs}` : '';
      const box = h('input', { type: 'checkbox', class: 'job-select', 'aria-label': `select job ${j.id}`,
        checked: st.selected.has(j.id) });
      box.addEventListener('change', () => {
        if (box.checked) st.selected.add(j.id); else st.selected.delete(j.id);
        render();
      });
      const tags = Array.isArray(j.tags) ? j.tags : [];
      return h('tr', { 'data-job-id': j.id, class: st.selected.has(j.id) ? 'selected' : null },
        h('td', { class: 'col-check' }, box),
        h('td', { class: 'col-name' },
          h('a', { href: `#/jobs/${j.id}`, class: 'job-link', title: j.notes || null }, jobDisplayName(j)),
          j.name ? h('span', { class: 'muted small id' }, ` #${j.id}`) : null,
          tags.length ? h('div', { class: 'tag-list' }, tags.map((t) => h('button', {
            type: 'button', class: 'tag-chip', title: `show the jobs tagged ${t}`, onclick: () => setTag(t),
          }, t))) : null),
        h('td', { class: 'nowrap' }, j.network || '—'),
        h('td', {}, j.dataset_name || names.get(j.dataset_id) || `#${j.dataset_id}`),
        h('td', { class: 'nowrap small' }, j.precision || '—'),
        h('td', {}, statusBadge(j.status)),
        h('td', { class: 'col-progress' }, h('div', { class: 'progress-cell' },
          progressBar(j.progress, `progress of job ${j.id}`),
          h('span', { class: 'muted small' }, `${fmtPercent(j.progress, 0)} · ${epochText}`))),
        h('td', { class: 'num' }, String(j.epochs ?? '—')),
        h('td', { class: 'num' }, fmtPercent(acc, 2)),
        h('td', { class: 'nowrap col-created' }, fmtTime(j.created_at)));
    }));
  }

  function setDatasets(datasets) {
    st.datasets = datasets;
    const keep = datasetSel.value;
    fill(datasetSel, h('option', { value: '' }, 'Any dataset'),
      datasets.map((d) => h('option', { value: String(d.id) }, `${d.name} (#${d.id})`)));
    datasetSel.value = datasets.some((d) => String(d.id) === keep) ? keep : '';
  }

  return { el, summary, refresh: load, setDatasets };
}
