// The clone view (#/jobs/ID/clone): the new-job form (jobform.js) filled
// with job ID's settings, for the user to change and start. The settings are
// the job's request, GET /api/v1/jobs/{id}/request (the POST /api/v1/jobs body
// that recreates it); the name is the job's with " (copy)", as POST
// /api/v1/jobs/{id}/clone names a clone. Submitting creates an ordinary job
// (POST /api/v1/jobs with what the form shows) and opens its page.

import { get, getSchema, ApiError } from './api.js';
import { buildJobForm } from './jobform.js';
import { h, fill } from './ui.js';

const SUFFIX = ' (copy)';          // server/job_clone.h's JOB_CLONE_SUFFIX

export function renderClone(root, id) {
  const state = { datasets: [], networks: [], alive: true };
  const form = buildJobForm(state);
  const notes = h('div', { class: 'notice-box', role: 'status', id: 'clone-notes', hidden: true });
  const errorBox = h('div', { class: 'error-box', role: 'alert', id: 'clone-error', hidden: true });
  const loading = h('p', { class: 'muted', id: 'clone-loading', role: 'status' }, `Loading job ${id}'s settings…`);
  const card = h('section', { class: 'card clone-card', 'aria-labelledby': 'clone-title', hidden: true },
    h('div', { class: 'card-head' }, h('h2', { id: 'clone-title' }, 'New training job')), form.el);

  fill(root,
    h('nav', { class: 'crumbs', 'aria-label': 'breadcrumb' }, h('a', { href: '#/' }, 'Dashboard'), ' / ',
      h('a', { href: `#/jobs/${id}` }, `Job ${id}`), ' / ', 'Clone'),
    h('div', { class: 'page-head' },
      h('div', {},
        h('h1', { class: 'page-title' }, `Clone job ${id}`),
        h('p', { class: 'muted' }, `A new job with job ${id}'s settings: change what you want to try, then start it.`))),
    errorBox, loading, notes, card);

  (async () => {
    try {
      const [job, req, datasets, networks, info] = await Promise.all([
        get(`/jobs/${id}`), get(`/jobs/${id}/request`), get('/datasets'),
        get('/networks').catch(() => ({ items: [] })), get('/info').catch(() => ({ devices: [] }))]);
      if (!state.alive) return;
      state.datasets = datasets.items || [];
      state.networks = networks.items || [];
      form.setNetworks(state.networks);
      form.setDatasets(state.datasets);
      form.setInfo(info);
      const base = typeof req.name === 'string' && req.name ? req.name : `job ${id}`;
      const named = { ...req, name: cloneName(base, (await getSchema()).job.name.maxLength) };
      const said = await form.prefill(named, { stepsPerEpoch: job.epochs > 0 ? job.steps / job.epochs : 0 });
      if (!state.alive) return;
      notes.hidden = !said.length;
      fill(notes, said.map((n) => h('p', {}, n)));
      card.hidden = false;
    } catch (e) {
      if (!state.alive) return;
      errorBox.hidden = false;
      fill(errorBox, e instanceof ApiError && e.status === 404 ? `There is no job ${id}.` : e.message);
    } finally {
      loading.hidden = true;
    }
  })();

  return () => { state.alive = false; };
}

/* base + SUFFIX, base cut at a character so that the whole fits in max bytes
 * of UTF-8 (the name's limit in GET /api/v1/schema), as the server cuts it. */
function cloneName(base, max) {
  const bytes = (t) => new TextEncoder().encode(t).length;
  const chars = [...base];
  while (chars.length && bytes(chars.join('') + SUFFIX) > max) chars.pop();
  return chars.join('') + SUFFIX;
}
