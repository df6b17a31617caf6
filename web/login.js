// The sign-in page: shown when the API answers 401 (a server with users, or
// bound beyond loopback). It POSTs /api/v1/session, whose answer sets the
// kiln_session cookie (HttpOnly: this page never sees the secret), then hands
// the signed-in user to the app.

import { post } from './api.js';
import { h, fill } from './ui.js';

/* Renders the form into main; onSignedIn(session) once signed in. notice: a
 * line above the form (why the page is shown), or null. */
export function renderLogin(main, onSignedIn, notice = null) {
  const user = h('input', { id: 'login-user', name: 'username', autocomplete: 'username', required: true,
    spellcheck: 'false', autocapitalize: 'off' });
  const password = h('input', { id: 'login-password', name: 'password', type: 'password',
    autocomplete: 'current-password', required: true });
  const error = h('p', { class: 'form-error', id: 'login-error', role: 'alert', hidden: true });
  const button = h('button', { class: 'btn btn-primary', type: 'submit', id: 'login-submit' }, 'Sign in');
  const form = h('form', { class: 'form', id: 'login-form', novalidate: true },
    h('div', { class: 'field' }, h('label', { for: 'login-user' }, 'User name'), user),
    h('div', { class: 'field' }, h('label', { for: 'login-password' }, 'Password'), password),
    error,
    h('div', { class: 'actions' }, button));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    if (!user.value || !password.value) {
      error.textContent = 'Enter your user name and password.';
      error.hidden = false;
      return;
    }
    button.disabled = true;
    try {
      const session = await post('/session', { user: user.value, password: password.value });
      password.value = '';
      onSignedIn(session);
    } catch (e) {
      error.textContent = e.status === 401 ? 'Wrong user name or password.' : e.message;
      error.hidden = false;
      password.select();
    } finally {
      button.disabled = false;
    }
  });

  fill(main,
    h('section', { class: 'card login-card', 'aria-labelledby': 'login-title' },
      h('div', { class: 'card-head' }, h('h1', { id: 'login-title', class: 'page-title' }, 'Sign in')),
      notice ? h('p', { class: 'hint login-notice', id: 'login-notice' }, notice) : null,
      h('p', { class: 'hint' }, 'This kiln has users. An admin adds them with ',
        h('code', {}, 'kiln user add NAME'), '; scripts use a token: ',
        h('code', {}, 'Authorization: Bearer TOKEN'), '.'),
      form));
  main.dataset.view = 'login';
  document.title = 'Sign in · kiln';
  user.focus();
}
