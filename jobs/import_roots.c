/* jobs/import_roots.c: which server paths a request may import (contract in
 * import_roots.h).
 *
 * A path is resolved with realpath, so "..", "." and every symbolic link are
 * followed before the roots are compared, component by component ("/data2"
 * is not inside "/data"). A path that does not exist is answered from what
 * does: its longest existing prefix, resolved, must lie inside a root for
 * the answer to be "not found" rather than "not allowed", so a request learns
 * nothing about folders outside the roots.
 */
#define _GNU_SOURCE           /* realpath */
#include "jobs/import_roots.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How much of a path an error message shows. */
#define SHOWN "%.200s"

int import_roots_add(import_roots *r, const char *dir, char *err, size_t errlen)
{
    char buf[PATH_MAX];
    struct stat sb;
    if (!dir || !dir[0])
        return set_err(err, errlen, IMPORT_ROOTS_FLAG " needs a folder");
    if (!realpath(dir, buf))
        return set_err(err, errlen, IMPORT_ROOTS_FLAG " " SHOWN ": %s", dir, strerror(errno));
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return set_err(err, errlen, IMPORT_ROOTS_FLAG " " SHOWN ": not a folder", dir);
    char *copy = strdup(buf);
    char **dirs = copy ? realloc(r->dirs, (r->n + 1) * sizeof *dirs) : NULL;
    if (!dirs) {
        free(copy);
        return set_err(err, errlen, "out of memory");
    }
    dirs[r->n++] = copy;
    r->dirs = dirs;
    return 0;
}

void import_roots_free(import_roots *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->dirs[i]);
    free(r->dirs);
    r->dirs = NULL;
    r->n = 0;
}

/* Whether the resolved path p is root or lies below it. */
static bool below(const char *root, const char *p)
{
    size_t n = strlen(root);
    if (n == 1 && root[0] == '/')
        return p[0] == '/';
    return strncmp(p, root, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static bool inside_roots(const import_roots *r, const char *p)
{
    if (!r)
        return true;
    for (size_t i = 0; i < r->n; i++)
        if (below(r->dirs[i], p))
            return true;
    return false;
}

static int not_allowed(const import_roots *r, const char *path, api_error *e)
{
    if (r->n == 0)
        return api_fail(e, 403, "path_not_allowed",
                        SHOWN ": this server imports no files of its own; start kiln serve with "
                        IMPORT_ROOTS_FLAG " DIR to allow it", path);
    char list[256] = "";
    for (size_t i = 0, o = 0; i < r->n && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", r->dirs[i]);
    return api_fail(e, 403, "path_not_allowed",
                    SHOWN " resolves outside the import roots (%s); start kiln serve with "
                    IMPORT_ROOTS_FLAG " DIR to allow it", path, list);
}

/* The longest prefix of path (cut at slashes) that resolves, resolved into
 * out; "/" at worst. */
static void existing_prefix(const char *path, char *out)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (;;) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) {
            snprintf(out, PATH_MAX, "/");
            return;
        }
        *slash = '\0';
        if (realpath(p, out))
            return;
    }
}

int import_roots_check(const import_roots *r, const char *path, char *resolved, api_error *e)
{
    if (!path || !path[0])
        return api_fail(e, 400, "invalid_path", "the path is empty: give an absolute path");
    if (path[0] != '/')
        return api_fail(e, 400, "invalid_path", "\"" SHOWN "\" is not an absolute path: give it from /",
                        path);
    if (strlen(path) >= PATH_MAX)
        return api_fail(e, 400, "invalid_path", "the path is longer than %d bytes", PATH_MAX - 1);
    if (r && r->n == 0)
        return not_allowed(r, path, e);

    char buf[PATH_MAX];
    if (!realpath(path, buf)) {
        int why = errno;
        existing_prefix(path, buf);
        if (!inside_roots(r, buf))
            return not_allowed(r, path, e);
        if (why == ENOENT || why == ENOTDIR)
            return api_fail(e, 404, "path_not_found", SHOWN " does not exist", path);
        return api_fail(e, 400, "path_unreadable", "cannot read " SHOWN ": %s", path, strerror(why));
    }
    if (!inside_roots(r, buf))
        return not_allowed(r, path, e);
    struct stat sb;
    int mode = stat(buf, &sb) == 0 && S_ISDIR(sb.st_mode) ? R_OK | X_OK : R_OK;
    if (access(buf, mode) != 0)
        return api_fail(e, 400, "path_unreadable", "cannot read " SHOWN ": %s", path, strerror(errno));
    if (resolved)
        memcpy(resolved, buf, strlen(buf) + 1);
    return 0;
}
