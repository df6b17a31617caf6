// The "new training job" form of the home view: everything POST /api/v1/jobs
// takes, the common settings in view and the rest under "Advanced", plus the
// model summary of the chosen network for the chosen dataset and batch.
// The request sends only what the user set or what the chosen solver and
// policy need, so that the server's defaults (README) apply otherwise.

import { post, ApiError } from './api.js';
import { h, fill, fmtCount, fmtBytes } from './ui.js';

const CUSTOM = '__custom__';
const EXAMPLE_SPEC = `{
  "layers": [
    {"type": "conv2d", "name": "conv1", "filters": 32, "kernel": 3, "padding": "same"},
    {"type": "relu", "name": "relu1"},
    {"type": "maxpool", "name": "pool1", "kernel": 2, "stride": 2},
    {"type": "flatten", "name": "flatten"},
    {"type": "dense", "name": "fc", "units": "classes"}
  ]
}`;

/* The fields of each learning-rate policy: [key, label, default, attrs]. */
const POLICIES = {
  fixed: [],
  step: [['step_size', 'Step size (steps)', '1000', { min: 1, step: 1 }], ['gamma', 'Gamma', '0.1', {}]],
  multistep: [['milestones', 'Milestones (steps, comma-separated)', '1000, 2000', { type: 'text' }],
    ['gamma', 'Gamma', '0.1', {}]],
  exponential: [['gamma', 'Gamma (per step)', '0.999', {}]],
  polynomial: [['power', 'Power', '1', {}]],
  cosine: [['min_lr', 'Minimum lr', '0', { min: 0 }]],
};

export function buildJobForm(state) {
  const ids = new Set();
  const field = (id, label, control, hint) => {
    ids.add(id);
    return h('div', { class: 'field', id: `${id}-field` }, h('label', { for: id }, label), control,
      hint ? h('p', { class: 'hint' }, hint) : null);
  };
  const number = (id, value, attrs = {}) => h('input', {
    id, type: attrs.type || 'number', value, step: 'any', ...attrs,
  });
  const select = (id, options, value) => {
    const s = h('select', { id }, options.map(([v, text, disabled]) => h('option', { value: v, disabled }, text)));
    if (value !== undefined) s.value = value;
    return s;
  };
  const check = (id, label) => {
    const input = h('input', { id, type: 'checkbox' });
    return { input, el: h('label', { class: 'check', for: id }, input, ` ${label}`) };
  };

  const dataset = h('select', { id: 'job-dataset', name: 'dataset_id', required: true });
  const network = h('select', { id: 'job-network', name: 'network', required: true });
  const spec = h('textarea', { id: 'job-spec', rows: 9, spellcheck: false, class: 'code' }, EXAMPLE_SPEC);
  const specError = h('p', { class: 'form-error', id: 'job-spec-error', hidden: true });
  const specField = h('div', { class: 'field', id: 'job-spec-field', hidden: true },
    h('label', { for: 'job-spec' }, 'Network spec (JSON)'), spec, specError,
    h('p', { class: 'hint' }, 'Layers as in the built-in specs (GET /api/v1/networks lists them); "units": "classes" sizes the last layer.'));
  const summaryButton = h('button', { type: 'button', class: 'btn', id: 'job-summary-button' }, 'Model summary');
  const summaryOut = h('div', { class: 'summary', id: 'job-summary', hidden: true });

  const epochs = number('job-epochs', '2', { min: 1, max: 10000, step: 1 });
  const batch = number('job-batch', '64', { min: 1, max: 4096, step: 1 });
  const precision = select('job-precision', [['fp32', 'FP32'], ['amp-bf16', 'Mixed, bfloat16 (amp-bf16)'],
    ['amp-fp16', 'Mixed, FP16 (amp-fp16)']], 'fp32');

  const solver = select('job-solver', [['sgd', 'SGD'], ['adam', 'Adam'], ['adamw', 'AdamW']], 'sgd');
  const lr = number('job-lr', '0.01', { min: 0 });
  const momentum = number('job-momentum', '0.9', { min: 0, max: 0.999 });
  const nesterov = check('job-nesterov', 'Nesterov momentum');
  const weightDecay = number('job-weight-decay', '0', { min: 0 });
  const beta1 = number('job-beta1', '0.9', { min: 0, max: 0.999 });
  const beta2 = number('job-beta2', '0.999', { min: 0, max: 0.999999 });
  const eps = number('job-eps', '1e-8', { min: 0, type: 'text' });

  const policy = select('job-policy', Object.keys(POLICIES).map((k) => [k, k]), 'fixed');
  const policyFields = h('div', { class: 'field-row', id: 'job-policy-fields' });
  const policyInputs = {};
  const warmup = number('job-warmup', '0', { min: 0 });
  const clipNorm = number('job-clip-norm', '0', { min: 0 });
  const smoothing = number('job-label-smoothing', '0', { min: 0, max: 0.99 });
  const decayBias = check('job-decay-bias', 'Decay biases and batch-norm parameters too');
  const larc = select('job-larc', [['', 'off'], ['clip', 'clip'], ['scale', 'scale']], '');
  const larcEta = number('job-larc-eta', '0.001', { min: 0 });
  const lossScaling = select('job-loss-scaling', [['', 'default'], ['dynamic', 'dynamic'],
    ['off', 'off']], '');
  const seed = number('job-seed', '1', { min: 0, step: 1 });
  const snapshot = number('job-snapshot', '1', { min: 1, step: 1 });
  const name = h('input', { id: 'job-name', type: 'text', maxlength: 200, placeholder: 'optional' });

  const error = h('p', { class: 'form-error', role: 'alert', 'aria-live': 'assertive', hidden: true, id: 'job-error' });
  const button = h('button', { type: 'submit', class: 'btn btn-primary', id: 'job-submit' }, 'Start training');

  const sgdRow = h('div', { class: 'field-row' }, field('job-momentum', 'Momentum', momentum),
    h('div', { class: 'field check-field' }, nesterov.el));
  const adamRow = h('div', { class: 'field-row' }, field('job-beta1', 'Beta 1', beta1),
    field('job-beta2', 'Beta 2', beta2));
  const adamEps = field('job-eps', 'Epsilon', eps);
  const larcField = h('div', { class: 'field-row', id: 'job-larc-row' },
    field('job-larc', 'LARC', larc), field('job-larc-eta', 'LARC eta', larcEta));
  const lossScalingField = field('job-loss-scaling', 'Loss scaling', lossScaling,
    'Default: dynamic for amp-fp16, off otherwise.');

  const el = h('form', { class: 'form', id: 'job-form', novalidate: true },
    field('job-dataset', 'Dataset', dataset),
    field('job-network', 'Network', network),
    specField,
    h('div', { class: 'actions actions-left' }, summaryButton),
    summaryOut,
    h('div', { class: 'field-row' }, field('job-epochs', 'Epochs', epochs), field('job-batch', 'Batch size', batch)),
    field('job-precision', 'Precision', precision),
    h('fieldset', { class: 'fieldset' }, h('legend', {}, 'Solver'),
      h('div', { class: 'field-row' }, field('job-solver', 'Type', solver), field('job-lr', 'Learning rate', lr)),
      sgdRow,
      adamRow,
      h('div', { class: 'field-row' }, field('job-weight-decay', 'Weight decay', weightDecay), adamEps)),
    h('details', { class: 'advanced', id: 'job-advanced' }, h('summary', {}, 'Advanced'),
      h('div', { class: 'field-row' }, field('job-policy', 'Learning-rate policy', policy),
        field('job-warmup', 'Warm-up epochs', warmup)),
      policyFields,
      h('div', { class: 'field-row' }, field('job-clip-norm', 'Clip gradient norm (0: off)', clipNorm),
        field('job-label-smoothing', 'Label smoothing', smoothing)),
      h('div', { class: 'field check-field' }, decayBias.el),
      larcField,
      h('div', { class: 'field-row' }, lossScalingField, field('job-seed', 'Seed', seed)),
      h('div', { class: 'field-row' }, field('job-snapshot', 'Checkpoint every (epochs)', snapshot),
        field('job-name', 'Name', name))),
    error,
    h('div', { class: 'actions' }, button));

  function showSolver() {
    const sgd = solver.value === 'sgd';
    sgdRow.hidden = !sgd;
    adamRow.hidden = sgd;
    adamEps.hidden = sgd;
    larcField.hidden = !sgd;
  }
  function showPolicy() {
    fill(policyFields);
    for (const k of Object.keys(policyInputs)) delete policyInputs[k];
    for (const [key, label, value, attrs] of POLICIES[policy.value]) {
      const input = number(`job-policy-${key}`, value, attrs);
      policyInputs[key] = input;
      policyFields.append(field(`job-policy-${key}`, label, input));
    }
    policyFields.hidden = !POLICIES[policy.value].length;
  }
  function showNetwork() {
    specField.hidden = network.value !== CUSTOM;
  }
  solver.addEventListener('change', () => {
    // a learning rate left at one solver's usual default follows to the other's
    if (solver.value === 'sgd' && lr.value === '0.001') lr.value = '0.01';
    else if (solver.value !== 'sgd' && lr.value === '0.01') lr.value = '0.001';
    showSolver();
  });
  policy.addEventListener('change', showPolicy);
  network.addEventListener('change', () => {
    showNetwork();
    fill(summaryOut);
    summaryOut.hidden = true;
    error.hidden = true;
  });
  showSolver();
  showPolicy();

  /* The network: a name, or the parsed custom spec (an Error when it does not parse). */
  function networkValue() {
    if (network.value !== CUSTOM) return network.value;
    try {
      const v = JSON.parse(spec.value);
      if (!v || typeof v !== 'object' || Array.isArray(v)) return new Error('The spec must be a JSON object with "layers".');
      return v;
    } catch (e) {
      return new Error(`The spec is not valid JSON: ${e.message}`);
    }
  }
  function checkSpec() {
    const v = networkValue();
    specError.hidden = !(v instanceof Error);
    fill(specError, v instanceof Error ? v.message : '');
    return v;
  }
  spec.addEventListener('input', () => {
    error.hidden = true;            // the form's error may have been about the old text
    if (!specError.hidden) checkSpec();
  });

  const num = (input, what) => {
    const v = Number(String(input.value).trim());
    if (String(input.value).trim() === '' || !Number.isFinite(v)) throw new Error(`${what} must be a number.`);
    return v;
  };

  /* The request body from the form; throws an Error naming a bad field. */
  function requestBody() {
    if (!dataset.value) throw new Error('Choose a dataset (one that is ready).');
    const net = checkSpec();
    if (net instanceof Error) throw net;
    const body = {
      dataset_id: Number(dataset.value),
      network: net,
      epochs: num(epochs, 'Epochs'),
      batch_size: num(batch, 'Batch size'),
    };
    if (precision.value !== 'fp32') body.precision = precision.value;
    if (lossScaling.value) body.loss_scaling = lossScaling.value;
    const s = { type: solver.value, lr: num(lr, 'Learning rate') };
    if (s.type === 'sgd') {
      s.momentum = num(momentum, 'Momentum');
      if (nesterov.input.checked) s.nesterov = true;
      if (larc.value) s.larc = { policy: larc.value, eta: num(larcEta, 'LARC eta') };
    } else {
      s.beta1 = num(beta1, 'Beta 1');
      s.beta2 = num(beta2, 'Beta 2');
      s.eps = num(eps, 'Epsilon');
    }
    const wd = num(weightDecay, 'Weight decay');
    if (wd) s.weight_decay = wd;
    if (decayBias.input.checked) s.decay_bias = true;
    const clip = num(clipNorm, 'Clip gradient norm');
    if (clip) s.clip_norm = clip;
    const ls = num(smoothing, 'Label smoothing');
    if (ls) s.label_smoothing = ls;
    body.solver = s;
    const w = num(warmup, 'Warm-up epochs');
    if (policy.value !== 'fixed' || w) {
      const p = { type: policy.value };
      for (const [key, input] of Object.entries(policyInputs)) {
        p[key] = key === 'milestones'
          ? String(input.value).split(',').map((x) => x.trim()).filter(Boolean).map(Number)
          : num(input, key.replace('_', ' '));
      }
      if (p.milestones && p.milestones.some((x) => !Number.isInteger(x))) throw new Error('Milestones must be whole step numbers.');
      if (w) p.warmup_epochs = w;
      body.lr_policy = p;
    }
    const sd = num(seed, 'Seed');
    if (sd !== 1) body.seed = sd;
    const snap = num(snapshot, 'Checkpoint interval');
    if (snap !== 1) body.snapshot_interval = snap;
    if (name.value.trim()) body.name = name.value.trim();
    return body;
  }

  summaryButton.addEventListener('click', async () => {
    summaryOut.hidden = false;
    const net = checkSpec();
    if (net instanceof Error) { fill(summaryOut); summaryOut.hidden = true; return; }
    const ds = state.datasets.find((d) => String(d.id) === dataset.value);
    const q = { network: net, batch_size: Number(batch.value) || 64, solver: solver.value, precision: precision.value };
    if (ds && Array.isArray(ds.shape)) q.input = ds.shape;
    if (ds && ds.classes) q.classes = ds.classes.length;
    fill(summaryOut, h('p', { class: 'muted' }, 'Summarising…'));
    try {
      renderSummary(summaryOut, await post('/networks/summary', q), ds);
    } catch (e) {
      fill(summaryOut, h('p', { class: 'form-error', id: 'job-summary-error' }, e instanceof ApiError ? e.message : String(e)));
    }
  });

  let lastKey = '';
  function setDatasets(items) {
    const ready = items.filter((d) => d.status === 'ready');
    const key = ready.map((d) => `${d.id}:${d.name}`).join('|');
    if (key === lastKey) return;
    lastKey = key;
    const keep = dataset.value;
    fill(dataset, ready.length
      ? ready.map((d) => h('option', { value: String(d.id) },
        `${d.name} (${fmtCount(d.counts && d.counts.train)} train · ${(d.classes || []).length} classes)`))
      : h('option', { value: '' }, 'No ready dataset'));
    if (keep && ready.some((d) => String(d.id) === keep)) dataset.value = keep;
    button.disabled = !ready.length;
  }
  function setNetworks(items) {
    const keep = network.value;
    fill(network, items.map((n) => h('option', { value: n.name }, n.name)),
      h('option', { value: CUSTOM }, 'custom spec…'));
    if (keep && (keep === CUSTOM || items.some((n) => n.name === keep))) network.value = keep;
    showNetwork();
  }
  setNetworks(state.networks);
  setDatasets([]);

  el.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    let body;
    try {
      body = requestBody();
    } catch (e) {
      showError(error, e);
      return;
    }
    button.disabled = true;
    try {
      const job = await post('/jobs', body);
      location.hash = `#/jobs/${job.id}`;
    } catch (e) {
      showError(error, e);
    } finally {
      button.disabled = false;
    }
  });

  return { el, setDatasets, setNetworks, requestBody };
}

function showError(el, e) {
  el.hidden = false;
  fill(el, e instanceof ApiError || e instanceof Error ? e.message : String(e));
}

/* The summary's headline figures, its warnings and a collapsible layer table. */
function renderSummary(el, s, ds) {
  const m = s.training_memory || {};
  const fmtG = (x) => (x >= 1e9 ? `${(x / 1e9).toFixed(2)} G` : x >= 1e6 ? `${(x / 1e6).toFixed(2)} M` : fmtCount(x));
  const devices = (m.devices || []).map((d) => h('li', { class: d.fits ? '' : 'warn' },
    `${d.kind} ${d.index} (${d.name}, ${fmtBytes(d.memory_bytes)}): ${d.fits ? 'fits' : 'does not fit'}, up to batch ${fmtCount(d.max_batch)}`));
  fill(el,
    h('dl', { class: 'summary-figures' },
      h('dt', {}, 'Input'), h('dd', {}, `${(s.input || []).join('×')}, ${s.classes} classes${ds ? ` (${ds.name})` : ''}`),
      h('dt', {}, 'Parameters'), h('dd', { id: 'job-summary-params' }, fmtCount(s.params)),
      h('dt', {}, 'Forward FLOPs'), h('dd', {}, `${fmtG(s.flops)} per image`),
      h('dt', {}, 'Training memory'),
      h('dd', {}, `${fmtBytes(m.total_bytes)} at batch ${m.batch_size}, ${m.precision || 'fp32'} (a lower bound)`)),
    devices.length ? h('ul', { class: 'summary-devices' }, devices) : null,
    (s.warnings || []).length
      ? h('ul', { class: 'summary-warnings' }, s.warnings.map((w) => h('li', {}, w)))
      : null,
    h('details', {}, h('summary', {}, `${s.layers.length} layers`),
      h('div', { class: 'table-wrap' }, h('table', { class: 'table table-compact' },
        h('thead', {}, h('tr', {}, ['Layer', 'Type', 'Output', 'Params', 'FLOPs'].map((t, i) =>
          h('th', { scope: 'col', class: i >= 3 ? 'num' : null }, t)))),
        h('tbody', {}, s.layers.map((l) => h('tr', {},
          h('td', {}, l.name), h('td', {}, l.type), h('td', {}, (l.output_shape || []).join('×')),
          h('td', { class: 'num' }, fmtCount(l.params)), h('td', { class: 'num' }, fmtG(l.flops)))))))));
}
