// kiln dashboard: a hash router over three views, and the header's service info.
//   #/              datasets and jobs (home.js)
//   #/jobs/ID       one job, live (job.js)
//   #/datasets/ID   one dataset: its import report and classes (dataset.js)
// Everything goes through the public REST API under /api/v1.

import { get } from './api.js';
import { h, fill, fmtBytes } from './ui.js';
import { renderHome } from './home.js';
import { renderJob } from './job.js';
import { renderDataset } from './dataset.js';

const main = document.getElementById('main');
let teardown = null;

function route() {
  if (teardown) { teardown(); teardown = null; }
  const hash = location.hash || '#/';
  const m = /^#\/jobs\/(\d+)\/?$/.exec(hash);
  const ds = /^#\/datasets\/(\d+)\/?$/.exec(hash);
  // a view's data-* marks (status, explored, ...) belong to that view only
  for (const k of Object.keys(main.dataset)) delete main.dataset[k];
  main.dataset.view = m ? 'job' : ds ? 'dataset' : 'home';
  if (m) {
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
      h('span', { class: 'chip', id: 'info-backends' }, `backend: ${(info.backends || []).join(', ') || '—'}`),
      ...devices);
  } catch (e) {
    fill(el, h('span', { class: 'chip chip-error' }, `service unavailable: ${e.message}`));
  }
}

window.addEventListener('hashchange', route);
route();
loadInfo();
