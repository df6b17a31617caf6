// The job view (#/jobs/ID): status, progress with epoch/step, ETA and
// throughput, loss and accuracy curves, the worker's log lines, cancel and
// model download (shown whenever the job has a model: done, or any snapshot,
// cancelled jobs included), why early stopping ended it, and its snapshots
// (web/snapshots.js) with the best marked. Curves are filled from GET /metrics first, then live from
// the SSE stream /events (EventSource), which ends after the final status.
// A failed or cancelled job with a checkpoint has a Resume button; Clone opens
// the new-job form filled with the job's settings (#/jobs/ID/clone, clone.js).

import { get, post, API, ApiError } from './api.js';
import { createChart, chartControls } from './charts.js';
import { classifyCard } from './classify.js';
import { snapshotsCard } from './snapshots.js';
import { evaluationCard } from './evaluation.js';
import { jobMetaCard } from './jobmeta.js';
import {
  h, fill, statusBadge, progressBar, setProgress, fmtPercent, fmtNumber, fmtDuration, fmtTime, fmtCount,
} from './ui.js';

const FINAL = new Set(['done', 'failed', 'cancelled']);

/* The page's title: the job's name (PATCH /jobs/{id} changes it), else "Job <id>". */
function jobTitle(job) {
  return job.name ? job.name : `Job ${job.id}`;
}
const LOG_LINES = 200;

// the metrics that change the headline figures
const HEADLINE_TAGS = new Set(['train/loss', 'train/epoch_loss', 'train/epoch_accuracy', 'val/accuracy']);

export function renderJob(root, id) {
  const st = {
    job: null, es: null, alive: true, charts: [], stepsPerEpoch: 0, pendingMetrics: [],
    latest: {}, lastEventId: 0, pollTimer: null, classifyEpoch: 0, snapshotEpoch: 0, hasSnapshots: false,
  };

  const title = h('h1', { class: 'page-title' }, `Job ${id}`);
  const subtitle = h('p', { class: 'muted', id: 'job-subtitle' });
  const badge = h('span', { id: 'job-status', 'aria-live': 'polite' });
  const cancelBtn = h('button', { type: 'button', class: 'btn btn-danger', id: 'job-cancel', hidden: true }, 'Cancel');
  // a failed or cancelled job with a checkpoint goes on from it (POST /jobs/{id}/resume)
  const resumeBtn = h('button', { type: 'button', class: 'btn btn-primary', id: 'job-resume', hidden: true,
    title: 'Continue training from the latest checkpoint' }, 'Resume');
  // a new job with this one's settings, in the new-job form (web/clone.js)
  const cloneBtn = h('a', { class: 'btn', id: 'job-clone', href: `#/jobs/${id}/clone`,
    title: 'Open the new-job form filled with this job\'s settings' }, 'Clone');
  const download = h('a', { class: 'btn btn-primary', id: 'job-download', hidden: true,
    href: `${API}/jobs/${id}/model?format=tar`, download: `kiln-job-${id}-model.tar` }, 'Download model (.tar)');
  const bar = progressBar(0, 'training progress');
  bar.id = 'job-progress';
  const progressText = h('span', { class: 'progress-text', id: 'job-progress-text' });
  const stats = {
    epoch: h('dd', { id: 'stat-epoch' }, '—'),
    step: h('dd', { id: 'stat-step' }, '—'),
    eta: h('dd', { id: 'stat-eta' }, '—'),
    ips: h('dd', { id: 'stat-ips' }, '—'),
    loss: h('dd', { id: 'stat-loss' }, '—'),
    // which train loss the headline shows: the last epoch's mean, or the running one before it
    lossLabel: h('dt', { id: 'stat-loss-label' }, 'Train loss'),
    valacc: h('dd', { id: 'stat-valacc' }, '—'),
  };
  const errorBox = h('div', { class: 'error-box', role: 'alert', id: 'job-error', hidden: true });
  const stoppedBox = h('div', { class: 'notice-box', role: 'status', id: 'job-stopped-early', hidden: true });
  const snapshots = snapshotsCard(id);
  const actionError = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const lossBox = h('div', { class: 'chart', id: 'chart-loss', role: 'img', 'aria-label': 'training and validation loss by epoch' });
  const accBox = h('div', { class: 'chart', id: 'chart-accuracy', role: 'img', 'aria-label': 'training and validation accuracy by epoch' });
  const config = h('dl', { class: 'config', id: 'job-config' });
  // mixed precision: the loss scale over time and the steps its overflows skipped
  const ampScale = h('dd', { id: 'stat-loss-scale' }, '—');
  const ampSkipped = h('dd', { id: 'stat-skipped' }, '—');
  const ampBox = h('div', { class: 'chart', id: 'chart-loss-scale', role: 'img', 'aria-label': 'loss scale by epoch' });
  const ampCard = h('section', { class: 'card', id: 'amp-card', 'aria-labelledby': 'amp-title', hidden: true },
    h('div', { class: 'card-head' }, h('h2', { id: 'amp-title' }, 'Mixed precision')),
    h('dl', { class: 'stats stats-2' }, h('div', { class: 'stat' }, h('dt', {}, 'Loss scale'), ampScale),
      h('div', { class: 'stat' }, h('dt', {}, 'Skipped steps'), ampSkipped)),
    ampBox);
  const ampSection = h('section', { class: 'grid charts', hidden: true }, ampCard);
  const log = h('pre', { class: 'log', id: 'job-log', 'aria-live': 'off', tabindex: '0' });
  const logCard = h('section', { class: 'card', 'aria-labelledby': 'log-title', hidden: true },
    h('div', { class: 'card-head' }, h('h2', { id: 'log-title' }, 'Log')), log);

  const stat = (label, dd) => h('div', { class: 'stat' }, h('dt', {}, label), dd);
  // the charts' x-axis, smoothing and log scale (web/charts.js), for all three
  const controls = chartControls('job-charts', {}, (view) => { for (const c of st.charts) c.setView(view); });
  // the trained model in use: classify images with the final weights or a snapshot
  const classify = classifyCard(id, async () => {
    const snaps = await get(`/jobs/${id}/snapshots`);
    const opts = snaps.best ? [{ value: 'best', label: `best (epoch ${snaps.best})` }] : [];
    return opts.concat(snaps.items.map((s) => ({ value: s.epoch, label: `epoch ${s.epoch}` })));
  });
  // evaluate the model on a dataset split (web/evaluation.js), shown with the classify box
  const evaluate = evaluationCard(id, () => st.job);
  // the user's name, tags and notes (PATCH /jobs/{id}); a saved name becomes the title
  const meta = jobMetaCard(id, (job) => { if (st.job) { st.job.name = job.name; fill(title, jobTitle(job)); } });

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ', `Job ${id}`),
    h('div', { class: 'page-head' },
      h('div', {}, h('div', { class: 'title-row' }, title, badge), subtitle),
      h('div', { class: 'page-actions' }, cancelBtn, resumeBtn, cloneBtn, download)),
    actionError,
    errorBox,
    stoppedBox,
    h('section', { class: 'card', 'aria-labelledby': 'progress-title' },
      h('div', { class: 'card-head' }, h('h2', { id: 'progress-title' }, 'Progress'), progressText),
      bar,
      h('dl', { class: 'stats' },
        stat('Epoch', stats.epoch), stat('Step', stats.step), stat('ETA', stats.eta),
        stat('Images/s', stats.ips), h('div', { class: 'stat' }, stats.lossLabel, stats.loss), stat('Val accuracy', stats.valacc))),
    controls.el,
    h('section', { class: 'grid charts' },
      h('section', { class: 'card', 'aria-labelledby': 'loss-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'loss-title' }, 'Loss')), lossBox),
      h('section', { class: 'card', 'aria-labelledby': 'acc-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'acc-title' }, 'Accuracy')), accBox)),
    meta.el,
    ampSection,
    snapshots,
    classify,
    evaluate,
    h('section', { class: 'grid' },
      logCard,
      h('section', { class: 'card', 'aria-labelledby': 'config-title' },
        h('div', { class: 'card-head' }, h('h2', { id: 'config-title' }, 'Configuration')), config)));

  // the frame reaches the job's last epoch or step; wall time: the data's
  const xMax = (axis) => (!st.job ? null : axis === 'epoch' ? st.job.epochs : axis === 'step' ? st.job.steps : null);
  const view = controls.view();
  const lossChart = createChart(lossBox, {
    name: 'loss', yLabel: 'loss', xMax, view,
    series: [{ tag: 'train/loss', label: 'train loss' }, { tag: 'val/loss', label: 'val loss' }],
  });
  const accChart = createChart(accBox, {
    name: 'accuracy', yLabel: 'accuracy', yRange: [0, 1], xMax, view,
    series: [{ tag: 'train/accuracy', label: 'train accuracy' }, { tag: 'val/accuracy', label: 'val accuracy' }],
  });
  const ampChart = createChart(ampBox, {
    name: 'loss-scale', yLabel: 'loss scale', yLog: 2, xMax, view,
    series: [{ tag: 'amp/loss_scale', label: 'loss scale' }],
  });
  st.charts = [lossChart, accChart, ampChart];

  cancelBtn.addEventListener('click', async () => {
    cancelBtn.disabled = true;
    actionError.hidden = true;
    try {
      await post(`/jobs/${id}/cancel`);
      cancelBtn.textContent = 'Cancelling…';
    } catch (e) {
      actionError.hidden = false;
      fill(actionError, e.message);
      cancelBtn.disabled = false;
    }
  });

  resumeBtn.addEventListener('click', async () => {
    resumeBtn.disabled = true;
    actionError.hidden = true;
    try {
      await post(`/jobs/${id}/resume`);
      // The view starts over: the job's metrics past the checkpoint are
      // dropped and its stream goes on with the new run.
      if (st.alive) window.dispatchEvent(new HashChangeEvent('hashchange'));
    } catch (e) {
      actionError.hidden = false;
      fill(actionError, e.message);
      resumeBtn.disabled = false;
    }
  });

  /* x of a metric: fractional epochs from its global step where the job's step
   * count is known, else the epoch the event names. */
  function xOf(m) {
    if (typeof m.step === 'number') return m.step / st.stepsPerEpoch;
    return typeof m.epoch === 'number' ? m.epoch : NaN;
  }

  function addMetric(m) {
    if (!st.stepsPerEpoch) { st.pendingMetrics.push(m); return; }
    const p = { step: m.step, epoch: xOf(m), wall: m.wall_time, value: m.value };
    for (const c of st.charts) c.add(m.tag, p);
    const prev = st.latest[m.tag];
    if (!prev || m.step >= prev.step) st.latest[m.tag] = m;
    if (HEADLINE_TAGS.has(m.tag)) renderLatest();
    if (m.tag === 'amp/loss_scale' || m.tag === 'amp/skipped_steps') renderAmp();
  }

  function renderAmp() {
    const scale = st.latest['amp/loss_scale'];
    const skipped = st.latest['amp/skipped_steps'];
    if (scale) fill(ampScale, fmtNumber(scale.value));
    if (skipped) fill(ampSkipped, fmtCount(skipped.value));
  }

  /* The headline's train figures: the latest epoch's image-weighted means
   * (train/epoch_loss, train/epoch_accuracy) once an epoch has ended, else
   * the running train/loss (the mean since the previous report), labelled
   * so that a reader knows which. metrics: tag -> {value, epoch}. */
  function renderTrain(metrics) {
    const ep = metrics['train/epoch_loss'];
    const epAcc = metrics['train/epoch_accuracy'];
    const run = metrics['train/loss'];
    if (ep) {
      const n = Number.isFinite(ep.epoch) ? Math.round(ep.epoch) : null;
      fill(stats.lossLabel, n ? `Train loss · epoch ${n}` : 'Train loss · epoch');
      stats.lossLabel.title = `The mean over ${n ? `epoch ${n}'s` : 'the last epoch\'s'} training images`;
      fill(stats.loss, fmtNumber(ep.value),
        epAcc ? h('span', { class: 'muted small', id: 'stat-train-acc' }, ` · acc ${fmtPercent(epAcc.value, 1)}`) : '');
    } else if (run) {
      fill(stats.lossLabel, 'Train loss · running');
      stats.lossLabel.title = 'The mean over the steps since the previous report; the epoch\'s mean follows when it ends';
      fill(stats.loss, fmtNumber(run.value));
    }
  }

  function renderLatest() {
    renderTrain(st.latest);
    const acc = st.latest['val/accuracy'];
    if (acc) fill(stats.valacc, fmtPercent(acc.value, 2));
  }

  function renderProgress(p) {
    // p: {epoch, epochs, step, steps, images_per_sec, eta(_seconds)}
    const frac = p.steps > 0 ? p.step / p.steps : 0;
    setProgress(bar, st.job && FINAL.has(st.job.status) && st.job.status === 'done' ? 1 : frac);
    fill(progressText, `${fmtPercent(frac, 0)}`);
    // p.epoch counts finished epochs; while one is under way, show that one (1-based).
    if (p.epochs) {
      const done = Math.min(p.epoch ?? 0, p.epochs);
      // (an ended job shows the epochs it finished: early stopping ends before p.steps)
      const ended = st.job && FINAL.has(st.job.status);
      const current = !ended && p.step > 0 && p.step < p.steps ? Math.min(done + 1, p.epochs) : done;
      fill(stats.epoch, `${current} / ${p.epochs}`);
    }
    if (p.steps) fill(stats.step, `${fmtCount(p.step)} / ${fmtCount(p.steps)}`);
    if ((p.epoch ?? 0) > st.classifyEpoch) { st.classifyEpoch = p.epoch; classify.refresh(); evaluate.refresh(); }
    if ((p.epoch ?? 0) > st.snapshotEpoch) { st.snapshotEpoch = p.epoch; loadSnapshots(); }
    const eta = p.eta ?? p.eta_seconds;
    fill(stats.eta, st.job && FINAL.has(st.job.status) ? '—' : fmtDuration(eta));
    fill(stats.ips, p.images_per_sec > 0 ? fmtNumber(p.images_per_sec, 4) : '—');
    if (p.steps > 0 && p.epochs > 0 && !st.stepsPerEpoch) {
      st.stepsPerEpoch = p.steps / p.epochs;
      const pend = st.pendingMetrics;
      st.pendingMetrics = [];
      pend.forEach(addMetric);
    }
  }

  function renderStatus(status, error) {
    if (st.job) { st.job.status = status; if (error !== undefined) st.job.error = error; }
    fill(badge, statusBadge(status));
    root.dataset.status = status;
    const live = status === 'queued' || status === 'running';
    cancelBtn.hidden = !live;
    resumeBtn.hidden = !((status === 'failed' || status === 'cancelled') && st.job && st.job.resumable);
    showDownload();
    if (status === 'failed' || (error && status !== 'done')) {
      errorBox.hidden = false;
      fill(errorBox, h('strong', {}, status === 'failed' ? 'The job failed. ' : ''), error || 'No reason was recorded.');
    } else {
      errorBox.hidden = true;
    }
    if (FINAL.has(status)) {
      fill(stats.eta, '—');
      if (status === 'done') { setProgress(bar, 1); fill(progressText, '100%'); }
      if (status === 'done' && classify.hidden) classify.refresh();
      loadSnapshots();
      if (status === 'done' && evaluate.hidden) evaluate.refresh();
    }
  }

  /* The model download: for a job that has a model, the final one or any
   * snapshot (a cancelled or failed job's latest). */
  function showDownload() {
    download.hidden = !(st.job && st.job.status === 'done') && !st.hasSnapshots;
  }

  async function loadSnapshots() {
    try {
      const list = await snapshots.refresh();
      if (!st.alive) return;
      st.hasSnapshots = (list.items || []).length > 0;
      showDownload();
    } catch { /* the list is a convenience; the page works without it */ }
  }

  /* Why early stopping ended the job: {"epoch","best_epoch","message"} or null. */
  function renderStoppedEarly(s) {
    stoppedBox.hidden = !s;
    // "Stopped early after epoch 14: val/loss has not improved for 5 epochs; best epoch 9"
    if (s) fill(stoppedBox, s.message.charAt(0).toUpperCase() + s.message.slice(1));
  }

  function renderJobInfo(job) {
    st.job = job;
    fill(title, jobTitle(job));
    meta.set(job);
    const c = job.config || {};
    const dsName = st.datasetName ? `${st.datasetName} (#${job.dataset_id})` : `#${job.dataset_id}`;
    fill(subtitle, `${job.network} on dataset ${dsName}`, ' · created ', fmtTime(job.created_at),
      job.finished_at ? [' · finished ', fmtTime(job.finished_at)] : []);
    const row = (k, v) => [h('dt', {}, k), h('dd', {}, v)];
    const precision = c.precision || 'fp32';
    ampCard.hidden = ampSection.hidden = precision === 'fp32';
    fill(config,
      row('Network', job.network),
      row('Dataset', dsName),
      row('Input', Array.isArray(c.input) ? c.input.join(' × ') : '—'),
      row('Epochs', String(job.epochs ?? c.epochs ?? '—')),
      row('Batch size', String(c.batch_size ?? '—')),
      row('Solver', solverText(c.solver)),
      row('Learning rate', policyText(c.lr_policy)),
      row('Precision', precision === 'fp32' ? 'fp32' : `${precision}, loss scaling ${c.loss_scaling || 'off'}`),
      row('Devices', devicesText(job.devices)),
      // a job of several processes (kiln serve --dispatcher slurm); 1, the default, says nothing
      c.nodes > 1 ? row('Nodes', String(c.nodes)) : [],
      c.tasks_per_node > 1 ? row('Tasks per node', String(c.tasks_per_node)) : [],
      row('Seed', String(c.seed ?? '—')),
      row('Snapshots', snapshotText(c)),
      row('Early stopping', earlyStopText(c.early_stopping)),
      job.slurm ? row('Slurm', slurmText(job.slurm)) : []);
    renderProgress({ epoch: job.epoch, epochs: job.epochs, step: job.step, steps: job.steps,
      images_per_sec: job.images_per_sec, eta: job.eta_seconds });
    renderStatus(job.status, job.error);
    renderStoppedEarly(job.stopped_early);
    if (job.metrics) {
      if (!st.latest['train/loss'] && !st.latest['train/epoch_loss']) {
        const m = {};
        for (const tag of ['train/loss', 'train/epoch_loss', 'train/epoch_accuracy'])
          if (job.metrics[tag] !== undefined) m[tag] = { value: job.metrics[tag], epoch: tag === 'train/loss' ? NaN : job.epoch };
        renderTrain(m);
      }
      if (job.metrics['val/accuracy'] !== undefined && !st.latest['val/accuracy']) fill(stats.valacc, fmtPercent(job.metrics['val/accuracy'], 2));
    }
  }

  /* A job the Slurm dispatcher submitted: "job 12 · RUNNING on node01",
   * "job 13 · PENDING (Resources)", "job 9 · TIMEOUT on node02". */
  function slurmText(s) {
    const reason = s.reason && s.reason !== 'None' ? ` (${s.reason})` : '';
    return `job ${s.job_id} · ${s.state || 'submitted'}${reason}${s.nodes ? ` on ${s.nodes}` : ''}`;
  }

  /* The job's "devices" as the API reads them from its config: the CPU, GPUs
   * by number, or any N free ones (the scheduler's choice, which the log
   * names); null where the stored config does not read. */
  function devicesText(d) {
    if (!d || !d.kind) return '—';
    const n = d.count ?? 1;
    const dp = n > 1 ? ' (data parallel)' : '';
    if (d.kind === 'cpu') return n > 1 ? `CPU, ${n} replicas${dp}` : 'CPU';
    if (d.kind !== 'cuda') return d.kind;
    if (Array.isArray(d.gpus) && d.gpus.length) return `GPU${d.gpus.length > 1 ? 's' : ''} ${d.gpus.join(', ')}${dp}`;
    return n > 1 ? `any ${n} free GPUs${dp}` : 'any free GPU';
  }

  /* The worker's log follows the stream: each `log` event ({"line"}) is a line
   * of it, stored with an id like the metrics, so the stream from the start
   * carries the whole log and a reconnect (Last-Event-ID) goes on where it
   * stopped; the card shows the last LOG_LINES lines, redrawn at most every
   * 100 ms. A job whose stream has no log lines (it ran before they were
   * streamed) gets GET /jobs/{id}/log once, when its stream ends. */
  const logLines = [];
  let logFromStream = false;
  let logDrawTimer = null;
  function drawLog(force) {
    logDrawTimer = null;
    if (!st.alive || !logLines.length) return;
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    logCard.hidden = false;
    fill(log, logLines.join('\n'));
    if (atBottom || force) log.scrollTop = log.scrollHeight;
  }
  function addLogLine(line) {
    logFromStream = true;
    logLines.push(String(line));
    if (logLines.length > LOG_LINES) logLines.splice(0, logLines.length - LOG_LINES);
    if (!logDrawTimer) logDrawTimer = setTimeout(() => drawLog(false), 100);
  }
  async function loadLogOnce() {
    if (logFromStream) return;
    try {
      const res = await fetch(`${API}/jobs/${id}/log`, { headers: { accept: 'text/plain' } });
      if (!res.ok || !st.alive || logFromStream) return;
      const text = (await res.text()).replace(/\n+$/, '');
      if (!text) return;
      logLines.splice(0, logLines.length, ...text.split('\n').slice(-LOG_LINES));
      drawLog(true);
    } catch { /* the log is a convenience; the stream carries the state */ }
  }

  function connect() {
    if (!st.alive || (st.job && FINAL.has(st.job.status) && st.streamDone)) return;
    // A new EventSource (after one was refused) goes on after the last id seen.
    const after = st.lastEventId ? `?last_event_id=${encodeURIComponent(st.lastEventId)}` : '';
    const es = new EventSource(`${API}/jobs/${id}/events${after}`);
    const seen = (e) => { if (e.lastEventId) st.lastEventId = e.lastEventId; };
    st.es = es;
    es.addEventListener('open', () => { st.retries = 0; });
    es.addEventListener('metric', (e) => {
      seen(e);
      try { addMetric(JSON.parse(e.data)); } catch { /* ignore a malformed event */ }
    });
    es.addEventListener('progress', (e) => {
      try {
        const p = JSON.parse(e.data);
        if (st.job) Object.assign(st.job, { epoch: p.epoch, step: p.step, steps: p.steps });
        renderProgress(p);
      } catch { /* ignore */ }
    });
    es.addEventListener('log', (e) => {
      seen(e);
      try { addLogLine(JSON.parse(e.data).line); } catch { /* ignore a malformed event */ }
    });
    es.addEventListener('status', (e) => {
      seen(e);
      let d = {};
      try { d = JSON.parse(e.data); } catch { /* ignore */ }
      renderStatus(d.status, d.error ?? undefined);
      if (FINAL.has(d.status)) {
        st.streamDone = true;
        es.close();
        // The final numbers (epoch, finished_at, metrics) from the job itself.
        get(`/jobs/${id}`).then(renderJobInfo).catch(() => {});
        loadLogOnce();
      }
    });
    es.addEventListener('error', () => {
      // EventSource reconnects by itself (with Last-Event-ID) unless closed.
      // A refused stream (readyState CLOSED) is retried a few times, then the
      // page falls back to polling the job.
      if (es.readyState !== EventSource.CLOSED || !st.alive || st.streamDone) return;
      st.retries = (st.retries || 0) + 1;
      if (st.retries <= 5) setTimeout(connect, 2000 * st.retries);
      else if (!st.pollTimer) st.pollTimer = setInterval(poll, 3000);
    });
  }

  async function poll() {
    try {
      const job = await get(`/jobs/${id}`);
      if (!st.alive) return;
      renderJobInfo(job);
      const m = await get(`/jobs/${id}/metrics`);
      for (const item of m.items || []) addMetric(item);
      if (FINAL.has(job.status)) { clearInterval(st.pollTimer); st.pollTimer = null; loadLogOnce(); }
    } catch { /* keep polling */ }
  }

  (async () => {
    try {
      const job = await get(`/jobs/${id}`);
      if (!st.alive) return;
      try { st.datasetName = (await get(`/datasets/${job.dataset_id}`)).name; } catch { /* deleted: show the id */ }
      if (!st.alive) return;
      renderJobInfo(job);
      const m = await get(`/jobs/${id}/metrics`);
      if (!st.alive) return;
      for (const item of m.items || []) addMetric(item);
      if (!st.stepsPerEpoch && FINAL.has(job.status)) {
        // A job that ended without a step count: plot against the reported epoch.
        const pend = st.pendingMetrics;
        st.pendingMetrics = [];
        for (const x of pend) {
          const p = { step: x.step, epoch: x.epoch, wall: x.wall_time, value: x.value };
          for (const c of st.charts) c.add(x.tag, p);
        }
      }
      connect();
    } catch (e) {
      if (!st.alive) return;
      const msg = e instanceof ApiError && e.status === 404 ? `There is no job ${id}.` : e.message;
      errorBox.hidden = false;
      fill(errorBox, msg);
    }
  })();

  return () => {
    st.alive = false;
    if (st.es) st.es.close();
    if (st.pollTimer) clearInterval(st.pollTimer);
    evaluate.stop();
    for (const c of st.charts) c.destroy();
  };
}

/* "sgd, lr 0.01, momentum 0.9, weight decay 0.0005, clip 5, label smoothing 0.1" */
function solverText(s) {
  if (!s || !s.type) return '—';
  const parts = [s.type, `lr ${s.lr}`];
  if (s.type === 'sgd') parts.push(`momentum ${s.momentum}${s.nesterov ? ' (Nesterov)' : ''}`);
  else parts.push(`betas ${s.beta1}, ${s.beta2}, eps ${s.eps}`);
  parts.push(`weight decay ${s.weight_decay ?? 0}${s.decay_bias ? ' (biases too)' : ''}`);
  if (s.clip_norm) parts.push(`clip norm ${s.clip_norm}`);
  if (s.label_smoothing) parts.push(`label smoothing ${s.label_smoothing}`);
  if (s.larc) parts.push(`LARC ${s.larc.policy}, eta ${s.larc.eta}`);
  return parts.join(', ');
}

/* "every epoch, best by val/accuracy, keep the last 3 and the best" */
function snapshotText(c) {
  const every = (c.snapshot_interval ?? 1) === 1 ? 'every epoch' : `every ${c.snapshot_interval} epochs`;
  const keep = c.keep_checkpoints ? `, keep the last ${c.keep_checkpoints} and the best` : ', all kept';
  return `${every}, best by ${c.checkpoint_metric || 'val/accuracy'}${keep}`;
}

/* "val/loss, patience 5, min delta 0" or "off" */
function earlyStopText(e) {
  if (!e) return 'off';
  return `${e.metric}, patience ${e.patience}, min delta ${e.min_delta}`;
}

/* "cosine to 0, warm-up 125 steps" */
function policyText(p) {
  if (!p || !p.type) return 'fixed';
  const extra = Object.entries(p).filter(([k]) => k !== 'type' && k !== 'warmup_steps')
    .map(([k, v]) => `${k.replace('_', ' ')} ${Array.isArray(v) ? v.join(', ') : v}`);
  if (p.warmup_steps) extra.push(`warm-up ${p.warmup_steps} steps`);
  return extra.length ? `${p.type}: ${extra.join(', ')}` : p.type;
}
