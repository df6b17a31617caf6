/* tests/fuzz/fuzz_util.h: what the libFuzzer targets share (header-only:
 * each target is one translation unit).
 *
 *   fuzz_scratch()    a folder of this process's own under $TMPDIR (or
 *                     /dev/shm, or /tmp), made on first use and removed at exit: the
 *                     readers that take paths read the input from there
 *   fuzz_write()      writes bytes to a file, whole
 *   fuzz_empty()      empties a folder (the scratch, between inputs)
 *   fuzz_note()       with KILN_FUZZ_VERBOSE=1 in the environment, prints
 *                     what a reader answered (to see what a seed reaches)
 *   fuzz_touch()      reads every byte of a buffer a reader handed over
 *   fuzz_split()      one input as several files: the parts between
 *                     FUZZ_SEP lines (the dictionaries hold FUZZ_SEP, so the
 *                     fuzzer finds it; the corpus files are made so)
 *
 * A failure of the harness itself (no disk) aborts: that is not a finding
 * about kiln, and libFuzzer should stop rather than go on blind.
 */
#ifndef KILN_TESTS_FUZZ_UTIL_H
#define KILN_TESTS_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#error "the fuzz targets are built with _GNU_SOURCE (tests/fuzz/CMakeLists.txt)"
/* The network fuzz_checkpoint restores into, and make_seeds saves its seeds
 * from: every kind of state (convolution, batch norm with its running
 * statistics, dense; Adam's two slots per parameter). */
#define FUZZ_CKPT_SPEC                                                                      \
    "{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3}, {\"type\": \"batchnorm\"}," \
    " {\"type\": \"relu\"}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]}"
#define FUZZ_CKPT_SHAPE ((net_shape){ 1, 4, 4 })
#define FUZZ_CKPT_CLASSES 3

#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_SEP "\n--part--\n"
#define FUZZ_SEP_LEN (sizeof FUZZ_SEP - 1)

static char fuzz_scratch_dir[PATH_MAX];

static inline void fuzz_die(const char *what)
{
    fprintf(stderr, "fuzz harness: %s: %s\n", what, strerror(errno));
    abort();
}

static inline int fuzz_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

/* Removes everything below dir (dir itself stays). */
static inline void fuzz_empty(const char *dir)
{
    nftw(dir, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(dir, 0700);
}

static inline void fuzz_scratch_remove(void)
{
    if (fuzz_scratch_dir[0]) {
        fuzz_empty(fuzz_scratch_dir);
        rmdir(fuzz_scratch_dir);
    }
}

static inline const char *fuzz_scratch(void)
{
    if (!fuzz_scratch_dir[0]) {
        /* /dev/shm where there is one: the writers fsync, which memory makes free. */
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !*tmp)
            tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_scratch_dir, sizeof fuzz_scratch_dir, "%s/kiln-fuzz-XXXXXX", tmp);
        if (!mkdtemp(fuzz_scratch_dir))
            fuzz_die("mkdtemp");
        atexit(fuzz_scratch_remove);
    }
    return fuzz_scratch_dir;
}

static inline void fuzz_note(const char *what, int rc, const char *err)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("KILN_FUZZ_VERBOSE") && *getenv("KILN_FUZZ_VERBOSE") == '1';
    if (verbose)
        fprintf(stderr, "%s: %s\n", what, rc == 0 ? "ok" : err);
}

/* Reads every byte of p[0..n) (so that AddressSanitizer checks them all). */
static volatile uint8_t fuzz_sink;
static inline void fuzz_touch(const void *p, size_t n)
{
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= ((const uint8_t *)p)[i];
    fuzz_sink = x;
}

/* dir/name into buf (PATH_MAX). */
static inline char *fuzz_path(char *buf, const char *dir, const char *name)
{
    snprintf(buf, PATH_MAX, "%s/%s", dir, name);
    return buf;
}

static inline void fuzz_write(const char *path, const uint8_t *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fuzz_die(path);
    while (len > 0) {
        ssize_t k = write(fd, data, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            fuzz_die(path);
        data += k;
        len -= (size_t)k;
    }
    close(fd);
}

/* Splits data at each FUZZ_SEP into at most max parts (the last one takes
 * the rest); returns how many. */
static inline size_t fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, size_t max)
{
    size_t n = 0;
    while (n + 1 < max) {
        const uint8_t *sep = memmem(data, size, FUZZ_SEP, FUZZ_SEP_LEN);
        if (!sep)
            break;
        part[n] = data;
        len[n++] = (size_t)(sep - data);
        size -= (size_t)(sep - data) + FUZZ_SEP_LEN;
        data = sep + FUZZ_SEP_LEN;
    }
    part[n] = data;
    len[n++] = size;
    return n;
}

/* The network fuzz_checkpoint restores into, and make_seeds saves its seeds
 * from: every kind of state (convolution, batch norm with its running
 * statistics, dense; Adam's two slots per parameter). */
#define FUZZ_CKPT_SPEC                                                                      \
    "{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3}, {\"type\": \"batchnorm\"}," \
    " {\"type\": \"relu\"}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]}"
#define FUZZ_CKPT_SHAPE ((net_shape){ 1, 4, 4 })
#define FUZZ_CKPT_CLASSES 3

#endif
