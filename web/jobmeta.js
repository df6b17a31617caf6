// The job page's name, tags and notes (issue 16): shown, and edited in a small
// form that saves with PATCH /api/v1/jobs/{id}. The limits are the server's
// (GET /api/v1/schema "job_edit"); the server checks them again.

import { request, getSchema, ApiError } from './api.js';
import { h, fill } from './ui.js';

/* Splits "a, b ,c" into trimmed, non-empty, distinct tags. */
export function parseTags(text) {
  const out = [];
  for (const t of text.split(',').map((s) => s.trim())) if (t && !out.includes(t)) out.push(t);
  return out;
}

/* jobMetaCard(id, onSaved(job)) -> {el, set(job)}: set shows a job's fields
 * (not while the form is being edited). */
export function jobMetaCard(id, onSaved) {
  let job = null;
  let editing = false;
  const view = h('div', { id: 'job-meta-view' });
  const name = h('input', { id: 'job-meta-name', autocomplete: 'off', placeholder: 'a name for this run' });
  const tags = h('input', { id: 'job-meta-tags', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'comma-separated, e.g. baseline, lr-sweep' });
  const notes = h('textarea', { id: 'job-meta-notes', rows: 4, placeholder: 'what this run tried, what it showed' });
  const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
  const save = h('button', { type: 'submit', class: 'btn btn-primary', id: 'job-meta-save' }, 'Save');
  const cancel = h('button', { type: 'button', class: 'btn', id: 'job-meta-cancel' }, 'Cancel');
  const form = h('form', { class: 'form', id: 'job-meta-form', hidden: true, novalidate: true },
    h('div', { class: 'field' }, h('label', { for: 'job-meta-name' }, 'Name'), name),
    h('div', { class: 'field' }, h('label', { for: 'job-meta-tags' }, 'Tags'), tags),
    h('div', { class: 'field' }, h('label', { for: 'job-meta-notes' }, 'Notes'), notes),
    error,
    h('div', { class: 'actions' }, save, cancel));
  const edit = h('button', { type: 'button', class: 'link-btn small', id: 'job-meta-edit' }, 'Edit');
  const el = h('section', { class: 'card', id: 'job-meta', 'aria-labelledby': 'job-meta-title' },
    h('div', { class: 'card-head' }, h('h2', { id: 'job-meta-title' }, 'Name, tags and notes'), edit),
    view, form);

  getSchema().then((s) => {
    const lim = (s && s.job_edit) || {};
    if (lim.name_max_bytes) name.maxLength = lim.name_max_bytes;
    if (lim.notes_max_bytes) notes.maxLength = lim.notes_max_bytes;
    if (lim.tags_max) tags.title = `at most ${lim.tags_max} tags of at most ${lim.tag_max_bytes} bytes each`;
  }).catch(() => { /* the server checks the limits anyway */ });

  function show() {
    const t = (job && job.tags) || [];
    fill(view,
      h('p', { class: 'job-meta-name' }, job && job.name ? job.name : h('span', { class: 'muted' }, 'No name')),
      h('div', { class: 'tag-list', id: 'job-meta-tags-view' },
        t.length ? t.map((x) => h('span', { class: 'tag-chip' }, x)) : h('span', { class: 'muted small' }, 'No tags')),
      h('p', { class: 'job-meta-notes', id: 'job-meta-notes-view' },
        job && job.notes ? job.notes : h('span', { class: 'muted small' }, 'No notes')));
  }

  function open(on) {
    editing = on;
    form.hidden = !on;
    view.hidden = on;
    edit.hidden = on;
    error.hidden = true;
    if (on) {
      name.value = (job && job.name) || '';
      tags.value = ((job && job.tags) || []).join(', ');
      notes.value = (job && job.notes) || '';
      name.focus();
    }
  }

  edit.addEventListener('click', () => open(true));
  cancel.addEventListener('click', () => open(false));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    save.disabled = true;
    try {
      const body = { name: name.value.trim(), tags: parseTags(tags.value), notes: notes.value };
      job = await request('PATCH', `/jobs/${id}`, body);
      open(false);
      show();
      if (onSaved) onSaved(job);
    } catch (e) {
      error.hidden = false;
      fill(error, e instanceof ApiError ? e.message : String(e));
    } finally {
      save.disabled = false;
    }
  });

  show();
  return {
    el,
    set(j) {
      job = j;
      if (!editing) show();
    },
  };
}
