/* jobs/idx.c: MNIST's IDX files, checked then streamed (contract in jobs/idx.h).
 *
 * Each file is read through libarchive's "raw" format with the gzip filter,
 * so a gzipped file and a plain one are the same stream to the code below
 * (libarchive tells them apart by their first bytes, not by the name). A
 * stream is read in small pieces: one image and a block of labels at a time.
 */
#include "jobs/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "base/err.h"
#include "jobs/readers.h"   /* readers_grouped, class_names */

#define IMAGES_MAGIC 0x00000803u    /* unsigned bytes, 3 dimensions */
#define LABELS_MAGIC 0x00000801u    /* unsigned bytes, 1 dimension */
#define IMAGES_HEADER 16            /* magic, count, rows, cols */
#define LABELS_HEADER 8             /* magic, count */
#define CHUNK 65536                 /* bytes read at a time */

typedef enum file_kind { KIND_IMAGES, KIND_LABELS, KIND_COUNT } file_kind;

/* The names each file may have, in the order they are tried (each plain, then
 * with ".gz"); the first is the one error messages use when it is missing. */
static const struct idx_name {
    reader_split split;
    file_kind kind;
    const char *names[2];
} idx_names[] = {
    { READER_TRAIN, KIND_IMAGES, { "train-images-idx3-ubyte", "train-images.idx3-ubyte" } },
    { READER_TRAIN, KIND_LABELS, { "train-labels-idx1-ubyte", "train-labels.idx1-ubyte" } },
    { READER_TEST, KIND_IMAGES, { "t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte" } },
    { READER_TEST, KIND_LABELS, { "t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte" } },
};
static const char *const suffixes[] = { "", ".gz" };

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct idx_file {
    bool found;
    char name[48];               /* as found in the folder: "train-images-idx3-ubyte.gz" */
    char path[PATH_MAX];
    uint32_t count, rows, cols;  /* from the header (rows, cols: images only) */
} idx_file;

struct idx_source {
    idx_file files[2][KIND_COUNT];   /* [split][kind] */
    int w, h;
    int nclasses;
    class_names classes;             /* "0" .. max label */
};

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* ---- one file as a byte stream ------------------------------------------------ */

typedef struct stream {
    struct archive *a;
    int fd;
    const char *name;
    bool compressed;   /* gzipped: its length is known only by reading it */
    bool eof;
    off_t size;        /* the file's size on disk */
} stream;

static void stream_close(stream *s) {
    if (s->a) archive_read_free(s->a);
    if (s->fd >= 0) close(s->fd);
    s->a = NULL;
    s->fd = -1;
}

static int stream_open(stream *s, const idx_file *f, char *err, size_t errlen) {
    *s = (stream){ .fd = -1, .name = f->name };
    struct stat st;
    s->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (s->fd < 0) return set_err(err, errlen, "%s: %s", f->name, strerror(errno));
    if (fstat(s->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        stream_close(s);
        return set_err(err, errlen, "%s: not a regular file", f->name);
    }
    s->size = st.st_size;
    s->a = archive_read_new();
    if (!s->a) {
        stream_close(s);
        return set_err(err, errlen, "out of memory");
    }
    archive_read_support_format_raw(s->a);
    archive_read_support_format_empty(s->a);   /* a gzip stream of nothing: an empty file */
    archive_read_support_filter_gzip(s->a);
    struct archive_entry *e;
    int r = ARCHIVE_EOF;
    if (st.st_size > 0) {
        if (archive_read_open_fd(s->a, s->fd, CHUNK) != ARCHIVE_OK) goto fail;
        r = archive_read_next_header(s->a, &e);
    }
    if (r == ARCHIVE_EOF) {
        s->eof = true;           /* an empty file, or an empty gzip member */
    } else if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        goto fail;
    }
    s->compressed = archive_filter_count(s->a) > 1;
    return 0;
fail:
    set_err(err, errlen, "%s: cannot read: %s", f->name,
            archive_error_string(s->a) ? archive_error_string(s->a) : "unknown error");
    stream_close(s);
    return -1;
}

/* Reads up to n bytes into buf; *got is how many (less than n only at the
 * end). Returns 0, or -1 with err set. */
static int stream_read(stream *s, void *buf, size_t n, size_t *got, char *err, size_t errlen) {
    *got = 0;
    while (*got < n && !s->eof) {
        la_ssize_t r = archive_read_data(s->a, (uint8_t *)buf + *got, n - *got);
        if (r < 0) {
            return set_err(err, errlen, "%s: cannot read: %s", s->name,
                           archive_error_string(s->a) ? archive_error_string(s->a) : "unknown error");
        }
        if (r == 0) s->eof = true;
        *got += (size_t)r;
    }
    return 0;
}

/* ---- headers and lengths ------------------------------------------------------ */

static uint64_t header_size(file_kind k) { return k == KIND_IMAGES ? IMAGES_HEADER : LABELS_HEADER; }

static uint64_t data_size(const idx_file *f, file_kind k) {
    return k == KIND_IMAGES ? (uint64_t)f->count * f->rows * f->cols : f->count;
}

/* "a 16-byte header and 60,000 images of 28x28" */
static void layout_text(char *buf, size_t n, const idx_file *f, file_kind k) {
    char c[32];
    if (k == KIND_IMAGES)
        snprintf(buf, n, "a %d-byte header and %s images of %ux%u", IMAGES_HEADER, readers_grouped(c, f->count),
                 f->cols, f->rows);
    else
        snprintf(buf, n, "an %d-byte header and %s labels", LABELS_HEADER, readers_grouped(c, f->count));
}

/* Reads and checks the header of f (a file of kind k) from s into f. */
static int read_header(stream *s, idx_file *f, file_kind k, char *err, size_t errlen) {
    uint8_t h[IMAGES_HEADER];
    size_t want = (size_t)header_size(k), got;
    if (stream_read(s, h, want, &got, err, errlen) != 0) return -1;
    if (got < 4) return set_err(err, errlen, "%s: %zu bytes, too short for an IDX file", f->name, got);
    uint32_t magic = be32(h), expect = k == KIND_IMAGES ? IMAGES_MAGIC : LABELS_MAGIC;
    if (magic != expect) {
        return set_err(err, errlen, "%s: magic number 0x%08x, expected 0x%08x (IDX %s: unsigned bytes, %d %s)",
                       f->name, magic, expect, k == KIND_IMAGES ? "images" : "labels",
                       k == KIND_IMAGES ? 3 : 1, k == KIND_IMAGES ? "dimensions" : "dimension");
    }
    if (got < want) return set_err(err, errlen, "%s: truncated inside its %zu-byte header", f->name, want);
    f->count = be32(h + 4);
    if (k == KIND_IMAGES) {
        f->rows = be32(h + 8);
        f->cols = be32(h + 12);
        if (f->rows < 1 || f->rows > IDX_MAX_SIDE || f->cols < 1 || f->cols > IDX_MAX_SIDE) {
            return set_err(err, errlen, "%s: images of %u rows and %u cols; each must be 1..%d", f->name,
                           f->rows, f->cols, IDX_MAX_SIDE);
        }
    }
    return 0;
}

/* Reads the rest of s (after the header) to check f's length; for a labels
 * file, raises *max_label to the largest label. */
static int check_length(stream *s, const idx_file *f, file_kind k, int *max_label, char *err, size_t errlen) {
    uint64_t want = data_size(f, k), have = 0;
    bool exact = true;
    if (k == KIND_IMAGES && !s->compressed) {
        have = (uint64_t)s->size - IMAGES_HEADER;       /* the header was read whole */
    } else {
        uint8_t *buf = malloc(CHUNK);
        if (!buf) return set_err(err, errlen, "out of memory");
        while (have <= want) {          /* one byte past the end is enough to know */
            size_t got;
            if (stream_read(s, buf, CHUNK, &got, err, errlen) != 0) {
                free(buf);
                return -1;
            }
            if (k == KIND_LABELS) {
                size_t used = (uint64_t)got > want - have ? (size_t)(want - have) : got;
                for (size_t i = 0; i < used; i++)
                    if (buf[i] > *max_label) *max_label = buf[i];
            }
            have += got;
            if (got < CHUNK) break;
        }
        free(buf);
        exact = s->eof;
    }
    if (have == want) return 0;
    char lay[96], a[32], b[32];
    layout_text(lay, sizeof lay, f, k);
    uint64_t hs = header_size(k);
    const char *unz = s->compressed ? " once uncompressed" : "";
    if (have < want)
        return set_err(err, errlen, "%s: truncated: %s bytes%s where %s make %s", f->name, readers_grouped(a, hs + have),
                       unz, lay, readers_grouped(b, hs + want));
    return set_err(err, errlen, "%s: %s%s bytes%s where %s make %s", f->name, exact ? "" : "more than ",
                   readers_grouped(a, hs + have), unz, lay, readers_grouped(b, hs + want));
}

/* Opens f, reads its header and checks its length. */
static int check_file(idx_file *f, file_kind k, int *max_label, char *err, size_t errlen) {
    stream s;
    if (stream_open(&s, f, err, errlen) != 0) return -1;
    int rc = read_header(&s, f, k, err, errlen);
    if (rc == 0) rc = check_length(&s, f, k, max_label, err, errlen);
    stream_close(&s);
    return rc;
}

/* ---- finding and checking the files -------------------------------------------- */

/* Looks for the file of split and kind in dir; f->found says whether it is
 * there. A symbolic link in its place is an error: the caller checked the
 * folder against the import roots, and a link could lead out of them. */
static int find_file(const char *dir, const struct idx_name *n, idx_file *f, char *err, size_t errlen) {
    for (size_t i = 0; i < COUNT_OF(n->names); i++) {
        for (size_t j = 0; j < COUNT_OF(suffixes); j++) {
            char name[sizeof f->name];
            snprintf(name, sizeof name, "%s%s", n->names[i], suffixes[j]);
            int len = snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
            memcpy(f->name, name, sizeof name);
            if (len < 0 || (size_t)len >= sizeof f->path) return set_err(err, errlen, "folder path too long");
            struct stat st;
            if (lstat(f->path, &st) != 0) continue;
            if (S_ISLNK(st.st_mode))
                return set_err(err, errlen, "%s is a symbolic link; links in an import folder are not followed",
                               f->name);
            if (S_ISREG(st.st_mode)) {
                f->found = true;
                return 0;
            }
        }
    }
    snprintf(f->name, sizeof f->name, "%s", n->names[0]);   /* the name to give when it is missing */
    return 0;
}

static int check_split(idx_source *s, reader_split sp, int *max_label, char *err, size_t errlen) {
    idx_file *im = &s->files[sp][KIND_IMAGES], *lb = &s->files[sp][KIND_LABELS];
    stream is, ls;
    if (stream_open(&is, im, err, errlen) != 0) return -1;
    if (stream_open(&ls, lb, err, errlen) != 0) {
        stream_close(&is);
        return -1;
    }
    int rc = read_header(&is, im, KIND_IMAGES, err, errlen);
    if (rc == 0) rc = read_header(&ls, lb, KIND_LABELS, err, errlen);
    stream_close(&is);
    stream_close(&ls);
    if (rc != 0) return -1;
    char a[32], b[32];
    if (lb->count != im->count) {
        return set_err(err, errlen, "%s: %s labels for %s images", lb->name, readers_grouped(a, lb->count),
                       readers_grouped(b, im->count));
    }
    if (sp == READER_TEST) {
        const idx_file *tr = &s->files[READER_TRAIN][KIND_IMAGES];
        if (im->rows != tr->rows || im->cols != tr->cols) {
            return set_err(err, errlen, "%s: images of %ux%u, but %s holds images of %ux%u", im->name, im->cols,
                           im->rows, tr->name, tr->cols, tr->rows);
        }
    }
    if (check_file(lb, KIND_LABELS, max_label, err, errlen) != 0) return -1;
    return check_file(im, KIND_IMAGES, max_label, err, errlen);
}

idx_source *idx_open(const char *dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        set_err(err, errlen, "cannot read %s: %s", dir, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s is not a folder (expected a folder holding the IDX files)", dir);
        return NULL;
    }
    idx_source *s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < COUNT_OF(idx_names); i++) {
        const struct idx_name *n = &idx_names[i];
        if (find_file(dir, n, &s->files[n->split][n->kind], err, errlen) != 0) goto fail;
    }
    for (int k = 0; k < KIND_COUNT; k++) {
        const idx_file *f = &s->files[READER_TRAIN][k];
        if (!f->found) {
            set_err(err, errlen, "no %s (or %s.gz) in %s", f->name, f->name, dir);
            goto fail;
        }
    }
    idx_file *ti = &s->files[READER_TEST][KIND_IMAGES], *tl = &s->files[READER_TEST][KIND_LABELS];
    if (ti->found != tl->found) {
        set_err(err, errlen, "%s without %s: the test split needs both", ti->found ? ti->name : tl->name,
                ti->found ? tl->name : ti->name);
        goto fail;
    }
    int max_label = -1;
    if (check_split(s, READER_TRAIN, &max_label, err, errlen) != 0) goto fail;
    if (ti->found && check_split(s, READER_TEST, &max_label, err, errlen) != 0) goto fail;
    s->w = (int)s->files[READER_TRAIN][KIND_IMAGES].cols;
    s->h = (int)s->files[READER_TRAIN][KIND_IMAGES].rows;
    s->nclasses = max_label + 1;
    if (class_names_numbered(&s->classes, s->nclasses, err, errlen) != 0) goto fail;
    return s;
fail:
    free(s);
    return NULL;
}

void idx_close(idx_source *s) {
    if (!s) return;
    class_names_free(&s->classes);
    free(s);
}

size_t idx_count(const idx_source *s, reader_split split) {
    const idx_file *f = &s->files[split == READER_TEST][KIND_IMAGES];
    return f->found ? f->count : 0;
}

void idx_shape(const idx_source *s, int *w, int *h) {
    *w = s->w;
    *h = s->h;
}

int idx_nclasses(const idx_source *s) { return s->nclasses; }

const char *idx_class_name(const idx_source *s, int i) {
    return i >= 0 && i < s->nclasses ? s->classes.name[i] : NULL;
}

/* ---- streaming ----------------------------------------------------------------- */

/* Re-reads f's header from s and checks it is the one idx_open saw. */
static int same_header(stream *s, const idx_file *f, file_kind k, char *err, size_t errlen) {
    idx_file now = *f;
    if (read_header(s, &now, k, err, errlen) != 0) return -1;
    if (now.count != f->count || now.rows != f->rows || now.cols != f->cols)
        return set_err(err, errlen, "%s: changed while being imported", f->name);
    return 0;
}

static int read_split(idx_source *s, reader_split sp, uint8_t *pix, uint8_t *labels, idx_image_fn fn, void *arg,
                      char *err, size_t errlen) {
    const idx_file *im = &s->files[sp][KIND_IMAGES], *lb = &s->files[sp][KIND_LABELS];
    stream is, ls;
    if (stream_open(&is, im, err, errlen) != 0) return -1;
    if (stream_open(&ls, lb, err, errlen) != 0) {
        stream_close(&is);
        return -1;
    }
    int rc = same_header(&is, im, KIND_IMAGES, err, errlen);
    if (rc == 0) rc = same_header(&ls, lb, KIND_LABELS, err, errlen);
    size_t npix = (size_t)im->rows * im->cols, nlab = 0, at = 0;
    for (size_t i = 0; rc == 0 && i < im->count; i++) {
        size_t got;
        if (at == nlab) {               /* the next block of labels */
            size_t want = im->count - i < CHUNK ? im->count - i : CHUNK;
            rc = stream_read(&ls, labels, want, &nlab, err, errlen);
            at = 0;
            if (rc == 0 && nlab < want) rc = set_err(err, errlen, "%s: changed while being imported", lb->name);
            if (rc != 0) break;
        }
        rc = stream_read(&is, pix, npix, &got, err, errlen);
        if (rc == 0 && got < npix) rc = set_err(err, errlen, "%s: changed while being imported", im->name);
        if (rc != 0) break;
        idx_image img = { .split = sp, .index = i, .label = labels[at++], .w = (int)im->cols, .h = (int)im->rows,
                          .pixels = pix };
        if (img.label >= s->nclasses) {
            rc = set_err(err, errlen, "%s: changed while being imported", lb->name);
            break;
        }
        rc = fn(arg, &img, err, errlen) == 0 ? 0 : -1;
    }
    stream_close(&is);
    stream_close(&ls);
    return rc;
}

int idx_read(idx_source *s, idx_image_fn fn, void *arg, char *err, size_t errlen) {
    uint8_t *pix = malloc((size_t)s->w * (size_t)s->h), *labels = malloc(CHUNK);
    int rc = 0;
    if (!pix || !labels) rc = set_err(err, errlen, "out of memory");
    if (rc == 0) rc = read_split(s, READER_TRAIN, pix, labels, fn, arg, err, errlen);
    if (rc == 0 && s->files[READER_TEST][KIND_IMAGES].found)
        rc = read_split(s, READER_TEST, pix, labels, fn, arg, err, errlen);
    free(pix);
    free(labels);
    return rc;
}
