/* jobs/pathlist.c: `path label` lists (contract in jobs/pathlist.h).
 *
 * The list is read through a 64 KiB buffer into one line of at most
 * PATHLIST_LINE_MAX bytes; a longer line is skipped to its end and reported.
 * Both passes parse a line with parse_line, against the same class limit,
 * so they agree on every line unless the file changes between them.
 */
#include "jobs/pathlist.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "jobs/readers.h"   /* class_names, readers_grouped */

#define BUF_SIZE 65536

struct pathlist {
    int fd;
    char dir[PATH_MAX];          /* the list's folder */
    bool has_labels;
    char labels_name[256];       /* the labels file's name, for messages */
    int limit;                   /* labels are 0 .. limit - 1 */
    class_names classes;
    size_t count, problems;
    /* the line being read */
    uint8_t buf[BUF_SIZE];
    size_t pos, len;
    bool eof;
    char line[PATHLIST_LINE_MAX + 1];
    size_t n;
    bool too_long;
    unsigned long lineno;
    /* what parse_line found */
    char path[PATH_MAX];
    char problem[512];
};

/* ---- lines ---------------------------------------------------------------------- */

/* Reads the next line into l->line (l->n bytes, terminated, without its
 * LF; l->too_long when it was cut). Returns 1, 0 at the end, -1 with err. */
static int next_line(pathlist *l, char *err, size_t errlen) {
    l->n = 0;
    l->too_long = false;
    bool any = false;
    for (;;) {
        if (l->pos == l->len) {
            if (l->eof) break;
            ssize_t r = read(l->fd, l->buf, sizeof l->buf);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return set_err(err, errlen, "cannot read the list: %s", strerror(errno));
            l->pos = 0;
            l->len = (size_t)r;
            if (r == 0) {
                l->eof = true;
                break;
            }
        }
        any = true;
        const uint8_t *p = l->buf + l->pos, *nl = memchr(p, '\n', l->len - l->pos);
        size_t take = nl ? (size_t)(nl - p) : l->len - l->pos;
        size_t room = PATHLIST_LINE_MAX - l->n, copy = take < room ? take : room;
        memcpy(l->line + l->n, p, copy);
        l->n += copy;
        if (copy < take) l->too_long = true;
        l->pos += take + (nl ? 1 : 0);
        if (nl) break;
    }
    l->line[l->n] = '\0';
    if (!any) return 0;
    l->lineno++;
    return 1;
}

/* ---- one line ---------------------------------------------------------------------- */

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f'; }

/* Joins text (n bytes) to the list's folder into l->path; false when too long. */
static bool resolve(pathlist *l, const char *text, size_t n) {
    int len;
    if (text[0] == '/')
        len = snprintf(l->path, sizeof l->path, "%.*s", (int)n, text);
    else
        len = snprintf(l->path, sizeof l->path, "%s%s%.*s", l->dir,
                       l->dir[strlen(l->dir) - 1] == '/' ? "" : "/", (int)n, text);
    return len >= 0 && (size_t)len < sizeof l->path;
}

/* Parses a label token (n bytes): 0 with *v, or -1 when not a whole number. */
static int parse_label(const char *t, size_t n, long *v) {
    size_t i = t[0] == '-' || t[0] == '+' ? 1 : 0;
    if (i == n) return -1;
    long x = 0;
    for (size_t k = i; k < n; k++) {
        if (t[k] < '0' || t[k] > '9') return -1;
        if (x < 100000000) x = x * 10 + (t[k] - '0');   /* past any class count: stop growing (no overflow) */
    }
    *v = t[0] == '-' ? -x : x;
    return 0;
}

static bool printable(const char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0x20 || t[i] > 0x7e) return false;
    return true;
}

typedef enum line_kind { LINE_SKIP, LINE_IMAGE, LINE_PROBLEM } line_kind;

/* Parses the current line: LINE_SKIP (empty or a comment), LINE_IMAGE with
 * l->path and *label, or LINE_PROBLEM with l->problem (and l->path, or ""). */
static line_kind parse_line(pathlist *l, int *label) {
    char *s = l->line;
    size_t n = l->n;
    l->path[0] = '\0';
    l->problem[0] = '\0';
    bool nul = strlen(s) != n;
    while (n > 0 && is_space(s[n - 1])) n--;
    while (n > 0 && is_space(*s)) s++, n--;
    if (n == 0 || s[0] == '#') return LINE_SKIP;
    if (l->too_long) {
        char a[32];
        snprintf(l->problem, sizeof l->problem, "line longer than %s bytes",
                 readers_grouped(a, PATHLIST_LINE_MAX));
        return LINE_PROBLEM;
    }
    if (nul) {
        snprintf(l->problem, sizeof l->problem, "line holds a NUL byte (not a text list)");
        return LINE_PROBLEM;
    }
    size_t t = n;                         /* the last token: s[t .. n) */
    while (t > 0 && !is_space(s[t - 1])) t--;
    if (t == 0) {
        if (!resolve(l, s, n)) l->path[0] = '\0';
        snprintf(l->problem, sizeof l->problem, "no label: expected `path label`");
        return LINE_PROBLEM;
    }
    size_t pn = t;
    while (pn > 0 && is_space(s[pn - 1])) pn--;
    bool path_ok = resolve(l, s, pn);
    if (!path_ok) l->path[0] = '\0';
    const char *tok = s + t;
    size_t tn = n - t;
    long v;
    if (parse_label(tok, tn, &v) != 0) {
        if (printable(tok, tn) && tn <= 40)
            snprintf(l->problem, sizeof l->problem, "label \"%.*s\" is not a whole number", (int)tn, tok);
        else
            snprintf(l->problem, sizeof l->problem, "the label is not a whole number");
        return LINE_PROBLEM;
    }
    int tw = tn > 40 ? 40 : (int)tn;      /* the label as written (digits), for the message */
    if (v < 0) {
        snprintf(l->problem, sizeof l->problem, "label %.*s is negative", tw, tok);
        return LINE_PROBLEM;
    }
    if (v >= l->limit) {
        if (l->has_labels)
            snprintf(l->problem, sizeof l->problem, "label %.*s is out of range: %s names %d classes (0..%d)", tw,
                     tok, l->labels_name, l->limit, l->limit - 1);
        else
            snprintf(l->problem, sizeof l->problem, "label %.*s is out of range: at most %d", tw, tok, l->limit - 1);
        return LINE_PROBLEM;
    }
    if (!path_ok) {
        snprintf(l->problem, sizeof l->problem, "path longer than %d bytes once joined to the list's folder",
                 PATH_MAX - 1);
        return LINE_PROBLEM;
    }
    *label = (int)v;
    return LINE_IMAGE;
}

/* ---- the list ------------------------------------------------------------------------ */

static int rewind_list(pathlist *l, char *err, size_t errlen) {
    if (lseek(l->fd, 0, SEEK_SET) != 0) return set_err(err, errlen, "cannot read the list: %s", strerror(errno));
    l->pos = l->len = 0;
    l->eof = false;
    l->lineno = 0;
    return 0;
}

/* The first pass: counts, and the largest label. */
static int count_lines(pathlist *l, int *max_label, char *err, size_t errlen) {
    int r;
    *max_label = -1;
    while ((r = next_line(l, err, errlen)) == 1) {
        int label;
        switch (parse_line(l, &label)) {
        case LINE_SKIP: break;
        case LINE_PROBLEM: l->problems++; break;
        case LINE_IMAGE:
            l->count++;
            if (label > *max_label) *max_label = label;
            break;
        }
    }
    return r;
}

pathlist *pathlist_open(const char *list_path, const char *labels_path, char *err, size_t errlen) {
    pathlist *l = calloc(1, sizeof *l);
    if (!l) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    l->fd = open(list_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (l->fd < 0) {
        set_err(err, errlen, "cannot read %s: %s", list_path, strerror(errno));
        goto fail;
    }
    if (fstat(l->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s is not a regular file (expected a `path label` list)", list_path);
        goto fail;
    }
    const char *slash = strrchr(list_path, '/');
    if (!slash) {
        snprintf(l->dir, sizeof l->dir, ".");
    } else {
        size_t dn = slash == list_path ? 1 : (size_t)(slash - list_path);
        if (dn >= sizeof l->dir) {
            set_err(err, errlen, "list path too long");
            goto fail;
        }
        memcpy(l->dir, list_path, dn);
        l->dir[dn] = '\0';
    }
    l->limit = READERS_MAX_CLASSES;
    if (labels_path) {
        const char *base = strrchr(labels_path, '/') ? strrchr(labels_path, '/') + 1 : labels_path;
        snprintf(l->labels_name, sizeof l->labels_name, "%s", base);
        if (class_names_load(&l->classes, labels_path, l->labels_name, READERS_MAX_CLASSES, err, errlen) != 0)
            goto fail;
        l->has_labels = true;
        l->limit = l->classes.n;
    }
    int max_label;
    if (count_lines(l, &max_label, err, errlen) != 0) goto fail;
    if (!l->has_labels && class_names_numbered(&l->classes, max_label + 1, err, errlen) != 0) goto fail;
    if (rewind_list(l, err, errlen) != 0) goto fail;
    return l;
fail:
    pathlist_close(l);
    return NULL;
}

void pathlist_close(pathlist *l) {
    if (!l) return;
    if (l->fd >= 0) close(l->fd);
    class_names_free(&l->classes);
    free(l);
}

size_t pathlist_count(const pathlist *l) { return l->count; }
size_t pathlist_problems(const pathlist *l) { return l->problems; }
int pathlist_nclasses(const pathlist *l) { return l->classes.n; }

const char *pathlist_class_name(const pathlist *l, int i) {
    return i >= 0 && i < l->classes.n ? l->classes.name[i] : NULL;
}

int pathlist_read(pathlist *l, pathlist_entry_fn fn, void *arg, char *err, size_t errlen) {
    if (rewind_list(l, err, errlen) != 0) return -1;
    int r;
    while ((r = next_line(l, err, errlen)) == 1) {
        int label = -1;
        line_kind k = parse_line(l, &label);
        if (k == LINE_SKIP) continue;
        if (k == LINE_IMAGE && label >= l->classes.n) {    /* the list grew a label since pathlist_open */
            snprintf(l->problem, sizeof l->problem, "label %d is out of range: %d classes (0..%d)", label,
                     l->classes.n, l->classes.n - 1);
            k = LINE_PROBLEM;
        }
        pathlist_entry e = {
            .line = l->lineno,
            .path = l->path[0] ? l->path : NULL,
            .label = k == LINE_IMAGE ? label : -1,
            .problem = k == LINE_PROBLEM ? l->problem : NULL,
        };
        if (fn(arg, &e, err, errlen) != 0) return -1;
    }
    return r < 0 ? -1 : 0;
}
