// The dashboard's REST client: the same public API curl uses (/api/v1).

// Relative to the page's <base href> (index.html), which kiln serve points at
// its --base-path: behind a proxy under /PREFIX this is /PREFIX/api/v1.
export const API = 'api/v1';

/* A URL the API gave (an API path such as "/api/v1/jobs/3/model?..."), as
 * the dashboard uses it: relative to the base, so it stays under the prefix. */
export function apiHref(url) {
  return typeof url === 'string' && url.startsWith('/') && !url.startsWith('//') ? url.slice(1) : url;
}

/* An error from the API: .status, .code and the server's message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function toError(res) {
  let code = 'http_error';
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body && body.error) {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch { /* not JSON: keep the status line */ }
  return new ApiError(res.status, code, message);
}

/* A 401 outside the sign-in itself: the session has ended or never was;
 * the app (app.js) shows the sign-in page. */
function unauthorized(err, path) {
  if (err.status === 401 && path !== '/session') {
    window.dispatchEvent(new CustomEvent('kiln:unauthorized', { detail: err.message }));
  }
}

/* GET/POST/... a JSON resource. Resolves to the parsed body; rejects with ApiError. */
export async function request(method, path, body) {
  const init = { method, headers: { accept: 'application/json' } };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(API + path, init);
  } catch (e) {
    throw new ApiError(0, 'network_error', `The server did not answer (${e.message}). Is kiln serve running?`);
  }
  if (!res.ok) {
    const err = await toError(res);
    unauthorized(err, path);
    throw err;
  }
  if (res.status === 204) return null;
  return res.json();
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body);
export const del = (path) => request('DELETE', path);

/* Uploads a dataset archive as multipart/form-data through XHR, so the browser
 * reports upload progress: onProgress(fraction). Resolves to the dataset. */
/* GET /api/v1/schema (the server's tables of request fields: "job", "dataset"),
 * once per page; asked again after a failure. */
let schemaRequest = null;
export function getSchema() {
  if (!schemaRequest) {
    schemaRequest = get('/schema');
    schemaRequest.catch(() => { schemaRequest = null; });
  }
  return schemaRequest;
}

/* options: {val_percent, width, height, channels}, each sent only when set. */
export function uploadDataset(name, file, onProgress, options = {}) {
  return new Promise((resolve, reject) => {
    const form = new FormData();
    form.append('name', name);
    for (const [k, v] of Object.entries(options)) {
      if (v !== undefined && v !== null && v !== '') form.append(k, String(v));
    }
    form.append('archive', file, file.name);
    const xhr = new XMLHttpRequest();
    xhr.open('POST', `${API}/datasets`);
    xhr.responseType = 'text';
    xhr.upload.addEventListener('progress', (e) => {
      if (e.lengthComputable && onProgress) onProgress(e.loaded / e.total);
    });
    xhr.addEventListener('load', () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { body = null; }
      if (xhr.status >= 200 && xhr.status < 300 && body) { resolve(body); return; }
      const err = body && body.error;
      const e = new ApiError(xhr.status, (err && err.code) || 'http_error',
        (err && err.message) || `Upload failed: ${xhr.status} ${xhr.statusText}`);
      unauthorized(e, '/datasets');
      reject(e);
    });
    xhr.addEventListener('error', () => reject(new ApiError(0, 'network_error',
      'The upload was interrupted: the connection to the server closed.')));
    xhr.addEventListener('abort', () => reject(new ApiError(0, 'aborted', 'The upload was cancelled.')));
    xhr.send(form);
  });
}
