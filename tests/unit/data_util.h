/* tests/unit/data_util.h: temporary folders for the data tests (dataset,
 * import, TensorBoard). Header-only, static: each test file gets its own copy.
 * Include after defining _GNU_SOURCE (nftw). */
#ifndef KILN_TESTS_DATA_UTIL_H
#define KILN_TESTS_DATA_UTIL_H

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int du_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    return (flag == FTW_DP || flag == FTW_D) ? rmdir(path) : unlink(path);
}

/* Removes a folder and everything in it. */
static inline void du_rm_rf(const char *path) { nftw(path, du_rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Creates a fresh folder under $TMPDIR (or /tmp) into buf; returns buf or NULL. */
static inline char *du_mkdtemp(char *buf, size_t len) {
    const char *t = getenv("TMPDIR");
    snprintf(buf, len, "%s/kiln-test-XXXXXX", t && t[0] ? t : "/tmp");
    return mkdtemp(buf);
}

/* Writes n bytes to path; returns 0 or -1. */
static inline int du_write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(p, 1, n, f) != n;
    if (fclose(f) != 0) bad = 1;
    return bad ? -1 : 0;
}

/* Reads a whole file (malloc'ed, NUL-terminated); NULL on error. */
static inline char *du_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        if (len) *len = (size_t)n;
    }
    return b;
}

/* Number of entries in a folder whose name ends with suffix. */
static inline int du_count_suffix(const char *dir, const char *suffix) {
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    size_t sl = strlen(suffix);
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l >= sl && strcmp(e->d_name + l - sl, suffix) == 0) n++;
    }
    closedir(d);
    return n;
}

#endif
