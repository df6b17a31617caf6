// The job page's "Classify" box: drop or pick images, send them to
// POST /api/v1/jobs/ID/infer (the same request curl makes), and show each
// image's thumbnail with its top-k labels as bars. Bad images show their
// error in place of the bars; the request's own error shows above.

import { API, ApiError } from './api.js';
import { h, fill, fmtPercent } from './ui.js';

const MAX_FILES = 64;          // one request from the box; the API takes more (archives)

/* POST .../infer with the files as `image` fields. Resolves to the body, also
 * for a 422 (no image could be classified: its items say why). */
export async function classify(jobId, files, { topK = '', epoch = '' } = {}) {
  const form = new FormData();
  for (const f of files) form.append('image', f, f.name);
  if (topK) form.append('top_k', String(topK));   // else the server's default (5, or the class count)
  if (epoch) form.append('epoch', String(epoch));
  let res;
  try {
    res = await fetch(`${API}/jobs/${jobId}/infer`, { method: 'POST', body: form, headers: { accept: 'application/json' } });
  } catch (e) {
    throw new ApiError(0, 'network_error', `The server did not answer (${e.message}).`);
  }
  let body = null;
  try { body = await res.json(); } catch { body = null; }
  if (res.ok || (res.status === 422 && body && Array.isArray(body.items))) return body;
  const err = body && body.error;
  throw new ApiError(res.status, (err && err.code) || 'http_error', (err && err.message) || `${res.status} ${res.statusText}`);
}

/* One image's result: thumbnail, name, and a bar per prediction. */
function resultRow(file, item) {
  const url = URL.createObjectURL(file);
  const img = h('img', { class: 'classify-thumb', src: url, alt: file.name });
  img.addEventListener('load', () => URL.revokeObjectURL(url), { once: true });
  // a file the browser cannot show either: a plain placeholder, not the broken-image icon
  img.addEventListener('error', () => {
    URL.revokeObjectURL(url);
    img.replaceWith(h('span', { class: 'classify-thumb classify-nothumb', title: 'the browser cannot show this file' }, '?'));
  }, { once: true });
  let body;
  if (!item || item.error) {
    const why = item && item.error && (item.error.message || item.error.code);
    body = h('p', { class: 'form-error' }, why || 'no answer for this image');
  } else {
    body = h('ol', { class: 'classify-bars' }, ...item.predictions.map((p, i) =>
      h('li', { class: i === 0 ? 'top' : '' },
        h('span', { class: 'classify-label', title: `class index ${p.index}` }, p.label),
        h('span', { class: 'classify-bar', role: 'meter', 'aria-valuemin': '0', 'aria-valuemax': '1',
          'aria-valuenow': String(p.probability), 'aria-label': `${p.label} probability` },
          h('span', { class: 'classify-fill', style: `width: ${(100 * p.probability).toFixed(1)}%` })),
        h('span', { class: 'classify-prob' }, fmtPercent(p.probability, 1)))));
  }
  return h('li', { class: 'classify-item' }, img,
    h('div', {}, h('div', { class: 'classify-name' }, file.name), body));
}

/* The card. epochOptions() resolves to [{value, label}] of the snapshots
 * that can be chosen (the final model is always first). */
export function classifyCard(jobId, epochOptions) {
  const input = h('input', { type: 'file', id: 'classify-input', accept: 'image/png,image/jpeg', multiple: true, class: 'visually-hidden' });
  const drop = h('label', { class: 'dropzone', for: 'classify-input', id: 'classify-drop', tabindex: '0' },
    h('strong', {}, 'Drop images here'), ' or click to pick PNG or JPEG files');
  const topK = h('input', { type: 'number', id: 'classify-topk', min: '1', placeholder: '5', class: 'input-narrow',
    title: 'how many of the likeliest classes to show (default 5, or every class when there are fewer)' });
  const epoch = h('select', { id: 'classify-epoch' }, h('option', { value: '' }, 'final model'));
  const status = h('p', { class: 'muted', id: 'classify-status', 'aria-live': 'polite' });
  const error = h('p', { class: 'form-error', role: 'alert', id: 'classify-error', hidden: true });
  const results = h('ul', { class: 'classify-results', id: 'classify-results' });
  const card = h('section', { class: 'card', id: 'classify-card', 'aria-labelledby': 'classify-title', hidden: true },
    h('div', { class: 'card-head' }, h('h2', { id: 'classify-title' }, 'Classify')),
    h('div', { class: 'classify-controls' },
      h('label', {}, 'Top ', topK), h('label', {}, 'Weights ', epoch)),
    drop, input, error, status, results);

  async function run(fileList) {
    const files = [...fileList].slice(0, MAX_FILES);
    if (!files.length) return;
    error.hidden = true;
    fill(status, `Classifying ${files.length} image${files.length === 1 ? '' : 's'}…`);
    try {
      const t0 = performance.now();
      const body = await classify(jobId, files, { topK: topK.value, epoch: epoch.value });
      const ms = performance.now() - t0;
      fill(results, ...files.map((f, i) => resultRow(f, body.items[i])));
      fill(status, `Epoch ${body.epoch}: ${files.length} image${files.length === 1 ? '' : 's'} in ${ms.toFixed(0)} ms` +
        (fileList.length > MAX_FILES ? ` (the first ${MAX_FILES} of ${fileList.length})` : ''));
    } catch (e) {
      fill(status);
      fill(error, e.message);
      error.hidden = false;
    }
  }

  input.addEventListener('change', () => { run(input.files); input.value = ''; });
  for (const ev of ['dragenter', 'dragover']) {
    drop.addEventListener(ev, (e) => { e.preventDefault(); drop.classList.add('drag'); });
  }
  drop.addEventListener('dragleave', () => drop.classList.remove('drag'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('drag');
    run(e.dataTransfer.files);
  });

  /* Called by the job page whenever the job has (new) weights. */
  card.refresh = async () => {
    card.hidden = false;
    try {
      const opts = await epochOptions();
      const keep = epoch.value;
      fill(epoch, h('option', { value: '' }, 'final model'),
        ...opts.map((o) => h('option', { value: String(o.value) }, o.label)));
      if ([...epoch.options].some((o) => o.value === keep)) epoch.value = keep;
    } catch { /* the snapshot list is optional: the final model stays */ }
  };
  return card;
}
