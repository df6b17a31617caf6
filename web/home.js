// The home view (#/): datasets with a form to add one (an upload, or files on
// the server), jobs with a "new job" form.
// Lists refresh every few seconds while the page is open.

import { get, post, request, getSchema, uploadDataset, ApiError } from './api.js';
import { buildJobForm } from './jobform.js';
import { sweepsCard } from './sweep.js';
import { queueCard } from './queue.js';
import { buildJobsTable } from './jobstable.js';
import { hardwareCard } from './hardware.js';
import {
  h, fill, statusBadge, progressBar, fmtPercent, fmtCount, fmtTime, fmtShape, fmtBytes, fmtDuration, limit,
} from './ui.js';

// Browsers do not send `Expect: 100-continue`, so an oversize upload is refused
// here before a byte is sent rather than by the server after all of them.
export const MAX_UPLOAD_BYTES = 2 * 1024 * 1024 * 1024;
const REFRESH_MS = 2000;
const BUILTIN_NETWORKS = [{ name: 'lenet', description: 'LeNet (MNIST-size images)' }];

export function renderHome(root) {
  const state = { datasets: [], networks: BUILTIN_NETWORKS, timer: null, alive: true };

  const datasetsBody = h('tbody');
  const datasetsError = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const jobsTable = buildJobsTable();

  const uploadForm = buildUploadForm(state, refresh);
  const jobForm = buildJobForm(state);
  const sweeps = sweepsCard();          // its own section and refresh (sweep.js)
  const queue = queueCard();            // its own section and refresh (queue.js)
  const hardware = hardwareCard();      // its own section and refresh (hardware.js)
  const newJobCard = h('section', { class: 'card', id: 'newjob-card', 'aria-labelledby': 'newjob-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'newjob-title' }, 'New training job')),
    jobForm.el);

  fill(root,
    // the jobs table takes the whole width (its columns clipped beside the form)
    h('section', { class: 'card', id: 'jobs-card', 'aria-labelledby': 'jobs-title' },
      h('div', { class: 'card-head' },
        h('h2', { id: 'jobs-title' }, 'Jobs'),
        h('div', { class: 'card-head-side' }, jobsTable.summary,
          h('button', { type: 'button', class: 'btn btn-primary', id: 'jobs-new',
            onclick: () => { newJobCard.scrollIntoView({ behavior: 'smooth' }); document.getElementById('job-dataset')?.focus({ preventScroll: true }); } },
          'New job'))),
      jobsTable.el),
    queue.el,
    h('section', { class: 'grid' },
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
      // the two forms in the narrow column, beside the datasets
      h('div', { class: 'stack' },
        newJobCard,
        h('section', { class: 'card', 'aria-labelledby': 'upload-title' },
          h('div', { class: 'card-head' }, h('h2', { id: 'upload-title' }, 'New dataset')),
          uploadForm),
        hardware.el),
      h('div', { class: 'grid-full' }, sweeps.el)));

  async function refresh() {
    if (!state.alive) return;
    const [ds] = await Promise.allSettled([get('/datasets'), jobsTable.refresh()]);
    if (!state.alive) return;
    if (ds.status === 'fulfilled') {
      state.datasets = ds.value.items;
      datasetsError.hidden = true;
      renderDatasets(datasetsBody, state.datasets, refresh);
      jobForm.setDatasets(state.datasets);
      jobsTable.setDatasets(state.datasets);
    } else {
      showError(datasetsError, ds.reason);
    }
  }

  get('/networks').then((r) => {
    const items = (r && r.items) || [];
    if (items.length) { state.networks = items; jobForm.setNetworks(items); }
  }).catch(() => { /* no /networks yet: the built-in list stands */ });

  get('/info').then((info) => {
    if (state.alive) jobForm.setInfo(info);
  }).catch(() => { /* the header says the service is unavailable */ });

  refresh();
  state.timer = setInterval(refresh, REFRESH_MS);
  return () => { state.alive = false; clearInterval(state.timer); sweeps.stop(); queue.stop(); hardware.stop(); };
}

function showError(el, e) {
  el.hidden = false;
  fill(el, e instanceof ApiError ? e.message : String(e));
}

/* "45% · 1 min 20 s left" while a dataset imports (the ETA once the server can estimate it). */
function importText(d) {
  const s = d.eta_seconds;
  const eta = typeof s === 'number' ? ` · ${s < 1 ? 'under a second' : fmtDuration(s)} left` : '';
  return `${fmtPercent(d.progress, 0)}${eta}`;
}

async function cancelImport(d, refresh) {
  if (!window.confirm(`Cancel the import of “${d.name}”? What it has read so far is removed.`)) return;
  try {
    await request('DELETE', `/datasets/${d.id}`);
  } catch (e) {
    window.alert(e.message);
  }
  refresh();
}

function renderDatasets(tbody, items, refresh) {
  if (!items.length) {
    fill(tbody, h('tr', {}, h('td', { colspan: 7, class: 'empty' },
      'No datasets yet. Upload an archive with one folder of images per class, import files on the server, or run ',
      h('code', {}, 'kiln import'), '.')));
    return;
  }
  fill(tbody, items.map((d) => {
    let status = statusBadge(d.status);
    if (d.status === 'importing') {
      status = h('div', { class: 'status-cell' }, statusBadge(d.status),
        progressBar(d.progress, `import of ${d.name}`),
        h('span', { class: 'muted small nowrap import-progress' }, importText(d)),
        h('button', { type: 'button', class: 'link-btn small', title: `cancel the import of ${d.name}`,
          onclick: () => cancelImport(d, refresh) }, 'Cancel'));
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

// The dataset form: a source (an archive to upload, or files on the server the
// operator allowed with --import-root) and the import's options. The option
// fields are built from GET /api/v1/schema's "dataset" table, so every option
// the server takes appears here with its limits and default; left empty, the
// server chooses.
const SOURCES = [
  { value: 'archive', label: 'Upload an archive' },
  { value: 'folder', label: 'A folder on the server', path: 'Folder', hint: 'One folder of PNG or JPEG images per class, or train/, val/ and test/ folders of them.', placeholder: '/data/photos' },
  { value: 'list', label: 'A path-label list on the server', path: 'List file', hint: 'A text file of `path label` lines (DIGITS); paths relative to its folder.', placeholder: '/data/train.txt' },
  { value: 'idx', label: 'MNIST IDX files on the server', path: 'Folder', hint: 'A folder holding the four IDX files, gzipped or not; t10k becomes the test split.', placeholder: '/data/mnist' },
  { value: 'cifar', label: 'CIFAR batches on the server', path: 'Folder or .tar.gz', hint: 'CIFAR-10 or CIFAR-100 binary batches: their folder or the published .tar.gz.', placeholder: '/data/cifar-10-batches-bin' },
];
const OPTION_LABELS = {
  width: 'Width', height: 'Height', channels: 'Channels', val_percent: 'Validation %', test_percent: 'Test %',
  resize: 'Resize', encoding: 'Storage', seed: 'Split seed',
};
const OPTION_PLACEHOLDERS = { width: 'most common', height: 'most common', test_percent: '0' };

/* One option field from its schema entry: a select for a choice (channels'
 * first choice is empty: "as the images"), else a number input with the
 * bounds. Its id is upload-<name with dashes>, its name the option's. */
function optionField(key, f) {
  const id = `upload-${key.replace(/_/g, '-')}`;
  let input;
  if (Array.isArray(f.enum)) {
    input = h('select', { id, name: key });
    if (f.default === null || f.default === undefined) input.append(h('option', { value: '' }, 'as the images'));
    for (const c of f.enum) {
      const text = key === 'channels' ? (c === 1 ? '1 (grey)' : c === 3 ? '3 (colour)' : String(c)) : String(c);
      // the default as the option's selected attribute, so that a form reset returns to it
      input.append(h('option', { value: String(c), selected: String(c) === String(f.default) ? 'selected' : null }, text));
    }
    if (f.description) input.title = f.description;
  } else {
    input = h('input', { id, name: key, type: 'number', step: 1, inputmode: 'numeric', autocomplete: 'off',
      placeholder: OPTION_PLACEHOLDERS[key] || '' });
    limit(input, f);
    if (f.default !== null && f.default !== undefined) input.defaultValue = input.value = String(f.default);
  }
  const label = OPTION_LABELS[key] || key.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());
  return { key, input, type: f.type, el: h('div', { class: 'field' }, h('label', { for: id }, label), input) };
}

/* The options set in the form: {name: value}, numbers as numbers, empty ones left out. */
function optionValues(fields) {
  const out = {};
  for (const f of fields) {
    const v = f.input.value.trim();
    if (v === '') continue;
    out[f.key] = f.type === 'integer' || f.type === 'number' ? Number(v) : v;
  }
  return out;
}

function buildUploadForm(state, refresh) {
  const name = h('input', { id: 'upload-name', name: 'name', required: true, maxlength: 100,
    placeholder: 'digits', autocomplete: 'off', pattern: '[^/\\\\]+' });
  const source = h('select', { id: 'upload-source', name: 'source' },
    SOURCES.map((s) => h('option', { value: s.value }, s.label)));
  const file = h('input', { id: 'upload-file', name: 'archive', type: 'file', required: true,
    accept: '.tar,.tar.gz,.tgz,.tar.bz2,.tar.xz,.tar.zst,.zip,.7z,application/x-tar,application/gzip,application/zip' });
  const fileField = h('div', { class: 'field' }, h('label', { for: 'upload-file' }, 'Archive'), file,
    h('p', { class: 'hint' }, `A .tar (plain or compressed), .zip or .7z with one folder of PNG or JPEG images per class, or train/, val/ and test/ folders of them (up to ${fmtBytes(MAX_UPLOAD_BYTES)}).`));
  const pathInput = h('input', { id: 'upload-path', name: 'path', autocomplete: 'off', spellcheck: 'false' });
  const pathLabel = h('label', { for: 'upload-path' }, 'Path');
  const pathHint = h('p', { class: 'hint', id: 'upload-path-hint' });
  const pathField = h('div', { class: 'field', hidden: true }, pathLabel, pathInput, pathHint);
  const labels = h('input', { id: 'upload-labels', name: 'labels', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'optional: /data/labels.txt' });
  const labelsField = h('div', { class: 'field', hidden: true }, h('label', { for: 'upload-labels' }, 'Class names'), labels,
    h('p', { class: 'hint' }, 'A file naming the classes, one per line in label order; left empty, the labels are the classes.'));
  const serverHint = h('p', { class: 'hint', hidden: true },
    'The server reads only below the folders it was started with (kiln serve --import-root DIR).');

  const bar = progressBar(0, 'upload progress');
  const barText = h('span', { class: 'muted small' });
  const barRow = h('div', { class: 'upload-progress', hidden: true }, bar, barText);
  const error = h('p', { class: 'form-error', role: 'alert', 'aria-live': 'assertive', hidden: true });
  const note = h('p', { class: 'form-note', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Upload');

  // The import's options, built from the server's table (GET /api/v1/schema's "dataset").
  const optionsHint = h('p', { class: 'hint', id: 'upload-options-hint' });
  const options = h('details', { class: 'advanced', id: 'upload-options' },
    h('summary', {}, 'Options'), optionsHint);
  let optionFields = [];
  getSchema().then((s) => {
    const d = (s && s.dataset) || {};
    optionFields = Object.entries(d).map(([key, f]) => optionField(key, f));
    const els = optionFields.map((f) => f.el);
    for (let i = 0; i < els.length; i += 2) options.insertBefore(h('div', { class: 'field-row' }, els.slice(i, i + 2)), optionsHint);
    fill(optionsHint, (d.width && d.width.description) ? `Size ${d.width.description.replace(/^with height; /, '')}. ` +
      'A source with train/, val/ and test/ folders (or IDX t10k files) keeps its own split.' : '');
  }).catch(() => fill(optionsHint, 'The server\'s options could not be read; reload the page to set them. ' +
    'Left as they are, the server chooses.'));

  function showSource() {
    const s = SOURCES.find((x) => x.value === source.value) || SOURCES[0];
    const server = s.value !== 'archive';
    fileField.hidden = server;
    file.required = !server;
    pathField.hidden = !server;
    serverHint.hidden = !server;
    labelsField.hidden = s.value !== 'list';
    name.placeholder = server ? 'the path\'s last part' : 'digits';
    if (server) {
      fill(pathLabel, s.path);
      fill(pathHint, s.hint);
      pathInput.placeholder = s.placeholder;
    }
    fill(button, server ? 'Import' : 'Upload');
  }
  source.addEventListener('change', showSource);
  showSource();

  file.addEventListener('change', () => {
    const f = file.files[0];
    if (f && !name.value) name.value = f.name.replace(/\.(tar\.gz|tgz|tar\.bz2|tar\.xz|tar\.zst|tar|zip|7z)$/i, '');
  });

  const form = h('form', { class: 'form', id: 'upload-form', novalidate: true },
    h('div', { class: 'field' }, h('label', { for: 'upload-source' }, 'Source'), source),
    h('div', { class: 'field' }, h('label', { for: 'upload-name' }, 'Name'), name),
    fileField, pathField, labelsField, serverHint,
    options, barRow, error, note,
    h('div', { class: 'actions' }, button));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    fill(note);
    if (source.value === 'archive') {
      const n = name.value.trim();
      return n ? submitUpload(n) : fail('Give the dataset a name.');
    }
    const p = pathInput.value.trim();
    if (!p) return fail('Give the path on the server.');
    if (!p.startsWith('/')) return fail('Give the path from the root of the server (it starts with /).');
    // left empty, the name is the path's last part (a folder's, or a file's without its extension)
    const n = name.value.trim() || (p.replace(/\/+$/, '').split('/').pop() || '').replace(/\.(tar\.gz|tgz|txt)$/i, '');
    if (!n) return fail('Give the dataset a name.');
    const src = { type: source.value, path: p };
    const l = labels.value.trim();
    if (source.value === 'list' && l) src.labels = l;
    button.disabled = true;
    try {
      const ds = await post('/datasets', { name: n, source: src, ...optionValues(optionFields) });
      fill(note, `Import started. Dataset “${ds.name}” is ${ds.status}.`);
      const kind = source.value;
      form.reset();
      source.value = kind;
      showSource();
      refresh();
    } catch (e) {
      fail(e.message);
    } finally {
      button.disabled = false;
    }
    return undefined;
  });

  async function submitUpload(n) {
    const f = file.files[0];
    if (!f) return fail('Choose an archive to upload.');
    if (f.size === 0) return fail(`${f.name} is empty.`);
    if (f.size > MAX_UPLOAD_BYTES) {
      return fail(`${f.name} is ${fmtBytes(f.size)}; the largest upload is ${fmtBytes(MAX_UPLOAD_BYTES)}. ` +
        'Import larger datasets from the server: a folder below kiln serve --import-root, or kiln import.');
    }
    button.disabled = true;
    barRow.hidden = false;
    try {
      const ds = await uploadDataset(n, f, (frac) => {
        setBar(frac);
        fill(barText, `${fmtPercent(frac, 0)} of ${fmtBytes(f.size)}`);
      }, optionValues(optionFields));
      fill(note, `Uploaded. Dataset “${ds.name}” is ${ds.status}.`);
      form.reset();
      showSource();
      refresh();
    } catch (e) {
      fail(e.message);
    } finally {
      button.disabled = false;
      barRow.hidden = true;
      setBar(0);
    }
    return undefined;
  }

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
