// kiln dashboard: a hash router over three views, and the header's service info.
//   #/              datasets and jobs (home.js)
//   #/jobs/ID       one job, live (job.js)
//   #/datasets/ID   one dataset: its import report and classes (dataset.js)
//   #/sweep/ID      one hyper-parameter sweep; #/sweeps/new its form (sweep.js)
//   #/jobs/ID/clone the new-job form filled with job ID's settings (clone.js)
//   #/compare?runs=1,2,3  runs side by side (compare.js)
// Everything goes through the public REST API under /api/v1. When the server
// needs a sign-in (GET /api/v1/session, or any call, answers 401) the sign-in
// page (login.js) takes the place of the views until the user has signed in.

import { get, del } from './api.js';
import { h, fill, fmtBytes } from './ui.js';
import { renderLogin } from './login.js';
import { renderHome } from './home.js';
import { renderJob } from './job.js';
import { renderDataset } from './dataset.js';
import { renderSweep, renderNewSweep } from './sweep.js';
import { renderClone } from './clone.js';
import { renderCompare } from './compare.js';

const main = document.getElementById('main');
let teardown = null;

let signedIn = false;

function route() {
  if (teardown) { teardown(); teardown = null; }
  if (!signedIn) return;
  const hash = location.hash || '#/';
  const m = /^#\/jobs\/(\d+)\/?$/.exec(hash);
  const ds = /^#\/datasets\/(\d+)\/?$/.exec(hash);
  const sw = /^#\/sweep\/(\d+)\/?$/.exec(hash);
  const newSweep = /^#\/sweeps\/new\/?$/.test(hash);
  const clone = /^#\/jobs\/(\d+)\/clone\/?$/.exec(hash);
  const cmp = /^#\/compare\/?(\?.*)?$/.exec(hash);
  // a view's data-* marks (status, explored, ...) belong to that view only
  for (const k of Object.keys(main.dataset)) delete main.dataset[k];
  main.dataset.view = m ? 'job' : ds ? 'dataset' : clone ? 'clone' : cmp ? 'compare' : sw ? 'sweep'
    : newSweep ? 'new-sweep' : 'home';
  if (sw) {
    document.title = `Sweep ${sw[1]} · kiln`;
    teardown = renderSweep(main, Number(sw[1]));
  } else if (newSweep) {
    document.title = 'New sweep · kiln';
    teardown = renderNewSweep(main);
  } else if (cmp) {
    document.title = 'Compare runs · kiln';
    teardown = renderCompare(main, cmp[1] || '');
  } else if (clone) {
    document.title = `Clone job ${clone[1]} · kiln`;
    teardown = renderClone(main, Number(clone[1]));
  } else if (m) {
    document.title = `Job ${m[1]} · kiln`;
    teardown = renderJob(main, Number(m[1]));
  } else if (ds) {
    document.title = `Dataset ${ds[1]} · kiln`;
    teardown = renderDataset(main, Number(ds[1]));
  } else {
    document.title = 'kiln';
    teardown = renderHome(main);
  }
  main.focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

/* The header's backend chip: what can run here (GET /api/v1/info's
 * backends_available), and what is built but has no device, e.g.
 * "backend: cpu (CUDA built, no GPU found)". */
function backendText(info) {
  const built = info.backends || [];
  const usable = info.backends_available || built;
  const idle = built.filter((b) => !usable.includes(b))
    .map((b) => `${b === 'cuda' ? 'CUDA' : b} built, no ${b === 'cuda' ? 'GPU' : 'device'} found`);
  return `backend: ${usable.join(', ') || '—'}${idle.length ? ` (${idle.join('; ')})` : ''}`;
}

async function loadInfo() {
  const el = document.getElementById('service-info');
  try {
    const info = await get('/info');
    const devices = (info.devices || []).map((d) => {
      const mem = d.memory_bytes ? ` · ${fmtBytes(d.memory_bytes)}` : '';
      const free = d.memory_free_bytes != null ? `, ${fmtBytes(d.memory_free_bytes)} free` : '';
      const cc = d.compute_capability ? `, compute capability ${d.compute_capability}` : '';
      return h('span', { class: 'chip', title: `${d.kind} ${d.index}: ${d.name}${mem}${free}${cc}` },
        h('span', { class: `dot dot-${d.kind}` }), `${d.name}${mem}`);
    });
    fill(el,
      h('span', { class: 'chip', id: 'info-version' }, `v${info.version}`),
      h('span', { class: 'chip', id: 'info-backends' }, backendText(info)),
      ...devices);
  } catch (e) {
    fill(el, h('span', { class: 'chip chip-error' }, `service unavailable: ${e.message}`));
  }
}

/* The header's user and sign-out control (none on an open server). */
function showSession(session) {
  const el = document.getElementById('session-info');
  if (!session || !session.user) { fill(el); return; }
  const out = h('button', { class: 'link-btn', type: 'button', id: 'sign-out' }, 'Sign out');
  out.addEventListener('click', async () => {
    try { await del('/session'); } catch { /* signed out either way */ }
    showLogin(null);
  });
  fill(el,
    h('span', { class: 'chip', id: 'session-user', title: session.user.admin ? 'admin' : 'user' },
      session.user.name, session.user.admin ? ' · admin' : ''),
    out);
}

function showApp(session) {
  signedIn = true;
  showSession(session);
  route();
  loadInfo();
}

function showLogin(notice) {
  if (teardown) { teardown(); teardown = null; }
  signedIn = false;
  for (const k of Object.keys(main.dataset)) delete main.dataset[k];
  showSession(null);
  fill(document.getElementById('service-info'));
  renderLogin(main, showApp, notice);
}

async function start() {
  try {
    showApp(await get('/session'));
  } catch (e) {
    if (e.status === 401) showLogin(null);
    else showApp(null);         // an older server without sessions, or unreachable: the views say so
  }
}

window.addEventListener('hashchange', route);
window.addEventListener('kiln:unauthorized', (ev) => {
  if (signedIn) showLogin(`You were signed out: ${ev.detail}`);
});
start();
