/* jobs/import.c: the importer: building a prepared dataset from what a
 * source hands it (contract in jobs/import.h, format in engine/dataset.h;
 * the sources in import_archive.c, import_folder.c and import_sources.c,
 * their shared state in import_internal.h).
 *
 * Guarantees:
 * - Formats: import_archive.c's tables readable_formats and readable_filters
 *   are the one list of what kiln opens from a user (tar, zip and 7z, plain or
 *   compressed with gzip, bzip2, xz or zstd; an empty file is an empty
 *   archive). The importer and import_probe open archives through
 *   open_archive only. A folder is walked like an archive, never following
 *   a link (import_folder.c).
 * - Nothing from an archive is extracted: entries are read into memory one at a
 *   time, so no entry name ever becomes a path. Entries with an absolute path or
 *   a ".." component, links and non-regular files are skipped and listed in
 *   import.log; hidden files (a component starting with '.') and "__MACOSX"
 *   folders are ignored (classify_entry, for the probe too). Total
 *   uncompressed bytes and the entry count are capped (import_opts.max_bytes,
 *   .max_entries); one file is capped at 256 MiB and decoded images at 64
 *   Mpixels. Every entry's data is counted, also that of entries passed over.
 * - Limits before work: a first pass reads only the images' headers; an
 *   image over opts.max_image_pixels (image-pixels) is skipped and listed,
 *   the images' sum over .max_import_pixels (import-pixels) fails the import,
 *   and so does the prepared size estimated from their count and the shape
 *   (import_estimate_check: dataset-bytes, the free disk), all before
 *   anything is decoded or written. The importing pass checks each header
 *   again before it decodes.
 * - Names: every path and class name from a source goes through imp_name
 *   (base/utf8.h: invalid UTF-8 bytes read as Latin-1), so the store, the
 *   log and the API only ever hold UTF-8.
 * - Classes: the first path component below an optional common top folder (one
 *   folder holding every file, with class folders inside it). Files outside any
 *   class folder are listed and left out. Classes are sorted by strcmp. When
 *   every top folder is train/, val/ (or validation/) or test/, and train/ is
 *   one, they are the source's splits, with the class folders inside them
 *   (detect_splits); test/ goes to test.kds.
 * - Images are decoded (PNG: libspng, JPEG: libturbojpeg), each on its own (a
 *   failed JPEG decode drops the decoder's state; a JPEG libjpeg warns about
 *   is unreadable), converted to the target channels (grey = (299 R + 587 G +
 *   114 B) / 1000), resized to the target size by the resize option
 *   (engine/image.h: squash, crop, fill, half_crop; a JPEG is decoded at the
 *   smallest scale that still covers the size) on the decoding pool's
 *   threads (import_pool.h), in the order read
 *   (without width and height: the most common size, from a first pass over
 *   the headers), and kept in an unlinked scratch file in the dataset folder
 *   until the split is written.
 * - The split is the source's where it has split folders (then val_percent
 *   draws val from train only when there is no val/). Otherwise it is a
 *   function of the seed: per class a seeded shuffle sends
 *   round(n * val_percent / 100) images to val, keeping at least one in train;
 *   each split keeps the order the images were read in (the loader shuffles
 *   every epoch). The mean is per channel over train.
 * - Files are written atomically (engine/dataset.h writers, fio_write_atomic:
 *   tmp + rename); on failure only temporary files may remain.
 */
#include "jobs/import.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/err.h"
#include "base/layout.h"      /* the dataset folder's files */
#include "base/utf8.h"        /* utf8_from_any: every name the importer keeps */
#include "engine/dataset.h"   /* ds_writer_*, ds_info_save */
#include "engine/fileio.h"    /* fio_read_file, fio_write_atomic */
#include "engine/image.h"     /* img_decode, img_probe, img_resize_chw */
#include "engine/rng.h"       /* rng_splitmix64, rng_splitmix64_below */
#include "jobs/import_internal.h"   /* the importer's state, shared steps */
#include "jobs/import_pool.h"    /* import_pool_new, import_pool_submit */


/* Tells the caller how far the import is; -1 with err set when the caller
 * asks to stop. */
int imp_report(import_progress_fn progress, void *arg, double fraction, char *err, size_t errlen) {
    if (progress && progress(arg, fraction < 0 ? 0 : fraction > 1 ? 1 : fraction) != 0)
        return set_err(err, errlen, CANCELLED_MSG);
    return 0;
}

/* ---- seeded shuffles -------------------------------------------------------- */

/* Fisher-Yates over v[0..n) with a stream drawn from (seed, stream). */
static void imp_shuffle(size_t *v, size_t n, uint64_t seed, uint64_t stream) {
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

char *imp_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}


/* Counts a file in *count (one of the report's) and lists it in import.log
 * and the report's problems. */
void imp_log_file(importer *im, size_t *count, const char *what, const char *path, const char *why) {
    (*count)++;
    char upath[1024], uwhy[512];        /* the source's names may be in any encoding */
    utf8_from_any(path, strlen(path), upath, sizeof upath);
    utf8_from_any(why, strlen(why), uwhy, sizeof uwhy);
    if (im->log_lines++ < IMPORT_LOG_MAX_LINES) sb_printf(&im->log, "%s %s: %s\n", what, upath, uwhy);
    import_report *r = &im->rep;
    if (r->nproblems < IMPORT_REPORT_PROBLEMS) {
        import_problem *p = &r->problems[r->nproblems++];
        snprintf(p->what, sizeof p->what, "%s", what);
        utf8_from_any(upath, strlen(upath), p->path, sizeof p->path);   /* cut short (for a page) at a character */
        utf8_from_any(uwhy, strlen(uwhy), p->why, sizeof p->why);
    }
}

char *imp_name(const char *path, char *out, size_t outlen) {
    utf8_from_any(path, strlen(path), out, outlen);
    return out;
}

/* ---- the import's limits: pixels before decoding, disk before writing ------------- */

static uint64_t opt_or(unsigned long long v, uint64_t def) { return v ? (uint64_t)v : def; }

int imp_pixels_check(importer *im, int w, int h, char *why, size_t whylen, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    uint64_t px = (uint64_t)(w > 0 ? w : 0) * (uint64_t)(h > 0 ? h : 0);
    uint64_t max_image = o ? opt_or(o->max_image_pixels, IMPORT_IMAGE_PIXELS_DEFAULT) : IMPORT_IMAGE_PIXELS_DEFAULT;
    uint64_t max_import = o ? opt_or(o->max_import_pixels, IMPORT_IMPORT_PIXELS_DEFAULT) : IMPORT_IMPORT_PIXELS_DEFAULT;
    if (px > max_image) {
        set_err(why, whylen, "image of %dx%d (%llu pixels) is over the limit of %llu pixels (image-pixels)", w, h,
                (unsigned long long)px, (unsigned long long)max_image);
        return 1;
    }
    im->pixels += px;
    if (im->pixels > max_import)
        return set_err(err, errlen, "the images add up to more than %llu pixels, over the limit of %llu pixels "
                       "(import-pixels); split the import", (unsigned long long)max_import,
                       (unsigned long long)max_import);
    return 0;
}

/* "1.5 GiB" */
static void human_bytes(uint64_t b, char *out, size_t outlen) {
    static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)b;
    size_t u = 0;
    while (v >= 1024 && u + 1 < COUNT_OF(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(out, outlen, "%llu bytes", (unsigned long long)b);
    else snprintf(out, outlen, "%.1f %s", v, units[u]);
}

#define SPLIT_RECORD_EXTRA 10u       /* a record's u16 label and u64 offset (engine/dataset.h) */
#define SPLIT_HEADER_BYTES 4096u     /* a split's header and padding, at most */

int import_estimate_check(size_t n, int c, int h, int w, const import_opts *o, const char *dir, api_error *e) {
    uint64_t image = (uint64_t)c * (uint64_t)h * (uint64_t)w;
    uint64_t splits = (uint64_t)n * (image + SPLIT_RECORD_EXTRA) + 3 * SPLIT_HEADER_BYTES;
    uint64_t cap = o ? opt_or(o->max_dataset_bytes, IMPORT_DATASET_BYTES_DEFAULT) : IMPORT_DATASET_BYTES_DEFAULT;
    char est[32], lim[32];
    human_bytes(splits, est, sizeof est);
    if (splits > cap) {
        human_bytes(cap, lim, sizeof lim);
        return api_fail(e, 413, "dataset_too_large", "the prepared dataset would take about %s (%zu images of "
                        "%dx%dx%d), over the limit of %llu bytes, %s (dataset-bytes); give a smaller width, height "
                        "or channels, or import fewer images", est, n, c, h, w, (unsigned long long)cap, lim);
    }
    struct statvfs sv;
    if (dir && statvfs(dir, &sv) == 0) {
        uint64_t need = splits + (uint64_t)n * image;          /* the splits and the scratch file */
        need += need / 10 + IMPORT_DISK_MARGIN;
        uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
        if (need > avail) {
            char nd[32], fr[32];
            human_bytes(need, nd, sizeof nd);
            human_bytes(avail, fr, sizeof fr);
            return api_fail(e, 413, "dataset_too_large", "the import would need about %s of disk (the dataset, "
                            "about %s, its scratch file and a margin) but the data directory has %s free; "
                            "give a smaller width, height or channels, or free some space", nd, est, fr);
        }
    }
    return 0;
}

static void drop_tag(void *t);

void imp_free(importer *im) {
    if (im->scratch) fclose(im->scratch);
    for (size_t i = 0; i < im->nrecs; i++) free(im->recs[i].path);
    free(im->recs);
    free(im->log.p);
    import_pool_free(im->pool, drop_tag);
    img_decoder_free(im->dec);
    free(im->resize_scratch);
    free(im->chw);
    for (size_t i = 0; i < im->nseen; i++) free(im->seen[i]);
    free(im->seen);
    import_report_free(&im->rep);
}


int imp_open_scratch(importer *im, char *err, size_t errlen) {
    char *path = imp_path_join(im->dir, "import.scratch.tmp");
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

/* Fixes the dataset's shape from the first image when no first pass chose
 * it (width, height and channels all given, or the first pass saw no image):
 * the user's values, else this image's. Returns 0 or -1 with err set. */
static int first_shape(importer *im, const char *path, int sw, int sh, bool gray, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    im->c = o->channels ? o->channels : gray ? 1 : 3;
    im->w = o->width ? o->width : sw;
    im->h = o->height ? o->height : sh;
    if (im->w > IMPORT_MAX_TARGET || im->h > IMPORT_MAX_TARGET)
        return set_err(err, errlen, "the first image (%s) is %dx%d; give a width and height of at most %d "
                       "to resize the images", path, sw, sh, IMPORT_MAX_TARGET);
    return 0;
}

/* Appends a converted image (im->image_bytes of CHW) to the scratch file as
 * record nrecs, named path (taken over; may be NULL), with label and split.
 * Returns 0 or -1 (err set; path freed). */
int imp_append_record(importer *im, char *path, const uint8_t *chw, int label, rec_split split,
                         char *err, size_t errlen) {
    if (im->nrecs == im->cap) {
        size_t ncap = im->cap ? im->cap * 2 : 256;
        image_rec *nr = realloc(im->recs, ncap * sizeof *nr);
        if (!nr) {
            free(path);
            return set_err(err, errlen, "out of memory");
        }
        im->recs = nr;
        im->cap = ncap;
    }
    if (fwrite(chw, 1, im->image_bytes, im->scratch) != im->image_bytes) {
        free(path);
        return set_err(err, errlen, "writing the scratch file in %s: %s", im->dir, strerror(errno));
    }
    image_rec *r = &im->recs[im->nrecs];
    *r = (image_rec){ path, label, split, { 0, 0, 0, 0 } };
    /* the mean's sums now, while the decoding threads work, not at the end */
    size_t hw = (size_t)im->h * (size_t)im->w;
    for (int ch = 0; ch < im->c; ch++) {
        const uint8_t *pl = chw + (size_t)ch * hw;
        uint32_t sum = 0;
        for (size_t p = 0; p < hw; p++) sum += pl[p];
        r->sums[ch] = sum;
    }
    im->nrecs++;
    return 0;
}

/* Resizes and converts an HWC image of sc channels (the options' resize
 * mode) and appends it (append_record; path copied, NULL: unnamed).
 * Returns 0 or -1 (err set). */
int imp_add_pixels(importer *im, const char *path, const uint8_t *hwc, int sw, int sh, int sc, int label,
                      rec_split split, char *err, size_t errlen) {
    if (!im->chw) {
        im->image_bytes = (size_t)im->c * (size_t)im->h * (size_t)im->w;
        if (!(im->chw = malloc(im->image_bytes))) return set_err(err, errlen, "out of memory");
    }
    char *p = path ? strdup(path) : NULL;
    uint64_t noise = im->opts ? im->opts->seed : 1;
    noise ^= (uint64_t)im->nrecs * 0x9E3779B97F4A7C15ull;
    img_resize mode = im->opts ? (img_resize)im->opts->resize : IMG_SQUASH;
    if ((path && !p) || img_resize_chw(hwc, sw, sh, sc, mode, noise, im->chw, im->w, im->h, im->c,
                                       &im->resize_scratch, &im->resize_cap) != 0) {
        free(p);
        return set_err(err, errlen, "out of memory");
    }
    return imp_append_record(im, p, im->chw, label, split, err, errlen);
}

/* Decodes one image file (a JPEG at the smallest scale that still covers the
 * dataset's size) and adds it (add_pixels). Returns 0, 1 (unreadable, why
 * set) or -1 (fatal, err set). */
static int imp_add_image(importer *im, const char *path, const uint8_t *buf, size_t len, int label,
                     rec_split split, char *why, size_t whylen, char *err, size_t errlen) {
    if (!im->dec && !(im->dec = img_decoder_new())) return set_err(err, errlen, "out of memory");
    if (im->h == 0) {
        int sw, sh;
        bool gray;
        if (img_probe(im->dec, buf, len, &sw, &sh, &gray, why, whylen) != 0) return 1;
        if (first_shape(im, path, sw, sh, gray, err, errlen) != 0) return -1;
    }
    uint8_t *pix = NULL;
    int sw = 0, sh = 0;
    if (img_decode(im->dec, buf, len, im->c, im->w, im->h, &pix, &sw, &sh, why, whylen) != 0) return 1;
    int rc = imp_add_pixels(im, path, pix, sw, sh, im->c, label, split, err, errlen);
    free(pix);
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
/* total counts the images within image-pixels: the import's image count
 * for the estimate of its size (import_estimate_check). */

int imp_estimate(importer *im, size_t n, int c, int h, int w, char *err, size_t errlen) {
    api_error e;
    if (import_estimate_check(n, c, h, w, im->opts, im->dir, &e) == 0) return 0;
    return set_err(err, errlen, "%s", e.message);
}

/* The first pass's visit: counts the image's size from its header. */
static int count_size(importer *im, void *ctx, const char *path, int rr, const uint8_t *buf, size_t len,
                      char *why, size_t whylen, char *err, size_t errlen) {
    (void)path;
    shape_census *sc = ctx;
    int w, h;
    bool gray;
    if (!im->dec && !(im->dec = img_decoder_new())) return set_err(err, errlen, "out of memory");
    if (rr != 0 || img_probe(im->dec, buf, len, &w, &h, &gray, why, whylen) != 0 || w <= 0 || h <= 0)
        return 0;
    int pc = imp_pixels_check(im, w, h, why, whylen, err, errlen);
    if (pc != 0) return pc < 0 ? -1 : 0;       /* over image-pixels: the importing pass lists it */
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
 * file is still read whole, so the caps hold as in the second pass): the
 * images' count and pixels against the limits (image-pixels, import-pixels,
 * then the size estimate: nothing is decoded or written before these), and
 * when the options leave it to the images, the most common image size (the
 * first seen of equal counts) and whether every image is grey. Sets the shape
 * the second pass squashes to, and the report's shape_note. */
static int imp_choose_shape(importer *im, const char *archive_path, double to,
                        import_progress_fn progress, void *arg, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    shape_census sc = { NULL, 0, 0, true };
    const archive_pass first = { false, 0, to, count_size, &sc };
    int rc = im->walk(im, archive_path, &first, progress, arg, err, errlen);
    im->pixels = 0;                                /* the importing pass counts again */
    if (rc != 0 || sc.total == 0) goto out;        /* no images: the second pass says so */
    if (o->width && o->channels) {                 /* the user's shape: only the estimate to make */
        rc = imp_estimate(im, sc.total, o->channels, o->height, o->width, err, errlen);
        goto out;
    }
    size_t best = 0;
    for (size_t k = 1; k < sc.nsizes; k++)
        if (sc.sizes[k].n > sc.sizes[best].n) best = k;
    im->c = o->channels ? o->channels : sc.all_gray ? 1 : 3;
    if (o->width) {                                /* the user's size; channels were left to us */
        im->w = o->width;
        im->h = o->height;
        snprintf(im->rep.shape_note, sizeof im->rep.shape_note, "the size asked for");
        rc = imp_estimate(im, sc.total, im->c, im->h, im->w, err, errlen);
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
    if (rc == 0) rc = imp_estimate(im, sc.total, im->c, im->h, im->w, err, errlen);
out:
    free(sc.sizes);
    return rc;
}

/* ---- decoding on the pool's threads ------------------------------------------------ */

typedef struct pool_tag {
    char *path;
    int label;
} pool_tag;

static void drop_tag(void *t) {
    pool_tag *tag = t;
    free(tag->path);
    free(tag);
}

/* A decoded file comes back, in the order it was read. */
static int pool_done(void *arg, void *t, int result, const uint8_t *chw, const char *why, char *err, size_t errlen) {
    importer *im = arg;
    pool_tag *tag = t;
    int rc = 0;
    if (result == 0) {
        rc = imp_append_record(im, tag->path, chw, tag->label, SPLIT_ANY, err, errlen);
        tag->path = NULL;
    } else {
        imp_log_file(im, &im->rep.unreadable, "unreadable", tag->path, why);
    }
    drop_tag(tag);
    return rc;
}

/* Starts the pool for the importing pass when the shape is known (else the
 * first image fixes it, on this thread). Returns 0 or -1 (err set). */
static int imp_pool_start(importer *im, char *err, size_t errlen) {
    if (im->h == 0) {
        const import_opts *o = im->opts;
        if (!(o->width && o->channels)) return 0;
        im->c = o->channels;
        im->w = o->width;
        im->h = o->height;
    }
    im->image_bytes = (size_t)im->c * (size_t)im->h * (size_t)im->w;
    if (!im->chw && !(im->chw = malloc(im->image_bytes))) return set_err(err, errlen, "out of memory");   /* write_split's */
    pool_target t = { im->c, im->h, im->w, im->opts->resize, im->opts->seed };
    im->pool = import_pool_new(&t, import_pool_threads(), pool_done, im, err, errlen);
    return im->pool ? 0 : -1;
}

/* Waits for the pool's last files and stops it. */
static int imp_pool_finish(importer *im, char *err, size_t errlen) {
    int rc = im->pool ? import_pool_drain(im->pool, err, errlen) : 0;
    import_pool_free(im->pool, drop_tag);
    im->pool = NULL;
    return rc;
}

/* ---- the importing pass ------------------------------------------------------------ */

/* Whether a file counts for the layout: it starts like a PNG or JPEG, or is
 * named like one (a README beside the class folders does not). */
static bool looks_like_image(const char *path, const uint8_t *buf, size_t len) {
    if (buf && img_signature(buf, len) != IMG_NONE) return true;
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
static int imp_visit_file(importer *im, void *ctx, const char *raw_path, int rr, const uint8_t *buf, size_t len,
                       char *why, size_t whylen, char *err, size_t errlen) {
    (void)ctx;
    char name[4096 * 2 + 1];
    const char *path = imp_name(raw_path, name, sizeof name);
    if (rr == 0) {                              /* the header's size against the limits, before decoding */
        int w, h;
        bool gray;
        if (!im->dec && !(im->dec = img_decoder_new())) return set_err(err, errlen, "out of memory");
        if (img_probe(im->dec, buf, len, &w, &h, &gray, why, whylen) != 0) rr = 1;
        else if ((rr = imp_pixels_check(im, w, h, why, whylen, err, errlen)) < 0) return -1;
        else if (rr == 1) {
            im->over_pixels++;
            if (!im->labelled && remember(im, path, err, errlen) != 0) return -1;
            imp_log_file(im, &im->rep.skipped, "skipped", path, why);
            return 0;
        }
    }
    if (!im->labelled && looks_like_image(path, rr == 0 ? buf : NULL, len) && remember(im, path, err, errlen) != 0)
        return -1;
    if (rr == 0 && im->pool) {
        pool_tag *tag = malloc(sizeof *tag);
        uint8_t *copy = tag ? malloc(len ? len : 1) : NULL;
        if (!copy || !(tag->path = strdup(path))) {
            free(copy);
            free(tag);
            return set_err(err, errlen, "out of memory");
        }
        memcpy(copy, buf, len);
        tag->label = im->cur_label;
        if (import_pool_submit(im->pool, copy, len, tag, err, errlen) != 0) {
            drop_tag(tag);
            return -1;
        }
        return 0;
    }
    if (rr == 0) rr = imp_add_image(im, path, buf, len, im->cur_label, SPLIT_ANY, why, whylen, err, errlen);
    if (rr < 0) return -1;
    if (rr == 1) imp_log_file(im, &im->rep.unreadable, "unreadable", path, why);
    return 0;
}

/* ---- classes, split and output ------------------------------------------------ */

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

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
            imp_log_file(im, &im->rep.outside, "left out", im->recs[i].path, "not inside a class folder");
            continue;
        }
        const char *problem = readers_class_name_problem(p, (size_t)(slash - p));
        if (problem) {
            imp_log_file(im, &im->rep.skipped, "skipped", im->recs[i].path, problem);
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
        if (!slash || readers_class_name_problem(p, (size_t)(slash - p))) continue;
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

double imp_write_from(const importer *im) {
    /* compressing each image (png, jpeg) is about as much work as reading it */
    return im->opts && im->opts->encoding != DS_ENC_RAW ? 0.5 : 0.9;
}

/* Writes the images at idx[0..n) of the scratch file to dir/name; adds their
 * per-channel pixel sums to sums when not NULL. */
static int write_split(importer *im, const char *name, const size_t *idx, size_t n, uint64_t *sums,
                       import_progress_fn progress, void *arg, double f0, double f1,
                       char *err, size_t errlen) {
    char *path = imp_path_join(im->dir, name);
    if (!path) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    int enc = im->opts ? im->opts->encoding : DS_ENC_RAW;
    ds_writer *wr = enc == DS_ENC_RAW ? ds_writer_open(path, im->c, im->h, im->w, err, errlen)
                                      : ds_writer_open_encoded(path, im->c, im->h, im->w, enc,
                                                               IMPORT_JPEG_QUALITY, err, errlen);
    free(path);
    if (!wr) return -1;
    if (ds_writer_expect(wr, n, err, errlen) != 0) {
        ds_writer_abort(wr);
        return -1;
    }
    int fd = fileno(im->scratch);
    for (size_t i = 0; i < n; i++) {
        off_t at = (off_t)(idx[i] * im->image_bytes);
        if (pread(fd, im->chw, im->image_bytes, at) != (ssize_t)im->image_bytes) {
            set_err(err, errlen, "reading the scratch file in %s: %s", im->dir, strerror(errno));
            ds_writer_abort(wr);
            return -1;
        }
        if (sums)
            for (int ch = 0; ch < im->c; ch++) sums[ch] += im->recs[idx[i]].sums[ch];
        if (ds_writer_add(wr, im->chw, im->recs[idx[i]].label, err, errlen) != 0) {
            ds_writer_abort(wr);
            return -1;
        }
        if ((i & (enc == DS_ENC_RAW ? 255 : 15)) == 0 && n > 0 &&
            imp_report(progress, arg, f0 + (f1 - f0) * (double)i / (double)n, err, errlen) != 0) {
            ds_writer_abort(wr);
            return -1;
        }
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
int imp_write_dataset(importer *im, char **classes, int nclasses, int val_percent, uint64_t seed,
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
    int test_percent = im->opts && ntest == 0 ? im->opts->test_percent : 0;   /* only without test/ */
    if (per_class) {
        for (int k = 0; k < nclasses; k++) {
            size_t n = 0;
            for (size_t i = 0; i < im->nrecs; i++)
                if (im->recs[i].label == k && (im->recs[i].split == SPLIT_ANY ||
                                               im->recs[i].split == SPLIT_TRAIN))
                    cls[n++] = i;
            imp_shuffle(cls, n, seed, (uint64_t)k + 1);
            /* round(n * percent / 100) each, at least one image left to train on */
            size_t nv = (n * (size_t)val_percent + 50) / 100;
            size_t nt = (n * (size_t)test_percent + 50) / 100;
            if (n >= 1 && nv > n - 1) nv = n - 1;
            if (n >= 1 && nt > n - 1 - nv) nt = n - 1 - nv;
            for (size_t i = 0; i < n; i++) {
                if (i < nv) val[nval++] = cls[i];
                else if (i < nv + nt) test[ntest++] = cls[i];
                else train[ntrain++] = cls[i];
            }
        }
    } else {
        /* one global shuffle: the first n - n * val_percent / 100 go to train */
        size_t n = 0;
        for (size_t i = 0; i < im->nrecs; i++)
            if (im->recs[i].label >= 0) cls[n++] = i;
        imp_shuffle(cls, n, seed, 0);
        size_t nv = n * (size_t)val_percent / 100;
        for (size_t i = 0; i < n; i++) {
            if (i < n - nv) train[ntrain++] = cls[i];
            else val[nval++] = cls[i];
        }
    }
    /* Each split in the order the images were read: the scratch file is then
     * read front to back, and the loader draws its own order every epoch. */
    qsort(train, ntrain, sizeof *train, cmp_size);
    qsort(val, nval, sizeof *val, cmp_size);
    qsort(test, ntest, sizeof *test, cmp_size);
    if (count_per_class(im, nclasses, train, ntrain, val, nval, test, ntest, err, errlen) != 0)
        goto out;
    if (fflush(im->scratch) != 0) {
        set_err(err, errlen, "writing the scratch file in %s: %s", im->dir, strerror(errno));
        goto out;
    }
    uint64_t sums[4] = { 0, 0, 0, 0 };
    /* the write's share of the progress, split by images */
    double w0 = imp_write_from(im), all = (double)(ntrain + nval + ntest ? ntrain + nval + ntest : 1);
    double w1 = w0 + (0.99 - w0) * (double)ntrain / all, w2 = w1 + (0.99 - w0) * (double)nval / all;
    if (write_split(im, LAYOUT_TRAIN_SPLIT, train, ntrain, sums, progress, arg, w0, w1, err, errlen) != 0 ||
        write_split(im, LAYOUT_VAL_SPLIT, val, nval, NULL, progress, arg, w1, w2, err, errlen) != 0 ||
        (ntest > 0 &&
         write_split(im, LAYOUT_TEST_SPLIT, test, ntest, NULL, progress, arg, w2, 0.99, err, errlen) != 0))
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
    snprintf(info->resize, sizeof info->resize, "%s",
             img_resize_name(im->opts ? (img_resize)im->opts->resize : IMG_SQUASH));
    info->encoding = im->opts ? im->opts->encoding : DS_ENC_RAW;
    if (ds_info_save(im->dir, info, source, err, errlen) != 0) goto out;
    rc = 0;
out:
    free(train);
    free(val);
    free(cls);
    free(test);
    return rc;
}

void imp_free_classes(char **classes, int n) {
    if (!classes) return;
    for (int i = 0; i < n; i++) free(classes[i]);
    free(classes);
}

/* Hands the header to the caller (out may be NULL): a copy with its own classes. */
int imp_give_info(const ds_info *info, ds_info *out, char *err, size_t errlen) {
    if (!out) return 0;
    *out = *info;
    out->classes = calloc((size_t)info->nclasses + 1, sizeof *out->classes);
    for (int i = 0; out->classes && i < info->nclasses; i++) {
        if (!(out->classes[i] = strdup(info->classes[i]))) {
            imp_free_classes(out->classes, i);
            out->classes = NULL;
        }
    }
    if (out->classes) return 0;
    out->nclasses = 0;
    return set_err(err, errlen, "out of memory");
}

int imp_write_log(importer *im, const char *head, char *err, size_t errlen) {
    strbuf out = { 0 };
    sb_printf(&out, "%s", head);
    sb_printf(&out, "unreadable: %zu, skipped: %zu, outside a class folder: %zu\n", im->rep.unreadable,
              im->rep.skipped, im->rep.outside);
    if (im->log.len) sb_printf(&out, "%s", im->log.p);
    if (im->log_lines > IMPORT_LOG_MAX_LINES)
        sb_printf(&out, "... and %zu more\n", im->log_lines - IMPORT_LOG_MAX_LINES);
    char *path = imp_path_join(im->dir, LAYOUT_IMPORT_LOG);
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

/* Checks what a source gave, splits it, writes the dataset and its log, and
 * hands the header to the caller: the end of every import. classes (owned
 * by the caller) are the dataset's class names; source says where the
 * images came from (header.json and the log). */
int imp_finish(importer *im, char **classes, int nclasses, const char *source,
                         import_progress_fn progress, void *arg, ds_info *info, char *err, size_t errlen) {
    const import_opts *o = im->opts;
    char ignored[64];
    if (nclasses == 0 && im->over_pixels) {
        set_err(err, errlen, "no image to import: the %zu image(s) found are over the limit of %llu pixels each "
                "(image-pixels); make them smaller", im->over_pixels,
                (unsigned long long)(o->max_image_pixels ? o->max_image_pixels : IMPORT_IMAGE_PIXELS_DEFAULT));
        imp_write_log(im, "kiln import: every image is over image-pixels\n", ignored, sizeof ignored);
        return -1;
    }
    if (nclasses == 0) {
        set_err(err, errlen, NO_IMAGES_MSG);
        imp_write_log(im, "kiln import: " NO_IMAGES_MSG "\n", ignored, sizeof ignored);
        return -1;
    }
    size_t trainable = 0;
    for (size_t i = 0; i < im->nrecs; i++)
        trainable += im->recs[i].label >= 0 && im->recs[i].split != SPLIT_VAL && im->recs[i].split != SPLIT_TEST;
    if (trainable == 0) {
        set_err(err, errlen, "no training images: the train/ folder holds no readable image");
        imp_write_log(im, "kiln import: no training images in train/\n", ignored, sizeof ignored);
        return -1;
    }
    if (nclasses < 2) {            /* nothing to tell apart: refuse rather than train on it */
        char why[600];
        snprintf(why, sizeof why, "the images make up one class (\"%.200s\") after %zu unreadable, %zu "
                 "skipped and %zu left out; a classifier needs at least two classes", classes[0],
                 im->rep.unreadable, im->rep.skipped, im->rep.outside);
        set_err(err, errlen, "%s", why);
        char head[700];
        snprintf(head, sizeof head, "kiln import: %s\n", why);
        imp_write_log(im, head, ignored, sizeof ignored);
        return -1;
    }
    ds_info written;
    if (imp_write_dataset(im, classes, nclasses, o->val_percent, o->seed, true, source, progress, arg,
                      &written, err, errlen) != 0)
        return -1;
    char head[900], tests[48] = "";
    if (written.test_count) snprintf(tests, sizeof tests, ", %zu test", written.test_count);
    snprintf(head, sizeof head, "kiln import: %zu images (%zu train, %zu val%s) in %d classes, shape [%d, %d, %d]%s%s%s, "
             "resize %s, encoding %s, from %.300s\n%s",
             written.train_count + written.val_count + written.test_count, written.train_count,
             written.val_count, tests, nclasses, im->c, im->h, im->w,
             im->rep.shape_note[0] ? " (" : "", im->rep.shape_note, im->rep.shape_note[0] ? ")" : "",
             written.resize, ds_encoding_name(written.encoding), source,
             !im->split_folders ? "" : im->has_val ? "splits: the source's train/, val/ and test/ folders\n"
                                                  : "splits: the source's train/ and test/ folders; val "
                                                    "drawn from train\n");
    if (imp_write_log(im, head, err, errlen) != 0 || imp_give_info(&written, info, err, errlen) != 0) return -1;
    return imp_report(progress, arg, 1.0, err, errlen);
}

/* The start of every import: the options checked, the scratch file open. */
int imp_start(importer *im, const char *dir, const import_opts *o, import_progress_fn progress,
                          void *arg, ds_info *info, char *err, size_t errlen) {
    memset(im, 0, sizeof *im);
    im->dir = dir;
    im->opts = o;
    if (info) memset(info, 0, sizeof *info);
    api_error bad;
    if (import_options_check(o, &bad) != 0) return set_err(err, errlen, "%s", bad.message);
    if (imp_report(progress, arg, 0, err, errlen) != 0) return -1;
    return imp_open_scratch(im, err, errlen);
}

/* The end of every import: the report to the caller (rep may be NULL),
 * the importer freed. */
void imp_end(importer *im, import_report *rep) {
    im->rep.images = im->nrecs;
    if (rep) {                   /* the report, its arrays too, goes to the caller */
        *rep = im->rep;
        memset(im->rep.per_class, 0, sizeof im->rep.per_class);
    }
    imp_free(im);
}

int imp_read_files(importer *im, const char *path, import_progress_fn progress, void *arg, char *err,
                   size_t errlen) {
    /* A first pass over the headers counts the images against the limits
     * and, without a size or channel count, chooses them: the most common
     * size, grey only if every image is. */
    double read_from = 0.3;
    if (imp_choose_shape(im, path, read_from, progress, arg, err, errlen) != 0) return -1;
    const archive_pass importing = { true, read_from, imp_write_from(im), imp_visit_file, NULL };
    if (imp_pool_start(im, err, errlen) != 0 || im->walk(im, path, &importing, progress, arg, err, errlen) != 0)
        return -1;
    return imp_pool_finish(im, err, errlen);
}

/* An archive or a folder of class folders (or of train/ val/ test/ folders
 * holding them). */
static int import_tree(import_kind kind, const char *path, const char *dir, const import_opts *o,
                       import_progress_fn progress, void *arg, ds_info *info, import_report *rep,
                       char *err, size_t errlen) {
    importer im;
    char **classes = NULL;
    int nclasses = 0, rc = -1;
    if (rep) memset(rep, 0, sizeof *rep);
    if (imp_start(&im, dir, o, progress, arg, info, err, errlen) != 0) goto out;
    im.walk = kind == IMPORT_FOLDER ? imp_each_folder_file : imp_each_archive_file;
    im.cur_label = -1;
    if (imp_read_files(&im, path, progress, arg, err, errlen) != 0) goto out;
    if (assign_classes(&im, &classes, &nclasses, err, errlen) != 0) goto out;
    const char *base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    char source[512];
    snprintf(source, sizeof source, "%s %.400s", kind == IMPORT_FOLDER ? "folder" : "archive",
             kind == IMPORT_FOLDER ? path : base);
    rc = imp_finish(&im, classes, nclasses, source, progress, arg, info, err, errlen);
out:
    imp_free_classes(classes, nclasses);
    imp_end(&im, rep);
    return rc;
}

int import_archive_reported(const char *archive_path, const char *dir, const import_opts *opts,
                            import_progress_fn progress, void *arg, ds_info *info,
                            import_report *rep, char *err, size_t errlen) {
    static const import_opts defaults = IMPORT_OPTS_DEFAULT;
    return import_tree(IMPORT_ARCHIVE, archive_path, dir, opts ? opts : &defaults, progress, arg, info, rep,
                       err, errlen);
}

static const char *const kind_names[IMPORT_KIND_COUNT] = {
    [IMPORT_ARCHIVE] = "archive", [IMPORT_FOLDER] = "folder", [IMPORT_LIST] = "list",
    [IMPORT_IDX] = "idx", [IMPORT_CIFAR] = "cifar", [IMPORT_MNIST_JSON] = "mnist-json",
};

const char *import_kind_name(import_kind k) {
    return (unsigned)k < IMPORT_KIND_COUNT ? kind_names[k] : NULL;
}

int import_kind_parse(const char *name, import_kind *k) {
    for (int i = 0; name && i < IMPORT_KIND_COUNT; i++)
        if (!strcmp(name, kind_names[i])) {
            *k = (import_kind)i;
            return 0;
        }
    return -1;
}

int import_run(const import_source *src, const char *dir, import_progress_fn progress, void *arg,
               ds_info *info, import_report *rep, char *err, size_t errlen) {
    if (rep) memset(rep, 0, sizeof *rep);
    switch (src->kind) {
    case IMPORT_ARCHIVE:
    case IMPORT_FOLDER:
        return import_tree(src->kind, src->path, dir, &src->opts, progress, arg, info, rep, err, errlen);
    case IMPORT_MNIST_JSON:
        return import_mnist_json(src->path, dir, progress, arg, info, err, errlen);
    case IMPORT_LIST:
        return imp_import_list(src, dir, progress, arg, info, rep, err, errlen);
    case IMPORT_IDX:
    case IMPORT_CIFAR:
        return imp_import_pixels(src, dir, progress, arg, info, rep, err, errlen);
    case IMPORT_KIND_COUNT:
        break;
    }
    return set_err(err, errlen, "unknown source type %d", (int)src->kind);
}

