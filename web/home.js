// The home view (#/): datasets with an upload form, jobs with a "new job" form.
// Lists refresh every few seconds while the page is open.

import { get, getSchema, uploadDataset, ApiError } from './api.js';
import { buildJobForm } from './jobform.js';
import {
  h, fill, statusBadge, progressBar, fmtPercent, fmtCount, fmtTime, fmtShape, fmtBytes, limit,
} from './ui.js';

// Browsers do not send `Expect: 100-continue`, so an oversize upload is refused
// here before a byte is sent rather than by the server after all of them.
export const MAX_UPLOAD_BYTES = 2 * 1024 * 1024 * 1024;
const REFRESH_MS = 2000;
const BUILTIN_NETWORKS = [{ name: 'lenet', description: 'LeNet (MNIST-size images)' }];

export function renderHome(root) {
  const state = { datasets: [], jobs: [], networks: BUILTIN_NETWORKS, timer: null, alive: true };

  const datasetsBody = h('tbody');
  const jobsBody = h('tbody');
  const datasetsError = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const jobsError = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const jobsSummary = h('span', { class: 'muted', id: 'jobs-summary' });

  const uploadForm = buildUploadForm(state, refresh);
  const jobForm = buildJobForm(state);

  fill(root,
    h('section', { class: 'grid' },
      h('section', { class: 'card span-2', 'aria-labelledby': 'jobs-title' },
        h('div', { class: 'card-head' },
          h('h2', { id: 'jobs-title' }, 'Jobs'),
          jobsSummary),
        jobsError,
        h('div', { class: 'table-wrap' },
          h('table', { class: 'table', id: 'jobs-table' },
            h('thead', {}, h('tr', {},
              h('th', { scope: 'col' }, 'Job'), h('th', { scope: 'col' }, 'Network'),
              h('th', { scope: 'col' }, 'Dataset'), h('th', { scope: 'col' }, 'Status'),
              h('th', { scope: 'col', class: 'col-progress' }, 'Progress'),
              h('th', { scope: 'col', class: 'num' }, 'Val accuracy'),
              h('th', { scope: 'col' }, 'Created'))),
            jobsBody))),
      h('section', { class: 'card', 'aria-labelledby': 'newjob-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'newjob-title' }, 'New training job')),
        jobForm.el),
      h('section', { class: 'card span-2', 'aria-labelledby': 'datasets-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'datasets-title' }, 'Datasets')),
        datasetsError,
        h('div', { class: 'table-wrap' },
          h('table', { class: 'table', id: 'datasets-table' },
            h('thead', {}, h('tr', {},
              h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col' }, 'Status'),
              h('th', { scope: 'col', class: 'num' }, 'Classes'), h('th', { scope: 'col', class: 'num' }, 'Train'),
              h('th', { scope: 'col', class: 'num' }, 'Val'), h('th', { scope: 'col' }, 'Shape'),
              h('th', { scope: 'col' }, 'Created'))),
            datasetsBody))),
      h('section', { class: 'card', 'aria-labelledby': 'upload-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'upload-title' }, 'Upload a dataset')),
        uploadForm)));

  async function refresh() {
    if (!state.alive) return;
    const [ds, jobs] = await Promise.allSettled([get('/datasets'), get('/jobs')]);
    if (!state.alive) return;
    if (ds.status === 'fulfilled') {
      state.datasets = ds.value.items;
      datasetsError.hidden = true;
      renderDatasets(datasetsBody, state.datasets);
      jobForm.setDatasets(state.datasets);
    } else {
      showError(datasetsError, ds.reason);
    }
    if (jobs.status === 'fulfilled') {
      state.jobs = jobs.value.items;
      jobsError.hidden = true;
      renderJobs(jobsBody, state.jobs, state.datasets);
      const running = state.jobs.filter((j) => j.status === 'running').length;
      const queued = state.jobs.filter((j) => j.status === 'queued').length;
      fill(jobsSummary, state.jobs.length ? `${running} running · ${queued} queued · ${state.jobs.length} in all` : '');
    } else {
      showError(jobsError, jobs.reason);
    }
  }

  get('/networks').then((r) => {
    const items = (r && r.items) || [];
    if (items.length) { state.networks = items; jobForm.setNetworks(items); }
  }).catch(() => { /* no /networks yet: the built-in list stands */ });

  get('/info').then((info) => {
    if (state.alive) jobForm.setDevices((info && info.devices) || []);
  }).catch(() => { /* the header says the service is unavailable */ });

  refresh();
  state.timer = setInterval(refresh, REFRESH_MS);
  return () => { state.alive = false; clearInterval(state.timer); };
}

function showError(el, e) {
  el.hidden = false;
  fill(el, e instanceof ApiError ? e.message : String(e));
}

function renderDatasets(tbody, items) {
  if (!items.length) {
    fill(tbody, h('tr', {}, h('td', { colspan: 7, class: 'empty' },
      'No datasets yet. Upload an archive with one folder of images per class, or run ',
      h('code', {}, 'kiln import'), '.')));
    return;
  }
  fill(tbody, items.map((d) => {
    let status = statusBadge(d.status);
    if (d.status === 'importing') {
      status = h('div', { class: 'status-cell' }, statusBadge(d.status),
        progressBar(d.progress, `import of ${d.name}`), h('span', { class: 'muted small' }, fmtPercent(d.progress, 0)));
    } else if (d.status === 'failed') {
      status = h('div', { class: 'status-cell' }, statusBadge(d.status), h('span', { class: 'error-text small' }, d.error || ''));
    }
    const classes = Array.isArray(d.classes) ? d.classes : [];
    return h('tr', { 'data-dataset-id': d.id },
      h('td', { class: 'nowrap' }, h('a', { href: `#/datasets/${d.id}`, class: 'dataset-link' }, h('strong', {}, d.name)),
        h('span', { class: 'muted small id' }, ` #${d.id}`)),
      h('td', {}, status),
      h('td', { title: classes.join(', '), class: 'num' }, classes.length ? String(classes.length) : '—'),
      h('td', { class: 'num' }, fmtCount(d.counts && d.counts.train)),
      h('td', { class: 'num' }, fmtCount(d.counts && d.counts.val)),
      h('td', { class: 'nowrap' }, fmtShape(d.shape)),
      h('td', { class: 'nowrap' }, fmtTime(d.created_at)));
  }));
}

function renderJobs(tbody, items, datasets) {
  if (!items.length) {
    fill(tbody, h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No jobs yet. Start one with the form.')));
    return;
  }
  const names = new Map(datasets.map((d) => [d.id, d.name]));
  fill(tbody, items.map((j) => {
    const acc = j.metrics && j.metrics['val/accuracy'];
    const epochText = j.epochs ? `epoch ${Math.min(j.epoch ?? 0, j.epochs)}/${j.epochs}` : '';
    return h('tr', { 'data-job-id': j.id },
      h('td', { class: 'nowrap' }, h('a', { href: `#/jobs/${j.id}`, class: 'job-link' }, `Job ${j.id}`)),
      h('td', {}, j.network || '—'),
      h('td', {}, names.get(j.dataset_id) || `#${j.dataset_id}`),
      h('td', {}, statusBadge(j.status)),
      h('td', { class: 'col-progress' }, h('div', { class: 'progress-cell' },
        progressBar(j.progress, `progress of job ${j.id}`),
        h('span', { class: 'muted small' }, `${fmtPercent(j.progress, 0)} · ${epochText}`))),
      h('td', { class: 'num' }, fmtPercent(acc, 2)),
      h('td', { class: 'nowrap' }, fmtTime(j.created_at)));
  }));
}

function buildUploadForm(state, refresh) {
  const name = h('input', { id: 'upload-name', name: 'name', required: true, maxlength: 100,
    placeholder: 'digits', autocomplete: 'off', pattern: '[^/\\\\]+' });
  const file = h('input', { id: 'upload-file', name: 'archive', type: 'file', required: true,
    accept: '.tar,.tar.gz,.tgz,.zip,application/x-tar,application/gzip,application/zip' });
  const bar = progressBar(0, 'upload progress');
  const barText = h('span', { class: 'muted small' });
  const barRow = h('div', { class: 'upload-progress', hidden: true }, bar, barText);
  const error = h('p', { class: 'form-error', role: 'alert', 'aria-live': 'assertive', hidden: true });
  const note = h('p', { class: 'form-note', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Upload');

  // The import's options, with the limits and defaults of the server's table
  // (GET /api/v1/schema's "dataset"): left empty, the server chooses.
  const opt = (id, attrs) => h('input', { id, type: 'number', step: 1, inputmode: 'numeric',
    autocomplete: 'off', ...attrs });
  const width = opt('upload-width', { placeholder: 'most common' });
  const height = opt('upload-height', { placeholder: 'most common' });
  const valPercent = opt('upload-val-percent', {});
  const channels = h('select', { id: 'upload-channels' }, h('option', { value: '' }, 'as the images'));
  const optionsHint = h('p', { class: 'hint', id: 'upload-options-hint' });
  const options = h('details', { class: 'advanced', id: 'upload-options' },
    h('summary', {}, 'Options'),
    h('div', { class: 'field-row' },
      h('div', { class: 'field' }, h('label', { for: 'upload-width' }, 'Width'), width),
      h('div', { class: 'field' }, h('label', { for: 'upload-height' }, 'Height'), height)),
    h('div', { class: 'field-row' },
      h('div', { class: 'field' }, h('label', { for: 'upload-channels' }, 'Channels'), channels),
      h('div', { class: 'field' }, h('label', { for: 'upload-val-percent' }, 'Validation %'), valPercent)),
    optionsHint);
  getSchema().then((s) => {
    const d = (s && s.dataset) || {};
    for (const [input, key] of [[width, 'width'], [height, 'height'], [valPercent, 'val_percent']]) {
      const f = d[key];
      if (!f) continue;
      limit(input, f);
      if (f.default !== null && f.default !== undefined) input.defaultValue = input.value = String(f.default);
    }
    for (const c of (d.channels && d.channels.enum) || []) {
      channels.append(h('option', { value: String(c) }, c === 1 ? '1 (grey)' : c === 3 ? '3 (colour)' : String(c)));
    }
    fill(optionsHint, (d.width && d.width.description) ? `Size ${d.width.description.replace(/^with height; /, '')}. ` +
      'An archive with train/, val/ and test/ folders keeps its own split.' : '');
  }).catch(() => fill(optionsHint, 'The server\'s limits for these options could not be read; it checks them on upload.'));

  file.addEventListener('change', () => {
    const f = file.files[0];
    if (f && !name.value) name.value = f.name.replace(/\.(tar\.gz|tgz|tar|zip)$/i, '');
  });

  const form = h('form', { class: 'form', id: 'upload-form', novalidate: true },
    h('div', { class: 'field' }, h('label', { for: 'upload-name' }, 'Name'), name),
    h('div', { class: 'field' }, h('label', { for: 'upload-file' }, 'Archive'), file,
      h('p', { class: 'hint' }, `A .tar, .tar.gz or .zip with one folder of PNG or JPEG images per class (up to ${fmtBytes(MAX_UPLOAD_BYTES)}).`)),
    options, barRow, error, note,
    h('div', { class: 'actions' }, button));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    fill(note);
    const f = file.files[0];
    const n = name.value.trim();
    if (!n) return fail('Give the dataset a name.');
    if (!f) return fail('Choose an archive to upload.');
    if (f.size === 0) return fail(`${f.name} is empty.`);
    if (f.size > MAX_UPLOAD_BYTES) {
      return fail(`${f.name} is ${fmtBytes(f.size)}; the largest upload is ${fmtBytes(MAX_UPLOAD_BYTES)}. ` +
        'Import larger datasets on the server with kiln import archive.');
    }
    button.disabled = true;
    barRow.hidden = false;
    try {
      const ds = await uploadDataset(n, f, (frac) => {
        setBar(frac);
        fill(barText, `${fmtPercent(frac, 0)} of ${fmtBytes(f.size)}`);
      }, { width: width.value.trim(), height: height.value.trim(), channels: channels.value,
        val_percent: valPercent.value.trim() });
      fill(note, `Uploaded. Dataset “${ds.name}” is ${ds.status}.`);
      form.reset();
      refresh();
    } catch (e) {
      fail(e.message);
    } finally {
      button.disabled = false;
      barRow.hidden = true;
      setBar(0);
    }
    return undefined;
  });

  function setBar(frac) {
    bar.setAttribute('aria-valuenow', String(Math.round(frac * 100)));
    bar.firstChild.style.width = `${(frac * 100).toFixed(1)}%`;
  }
  function fail(msg) {
    error.hidden = false;
    fill(error, msg);
  }
  return form;
}
