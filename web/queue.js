// The queue card on the home page (issue 17): GET /api/v1/queue every few
// seconds. Running jobs and evaluations with the devices each got; waiting
// ones in the order they will start, with their position, priority and what
// they wait for (the scheduler's own words), and up/down buttons that PATCH a
// job's priority where the caller may change it (can_change_priority). Another
// user's items come anonymised from the server and show as "another user's".

import { get, request } from './api.js';
import { h, fill, statusBadge } from './ui.js';

const REFRESH_MS = 3000;

/* "job 4 · name" / "evaluation 2 of job 4" / "another user's job". */
function label(it) {
  if (it.hidden) return h('span', { class: 'muted' }, `another user's ${it.kind}`);
  if (it.kind === 'evaluation') {
    return h('span', {}, `evaluation ${it.id} of `, h('a', { href: `#/jobs/${it.job_id}` }, `job ${it.job_id}`));
  }
  return h('a', { href: `#/jobs/${it.id}` }, `#${it.id}${it.name ? ` ${it.name}` : ''}`);
}

function devicesText(d) {
  return Array.isArray(d) && d.length ? d.join(', ') : '—';
}

export function queueCard() {
  const body = h('tbody');
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const summary = h('span', { class: 'muted', id: 'queue-summary' });
  const el = h('section', { class: 'card', id: 'queue-card', 'aria-labelledby': 'queue-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'queue-title' }, 'Queue'), summary),
    error,
    h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'queue-table' },
      h('thead', {}, h('tr', {}, h('th', { scope: 'col', class: 'num' }, '#'), h('th', { scope: 'col' }, 'Work'),
        h('th', { scope: 'col' }, 'Status'), h('th', { scope: 'col', class: 'num' }, 'Priority'),
        h('th', { scope: 'col' }, 'Devices / waiting for'))),
      body)));
  let alive = true;
  let limits = { min: -100, max: 100 };

  async function nudge(it, by, btn) {
    btn.disabled = true;
    const want = Math.max(limits.min, Math.min(limits.max, it.priority + by));
    try {
      await request('PATCH', `/jobs/${it.id}`, { priority: want });
      error.hidden = true;
    } catch (e) {
      error.textContent = `Could not change the priority of job ${it.id}: ${e.message}`;
      error.hidden = false;
    }
    refresh();
  }

  function priorityCell(it) {
    if (!it.can_change_priority) return h('td', { class: 'num' }, String(it.priority));
    const up = h('button', { type: 'button', class: 'btn btn-small queue-up', title: 'Raise the priority',
      'aria-label': `raise the priority of job ${it.id}`, disabled: it.priority >= limits.max }, '▲');
    const down = h('button', { type: 'button', class: 'btn btn-small queue-down', title: 'Lower the priority',
      'aria-label': `lower the priority of job ${it.id}`, disabled: it.priority <= limits.min }, '▼');
    up.addEventListener('click', () => nudge(it, 1, up));
    down.addEventListener('click', () => nudge(it, -1, down));
    return h('td', { class: 'num nowrap' }, up, ' ', h('span', { class: 'queue-priority' }, String(it.priority)), ' ', down);
  }

  /* Where a running item runs: its devices here, or its Slurm job and nodes. */
  function runsOn(it) {
    if (!it.slurm) return `on ${devicesText(it.assigned_devices)}`;
    return `in Slurm job ${it.slurm.job_id}${it.slurm.nodes ? ` on ${it.slurm.nodes}` : ''}`;
  }

  function row(it) {
    const attrs = { class: it.hidden ? 'queue-other' : '', 'data-kind': it.kind };
    if (!it.hidden) attrs['data-id'] = it.id;
    return h('tr', attrs,
      h('td', { class: 'num' }, it.position ? String(it.position) : ''),
      h('td', {}, label(it)),
      h('td', {}, statusBadge(it.status)),
      it.status === 'running' ? h('td', { class: 'num' }, String(it.priority)) : priorityCell(it),
      h('td', { class: 'queue-why' }, it.status === 'running' ? runsOn(it) : it.waiting_for));
  }

  async function refresh() {
    try {
      const q = await get('/queue');
      if (!alive) return;
      error.hidden = true;
      limits = { min: q.priority_min, max: q.priority_max };
      fill(summary, `${q.running.length} running · ${q.queued.length} waiting`);
      if (!q.running.length && !q.queued.length) {
        fill(body, h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'Nothing is running or waiting.')));
        return;
      }
      fill(body, [...q.running, ...q.queued].map(row));
    } catch (e) {
      if (!alive) return;
      error.textContent = `Could not load the queue: ${e.message}`;
      error.hidden = false;
    }
  }
  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  return { el, refresh, stop() { alive = false; clearInterval(timer); } };
}
