/* jobs/import_roots.h: the folders of the server's own disk that a request may
 * import from (`kiln serve --import-root DIR`, repeatable; none by default).
 *
 * One rule, here only: a path a request names (a source's path, a list's
 * labels file, each image a list names) is read only when, after every ".",
 * ".." and symbolic link is resolved (realpath), it is one of the roots or
 * lies below one. `kiln import` runs in the operator's own shell and checks
 * nothing (it passes no roots).
 */
#ifndef KILN_JOBS_IMPORT_ROOTS_H
#define KILN_JOBS_IMPORT_ROOTS_H

#include <stddef.h>

#include "base/err.h"   /* api_error */

typedef struct import_roots {
    size_t n;
    char **dirs;         /* n resolved absolute folders (owned) */
} import_roots;

#define IMPORT_ROOTS_FLAG "--import-root"

/* Adds dir, which must be an existing folder, resolved with realpath.
 * Returns 0, or -1 with err set ("--import-root DIR: No such file or
 * directory"); r is unchanged then. */
int import_roots_add(import_roots *r, const char *dir, char *err, size_t errlen);

/* Frees what r holds and empties it; NULL is a no-op. */
void import_roots_free(import_roots *r);

/* Resolves path (absolute) and checks that it exists inside one of r's
 * folders. r NULL: no roots check (kiln import), only the resolution. On
 * success returns 0 with the resolved path in resolved (PATH_MAX bytes; may
 * be NULL). Otherwise -1 with e (the path named in the message):
 *   403 path_not_allowed  r has no folders, or the path lies outside them (also
 *                         through ".." or a link); the message says to start
 *                         kiln serve with --import-root DIR
 *   404 path_not_found    it does not exist (and what exists of it lies inside
 *                         a root, so nothing is told about other folders)
 *   400 path_unreadable   it exists but cannot be read (permissions, a loop
 *                         of links)
 *   400 invalid_path      empty, relative, or longer than PATH_MAX
 * Thread-safe (r is only read). */
int import_roots_check(const import_roots *r, const char *path, char *resolved, api_error *e);

#endif
