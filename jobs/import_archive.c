/* jobs/import_archive.c: archives, as the importer and the upload check read
 * them (jobs/import_internal.h). The tables readable_formats and
 * readable_filters are the one list of what kiln opens from a user; nothing
 * is extracted: entries are read into memory one at a time, so no entry name
 * ever becomes a path.
 */
#include "jobs/import.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "base/err.h"
#include "jobs/import_internal.h"

/* How far through the archive file the reading is, 0..1 (libarchive's count
 * can run past the file's size behind a compression filter). */
static double archive_fraction(struct archive *a, off_t size) {
    double x = size > 0 ? (double)archive_filter_bytes(a, -1) / (double)size : 0;
    return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* ---- paths ------------------------------------------------------------------- */

enum { PATH_OK, PATH_UNSAFE, PATH_IGNORED };

/* Normalises an entry path into out ("a/./b//c" -> "a/b/c"). PATH_UNSAFE for an
 * absolute path, a ".." component, or no name at all; PATH_IGNORED for hidden
 * files and macOS metadata folders. */
static int path_normalize(const char *in, char *out, size_t outlen) {
    if (in[0] == '/' || in[0] == '\\') return PATH_UNSAFE;
    size_t o = 0;
    const char *p = in;
    bool ignored = false;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return PATH_UNSAFE;
        if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (p[0] == '.' || (n == 8 && memcmp(p, "__MACOSX", 8) == 0)) ignored = true;
            if (o + n + 2 > outlen) return PATH_UNSAFE;
            if (o) out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
        if (*p == '/') p++;
    }
    out[o] = '\0';
    if (o == 0) return PATH_UNSAFE;
    return ignored ? PATH_IGNORED : PATH_OK;
}

/* What the importer makes of an archive entry, in this order of precedence. */
typedef enum entry_kind {
    ENTRY_FILE,              /* a regular file to read; path holds its normalised name */
    ENTRY_DIR,               /* a folder: nothing to do */
    ENTRY_UNSAFE,            /* absolute or with "..": skipped and listed */
    ENTRY_NOT_FILE,          /* a link, device or pipe: skipped and listed */
    ENTRY_IGNORED,           /* hidden or macOS metadata: passed over */
} entry_kind;

/* Classifies entry e named name (not NULL); fills path (outlen bytes). */
static entry_kind classify_entry(struct archive_entry *e, const char *name, char *path, size_t outlen) {
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFDIR) return ENTRY_DIR;
    int pr = path_normalize(name, path, outlen);
    if (pr == PATH_UNSAFE) return ENTRY_UNSAFE;
    if (type != AE_IFREG || archive_entry_hardlink(e) || archive_entry_symlink(e)) return ENTRY_NOT_FILE;
    return pr == PATH_IGNORED ? ENTRY_IGNORED : ENTRY_FILE;
}

/* ---- opening an archive: the one list of what kiln reads --------------------------- */

typedef struct archive_kind {
    const char *name;                        /* in messages; NULL: not named */
    int (*enable)(struct archive *);
} archive_kind;

/* Not format_all: its mtree reader takes a text file as an archive whose
 * entries name files on this machine (and reads them). Not filter_all: it
 * falls back to external programs (lrzip, lzop, grzip, ...). These are the
 * formats users send. */
static const archive_kind readable_formats[] = {
    { "tar", archive_read_support_format_tar },
    { "zip", archive_read_support_format_zip },
    { "7z", archive_read_support_format_7zip },
    { NULL, archive_read_support_format_empty },   /* an empty file: an empty archive */
};
static const archive_kind readable_filters[] = {
    { "gzip", archive_read_support_filter_gzip },
    { "bzip2", archive_read_support_filter_bzip2 },
    { "xz", archive_read_support_filter_xz },
    { "zstd", archive_read_support_filter_zstd },
};


/* Appends the named kinds as "a, b or c" to buf[*o..n). */
static void append_names(char *buf, size_t n, size_t *o, const archive_kind *k, size_t count) {
    size_t named = 0, seen = 0;
    for (size_t i = 0; i < count; i++) named += k[i].name != NULL;
    for (size_t i = 0; i < count && *o < n; i++) {
        if (!k[i].name) continue;
        seen++;
        const char *sep = seen == 1 ? "" : seen == named ? " or " : ", ";
        int w = snprintf(buf + *o, n - *o, "%s%s", sep, k[i].name);
        *o = w < 0 ? n : *o + (size_t)w;
    }
}

/* "not an archive: <libarchive's reason> (kiln reads tar, zip or 7z, ...)" */
static int not_archive(struct archive *a, char *err, size_t errlen) {
    char kinds[160] = "";
    size_t o = 0;
    append_names(kinds, sizeof kinds, &o, readable_formats, COUNT_OF(readable_formats));
    if (o < sizeof kinds) o += (size_t)snprintf(kinds + o, sizeof kinds - o, ", plain or compressed with ");
    append_names(kinds, sizeof kinds, &o, readable_filters, COUNT_OF(readable_filters));
    const char *why = a && archive_error_string(a) ? archive_error_string(a) : "unknown format";
    return set_err(err, errlen, "not an archive: %s (kiln reads %s)", why, kinds);
}

static int damaged(struct archive *a, char *err, size_t errlen) {
    return set_err(err, errlen, "archive is damaged: %s",
                   archive_error_string(a) ? archive_error_string(a) : "read error");
}

/* Reads the next entry's header, counted in *entries against max. Returns
 * libarchive's status: ARCHIVE_EOF at the end, ARCHIVE_FATAL with err set for
 * a file that is no archive, a damaged one, or one with more than max entries. */
static int next_entry(struct archive *a, struct archive_entry **e, unsigned long *entries, unsigned long max,
                      char *err, size_t errlen) {
    int r = archive_read_next_header(a, e);
    if (r == ARCHIVE_EOF) return r;
    if (r == ARCHIVE_FATAL) {
        if (*entries == 0) not_archive(a, err, errlen);
        else damaged(a, err, errlen);
        return r;
    }
    if (++*entries > max) {
        set_err(err, errlen, "archive has more than %lu entries (the limit); split it into "
                "smaller archives", max);
        return ARCHIVE_FATAL;
    }
    return r;
}

static const char *entry_name(struct archive_entry *e) {
    const char *name = archive_entry_pathname(e);
    return name ? name : archive_entry_pathname_utf8(e);
}

enum { OPEN_OK = 0, OPEN_NOT_ARCHIVE = -1, OPEN_FAILED = -2 };

/* Opens the user's archive at path with the kinds above only. Returns OPEN_OK
 * with *out set (free with archive_read_free) and *size (when not NULL) the
 * file's size; OPEN_NOT_ARCHIVE with err "not an archive: ..." for a file
 * that is not regular or not one of those kinds; OPEN_FAILED with err set
 * when the file cannot be read at all (missing) or memory runs out. */
static int open_archive(const char *path, struct archive **out, off_t *size, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return OPEN_FAILED;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "not an archive: %s is not a regular file", path);
        return OPEN_NOT_ARCHIVE;
    }
    struct archive *a = archive_read_new();
    if (!a) {
        set_err(err, errlen, "out of memory");
        return OPEN_FAILED;
    }
    for (size_t i = 0; i < COUNT_OF(readable_formats); i++) readable_formats[i].enable(a);
    for (size_t i = 0; i < COUNT_OF(readable_filters); i++) readable_filters[i].enable(a);
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        not_archive(a, err, errlen);
        archive_read_free(a);
        return OPEN_NOT_ARCHIVE;
    }
    *out = a;
    if (size) *size = st.st_size;
    return OPEN_OK;
}

/* ---- reading the archive ------------------------------------------------------- */


int imp_over_bytes(const caps *cp, char *err, size_t errlen) {
    if (cp->total_bytes <= cp->max_bytes) return 0;
    set_err(err, errlen, "archive too large: more than %llu bytes of uncompressed data "
            "(the limit); split it into smaller archives", cp->max_bytes);
    return -1;
}

/* Reads the current entry's data. Returns 0 with *buf and *len set, 1 when this entry
 * is unreadable (reason in why), -1 on a fatal error (err set). */
static int read_entry(struct archive *a, struct archive_entry *e, caps *cp, uint8_t **buf, size_t *len,
                      char *why, size_t whylen, char *err, size_t errlen) {
    size_t cap = 1 << 16, n = 0;
    if (archive_entry_size_is_set(e)) {
        la_int64_t declared = archive_entry_size(e);
        if (declared > (la_int64_t)IMPORT_MAX_FILE) {
            cp->total_bytes += (unsigned long long)declared;
            if (imp_over_bytes(cp, err, errlen) != 0) return -1;
            set_err(why, whylen, "file larger than %zu bytes", IMPORT_MAX_FILE);
            return 1;
        }
        if (declared >= 0) cap = (size_t)declared + 1;
    }
    uint8_t *b = malloc(cap);
    if (!b) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    for (;;) {
        if (n == cap) {
            if (cap >= IMPORT_MAX_FILE) {
                /* drain the rest so that its bytes count against the total cap */
                la_ssize_t got;
                while ((got = archive_read_data(a, b, cap)) > 0) {
                    cp->total_bytes += (unsigned long long)got;
                    if (imp_over_bytes(cp, err, errlen) != 0) {
                        free(b);
                        return -1;
                    }
                }
                free(b);
                if (got == ARCHIVE_FATAL) return damaged(a, err, errlen);
                set_err(why, whylen, "file larger than %zu bytes", IMPORT_MAX_FILE);
                return 1;
            }
            size_t ncap = cap * 2 > IMPORT_MAX_FILE ? IMPORT_MAX_FILE : cap * 2;
            uint8_t *nb = realloc(b, ncap);
            if (!nb) {
                free(b);
                set_err(err, errlen, "out of memory");
                return -1;
            }
            b = nb;
            cap = ncap;
        }
        la_ssize_t got = archive_read_data(a, b + n, cap - n);
        if (got == 0) break;
        if (got < 0) {
            free(b);
            if (got == ARCHIVE_FATAL) return damaged(a, err, errlen);
            set_err(why, whylen, "%s", archive_error_string(a) ? archive_error_string(a) : "read error");
            return 1;
        }
        n += (size_t)got;
        cp->total_bytes += (unsigned long long)got;
        if (imp_over_bytes(cp, err, errlen) != 0) {
            free(b);
            return -1;
        }
    }
    *buf = b;
    *len = n;
    return 0;
}

/* ---- reading the archive, in one pass or two ------------------------------------- */

#define SKIP_REPORT_BYTES ((unsigned long long)64 << 20)   /* a long skip looks at the cancel mark this often */

/* Reads past the current entry's data (an entry the importer does not read:
 * a folder, a link, a hidden file), every byte counted against the caps, so
 * that no entry is decompressed for nothing past them; at the pass's
 * fraction x it asks the caller whether to go on every 64 MiB. Returns 0, or
 * -1 with err set (a cap, damage, cancelled). */
static int skip_data(struct archive *a, caps *cp, import_progress_fn progress, void *arg, double x,
                     char *err, size_t errlen) {
    unsigned long long since = 0;
    for (;;) {
        const void *buf;
        size_t size;
        la_int64_t offset;
        int r = archive_read_data_block(a, &buf, &size, &offset);
        if (r == ARCHIVE_EOF) return 0;
        if (r == ARCHIVE_FATAL) return damaged(a, err, errlen);
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return 0;
        cp->total_bytes += size;
        since += size;
        if (imp_over_bytes(cp, err, errlen) != 0) return -1;
        if (since >= SKIP_REPORT_BYTES) {
            since = 0;
            if (imp_report(progress, arg, x, err, errlen) != 0) return -1;
        }
    }
}


/* Reads the archive's entries in order, within the options' caps, and hands
 * every file the importer reads to p->visit. The first pass (not listing)
 * passes over the rest silently, and the entries libarchive warned about too. */
int imp_each_archive_file(importer *im, const char *archive_path, const archive_pass *p,
                     import_progress_fn progress, void *arg, char *err, size_t errlen) {
    static const char *const skip_reason[] = {
        [ENTRY_UNSAFE] = "unsafe path (absolute or with \"..\")",
        [ENTRY_NOT_FILE] = "not a regular file (link, device or pipe)",
    };
    const import_opts *o = im->opts;
    struct archive *a = NULL;
    off_t size = 0;
    if (open_archive(archive_path, &a, &size, err, errlen) != OPEN_OK) return -1;
    int rc = -1;
    caps cp = { o->max_bytes ? o->max_bytes : IMPORT_MAX_BYTES_DEFAULT, 0,
                o->max_entries ? o->max_entries : IMPORT_MAX_ENTRIES_DEFAULT };
    unsigned long entries = 0;
    char why[256], path[4096];
    for (;;) {
        struct archive_entry *e;
        int r = next_entry(a, &e, &entries, cp.max_entries, err, errlen);
        if (r == ARCHIVE_EOF) break;
        if (r == ARCHIVE_FATAL) goto out;
        double x = archive_fraction(a, size);           /* ends on p->to exactly */
        double at = p->from * (1 - x) + p->to * x;
        if (imp_report(progress, arg, at, err, errlen) != 0) goto out;
        const char *name = entry_name(e);
        entry_kind kind = ENTRY_IGNORED;
        if (!name) {
            if (p->listing) imp_log_file(im, &im->rep.skipped, "skipped", "(entry)", "name cannot be read");
        } else if (r != ARCHIVE_OK && (r != ARCHIVE_WARN || !p->listing)) {
            if (p->listing)
                imp_log_file(im, &im->rep.unreadable, "unreadable", name,
                         archive_error_string(a) ? archive_error_string(a) : "bad entry");
        } else {
            kind = classify_entry(e, name, path, sizeof path);
            if ((kind == ENTRY_UNSAFE || kind == ENTRY_NOT_FILE) && p->listing)
                imp_log_file(im, &im->rep.skipped, "skipped", name, skip_reason[kind]);
        }
        if (kind != ENTRY_FILE) {
            if (skip_data(a, &cp, progress, arg, at, err, errlen) != 0) goto out;
            continue;
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        int rr = read_entry(a, e, &cp, &buf, &len, why, sizeof why, err, errlen);
        if (rr < 0) goto out;
        rr = p->visit(im, p->ctx, path, rr, buf, len, why, sizeof why, err, errlen);
        free(buf);
        if (rr < 0) goto out;
    }
    rc = 0;
out:
    archive_read_free(a);
    return rc;
}

/* ---- the upload's check: a bounded look before an upload is accepted --------------- */

static double mono_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef enum check_stop { CHECK_GO, CHECK_BYTES, CHECK_TIME, CHECK_STOPPED } check_stop;

typedef struct check_state {
    uint64_t max_bytes, bytes;
    uint64_t max_seconds;
    double deadline;
    const atomic_bool *stop;
} check_state;

static check_stop check_bound(const check_state *cs) {
    if (cs->stop && atomic_load(cs->stop)) return CHECK_STOPPED;
    if (cs->bytes > cs->max_bytes) return CHECK_BYTES;
    if (mono_seconds() > cs->deadline) return CHECK_TIME;
    return CHECK_GO;
}

/* Reads the current entry's data to its end, every byte counted, keeping
 * its first IMG_SIGNATURE_BYTES in head (*nhead of them). Returns CHECK_GO
 * at the entry's end, the bound that stopped it, or -1 (damaged: err). */
static int check_drain(struct archive *a, check_state *cs, uint8_t *head, size_t *nhead, char *err, size_t errlen) {
    for (;;) {
        const void *buf;
        size_t size;
        la_int64_t offset;
        int r = archive_read_data_block(a, &buf, &size, &offset);
        if (r == ARCHIVE_EOF) return CHECK_GO;
        if (r == ARCHIVE_FATAL) return damaged(a, err, errlen);
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return CHECK_GO;   /* an unreadable entry: the next */
        for (size_t i = 0; head && *nhead < IMG_SIGNATURE_BYTES && i < size; i++)
            head[(*nhead)++] = ((const uint8_t *)buf)[i];
        cs->bytes += size;
        check_stop st = check_bound(cs);
        if (st != CHECK_GO) return (int)st;
    }
}

/* e for a check stopped at a bound before it found an image. */
static int check_refused(check_stop st, const check_state *cs, api_error *e) {
    if (st == CHECK_STOPPED)
        return api_fail(e, 503, "shutting_down", "the server is shutting down; upload again once it is back");
    if (st == CHECK_BYTES)
        return api_fail(e, 413, "check_limit", "the archive's check read %llu bytes of uncompressed data without "
                        "finding an image, over the limit of %llu bytes (check-bytes); put the class folders' "
                        "images first, or split the archive", (unsigned long long)cs->bytes,
                        (unsigned long long)cs->max_bytes);
    return api_fail(e, 413, "check_limit", "the archive's check found no image in %llu seconds, over the limit "
                    "(check-seconds); put the class folders' images first, or split the archive",
                    (unsigned long long)cs->max_seconds);
}

int import_probe(const char *archive_path, const import_check_limits *lim, import_check *out, api_error *e) {
    char err[400], path[4096];
    check_state cs = { lim && lim->max_bytes ? lim->max_bytes : IMPORT_CHECK_BYTES_DEFAULT, 0,
                       lim && lim->max_seconds ? lim->max_seconds : IMPORT_CHECK_SECONDS_DEFAULT, 0,
                       lim ? lim->stop : NULL };
    cs.deadline = mono_seconds() + (double)cs.max_seconds;
    out->images = 0;
    out->complete = false;
    struct archive *a = NULL;
    int r = open_archive(archive_path, &a, NULL, err, sizeof err);
    if (r == OPEN_NOT_ARCHIVE) return api_fail(e, 400, "invalid_archive", "%s", err);
    if (r != OPEN_OK) return api_fail(e, 500, "storage_error", "reading the upload back: %s", err);
    int rc = -1;
    unsigned long entries = 0;
    check_stop st = CHECK_GO;
    for (;;) {
        struct archive_entry *ae;
        r = next_entry(a, &ae, &entries, IMPORT_MAX_ENTRIES_DEFAULT, err, sizeof err);
        if (r == ARCHIVE_EOF) break;
        if (r == ARCHIVE_FATAL) {
            api_fail(e, 400, "invalid_archive", "%s", err);
            goto out;
        }
        const char *name = entry_name(ae);
        /* a file the importer reads, inside a class folder */
        bool candidate = name && (r == ARCHIVE_OK || r == ARCHIVE_WARN) &&
                         classify_entry(ae, name, path, sizeof path) == ENTRY_FILE && strchr(path, '/');
        uint8_t head[IMG_SIGNATURE_BYTES];
        size_t n = 0;
        int d = check_drain(a, &cs, candidate ? head : NULL, &n, err, sizeof err);
        if (d < 0) {
            api_fail(e, 400, "invalid_archive", "%s", err);
            goto out;
        }
        if (candidate && img_signature(head, n) != IMG_NONE) out->images++;
        st = d != CHECK_GO ? (check_stop)d : check_bound(&cs);
        if (st != CHECK_GO) break;
    }
    if (st == CHECK_STOPPED || (st != CHECK_GO && out->images == 0)) {
        check_refused(st, &cs, e);
        goto out;
    }
    out->complete = st == CHECK_GO;
    if (out->images == 0) {
        api_fail(e, 400, "no_images", "%s", NO_IMAGES_MSG);
        goto out;
    }
    rc = 0;
out:
    archive_read_free(a);
    return rc;
}


/* ---- loose images: an archive of images to classify -------------------------------- */

int import_archive_files(const char *archive_path, unsigned long max_entries, unsigned long long max_bytes,
                         import_file_fn fn, void *ctx, api_error *e) {
    char err[400], why[256], path[4096];
    struct archive *a = NULL;
    int r = open_archive(archive_path, &a, NULL, err, sizeof err);
    if (r == OPEN_NOT_ARCHIVE) return api_fail(e, 400, "invalid_archive", "%s", err);
    if (r != OPEN_OK) return api_fail(e, 500, "storage_error", "reading the archive back: %s", err);
    int rc = -1;
    caps cp = { max_bytes, 0, max_entries };
    unsigned long entries = 0;
    for (;;) {
        struct archive_entry *ae;
        r = next_entry(a, &ae, &entries, cp.max_entries, err, sizeof err);
        if (r == ARCHIVE_EOF) break;
        if (r == ARCHIVE_FATAL) {
            bool cap = entries > cp.max_entries;
            api_fail(e, cap ? 413 : 400, cap ? "archive_too_large" : "invalid_archive", "%s", err);
            goto out;
        }
        const char *name = entry_name(ae);
        if (!name || (r != ARCHIVE_OK && r != ARCHIVE_WARN)) continue;
        if (classify_entry(ae, name, path, sizeof path) != ENTRY_FILE) continue;
        uint8_t *buf = NULL;
        size_t len = 0;
        err[0] = '\0';
        int rr = read_entry(a, ae, &cp, &buf, &len, why, sizeof why, err, sizeof err);
        if (rr < 0) {
            bool over = cp.total_bytes > cp.max_bytes;
            api_fail(e, over ? 413 : strstr(err, "out of memory") ? 500 : 400,
                     over ? "archive_too_large" : strstr(err, "out of memory") ? "internal_error" : "invalid_archive",
                     "%s", err);
            goto out;
        }
        rr = fn(ctx, path, rr == 0 ? buf : NULL, len, rr == 0 ? NULL : why, e);
        free(buf);
        if (rr != 0) goto out;
    }
    rc = 0;
out:
    archive_read_free(a);
    return rc;
}
