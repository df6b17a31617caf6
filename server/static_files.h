/* server/static_files.h: the dashboard and the vendored browser libraries.
 *
 * GET / is <web-dir>/index.html; /web/PATH and any other non-API path are
 * files of the web dir (the dashboard asks for /app.js, /style.css); /static/PATH
 * is the static dir. Content types by extension; Cache-Control no-cache for the
 * dashboard (it changes with the server), a long max-age for static/.
 * A path with a ".." or "." segment, a backslash or a control byte is refused
 * (400); the resolved file must lie inside its folder (no link leads out);
 * a missing file is 404 with a JSON error.
 */
#ifndef KILN_SERVER_STATIC_FILES_H
#define KILN_SERVER_STATIC_FILES_H

#include <stdbool.h>

#include "server/http.h"

/* Answers a GET/HEAD for a non-API path. */
enum MHD_Result static_serve(request *r);

/* The content type for a file name ("application/octet-stream" when unknown). */
const char *static_content_type(const char *name);
/* True when a URL path is safe to map into a folder (see above). */
bool static_path_ok(const char *path);

#endif
