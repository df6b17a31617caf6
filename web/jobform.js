// The "new training job" form of the home view: everything POST /api/v1/jobs
// takes, the common settings in view and the rest under "Advanced", the model
// summary of the chosen network for the chosen dataset and batch, and a plot
// of the learning-rate schedule before anything trains.
//
// The form keeps no copy of the API's rules. GET /api/v1/schema (the table of
// jobs/jobcfg.c and engine/lr.c's policies), fetched once per page, gives
// each input its initial value (the field's default) and its bounds, each
// list its choices, and says which fields go with which solver and policy.
// Until it has come the form shows that it is loading; if it cannot be had,
// the form shows why and offers to try again, and guesses nothing.
//
// The request holds what the user set and what the chosen solver and policy
// need; a field left at the schema's default is not sent, and a field the
// solver does not take (momentum for adam) never is, so every request the
// form makes is one curl could have made. The form checks that a number is a
// number (a whole one where the schema says integer); whether it is in range
// is the server's to say, by the same rule the schema publishes, and its
// answer marks the field it names.
//
// Where jobs run is GET /api/v1/info's "dispatcher" (setInfo): under slurm a
// job may span nodes, and a CPU job may run several ranks a node, so "Nodes"
// and, with the CPU chosen, "Tasks per node" show (a GPU job runs one rank a
// GPU); under the local dispatcher they do not, and are never sent.

import { post, ApiError, getSchema } from './api.js';
import { h, svg, fill, fmtCount, fmtBytes, rangeText, limit } from './ui.js';

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

/* The form's own suggestions, the only values it starts from that are not the
 * schema's defaults. Each differs from the API's default (or the API has
 * none), so a request the form makes from one says so explicitly. */
const SUGGEST = {
  // The learning rate offered for Adam and AdamW: the usual 1e-3 (PyTorch's
  // default for both). The API's default, 0.01, is one rate for every solver,
  // SGD's; Adam at 0.01 often diverges. It replaces the rate when the solver
  // changes only while the rate is still the previous solver's usual one.
  lr: { adam: 0.001, adamw: 0.001 },
  // A step size and milestones have no API default (they depend on the run's
  // length, and a request must give them): a starting point to edit.
  'step.step_size': '1000',
  'multistep.milestones': '1000, 2000',
  // The API's gamma, 0.1, is one drop of the step policies; the exponential
  // policy applies gamma at every step, where 0.1 takes the rate to a
  // ten-billionth in ten steps.
  'exponential.gamma': '0.999',
};

/* How a choice reads in the form; a choice not listed reads as its name. */
const CHOICE_LABELS = {
  precision: { fp32: 'FP32', 'amp-bf16': 'AMP, bfloat16', 'amp-fp16': 'AMP, FP16' },
  'solver.type': { sgd: 'SGD', adam: 'Adam', adamw: 'AdamW' },
};

/* The learning-rate policies' fields in the order the form shows them
 * ("policy.key" before "key"); a field the schema adds shows after these,
 * under its own name. */
const POLICY_LABELS = {
  step_size: 'Step size (steps)', milestones: 'Milestones (steps)', 'exponential.gamma': 'Gamma (per step)',
  gamma: 'Gamma', power: 'Power', min_lr: 'Final lr',
};

/* GET /api/v1/schema's "job" object (api.js fetches the schema once per page). */
function loadSchema() {
  return getSchema().then((s) => {
    if (!s || typeof s.job !== 'object' || !s.job) throw new Error('GET /api/v1/schema has no "job" object');
    return s.job;
  });
}

/* Whether v is in a schema field's range, inclusive and exclusive bounds as
 * the server applies them (and a whole number where it says integer). */
function inRange(v, r) {
  return Number.isFinite(v) && (r.type !== 'integer' || Number.isInteger(v)) &&
    !(r.minimum !== undefined && v < r.minimum) && !(r.exclusiveMinimum !== undefined && v <= r.exclusiveMinimum) &&
    !(r.maximum !== undefined && v > r.maximum) && !(r.exclusiveMaximum !== undefined && v >= r.exclusiveMaximum);
}

const initialText = (v) => (v === undefined || v === null ? '' : String(v));

/* A bad value in the form: the message and the control to mark. */
class FieldError extends Error {
  constructor(message, input) {
    super(message);
    this.input = input;
  }
}

export function buildJobForm(state) {
  let S = null;                         // the schema's job fields, once loaded
  const rule = (path) => {
    const r = S && S[path];
    if (!r) throw new Error(`GET /api/v1/schema does not describe ${path}`);
    return r;
  };

  // ---- controls -------------------------------------------------------------
  // Values, bounds and choices come from the schema (applySchema).
  const field = (id, label, control, hint) => h('div', { class: 'field', id: `${id}-field` },
    h('label', { for: id }, label), control, hint ? h('p', { class: 'hint' }, hint) : null);
  const number = (id) => h('input', { id, type: 'number', step: 'any', inputmode: 'decimal', autocomplete: 'off' });
  const check = (id, label) => {
    const input = h('input', { id, type: 'checkbox' });
    return { input, el: h('label', { class: 'check', for: id }, input, ` ${label}`) };
  };

  const dataset = h('select', { id: 'job-dataset', name: 'dataset_id', required: true });
  const network = h('select', { id: 'job-network', name: 'network', required: true });
  const summaryButton = h('button', { type: 'button', class: 'btn', id: 'job-summary-button',
    title: 'Parameters, FLOPs and training memory of this network for the chosen dataset and batch' }, 'Summary');
  const networkAbout = h('span', { id: 'job-network-about', class: 'clamp-2' });
  const copyButton = h('button', { type: 'button', class: 'link-btn', id: 'job-network-copy' }, 'edit a copy');
  const networkHint = h('p', { class: 'hint', id: 'job-network-hint' }, networkAbout, ' ', copyButton);
  const spec = h('textarea', { id: 'job-spec', rows: 10, spellcheck: false, class: 'code', wrap: 'off',
    'aria-describedby': 'job-spec-error job-spec-hint' }, EXAMPLE_SPEC);
  const specError = h('p', { class: 'form-error', id: 'job-spec-error', role: 'alert', hidden: true });
  const specField = h('div', { class: 'field', id: 'job-spec-field', hidden: true },
    h('label', { for: 'job-spec' }, 'Network spec (JSON)'), spec, specError,
    h('p', { class: 'hint', id: 'job-spec-hint' }, 'Layers as in DESIGN.md; "units": "classes" sizes the last layer ',
      'for the dataset, and the input shape comes from the dataset.'));
  const summaryOut = h('div', { class: 'summary', id: 'job-summary', hidden: true, 'aria-live': 'polite' });

  const epochs = number('job-epochs');
  const batch = number('job-batch');
  const precision = h('select', { id: 'job-precision',
    title: 'Mixed precision (AMP): convolutions and dense layers in 16 bits, FP32 master weights' });
  const device = h('select', { id: 'job-device' });
  const name = h('input', { id: 'job-name', type: 'text', placeholder: 'optional', autocomplete: 'off' });

  const solver = h('select', { id: 'job-solver' });
  const lr = number('job-lr');
  const momentum = number('job-momentum');
  const weightDecay = number('job-weight-decay');

  const policy = h('select', { id: 'job-policy' });
  const warmup = number('job-warmup');
  const policyFields = h('div', { class: 'field-row', id: 'job-policy-fields' });
  const policyInputs = {};              // key -> input of the shown policy
  const policyValues = {};              // 'policy.key' -> the text last typed, across switches
  const lrPlot = h('div', { class: 'lr-plot', id: 'job-lr-plot', 'aria-hidden': 'true' });
  const lrCaption = h('p', { class: 'hint', id: 'job-lr-caption' });

  const nesterov = check('job-nesterov', 'Nesterov momentum');
  const beta1 = number('job-beta1');
  const beta2 = number('job-beta2');
  // text, as before: epsilon is typed in exponent form (1e-8)
  const eps = h('input', { id: 'job-eps', type: 'text', inputmode: 'decimal', autocomplete: 'off' });
  const decayBias = check('job-decay-bias', 'Decay biases and batch-norm parameters too');
  const clipNorm = number('job-clip-norm');
  const smoothing = number('job-label-smoothing');
  const smoothingHint = h('p', { class: 'hint', id: 'job-label-smoothing-hint' });
  const larc = h('select', { id: 'job-larc' });
  const larcEta = number('job-larc-eta');
  const lossScaling = h('select', { id: 'job-loss-scaling' });
  const lossScalingHint = h('p', { class: 'hint', id: 'job-loss-scaling-hint' });
  const seed = number('job-seed');
  const snapshot = number('job-snapshot');
  const loaderThreads = number('job-loader-threads');
  const priority = number('job-priority');
  const nodes = number('job-nodes');
  const tasksPerNode = number('job-tasks-per-node');

  // Snapshots and early stopping: which snapshot is best, how many to keep,
  // and the "early_stopping" object, sent only when the box is ticked.
  const checkpointMetric = h('select', { id: 'job-checkpoint-metric' });
  const keepCheckpoints = number('job-keep-checkpoints');
  keepCheckpoints.placeholder = 'all';
  const earlyStop = check('job-early-stop', 'Stop early when the metric stops improving');
  const esMetric = h('select', { id: 'job-es-metric' });
  const esPatience = number('job-es-patience');
  const esMinDelta = number('job-es-min-delta');

  // Augmentation: a random crop (the centre one at validation) and mirror, in training only.
  const crop = number('job-crop');
  const pad = number('job-pad');
  const mirror = check('job-mirror', 'Mirror left to right at random');
  const cropHint = h('p', { class: 'hint', id: 'job-crop-hint' });

  /* Each number input and the schema field it shows, for its initial value
   * and bounds; the same paths name the fields in the API's errors. */
  const numberFields = [
    ['epochs', epochs], ['batch_size', batch], ['seed', seed], ['snapshot_interval', snapshot],
    ['solver.lr', lr], ['solver.momentum', momentum], ['solver.weight_decay', weightDecay],
    ['solver.beta1', beta1], ['solver.beta2', beta2], ['solver.eps', eps], ['solver.clip_norm', clipNorm],
    ['solver.label_smoothing', smoothing], ['solver.larc.eta', larcEta], ['lr_policy.warmup_epochs', warmup],
    ['augmentation.crop', crop], ['augmentation.pad', pad], ['loader_threads', loaderThreads],
    ['keep_checkpoints', keepCheckpoints], ['early_stopping.patience', esPatience],
    ['early_stopping.min_delta', esMinDelta], ['priority', priority],
    ['nodes', nodes], ['tasks_per_node', tasksPerNode],
  ];

  const error = h('p', { class: 'form-error', role: 'alert', 'aria-live': 'assertive', hidden: true, id: 'job-error' });
  const button = h('button', { type: 'submit', class: 'btn btn-primary', id: 'job-submit' }, 'Start training');
  const loading = h('p', { class: 'muted', id: 'job-form-loading', role: 'status' }, 'Loading the job settings…');
  const retry = h('button', { type: 'button', class: 'btn', id: 'job-form-retry' }, 'Try again');
  const schemaErrorText = h('span');
  const schemaError = h('div', { class: 'form-error', id: 'job-form-schema-error', role: 'alert', hidden: true },
    h('p', {}, schemaErrorText), retry);

  // ---- layout ---------------------------------------------------------------
  const momentumField = field('job-momentum', 'Momentum', momentum);
  const beta1Field = field('job-beta1', 'Beta 1', beta1);
  const beta2Field = field('job-beta2', 'Beta 2', beta2);
  const adamRow = h('div', { class: 'field-row', id: 'job-adam-row' }, beta1Field, beta2Field);
  const adamEps = h('div', { class: 'field-row', id: 'job-eps-row' },
    field('job-eps', 'Epsilon', eps), h('div'));
  const nesterovField = h('div', { class: 'field check-field', id: 'job-nesterov-field' }, nesterov.el);
  const larcEtaField = field('job-larc-eta', 'LARC eta', larcEta);
  const larcRow = h('div', { class: 'field-row', id: 'job-larc-row' },
    field('job-larc', 'LARC', larc, 'layer-wise adaptive rate control'), larcEtaField);
  const lossScalingField = h('div', { class: 'field', id: 'job-loss-scaling-field' },
    h('label', { for: 'job-loss-scaling' }, 'Loss scaling'), lossScaling, lossScalingHint);
  const esRow = h('div', { class: 'field-row field-row-3', id: 'job-es-row', hidden: true },
    field('job-es-metric', 'Metric', esMetric),
    field('job-es-patience', 'Patience (epochs)', esPatience),
    field('job-es-min-delta', 'Min delta', esMinDelta, 'a smaller change is no improvement'));
  const deviceField = field('job-device', 'Device', device);
  deviceField.hidden = true;          // until GET /info names a GPU
  const tasksField = field('job-tasks-per-node', 'Tasks per node', tasksPerNode, 'CPU ranks on each node');
  const ranksRow = h('div', { class: 'field-row', id: 'job-ranks-row', hidden: true },
    field('job-nodes', 'Nodes', nodes, 'on the Slurm cluster'), tasksField);
  const advancedCount = h('span', { class: 'muted advanced-count', id: 'job-advanced-count' });
  const advanced = h('details', { class: 'advanced', id: 'job-advanced' },
    h('summary', {}, 'Advanced', advancedCount),
    h('p', { class: 'advanced-head' }, 'Optimizer'),
    nesterovField,
    adamRow,
    adamEps,
    h('div', { class: 'field-row' }, field('job-clip-norm', 'Clip gradient norm', clipNorm, '0: off'),
      h('div', { class: 'field', id: 'job-label-smoothing-field' },
        h('label', { for: 'job-label-smoothing' }, 'Label smoothing'), smoothing, smoothingHint)),
    h('div', { class: 'field check-field' }, decayBias.el),
    larcRow,
    lossScalingField,
    h('p', { class: 'advanced-head' }, 'Run'),
    h('div', { class: 'field-row' }, field('job-seed', 'Seed', seed),
      field('job-snapshot', 'Snapshot interval', snapshot, 'epochs between checkpoints')),
    h('div', { class: 'field-row' },
      field('job-loader-threads', 'Loader threads', loaderThreads, 'decoding and augmentation; 0: automatic'),
      field('job-priority', 'Priority', priority, 'in the queue: higher starts first')),
    h('p', { class: 'advanced-head' }, 'Snapshots and early stopping'),
    h('div', { class: 'field-row' },
      field('job-checkpoint-metric', 'Best snapshot by', checkpointMetric),
      field('job-keep-checkpoints', 'Keep snapshots', keepCheckpoints, 'the last N plus the best; empty: all')),
    h('div', { class: 'field check-field', id: 'job-early-stop-field' }, earlyStop.el),
    esRow);

  // The form's body shows once the schema has filled it in.
  const body = h('div', { class: 'form', id: 'job-form-body', hidden: true },
    field('job-dataset', 'Dataset', dataset),
    h('div', { class: 'field', id: 'job-network-field' },
      h('label', { for: 'job-network' }, 'Network'),
      h('div', { class: 'inline-control' }, network, summaryButton),
      networkHint),
    specField,
    summaryOut,
    h('div', { class: 'field-row' }, field('job-epochs', 'Epochs', epochs), field('job-batch', 'Batch size', batch)),
    h('fieldset', { class: 'fieldset' }, h('legend', {}, 'Solver'),
      h('div', { class: 'field-row' }, field('job-solver', 'Type', solver), field('job-lr', 'Learning rate', lr)),
      h('div', { class: 'field-row' }, momentumField, field('job-weight-decay', 'Weight decay', weightDecay))),
    h('fieldset', { class: 'fieldset', id: 'job-augmentation' }, h('legend', {}, 'Augmentation'),
      h('div', { class: 'field-row' },
        h('div', { class: 'field', id: 'job-crop-field' }, h('label', { for: 'job-crop' }, 'Random crop (pixels)'), crop, cropHint),
        field('job-pad', 'Padding (pixels)', pad, 'black border added before the crop; CIFAR: 4')),
      h('div', { class: 'field check-field', id: 'job-mirror-field' }, mirror.el)),
    h('fieldset', { class: 'fieldset' }, h('legend', {}, 'Learning-rate schedule'),
      h('div', { class: 'field-row' }, field('job-policy', 'Policy', policy),
        field('job-warmup', 'Warm-up epochs', warmup)),
      policyFields,
      lrPlot, lrCaption),
    deviceField,
    ranksRow,
    h('div', { class: 'field-row' }, field('job-precision', 'Precision', precision), field('job-name', 'Name', name)),
    advanced,
    error,
    h('div', { class: 'actions' }, button));
  const el = h('form', { class: 'form', id: 'job-form', novalidate: true }, loading, schemaError, body);

  // ---- the schema -----------------------------------------------------------
  /* A select's options: the schema field's choices, after `first` (a choice
   * the API expresses by leaving the field out); starts at the default. */
  function setChoices(select, path, first) {
    const r = rule(path);
    if (!Array.isArray(r.enum) || !r.enum.length) throw new Error(`GET /api/v1/schema lists no choices for ${path}`);
    const labels = CHOICE_LABELS[path] || {};
    fill(select, first || null, r.enum.map((v) => h('option', { value: v }, labels[v] || v)));
    select.value = first ? first.value : r.default;
  }

  /* The fields of learning-rate policy `type`, from the schema: {key, label,
   * type, default, bounds...}, in POLICY_LABELS' order. */
  function policyFieldsOf(type) {
    const order = Object.keys(POLICY_LABELS);
    const rank = (f) => {
      const i = order.findIndex((k) => k === `${type}.${f.key}` || k === f.key);
      return i < 0 ? order.length : i;
    };
    return Object.entries(S)
      .filter(([p, r]) => p.startsWith('lr_policy.') && Array.isArray(r.policies) && r.policies.includes(type))
      .map(([p, r]) => {
        const key = p.slice('lr_policy.'.length);
        return { ...r, key, label: POLICY_LABELS[`${type}.${key}`] || POLICY_LABELS[key] || key };
      })
      .sort((a, b) => rank(a) - rank(b));
  }

  /* Whether a solver field goes with the chosen solver ("solvers" in the schema; absent: all). */
  function applies(path) {
    const s = rule(path).solvers;
    return !Array.isArray(s) || s.includes(solver.value);
  }

  /* The rate the form offers for a solver: SUGGEST's, or the API's default. */
  function usualLr(type) {
    const r = rule('solver.lr');
    const v = SUGGEST.lr[type];
    return v !== undefined && inRange(v, r) ? v : r.default;
  }

  function applySchema(job) {
    S = job;
    for (const [path, input] of numberFields) {
      const r = rule(path);
      limit(input, r);
      input.value = initialText(r.default);
    }
    name.maxLength = rule('name').maxLength;
    setChoices(precision, 'precision');
    setChoices(checkpointMetric, 'checkpoint_metric');
    setChoices(esMetric, 'early_stopping.metric');
    earlyStop.input.checked = false;     // the API's default: no "early_stopping" object
    checkpointMetric.title = rule('checkpoint_metric').description || '';
    keepCheckpoints.title = rule('keep_checkpoints').description || '';
    earlyStop.input.title = rule('early_stopping.patience').description || '';
    setChoices(solver, 'solver.type');
    lr.value = String(usualLr(solver.value));
    setChoices(policy, 'lr_policy.type');
    // LARC: the API's default is no "larc" object; its policy's default applies only inside one.
    setChoices(larc, 'solver.larc.policy', h('option', { value: '' }, 'none'));
    // Loss scaling: the API's default (null) depends on the precision, which its description says.
    const ls = rule('loss_scaling');
    setChoices(lossScaling, 'loss_scaling', h('option', { value: '' }, 'default'));
    fill(lossScalingHint, ls.description || '');
    fill(smoothingHint, `${rangeText(rule('solver.label_smoothing'))}; training loss only`);
    nesterov.input.checked = rule('solver.nesterov').default === true;
    decayBias.input.checked = rule('solver.decay_bias').default === true;
    mirror.input.checked = rule('augmentation.mirror').default === true;
    mirror.input.title = rule('augmentation.mirror').description || '';
    showCrop();
    lastSolver = solver.value;
    for (const k of Object.keys(policyValues)) delete policyValues[k];
    showSolver();
    showLarc();
    showPrecision();
    showPolicy();
    showEarlyStop();
    showRanks();
    // Every initial value, to tell what the user changed (the Advanced count).
    for (const c of el.querySelectorAll('input, select')) {
      c.dataset.initial = c.type === 'checkbox' ? String(c.checked) : c.value;
    }
    countAdvanced();
    lastKey = '';
    setDatasets(pendingDatasets);
  }

  async function load() {
    loading.hidden = false;
    schemaError.hidden = true;
    try {
      applySchema(await loadSchema());
      body.hidden = false;
    } catch (e) {
      S = null;
      body.hidden = true;
      schemaError.hidden = false;
      fill(schemaErrorText, `The job form needs the API's settings and could not load them: ${e.message}`);
    } finally {
      loading.hidden = true;
    }
  }
  let loaded = null;                    // load()'s promise: the schema applied, or its failure shown
  retry.addEventListener('click', () => { loaded = load(); });

  // ---- what shows when ------------------------------------------------------
  function showSolver() {
    momentumField.hidden = !applies('solver.momentum');
    nesterovField.hidden = !applies('solver.nesterov');
    larcRow.hidden = !applies('solver.larc.policy');
    beta1Field.hidden = !applies('solver.beta1');
    beta2Field.hidden = !applies('solver.beta2');
    adamRow.hidden = beta1Field.hidden && beta2Field.hidden;
    adamEps.hidden = !applies('solver.eps');
  }
  function showEarlyStop() {
    esRow.hidden = !earlyStop.input.checked;
  }
  /* Nodes under the Slurm dispatcher; tasks per node with the CPU chosen too. */
  function showRanks() {
    ranksRow.hidden = !cluster;
    tasksField.hidden = !cpuChosen();
  }
  device.addEventListener('change', showRanks);
  earlyStop.input.addEventListener('change', showEarlyStop);
  function showLarc() {
    larcEtaField.hidden = !larc.value;
  }
  function showPrecision() {
    // Loss scaling is for mixed precision: any precision but fp32 (the engine's FP32 path has none).
    lossScalingField.hidden = precision.value === 'fp32';
  }
  function showPolicy() {
    fill(policyFields);
    for (const k of Object.keys(policyInputs)) delete policyInputs[k];
    const fields = policyFieldsOf(policy.value);
    for (const f of fields) {
      const id = `job-policy-${f.key}`;
      const initial = SUGGEST[`${policy.value}.${f.key}`] ?? initialText(f.default);
      let input;
      if (f.type === 'array') {
        input = h('input', { id, type: 'text', placeholder: initial, inputmode: 'numeric', autocomplete: 'off' });
        input.title = 'whole step numbers, increasing, separated by commas';
      } else {
        input = number(id);
        limit(input, f);
      }
      const remembered = policyValues[`${policy.value}.${f.key}`];
      input.value = remembered ?? initial;
      input.dataset.initial = initial;
      input.addEventListener('input', () => { policyValues[`${policy.value}.${f.key}`] = input.value; });
      policyInputs[f.key] = input;
      policyFields.append(field(id, f.label, input));
    }
    policyFields.hidden = !fields.length;
  }
  /* The crop's hint: the chosen dataset's size, which it may not exceed. */
  function showCrop() {
    const ds = currentDataset();
    const shape = ds && Array.isArray(ds.shape) ? ds.shape : null;
    fill(cropHint, shape ? `square, at most ${Math.min(shape[1], shape[2])} (the images are ${shape[2]}×${shape[1]}); `
      + '0: the stored size' : '0: the stored size');
  }
  dataset.addEventListener('change', showCrop);
  function builtin(n) {
    return state.networks.find((x) => x.name === n);
  }
  function showNetwork() {
    const custom = network.value === CUSTOM;
    specField.hidden = !custom;
    const b = builtin(network.value);
    const about = custom ? 'Your own layers, checked by the server before anything is allocated.'
      : (b && (b.description || (b.spec && b.spec.description))) || 'A built-in network.';
    fill(networkAbout, about);
    networkAbout.title = about;
    copyButton.hidden = custom || !(b && b.spec);
  }
  let lastSolver = '';
  solver.addEventListener('change', () => {
    // a learning rate left at one solver's usual value follows to the other's
    if (Number(lr.value) === usualLr(lastSolver)) lr.value = String(usualLr(solver.value));
    lastSolver = solver.value;
    showSolver();
  });
  larc.addEventListener('change', showLarc);
  precision.addEventListener('change', showPrecision);
  policy.addEventListener('change', showPolicy);
  network.addEventListener('change', () => {
    showNetwork();
    if (network.value === CUSTOM) hideSummary();
  });
  copyButton.addEventListener('click', () => {
    const b = builtin(network.value);
    if (!b || !b.spec) return;
    spec.value = specText(b.spec);
    network.value = CUSTOM;
    showNetwork();
    checkSpec();
    hideSummary();
    spec.setSelectionRange(0, 0);
    spec.focus({ preventScroll: true });
    spec.scrollTop = 0;
  });

  function changed(c) {
    return (c.type === 'checkbox' ? String(c.checked) : c.value) !== c.dataset.initial;
  }
  function countAdvanced() {
    // (a field hidden inside Advanced does not count; the form itself may be hidden while it is filled)
    const shown = (c) => { const x = c.closest('[hidden]'); return !x || !advanced.contains(x); };
    const n = [...advanced.querySelectorAll('input, select')].filter((c) => shown(c) && changed(c)).length;
    fill(advancedCount, n ? ` · ${n} changed` : '');
  }

  // ---- reading the form -----------------------------------------------------
  /* The network: a name, or the parsed custom spec (a FieldError when it does not parse). */
  function networkValue() {
    if (network.value !== CUSTOM) return network.value;
    try {
      const v = JSON.parse(spec.value);
      if (!v || typeof v !== 'object' || Array.isArray(v)) {
        return new FieldError('The spec must be a JSON object with "layers".', spec);
      }
      if (!Array.isArray(v.layers)) return new FieldError('The spec needs a "layers" list.', spec);
      return v;
    } catch (e) {
      return new FieldError(`The spec is not valid JSON: ${e.message}`, spec);
    }
  }
  function checkSpec() {
    const v = networkValue();
    const bad = v instanceof Error;
    specError.hidden = !bad;
    fill(specError, bad ? v.message : '');
    if (bad) spec.setAttribute('aria-invalid', 'true');
    else spec.removeAttribute('aria-invalid');
    return v;
  }
  spec.addEventListener('input', () => {
    error.hidden = true;            // the form's error may have been about the old text
    if (!specError.hidden) checkSpec();
    if (!summaryOut.hidden) summaryOut.classList.add('stale');
  });
  spec.addEventListener('change', checkSpec);

  /* A number from an input; undefined when empty and optional. Throws a FieldError. */
  function read(input, what, { int = false, optional = false } = {}) {
    const text = String(input.value).trim();
    if (text === '') {
      if (optional) return undefined;
      throw new FieldError(`${what}: enter a number.`, input);
    }
    const v = Number(text);
    if (!Number.isFinite(v)) throw new FieldError(`${what}: “${text}” is not a number.`, input);
    if (int && !Number.isInteger(v)) throw new FieldError(`${what} must be a whole number.`, input);
    return v;
  }
  /* The number of schema field `path` (a whole one where the schema says integer). */
  function readField(path, input, what, optional = false) {
    return read(input, what, { int: rule(path).type === 'integer', optional });
  }
  /* Sets obj[key] from the input of schema field `path` unless it is empty or the field's default. */
  function optional(obj, key, path, input, what) {
    const v = readField(path, input, what, true);
    if (v !== undefined && v !== rule(path).default) obj[key] = v;
  }
  /* Sets obj[key] from a checkbox unless it is the field's default. */
  function optionalCheck(obj, key, path, box) {
    if (box.checked !== (rule(path).default === true)) obj[key] = box.checked;
  }

  /* The policy with every value (for the plot), and the request's part (only
   * what differs from the API's defaults). Throws a FieldError. */
  function policyValue() {
    const full = { type: policy.value };
    const sent = { type: policy.value };
    for (const f of policyFieldsOf(policy.value)) {
      const input = policyInputs[f.key];
      let v;
      if (f.type === 'array') {
        const parts = String(input.value).split(/[\s,]+/).filter(Boolean);
        if (!parts.length) throw new FieldError(`${f.label}: list the steps, such as 1000, 2000.`, input);
        v = parts.map(Number);
        const bad = parts.find((_, i) => !Number.isFinite(v[i]));
        if (bad !== undefined) throw new FieldError(`${f.label}: “${bad}” is not a number.`, input);
      } else {
        v = read(input, f.label, { int: f.type === 'integer' });
      }
      full[f.key] = v;
      if (f.default === undefined || v !== f.default) sent[f.key] = v;
    }
    const wr = rule('lr_policy.warmup_epochs');
    const w = readField('lr_policy.warmup_epochs', warmup, 'Warm-up epochs', true);
    full.warmup_epochs = w ?? wr.default ?? 0;
    if (w !== undefined && w !== wr.default) sent.warmup_epochs = w;
    const plain = sent.type === rule('lr_policy.type').default && Object.keys(sent).length === 1;
    return { full, sent: plain ? null : sent };
  }

  /* The request body from the form; throws a FieldError naming a bad field. */
  function requestBody() {
    if (!S) throw new FieldError('The form has not loaded the API\'s settings yet.', null);
    if (!dataset.value) throw new FieldError('Choose a dataset (one that is ready).', dataset);
    const net = checkSpec();
    if (net instanceof Error) throw net;
    // The settings on view are always sent, so a request reads whole; the rest only when changed.
    const body = {
      dataset_id: Number(dataset.value),
      network: net,
      epochs: readField('epochs', epochs, 'Epochs'),
      batch_size: readField('batch_size', batch, 'Batch size'),
    };
    // devices: left out, a GPU when there is one; 0 the CPU; N any N GPUs; [i] GPU i.
    if (device.value === 'cpu') body.devices = 0;
    else if (device.value === 'any') body.devices = 1;
    else if (/^n\d+$/.test(device.value)) body.devices = Number(device.value.slice(1));
    else if (/^\d+$/.test(device.value)) body.devices = [Number(device.value)];
    if (precision.value !== rule('precision').default) body.precision = precision.value;
    if (!lossScalingField.hidden && lossScaling.value) body.loss_scaling = lossScaling.value;
    const s = { type: solver.value, lr: readField('solver.lr', lr, 'Learning rate') };
    if (applies('solver.momentum')) optional(s, 'momentum', 'solver.momentum', momentum, 'Momentum');
    if (applies('solver.nesterov')) optionalCheck(s, 'nesterov', 'solver.nesterov', nesterov.input);
    if (applies('solver.beta1')) optional(s, 'beta1', 'solver.beta1', beta1, 'Beta 1');
    if (applies('solver.beta2')) optional(s, 'beta2', 'solver.beta2', beta2, 'Beta 2');
    if (applies('solver.eps')) optional(s, 'eps', 'solver.eps', eps, 'Epsilon');
    optional(s, 'weight_decay', 'solver.weight_decay', weightDecay, 'Weight decay');
    optionalCheck(s, 'decay_bias', 'solver.decay_bias', decayBias.input);
    optional(s, 'clip_norm', 'solver.clip_norm', clipNorm, 'Clip gradient norm');
    optional(s, 'label_smoothing', 'solver.label_smoothing', smoothing, 'Label smoothing');
    if (applies('solver.larc.policy') && larc.value) {
      s.larc = { policy: larc.value };   // the choice that turns LARC on, so always sent
      optional(s.larc, 'eta', 'solver.larc.eta', larcEta, 'LARC eta');
    }
    body.solver = s;
    const p = policyValue().sent;
    if (p) body.lr_policy = p;
    const aug = {};
    optional(aug, 'crop', 'augmentation.crop', crop, 'Random crop');
    optional(aug, 'pad', 'augmentation.pad', pad, 'Padding');
    optionalCheck(aug, 'mirror', 'augmentation.mirror', mirror.input);
    if (Object.keys(aug).length) body.augmentation = aug;
    optional(body, 'seed', 'seed', seed, 'Seed');
    optional(body, 'snapshot_interval', 'snapshot_interval', snapshot, 'Checkpoint interval');
    optional(body, 'loader_threads', 'loader_threads', loaderThreads, 'Loader threads');
    optional(body, 'priority', 'priority', priority, 'Priority');
    if (checkpointMetric.value !== rule('checkpoint_metric').default) body.checkpoint_metric = checkpointMetric.value;
    optional(body, 'keep_checkpoints', 'keep_checkpoints', keepCheckpoints, 'Keep snapshots');
    if (earlyStop.input.checked) {
      const es = {};          // the box is the choice that turns it on, so the object is always sent
      if (esMetric.value !== rule('early_stopping.metric').default) es.metric = esMetric.value;
      optional(es, 'patience', 'early_stopping.patience', esPatience, 'Patience');
      optional(es, 'min_delta', 'early_stopping.min_delta', esMinDelta, 'Min delta');
      body.early_stopping = es;
    }
    if (!ranksRow.hidden) optional(body, 'nodes', 'nodes', nodes, 'Nodes');
    if (!ranksRow.hidden && !tasksField.hidden) optional(body, 'tasks_per_node', 'tasks_per_node', tasksPerNode, 'Tasks per node');
    if (name.value.trim()) body.name = name.value.trim();
    return body;
  }

  // ---- errors next to their fields ------------------------------------------
  /* The control an API error is about: its message starts with the field's
   * path ("solver.momentum must be ..."), or its code names the network. */
  function inputForError(e) {
    const byPath = {
      dataset_id: dataset, network: network.value === CUSTOM ? spec : network, epochs, batch_size: batch,
      precision, loss_scaling: lossScaling, devices: device, seed, snapshot_interval: snapshot, name,
      'solver.type': solver, 'solver.lr': lr, 'solver.momentum': momentum, 'solver.nesterov': nesterov.input,
      'solver.beta1': beta1, 'solver.beta2': beta2, 'solver.eps': eps, 'solver.weight_decay': weightDecay,
      'solver.decay_bias': decayBias.input, 'solver.clip_norm': clipNorm, 'solver.label_smoothing': smoothing,
      'solver.larc': larc, 'solver.larc.policy': larc, 'solver.larc.eta': larcEta,
      'lr_policy.type': policy, 'lr_policy.warmup_epochs': warmup, 'lr_policy': policy,
      augmentation: crop, 'augmentation.crop': crop, 'augmentation.pad': pad, 'augmentation.mirror': mirror.input,
      loader_threads: loaderThreads, checkpoint_metric: checkpointMetric, keep_checkpoints: keepCheckpoints,
      priority, early_stopping: earlyStop.input, 'early_stopping.metric': esMetric, 'early_stopping.patience': esPatience,
      'early_stopping.min_delta': esMinDelta, nodes, tasks_per_node: tasksPerNode,
    };
    for (const [k, input] of Object.entries(policyInputs)) byPath[`lr_policy.${k}`] = input;
    if (/network|dataset_not_found/.test(e.code || '')) return /dataset/.test(e.code) ? dataset : byPath.network;
    if (/^(no_gpu|unknown_device)$/.test(e.code || '')) return device;
    const m = /^([a-z_0-9]+(?:\.[a-z_0-9]+)*)/.exec(e.message || '');
    if (!m) return null;
    const parts = m[1].split('.');
    while (parts.length) {
      const input = byPath[parts.join('.')];
      if (input) return input;
      parts.pop();
    }
    return null;
  }
  function clearMarks() {
    for (const c of el.querySelectorAll('[aria-invalid]')) c.removeAttribute('aria-invalid');
  }
  function showFormError(e) {
    error.hidden = false;
    fill(error, e instanceof Error ? e.message : String(e));
    const input = e instanceof FieldError ? e.input : e instanceof ApiError ? inputForError(e) : null;
    if (input && !input.closest('[hidden]:not(details)')) {
      input.setAttribute('aria-invalid', 'true');
      if (advanced.contains(input)) advanced.open = true;
      input.focus({ preventScroll: true });
      input.scrollIntoView({ block: 'nearest' });
    }
    error.scrollIntoView({ block: 'nearest' });
  }
  el.addEventListener('input', (ev) => {
    if (ev.target.hasAttribute && ev.target.hasAttribute('aria-invalid') && ev.target !== spec) {
      ev.target.removeAttribute('aria-invalid');
    }
  });

  // ---- the model summary ----------------------------------------------------
  let summarySeq = 0;
  function hideSummary() {
    summarySeq++;
    fill(summaryOut);
    summaryOut.hidden = true;
    summaryOut.classList.remove('stale');
  }
  function currentDataset() {
    return state.datasets.find((d) => String(d.id) === dataset.value);
  }
  async function runSummary() {
    const net = checkSpec();
    if (net instanceof Error) { hideSummary(); spec.focus(); return; }
    const ds = currentDataset();
    // A batch out of the API's range (being typed) summarises at the default batch.
    const b = Number(batch.value);
    const br = rule('batch_size');
    const q = { network: net, batch_size: inRange(b, br) ? b : br.default, precision: precision.value };
    const m = Number(momentum.value);
    // The optimizer's state: SGD keeps a momentum buffer unless momentum is 0.
    q.solver = applies('solver.momentum') && String(momentum.value).trim() !== '' && m === 0
      ? { type: solver.value, momentum: 0 } : solver.value;
    // The network's input is the crop when there is one (the server checks it against the images).
    const c = Number(crop.value);
    if (ds && Array.isArray(ds.shape)) q.input = Number.isInteger(c) && c > 0 ? [ds.shape[0], c, c] : ds.shape;
    if (ds && Array.isArray(ds.classes) && ds.classes.length) q.classes = ds.classes.length;
    const seq = ++summarySeq;
    summaryOut.hidden = false;
    summaryOut.classList.add('busy');
    if (!summaryOut.firstChild) fill(summaryOut, h('p', { class: 'muted' }, 'Summarising…'));
    try {
      const s = await post('/networks/summary', q);
      if (seq !== summarySeq) return;
      summaryOut.classList.remove('is-error');
      renderSummary(summaryOut, s, ds);
    } catch (e) {
      if (seq !== summarySeq) return;
      summaryOut.classList.add('is-error');
      fill(summaryOut, h('p', { class: 'form-error', id: 'job-summary-error', role: 'alert' },
        e instanceof ApiError ? e.message : String(e)));
    } finally {
      if (seq === summarySeq) summaryOut.classList.remove('busy', 'stale');
    }
  }
  summaryButton.addEventListener('click', runSummary);
  // A summary on view follows the settings it depends on.
  let summaryTimer = null;
  function refreshSummary() {
    if (summaryOut.hidden || network.value === CUSTOM) {
      if (!summaryOut.hidden) summaryOut.classList.add('stale');
      return;
    }
    clearTimeout(summaryTimer);
    summaryTimer = setTimeout(runSummary, 250);
  }
  for (const c of [dataset, network, solver, precision]) c.addEventListener('change', refreshSummary);
  for (const c of [batch, momentum, crop]) c.addEventListener('input', refreshSummary);

  // ---- the learning-rate schedule plot --------------------------------------
  function drawSchedule() {
    if (!S) return;
    const ds = currentDataset();
    let p;
    let base;
    let ep;
    let b;
    try {
      p = policyValue().full;
      base = readField('solver.lr', lr, 'lr');
      ep = readField('epochs', epochs, 'epochs');
      b = readField('batch_size', batch, 'batch');
    } catch {
      fill(lrPlot);
      fill(lrCaption, 'The schedule shows once the rates and counts are numbers.');
      return;
    }
    const train = ds && ds.counts && ds.counts.train;
    if (!(train > 0) || !inRange(ep, rule('epochs')) || !inRange(b, rule('batch_size')) ||
        !inRange(base, rule('solver.lr'))) {
      fill(lrPlot);
      fill(lrCaption, train > 0 ? 'The schedule shows once epochs, batch size and learning rate are in range.'
        : 'Choose a dataset to see the schedule over the run.');
      return;
    }
    // An epoch's steps as the server counts them (loader_batch_count): the last
    // short batch is dropped in training, unless the split is smaller than a batch.
    const perEpoch = train >= b ? Math.floor(train / b) : 1;
    const total = perEpoch * ep;
    const warm = p.warmup_epochs * perEpoch;
    const n = Math.min(total, 240);
    const pts = [];
    let top = 0;
    for (let i = 0; i < n; i++) {
      const t = n === 1 ? 0 : Math.round((i * (total - 1)) / (n - 1));
      const v = lrAt(p, base, t, total, warm);
      pts.push([t, v]);
      top = Math.max(top, v);
    }
    const W = 300;
    const H = 48;
    const x = (t) => (total <= 1 ? 0 : (t / (total - 1)) * W);
    const y = (v) => (top > 0 ? H - 2 - (v / top) * (H - 6) : H - 2);
    const line = pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
    fill(lrPlot, svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', width: '100%', height: H },
      svg('polygon', { points: `0,${H} ${line} ${W},${H}`, class: 'lr-area' }),
      svg('polyline', { points: line, class: 'lr-line', 'vector-effect': 'non-scaling-stroke' })));
    const first = pts[0][1];
    const last = pts[pts.length - 1][1];
    if (p.type === 'fixed' && !warm) {
      fill(lrPlot);
      fill(lrCaption, `lr ${fmtRate(base)} throughout: ${fmtCount(total)} steps (${fmtCount(perEpoch)} per epoch).`);
      return;
    }
    fill(lrCaption, `lr ${fmtRate(first)} → ${fmtRate(last)}${top > first && top > last ? `, peak ${fmtRate(top)}` : ''}`,
      ` over ${fmtCount(total)} steps (${fmtCount(perEpoch)} per epoch)`,
      warm ? `; warm-up ${fmtCount(Math.min(warm, total))} steps` : '', '.');
  }
  for (const c of [policy, dataset]) c.addEventListener('change', drawSchedule);
  for (const c of [lr, epochs, batch, warmup, policyFields]) c.addEventListener('input', drawSchedule);
  solver.addEventListener('change', drawSchedule);

  // ---- lists from the API ---------------------------------------------------
  let cluster = false;                  // GET /api/v1/info's dispatcher is slurm
  let hasGpu = false;                   // GET /api/v1/info lists a GPU
  /* Whether the device choice is the CPU: "CPU", or "automatic" where that
   * is the CPU (no GPU here; on a cluster, a request without devices). */
  function cpuChosen() {
    return device.value === 'cpu' || (device.value === '' && (cluster || !hasGpu));
  }
  let lastKey = '';
  let pendingDatasets = [];
  /* The ready datasets as choices; kept until the schema has filled the form in. */
  function setDatasets(items) {
    pendingDatasets = items;
    if (!S) return;
    const ready = items.filter((d) => d.status === 'ready');
    const key = ready.map((d) => `${d.id}:${d.name}:${d.counts && d.counts.train}`).join('|');
    if (key === lastKey) return;
    lastKey = key;
    const keep = dataset.value;
    fill(dataset, ready.length
      ? ready.map((d) => h('option', { value: String(d.id) },
        `${d.name} (${fmtCount(d.counts && d.counts.train)} train · ${(d.classes || []).length} classes)`))
      : h('option', { value: '' }, 'No ready dataset'));
    if (keep && ready.some((d) => String(d.id) === keep)) dataset.value = keep;
    button.disabled = !ready.length;
    showCrop();
    drawSchedule();
  }
  function setNetworks(items) {
    const keep = network.value;
    fill(network, items.map((n) => h('option', { value: n.name }, n.name)),
      h('option', { value: CUSTOM }, 'custom spec…'));
    if (keep && (keep === CUSTOM || items.some((n) => n.name === keep))) network.value = keep;
    showNetwork();
  }

  /* The devices of GET /api/v1/info: a choice shows only where there is a GPU. */
  function setDevices(items) {
    const gpus = (items || []).filter((d) => d.kind !== 'cpu');
    const keep = device.value;
    hasGpu = gpus.length > 0;
    fill(device,
      h('option', { value: '' }, hasGpu && !cluster ? 'automatic (a free GPU)' : 'automatic (the CPU)'),
      h('option', { value: 'cpu' }, 'CPU'),
      gpus.length > 1 ? h('option', { value: 'any' }, 'any free GPU') : null,
      gpus.map((d) => h('option', { value: String(d.index) },
        `GPU ${d.index}: ${d.name}${d.memory_bytes ? ` · ${fmtBytes(d.memory_bytes)}` : ''}` +
        `${d.memory_free_bytes != null ? `, ${fmtBytes(d.memory_free_bytes)} free` : ''}`)),
      // Data parallel: the batch split across them, the same model as on one.
      gpus.slice(1).map((_, k) => h('option', { value: `n${k + 2}` },
        `${k + 2 === gpus.length ? 'all ' : 'any '}${k + 2} GPUs (data parallel)`)));
    if ([...device.options].some((o) => o.value === keep)) device.value = keep;
    deviceField.hidden = !gpus.length;
    showRanks();
  }
  /* GET /api/v1/info: its devices (setDevices) and its dispatcher. */
  function setInfo(info) {
    cluster = !!info && info.dispatcher === 'slurm';
    el.dataset.dispatcher = (info && info.dispatcher) || '';   // which one the form follows
    setDevices((info && info.devices) || []);
  }

  setNetworks(state.networks);
  setDevices([]);
  loaded = load();
  el.addEventListener('input', countAdvanced);
  el.addEventListener('change', countAdvanced);

  // ---- submit ---------------------------------------------------------------
  el.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    clearMarks();
    let body;
    try {
      body = requestBody();
    } catch (e) {
      if (e.input !== spec) showFormError(e);
      else { error.hidden = true; spec.focus(); }
      return;
    }
    button.disabled = true;
    try {
      const job = await post('/jobs', body);
      location.hash = `#/jobs/${job.id}`;
    } catch (e) {
      showFormError(e);
    } finally {
      button.disabled = false;
    }
  });

  // ---- filled from a job's request (Clone) ----------------------------------
  /* The device choice for a request's "devices" among the options on view:
   * 0 or [] the CPU, [i] GPU i, N any N GPUs; null when none says it. */
  function deviceChoice(d) {
    const has = (v) => [...device.options].some((o) => o.value === v);
    if (d === undefined || d === null) return '';
    if (d === 0 || (Array.isArray(d) && !d.length)) return 'cpu';
    if (Array.isArray(d) && d.length === 1 && has(String(d[0]))) return String(d[0]);
    const n = Array.isArray(d) ? d.length : d;
    if (n === 1) return has('any') ? 'any' : (deviceField.hidden ? null : '');
    return has(`n${n}`) ? `n${n}` : null;
  }

  /* Fills the form with a POST /api/v1/jobs body (GET /api/v1/jobs/{id}/request),
   * every field the form has; the rest keep the schema's defaults. A warm-up
   * in steps shows in epochs of stepsPerEpoch steps. Call it once the
   * datasets, networks and devices are set. Resolves to notes on what the
   * form could not show as the request has it (none: []); rejects when the
   * schema could not be loaded. */
  async function prefill(req, { stepsPerEpoch = 0 } = {}) {
    await loaded;
    if (!S) throw new Error('the job form could not load the API\'s settings');
    applySchema(S);                     // from the defaults: what the request leaves out keeps them
    const notes = [];
    const at = (path) => path.split('.').reduce((o, k) => (o && typeof o === 'object' ? o[k] : undefined), req);
    const ds = String(req.dataset_id);
    if ([...dataset.options].some((o) => o.value === ds)) dataset.value = ds;
    else notes.push(`The job's dataset #${req.dataset_id} is not ready or no longer exists: choose another.`);
    if (typeof req.network === 'string') {
      if (builtin(req.network)) network.value = req.network;
      else notes.push(`This server has no built-in network “${req.network}”.`);
    } else if (req.network && typeof req.network === 'object') {
      network.value = CUSTOM;
      spec.value = specText(req.network, false);
    }
    setChoice(precision, req.precision);
    setChoice(lossScaling, req.loss_scaling ?? '');
    setChoice(solver, at('solver.type'));
    lastSolver = solver.value;
    setChoice(larc, at('solver.larc.policy') ?? '');
    setChoice(checkpointMetric, req.checkpoint_metric);
    const es = req.early_stopping;
    earlyStop.input.checked = !!(es && typeof es === 'object');
    setChoice(esMetric, at('early_stopping.metric'));
    for (const [path, input] of numberFields) {
      const v = at(path);
      if (v === null) input.value = '';
      else if (v !== undefined) input.value = String(v);
    }
    for (const [path, box] of [['solver.nesterov', nesterov.input], ['solver.decay_bias', decayBias.input],
      ['augmentation.mirror', mirror.input]]) {
      if (typeof at(path) === 'boolean') box.checked = at(path);
    }
    // The policy: its own fields through policyValues, which showPolicy reads.
    const p = req.lr_policy && typeof req.lr_policy === 'object' ? req.lr_policy : { type: 'fixed' };
    setChoice(policy, p.type || 'fixed');
    for (const [k, v] of Object.entries(p)) {
      if (k !== 'type' && k !== 'warmup_epochs' && k !== 'warmup_steps' && v !== null) {
        policyValues[`${policy.value}.${k}`] = Array.isArray(v) ? v.join(', ') : String(v);
      }
    }
    if (p.warmup_steps > 0 && p.warmup_epochs === undefined) {
      const w = stepsPerEpoch > 0 ? p.warmup_steps / stepsPerEpoch : NaN;
      warmup.value = String(Number.isFinite(w) ? Math.max(1, Math.round(w)) : 0);
      if (!Number.isInteger(w)) {
        notes.push(`The job warmed up for ${fmtCount(p.warmup_steps)} steps; the form counts whole epochs` +
          (Number.isFinite(w) ? ` of ${fmtCount(stepsPerEpoch)} steps, so it shows ${warmup.value}.` : ': check the warm-up.'));
      }
    }
    const dv = deviceChoice(req.devices);
    if (dv === null) {
      const asked = Array.isArray(req.devices) ? `GPU${req.devices.length > 1 ? 's' : ''} ${req.devices.join(', ')}`
        : `${req.devices} GPU${req.devices > 1 ? 's' : ''}`;
      notes.push(`The job asked for ${asked}, which this machine does not offer: choose its device.`);
    }
    else device.value = dv;
    const ranks = [['nodes', 'nodes'], ['tasks_per_node', 'tasks per node']].filter(([k]) => req[k] > 1);
    if (ranks.length && !cluster) {
      notes.push(`The job ran with ${ranks.map(([k, w]) => `${req[k]} ${w}`).join(' and ')}; this kiln runs ` +
        'a job as one process on this machine (kiln serve --dispatcher slurm runs several), so the form asks for one.');
    }
    name.value = typeof req.name === 'string' ? req.name : '';
    showNetwork();
    showCrop();
    showSolver();
    showLarc();
    showPrecision();
    showPolicy();
    showEarlyStop();
    showRanks();
    hideSummary();
    drawSchedule();
    countAdvanced();
    advanced.open = advancedCount.textContent !== '';
    return notes;
  }
  /* A select's value when it offers it (else the select keeps its own). */
  function setChoice(select, v) {
    if (v !== undefined && v !== null && [...select.options].some((o) => o.value === String(v))) select.value = String(v);
  }

  return { el, setDatasets, setNetworks, setDevices, setInfo, requestBody, prefill };
}

/* The rate at step t of `total`, as engine/lr.c computes it (warm-up last). */
function lrAt(p, base, t, total, warm) {
  let v = base;
  const frac = total > 0 ? Math.min(t / total, 1) : 1;
  switch (p.type) {
    case 'step': v = base * p.gamma ** Math.floor(t / p.step_size); break;
    case 'multistep': v = base * p.gamma ** p.milestones.filter((m) => m <= t).length; break;
    case 'exponential': v = base * p.gamma ** t; break;
    case 'polynomial': v = base * (1 - frac) ** p.power; break;
    case 'cosine': v = p.min_lr + (base - p.min_lr) * (1 + Math.cos(Math.PI * frac)) / 2; break;
    default: break;
  }
  if (t < warm) v *= (t + 1) / warm;
  return v;
}

/* 0.00053 -> "0.00053", 3.95e-8 -> "3.95e-8". */
function fmtRate(v) {
  if (v === 0) return '0';
  if (Math.abs(v) >= 1e-4 && Math.abs(v) < 1e4) return String(Number(v.toPrecision(3)));
  const [m, e] = v.toExponential(2).split('e');
  return `${Number(m)}e${Number(e)}`;
}

/* 587520 -> "588 K", 3203200 -> "3.2 M". */
function fmtSI(x) {
  if (typeof x !== 'number' || !Number.isFinite(x)) return '—';
  const units = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'K']];
  for (const [u, s] of units) {
    if (Math.abs(x) >= u) return `${Number((x / u).toPrecision(3))} ${s}`;
  }
  return String(x);
}

/* A spec as editable text, one layer per line. A built-in's copy (asCopy)
 * is renamed and loses its input shape (the copy takes the chosen dataset's)
 * and its description; a job's own spec (a clone's) stays as it is. */
function specText(spec, asCopy = true) {
  const lines = ['{'];
  const top = asCopy ? { ...spec, name: spec.name ? `${spec.name}-custom` : undefined } : spec;
  const skip = asCopy ? ['layers', 'input', 'description'] : ['layers'];
  const keys = Object.keys(top).filter((k) => !skip.includes(k) && top[k] !== undefined);
  for (const k of keys) lines.push(`  ${JSON.stringify(k)}: ${JSON.stringify(top[k])},`);
  const layers = Array.isArray(spec.layers) ? spec.layers : [];
  lines.push('  "layers": [');
  layers.forEach((l, i) => lines.push(`    ${JSON.stringify(l).replace(/,"/g, ', "').replace(/":/g, '": ')}${i < layers.length - 1 ? ',' : ''}`));
  lines.push('  ]', '}');
  return lines.join('\n');
}

/* The summary's headline figures, its warnings and a collapsible layer table. */
function renderSummary(el, s, ds) {
  const m = s.training_memory || {};
  const parts = [['weights', m.weights_bytes], ['gradients', m.gradients_bytes], ['optimizer', m.optimizer_bytes],
    ['16-bit copies', m.weight_copies_bytes], ['activations', m.activations_bytes]]
    .filter(([, v]) => v > 0).map(([k, v]) => `${k} ${fmtBytes(v)}`).join(' · ');
  const devices = (m.devices || []).map((d) => h('li', { class: d.fits ? '' : 'warn' },
    `${d.kind} ${d.index} (${d.name}, ${fmtBytes(d.memory_bytes)}): ${d.fits ? 'fits' : 'does not fit'}, up to batch ${fmtCount(d.max_batch)}`));
  const warnings = s.warnings || [];
  const layers = s.layers || [];
  fill(el,
    h('dl', { class: 'summary-figures' },
      h('dt', {}, 'Input'), h('dd', {}, `${(s.input || []).join('×')}, ${s.classes} classes${ds ? ` (${ds.name})` : ''}`),
      h('dt', {}, 'Parameters'), h('dd', { id: 'job-summary-params' }, fmtCount(s.params)),
      h('dt', {}, 'Forward FLOPs'), h('dd', { id: 'job-summary-flops', title: `${fmtCount(s.flops)} per image` },
        `${fmtSI(s.flops)} per image`),
      h('dt', {}, 'Training memory'),
      h('dd', { id: 'job-summary-memory' },
        h('strong', {}, fmtBytes(m.total_bytes)), ` at batch ${m.batch_size}, ${m.precision || 'fp32'}, ${m.solver || 'sgd'}`,
        parts ? h('span', { class: 'summary-breakdown' }, `${parts} (a lower bound)`) : null)),
    devices.length ? h('ul', { class: 'summary-devices' }, devices) : null,
    warnings.length
      ? h('details', { class: 'summary-warnings', open: warnings.length <= 2 },
        h('summary', {}, `${warnings.length} warning${warnings.length === 1 ? '' : 's'}`),
        h('ul', {}, warnings.map((w) => h('li', {}, w))))
      : null,
    h('details', { class: 'summary-layers' }, h('summary', {}, `${layers.length} layers`),
      h('div', { class: 'table-wrap summary-table' }, h('table', { class: 'table table-compact' },
        h('thead', {}, h('tr', {}, ['Layer', 'Output', 'Params', 'FLOPs'].map((t, i) =>
          h('th', { scope: 'col', class: i >= 2 ? 'num' : null }, t)))),
        h('tbody', {}, layers.map((l) => h('tr', {},
          h('td', { title: l.type }, l.name, h('span', { class: 'muted' }, ` ${l.type}`)),
          h('td', { class: 'nowrap' }, (l.output_shape || []).join('×')),
          h('td', { class: 'num' }, fmtCount(l.params)),
          h('td', { class: 'num', title: fmtCount(l.flops) }, fmtSI(l.flops)))))))));
}
