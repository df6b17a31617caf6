/* jobs/cifar.c: CIFAR-10 and CIFAR-100 binary batches, from a folder or a tar
 * archive, checked then streamed (contract in jobs/cifar.h).
 *
 * Both kinds of source are a list of named byte streams: the files of a
 * folder (read(2)), or the regular entries of an archive (libarchive's tar
 * reader with the gzip filter; nothing is extracted, an entry's name is only
 * compared). cifar_open reads each batch once in blocks, keeping its length
 * and its largest label; cifar_read reads the batches again a block of
 * records at a time.
 */
#include "jobs/cifar.h"

#include <dirent.h>
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
#include "jobs/readers.h"   /* class_names, readers_grouped */

#define BLOCK_RECORDS 64     /* records read at a time */
#define MAX_CLASSES 256      /* labels are bytes */
#define CHUNK 65536

typedef enum meta_kind { META_10, META_FINE, META_COARSE, META_COUNT } meta_kind;
typedef enum role { ROLE_NONE, ROLE_BATCH, ROLE_META } role;

typedef struct file_role {
    role role;
    cifar_variant variant;
    reader_split split;      /* batches */
    unsigned long order;     /* data_batch_<n>: n */
    meta_kind meta;          /* meta files */
} file_role;

/* Every file name the reader knows, but data_batch_<n>.bin (file_role_of). */
static const struct named_file {
    const char *name;
    file_role r;
} named_files[] = {
    { "test_batch.bin", { .role = ROLE_BATCH, .variant = CIFAR_10, .split = READER_TEST } },
    { "train.bin", { .role = ROLE_BATCH, .variant = CIFAR_100, .split = READER_TRAIN } },
    { "test.bin", { .role = ROLE_BATCH, .variant = CIFAR_100, .split = READER_TEST } },
    { "batches.meta.txt", { .role = ROLE_META, .variant = CIFAR_10, .meta = META_10 } },
    { "fine_label_names.txt", { .role = ROLE_META, .variant = CIFAR_100, .meta = META_FINE } },
    { "coarse_label_names.txt", { .role = ROLE_META, .variant = CIFAR_100, .meta = META_COARSE } },
};

/* The subfolders of the published archives, looked in when a folder holds
 * no CIFAR file itself. */
static const char *const subfolders[] = { "cifar-10-batches-bin", "cifar-100-binary" };

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static size_t label_bytes(cifar_variant v) { return v == CIFAR_100 ? 2 : 1; }
static size_t record_bytes(cifar_variant v) { return label_bytes(v) + CIFAR_PIXELS; }
/* Where the class label is in a record. */
static size_t label_offset(cifar_variant v, cifar_labels l) {
    return v == CIFAR_100 && l == CIFAR_LABELS_FINE ? 1 : 0;
}

typedef struct batch {
    char name[256];          /* for messages: relative to the source path */
    char where[PATH_MAX];    /* a folder's file: its path; an archive's: the entry's pathname */
    cifar_variant variant;
    reader_split split;
    unsigned long order;
    uint64_t bytes;
    int max_label;           /* -1: no records */
    uint64_t max_at;         /* the first record with max_label */
} batch;

struct cifar_source {
    char path[PATH_MAX];
    bool archive;
    cifar_variant variant;
    cifar_labels labels;
    int nbatches;
    batch batches[CIFAR_MAX_BATCHES];
    size_t count[2];
    class_names classes;
    char names_file[256];    /* "" when the classes are numbered */
};

/* The role of a file by its name (no folder). */
static file_role file_role_of(const char *base) {
    for (size_t i = 0; i < COUNT_OF(named_files); i++)
        if (strcmp(base, named_files[i].name) == 0) return named_files[i].r;
    static const char prefix[] = "data_batch_";
    const char *p = base + sizeof prefix - 1;
    if (strncmp(base, prefix, sizeof prefix - 1) == 0 && *p >= '1' && *p <= '9') {
        unsigned long n = 0;
        for (; *p >= '0' && *p <= '9' && n < 100000; p++) n = n * 10 + (unsigned long)(*p - '0');
        if (strcmp(p, ".bin") == 0)
            return (file_role){ .role = ROLE_BATCH, .variant = CIFAR_10, .split = READER_TRAIN, .order = n };
    }
    return (file_role){ .role = ROLE_NONE };
}

/* ---- byte streams: a folder's file or an archive's entry -------------------------- */

typedef struct src {
    int fd;                  /* a file, or -1 */
    struct archive *a;       /* else the archive, at the entry */
} src;

/* Reads up to n bytes; fewer only at the end. Returns the count, or -1 with err. */
static long long src_read(src *s, const char *name, void *buf, size_t n, char *err, size_t errlen) {
    size_t got = 0;
    while (got < n) {
        long long r;
        if (s->a) {
            r = archive_read_data(s->a, (char *)buf + got, n - got);
            if (r < 0) {
                const char *why = archive_error_string(s->a);
                return set_err(err, errlen, "%s: cannot read: %s", name, why ? why : "unknown error");
            }
        } else {
            r = read(s->fd, (char *)buf + got, n - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return set_err(err, errlen, "%s: cannot read: %s", name, strerror(errno));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    return (long long)got;
}

/* ---- finding and checking the batches ----------------------------------------------- */

typedef struct scan {
    cifar_source *s;
    uint8_t *buf;                        /* CHUNK bytes */
    bool meta_found[META_COUNT];
    char meta_name[META_COUNT][256];     /* as for batch.name */
    char meta_where[META_COUNT][PATH_MAX];
    char *meta_text[META_COUNT];         /* an archive's meta files, read during the scan */
    size_t meta_len[META_COUNT];
} scan;

/* Reads batch b's bytes from s, keeping its length and largest label. */
static int scan_batch(scan *sc, batch *b, src *s, char *err, size_t errlen) {
    size_t rec = record_bytes(b->variant), off = label_offset(b->variant, sc->s->labels);
    uint64_t at = 0;
    b->max_label = -1;
    for (;;) {
        long long n = src_read(s, b->name, sc->buf, CHUNK, err, errlen);
        if (n < 0) return -1;
        /* the label bytes in [at, at + n): offsets r * rec + off */
        uint64_t r = at / rec + (at % rec > off ? 1 : 0);
        for (; r * rec + off < at + (uint64_t)n; r++) {
            int label = sc->buf[r * rec + off - at];
            if (label > b->max_label) {
                b->max_label = label;
                b->max_at = r;
            }
        }
        at += (uint64_t)n;
        if ((size_t)n < CHUNK) break;
    }
    b->bytes = at;
    if (at % rec != 0) {
        char a[32], c[32];
        return set_err(err, errlen, "%s: %s bytes is not a whole number of %s-byte records "
                       "(%zu label %s and %d pixel bytes each)", b->name, readers_grouped(a, at),
                       readers_grouped(c, rec), label_bytes(b->variant), label_bytes(b->variant) > 1 ? "bytes" : "byte",
                       CIFAR_PIXELS);
    }
    return 0;
}

/* Adds the batch named name (where: its path or entry) with role r, and
 * scans it from s. */
static int add_batch(scan *sc, const char *name, const char *where, file_role r, src *s, char *err, size_t errlen) {
    cifar_source *cs = sc->s;
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    for (int i = 0; i < cs->nbatches; i++) {
        const batch *o = &cs->batches[i];
        const char *obase = strrchr(o->name, '/') ? strrchr(o->name, '/') + 1 : o->name;
        if (strcmp(obase, base) == 0)
            return set_err(err, errlen, "two files named %s: %s and %s", base, o->name, name);
    }
    if (cs->nbatches == CIFAR_MAX_BATCHES)
        return set_err(err, errlen, "more than %d CIFAR batch files", CIFAR_MAX_BATCHES);
    batch *b = &cs->batches[cs->nbatches++];
    *b = (batch){ .variant = r.variant, .split = r.split, .order = r.order };
    snprintf(b->name, sizeof b->name, "%s", name);
    snprintf(b->where, sizeof b->where, "%s", where);
    return scan_batch(sc, b, s, err, errlen);
}

static int add_meta(scan *sc, const char *name, const char *where, meta_kind m, char *err, size_t errlen) {
    if (sc->meta_found[m]) {
        const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
        return set_err(err, errlen, "two files named %s: %s and %s", base, sc->meta_name[m], name);
    }
    sc->meta_found[m] = true;
    snprintf(sc->meta_name[m], sizeof sc->meta_name[m], "%s", name);
    snprintf(sc->meta_where[m], sizeof sc->meta_where[m], "%s", where);
    return 0;
}

/* Scans the folder dir (prefix: how messages name it relative to the source).
 * A CIFAR file that is a symbolic link is an error: the caller checked the
 * folder against the import roots, and a link could lead out of them. */
static int scan_folder(scan *sc, const char *dir, const char *prefix, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) return set_err(err, errlen, "cannot read %s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        file_role r = file_role_of(de->d_name);
        if (r.role == ROLE_NONE) continue;
        char name[256], where[PATH_MAX];
        int nw = snprintf(where, sizeof where, "%s/%s", dir, de->d_name);
        snprintf(name, sizeof name, "%s%s", prefix, de->d_name);
        if (nw < 0 || (size_t)nw >= sizeof where) {
            rc = set_err(err, errlen, "%s: path too long", name);
            break;
        }
        struct stat st;
        if (lstat(where, &st) != 0) continue;
        if (S_ISLNK(st.st_mode)) {
            rc = set_err(err, errlen, "%s is a symbolic link; links in an import folder are not followed", name);
            break;
        }
        if (!S_ISREG(st.st_mode)) continue;
        if (r.role == ROLE_META) {
            rc = add_meta(sc, name, where, r.meta, err, errlen);
            continue;
        }
        src s = { .fd = open(where, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) };
        if (s.fd < 0) {
            rc = set_err(err, errlen, "%s: %s", name, strerror(errno));
            break;
        }
        rc = add_batch(sc, name, where, r, &s, err, errlen);
        close(s.fd);
    }
    closedir(d);
    return rc;
}

/* Reads the current entry (a meta file) into memory. */
static int read_meta_entry(scan *sc, struct archive *a, meta_kind m, char *err, size_t errlen) {
    size_t cap = 4096, n = 0;
    char *t = malloc(cap);
    if (!t) return set_err(err, errlen, "out of memory");
    src s = { .fd = -1, .a = a };
    for (;;) {
        if (n == cap) {
            if (cap > READERS_NAMES_FILE_MAX) {
                free(t);
                return set_err(err, errlen, "%s: larger than %u MiB, not a list of class names", sc->meta_name[m],
                               READERS_NAMES_FILE_MAX >> 20);
            }
            char *nt = realloc(t, 2 * cap);
            if (!nt) {
                free(t);
                return set_err(err, errlen, "out of memory");
            }
            t = nt;
            cap *= 2;
        }
        long long r = src_read(&s, sc->meta_name[m], t + n, cap - n, err, errlen);
        if (r < 0) {
            free(t);
            return -1;
        }
        n += (size_t)r;
        if (n < cap) break;
    }
    if (n > READERS_NAMES_FILE_MAX) {
        free(t);
        return set_err(err, errlen, "%s: larger than %u MiB, not a list of class names", sc->meta_name[m],
                       READERS_NAMES_FILE_MAX >> 20);
    }
    sc->meta_text[m] = t;
    sc->meta_len[m] = n;
    return 0;
}

/* Opens the archive at path; *fd is the file under it (closed by the caller
 * after archive_read_free). */
static struct archive *open_archive(const char *path, int *fd, char *err, size_t errlen) {
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) {
        set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    struct archive *a = archive_read_new();
    if (!a) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    archive_read_support_format_tar(a);
    archive_read_support_format_empty(a);   /* an empty file: no batches */
    archive_read_support_filter_gzip(a);
    if (archive_read_open_fd(a, *fd, CHUNK) != ARCHIVE_OK) {
        const char *why = archive_error_string(a);
        set_err(err, errlen, "%s: not a tar or tar.gz archive of CIFAR batches: %s", path, why ? why : "unknown error");
        archive_read_free(a);
        return NULL;
    }
    return a;
}

/* The next regular, not hidden entry of a, in *e; 1 at the end, -1 with err. */
static int next_entry(struct archive *a, const char *path, struct archive_entry **e, char *err, size_t errlen) {
    for (;;) {
        int r = archive_read_next_header(a, e);
        if (r == ARCHIVE_EOF) return 1;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            const char *why = archive_error_string(a);
            return set_err(err, errlen, "%s: not a tar or tar.gz archive of CIFAR batches: %s", path,
                           why ? why : "unknown error");
        }
        const char *pn = archive_entry_pathname(*e);
        if (archive_entry_filetype(*e) != AE_IFREG || !pn || strlen(pn) >= PATH_MAX) continue;
        const char *base = strrchr(pn, '/') ? strrchr(pn, '/') + 1 : pn;
        if (base[0] == '.') continue;
        return 0;
    }
}

static int scan_archive(scan *sc, const char *path, char *err, size_t errlen) {
    int fd;
    struct archive *a = open_archive(path, &fd, err, errlen);
    if (!a) {
        if (fd >= 0) close(fd);
        return -1;
    }
    struct archive_entry *e;
    int rc;
    while ((rc = next_entry(a, path, &e, err, errlen)) == 0) {
        const char *pn = archive_entry_pathname(e);
        file_role r = file_role_of(strrchr(pn, '/') ? strrchr(pn, '/') + 1 : pn);
        if (r.role == ROLE_BATCH) {
            src s = { .fd = -1, .a = a };
            rc = add_batch(sc, pn, pn, r, &s, err, errlen);
        } else if (r.role == ROLE_META) {
            rc = add_meta(sc, pn, pn, r.meta, err, errlen);
            if (rc == 0) rc = read_meta_entry(sc, a, r.meta, err, errlen);
        }
        if (rc != 0) break;
    }
    archive_read_free(a);
    close(fd);
    return rc < 0 ? -1 : 0;
}

static int by_split_and_number(const void *x, const void *y) {
    const batch *a = x, *b = y;
    if (a->split != b->split) return a->split == READER_TRAIN ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

/* After the scan: one layout, a train batch, the classes, labels within them. */
static int settle(scan *sc, const char *path, char *err, size_t errlen) {
    cifar_source *s = sc->s;
    bool seen[2] = { false, false }, train = false;
    for (int i = 0; i < s->nbatches; i++) {
        seen[s->batches[i].variant == CIFAR_100] = true;
        train |= s->batches[i].split == READER_TRAIN;
    }
    if (seen[0] && seen[1])
        return set_err(err, errlen, "%s holds both CIFAR-10 (data_batch_*.bin, test_batch.bin) and CIFAR-100 "
                       "(train.bin, test.bin) batches; keep one", path);
    if (!train) {
        return set_err(err, errlen, "no CIFAR training batches in %s: expected CIFAR's binary version, "
                       "data_batch_1.bin .. data_batch_5.bin and test_batch.bin (CIFAR-10) or train.bin and "
                       "test.bin (CIFAR-100)", path);
    }
    s->variant = seen[1] ? CIFAR_100 : CIFAR_10;
    meta_kind m = s->variant == CIFAR_10 ? META_10 : s->labels == CIFAR_LABELS_COARSE ? META_COARSE : META_FINE;
    int max_label = -1;
    for (int i = 0; i < s->nbatches; i++) {
        const batch *b = &s->batches[i];
        if (b->max_label > max_label) max_label = b->max_label;
        s->count[b->split] += (size_t)(b->bytes / record_bytes(s->variant));
    }
    int rc;
    if (!sc->meta_found[m]) {
        rc = class_names_numbered(&s->classes, max_label + 1, err, errlen);
    } else {
        snprintf(s->names_file, sizeof s->names_file, "%s", sc->meta_name[m]);
        rc = s->archive ? class_names_parse(&s->classes, sc->meta_text[m], sc->meta_len[m], sc->meta_name[m],
                                            MAX_CLASSES, err, errlen)
                        : class_names_load(&s->classes, sc->meta_where[m], sc->meta_name[m], MAX_CLASSES, err, errlen);
    }
    if (rc != 0) return -1;
    for (int i = 0; i < s->nbatches; i++) {
        const batch *b = &s->batches[i];
        if (b->max_label >= s->classes.n) {
            char a[32];
            return set_err(err, errlen, "%s: record %s has %slabel %d, beyond the %d classes of %s", b->name,
                           readers_grouped(a, b->max_at + 1),
                           s->variant == CIFAR_10 ? "" : s->labels == CIFAR_LABELS_COARSE ? "coarse " : "fine ",
                           b->max_label, s->classes.n, s->names_file);
        }
    }
    if (!s->archive) qsort(s->batches, (size_t)s->nbatches, sizeof s->batches[0], by_split_and_number);
    return 0;
}

cifar_source *cifar_open(const char *path, cifar_labels labels, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s is neither a folder nor an archive", path);
        return NULL;
    }
    cifar_source *s = calloc(1, sizeof *s);
    scan sc = { .s = s, .buf = malloc(CHUNK) };
    int rc = -1;
    if (!s || !sc.buf) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    s->labels = labels;
    s->archive = S_ISREG(st.st_mode);
    int len = snprintf(s->path, sizeof s->path, "%s", path);
    if (len < 0 || (size_t)len >= sizeof s->path) {
        set_err(err, errlen, "path too long");
        goto out;
    }
    if (s->archive) {
        rc = scan_archive(&sc, path, err, errlen);
    } else {
        rc = scan_folder(&sc, path, "", err, errlen);
        bool any = s->nbatches > 0;
        for (int m = 0; m < META_COUNT; m++) any |= sc.meta_found[m];
        for (size_t i = 0; rc == 0 && !any && i < COUNT_OF(subfolders); i++) {
            char sub[PATH_MAX], prefix[64];
            struct stat sst;
            int n = snprintf(sub, sizeof sub, "%s/%s", path, subfolders[i]);
            if (n < 0 || (size_t)n >= sizeof sub || lstat(sub, &sst) != 0 || !S_ISDIR(sst.st_mode)) continue;
            snprintf(prefix, sizeof prefix, "%s/", subfolders[i]);
            rc = scan_folder(&sc, sub, prefix, err, errlen);
            any = s->nbatches > 0;
            for (int m = 0; m < META_COUNT; m++) any |= sc.meta_found[m];
        }
    }
    if (rc == 0) rc = settle(&sc, path, err, errlen);
out:
    for (int m = 0; m < META_COUNT; m++) free(sc.meta_text[m]);
    free(sc.buf);
    if (rc != 0) {
        cifar_close(s);
        return NULL;
    }
    return s;
}

void cifar_close(cifar_source *s) {
    if (!s) return;
    class_names_free(&s->classes);
    free(s);
}

cifar_variant cifar_kind(const cifar_source *s) { return s->variant; }

size_t cifar_count(const cifar_source *s, reader_split split) {
    return split == READER_TEST ? s->count[READER_TEST] : s->count[READER_TRAIN];
}

int cifar_nclasses(const cifar_source *s) { return s->classes.n; }

const char *cifar_class_name(const cifar_source *s, int i) {
    return i >= 0 && i < s->classes.n ? s->classes.name[i] : NULL;
}

const char *cifar_names_file(const cifar_source *s) { return s->names_file[0] ? s->names_file : NULL; }

/* ---- streaming ------------------------------------------------------------------ */

typedef struct reading {
    cifar_source *s;
    uint8_t *buf;                 /* BLOCK_RECORDS records */
    size_t index[2];              /* records delivered per split */
    cifar_image_fn fn;
    void *arg;
} reading;

static int changed(const batch *b, char *err, size_t errlen) {
    return set_err(err, errlen, "%s: changed while being imported", b->name);
}

/* Delivers batch b's records from s to the callback. */
static int read_batch(reading *rd, const batch *b, src *s, char *err, size_t errlen) {
    size_t rec = record_bytes(b->variant), off = label_offset(b->variant, rd->s->labels);
    uint64_t total = 0;
    for (;;) {
        long long n = src_read(s, b->name, rd->buf, rec * BLOCK_RECORDS, err, errlen);
        if (n < 0) return -1;
        if ((size_t)n % rec != 0 || total + (uint64_t)n > b->bytes) return changed(b, err, errlen);
        for (size_t i = 0; i < (size_t)n / rec; i++) {
            const uint8_t *r = rd->buf + i * rec;
            cifar_image im = { .split = b->split, .index = rd->index[b->split]++, .label = r[off],
                               .chw = r + label_bytes(b->variant) };
            if (im.label >= rd->s->classes.n) return changed(b, err, errlen);
            if (rd->fn(rd->arg, &im, err, errlen) != 0) return -1;
        }
        total += (uint64_t)n;
        if ((size_t)n < rec * BLOCK_RECORDS) break;
    }
    return total == b->bytes ? 0 : changed(b, err, errlen);
}

static int read_folder(reading *rd, char *err, size_t errlen) {
    for (int i = 0; i < rd->s->nbatches; i++) {
        const batch *b = &rd->s->batches[i];
        src s = { .fd = open(b->where, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) };
        if (s.fd < 0) return set_err(err, errlen, "%s: %s", b->name, strerror(errno));
        int rc = read_batch(rd, b, &s, err, errlen);
        close(s.fd);
        if (rc != 0) return -1;
    }
    return 0;
}

static int read_archive(reading *rd, char *err, size_t errlen) {
    cifar_source *cs = rd->s;
    int fd;
    struct archive *a = open_archive(cs->path, &fd, err, errlen);
    if (!a) {
        if (fd >= 0) close(fd);
        return -1;
    }
    struct archive_entry *e;
    bool done[CIFAR_MAX_BATCHES] = { false };
    int rc = 0, ndone = 0;
    while (rc == 0 && ndone < cs->nbatches) {
        int r = next_entry(a, cs->path, &e, err, errlen);
        if (r != 0) {
            rc = r < 0 ? -1 : 0;
            break;
        }
        const char *pn = archive_entry_pathname(e);
        for (int i = 0; i < cs->nbatches; i++) {
            if (done[i] || strcmp(pn, cs->batches[i].where) != 0) continue;
            src s = { .fd = -1, .a = a };
            done[i] = true;
            ndone++;
            rc = read_batch(rd, &cs->batches[i], &s, err, errlen);
            break;
        }
    }
    archive_read_free(a);
    close(fd);
    if (rc != 0) return -1;
    for (int i = 0; i < cs->nbatches; i++)
        if (!done[i]) return changed(&cs->batches[i], err, errlen);
    return 0;
}

int cifar_read(cifar_source *s, cifar_image_fn fn, void *arg, char *err, size_t errlen) {
    reading rd = { .s = s, .buf = malloc(record_bytes(s->variant) * BLOCK_RECORDS), .fn = fn, .arg = arg };
    if (!rd.buf) return set_err(err, errlen, "out of memory");
    int rc = s->archive ? read_archive(&rd, err, errlen) : read_folder(&rd, err, errlen);
    free(rd.buf);
    return rc;
}
