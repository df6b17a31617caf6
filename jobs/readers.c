/* jobs/readers.c: class-name lists and counts for the source readers
 * (contract in jobs/readers.h). */
#include "jobs/readers.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

const char *readers_grouped(char buf[32], uint64_t n) {
    char t[24];
    int len = snprintf(t, sizeof t, "%llu", (unsigned long long)n), o = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = t[i];
    }
    buf[o] = '\0';
    return buf;
}

/* Whether p[0..n) is UTF-8 (shortest forms, no surrogates, at most U+10FFFF). */
static bool is_utf8(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t len;
        unsigned min, cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2, min = 0x80, cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, min = 0x800, cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, min = 0x10000, cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len) return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += len;
    }
    return true;
}

void class_names_free(class_names *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->name[i]);
    free(c->name);
    c->n = 0;
    c->name = NULL;
}

typedef struct name_at {
    const char *name;
    int line;
} name_at;

static int by_name(const void *a, const void *b) {
    const name_at *x = a, *y = b;
    int d = strcmp(x->name, y->name);
    return d ? d : (x->line > y->line) - (x->line < y->line);
}

/* Fails when two of c's names are the same (lines[i]: where name i was). */
static int check_unique(const class_names *c, const int *lines, const char *file, char *err, size_t errlen) {
    name_at *v = malloc((size_t)c->n * sizeof *v + 1);
    if (!v) return set_err(err, errlen, "out of memory");
    for (int i = 0; i < c->n; i++) v[i] = (name_at){ c->name[i], lines[i] };
    qsort(v, (size_t)c->n, sizeof *v, by_name);
    int rc = 0;
    for (int i = 1; i < c->n && rc == 0; i++) {
        if (strcmp(v[i - 1].name, v[i].name) == 0)
            rc = set_err(err, errlen, "%s: line %d repeats the class \"%s\" of line %d", file, v[i].line, v[i].name,
                         v[i - 1].line);
    }
    free(v);
    return rc;
}

static bool is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r'; }

#define TEXT_(x) #x
#define TEXT(x) TEXT_(x)

const char *readers_class_name_problem(const char *s, size_t n) {
    if (n == 0) return "an empty class name";
    if (n > READERS_NAME_MAX) return "a class name longer than " TEXT(READERS_NAME_MAX) " bytes";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        /* C0, DEL, and C1 (U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8) */
        if (c < 0x20 || c == 0x7f || (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                                      (unsigned char)s[i + 1] <= 0x9f))
            return "a control character in a class name";
    }
    return NULL;
}

int class_names_parse(class_names *c, const char *text, size_t len, const char *file, int max,
                      char *err, size_t errlen) {
    *c = (class_names){ 0 };
    if (memchr(text, '\0', len)) return set_err(err, errlen, "%s: not a text file (it holds a NUL byte)", file);
    int cap = 0, *lines = NULL, line = 0, rc = -1;
    for (size_t at = 0; at < len;) {
        const char *p = text + at, *nl = memchr(p, '\n', len - at);
        size_t n = nl ? (size_t)(nl - p) : len - at;
        at += n + 1;
        line++;
        while (n > 0 && is_blank(p[n - 1])) n--;
        while (n > 0 && is_blank(*p)) p++, n--;
        if (n == 0) continue;
        const char *problem = readers_class_name_problem(p, n);
        if (problem) {
            set_err(err, errlen, "%s: line %d: %s", file, line, problem);
            goto out;
        }
        if (!is_utf8((const unsigned char *)p, n)) {
            set_err(err, errlen, "%s: line %d: a class name that is not UTF-8 text", file, line);
            goto out;
        }
        if (c->n == max) {
            set_err(err, errlen, "%s: more than %d class names", file, max);
            goto out;
        }
        if (c->n == cap) {
            int ncap = cap ? 2 * cap : 16;
            char **nn = realloc(c->name, (size_t)ncap * sizeof *nn);
            if (nn) c->name = nn;
            int *nl2 = nn ? realloc(lines, (size_t)ncap * sizeof *nl2) : NULL;
            if (nl2) lines = nl2;
            if (!nn || !nl2) {
                set_err(err, errlen, "out of memory");
                goto out;
            }
            cap = ncap;
        }
        char *name = strndup(p, n);
        if (!name) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        lines[c->n] = line;
        c->name[c->n++] = name;
    }
    if (c->n == 0) {
        set_err(err, errlen, "%s: names no classes", file);
        goto out;
    }
    rc = check_unique(c, lines, file, err, errlen);
out:
    free(lines);
    if (rc != 0) class_names_free(c);
    return rc;
}

int class_names_load(class_names *c, const char *path, const char *file, int max, char *err, size_t errlen) {
    *c = (class_names){ 0 };
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return set_err(err, errlen, "%s: %s", file, strerror(errno));
    struct stat st;
    char *buf = NULL;
    int rc = -1;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", file);
        goto out;
    }
    if (st.st_size > (off_t)READERS_NAMES_FILE_MAX) {
        set_err(err, errlen, "%s: larger than %u MiB, not a list of class names", file,
                READERS_NAMES_FILE_MAX >> 20);
        goto out;
    }
    size_t n = (size_t)st.st_size, got = 0;
    buf = malloc(n + 1);
    if (!buf) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            set_err(err, errlen, "%s: %s", file, strerror(errno));
            goto out;
        }
        if (r == 0) break;   /* shrank since fstat: parse what is there */
        got += (size_t)r;
    }
    rc = class_names_parse(c, buf, got, file, max, err, errlen);
out:
    free(buf);
    close(fd);
    return rc;
}

int class_names_numbered(class_names *c, int n, char *err, size_t errlen) {
    *c = (class_names){ 0 };
    if (n <= 0) return 0;
    c->name = calloc((size_t)n, sizeof *c->name);
    if (!c->name) return set_err(err, errlen, "out of memory");
    for (int i = 0; i < n; i++) {
        char t[16];
        snprintf(t, sizeof t, "%d", i);
        c->name[i] = strdup(t);
        if (!c->name[i]) {
            c->n = i;
            class_names_free(c);
            return set_err(err, errlen, "out of memory");
        }
    }
    c->n = n;
    return 0;
}
