/* server/dataset_view.c: the dataset explorer (contract in dataset_view.h).
 *
 * Every handler reads the store's record first (404, 409), then the dataset's
 * folder: header.json for the class names and the split's .kds file, mapped
 * read-only (a dataset deleted meanwhile stays readable through the mapping
 * until the request ends). Images come out through ds_split_read, the
 * loader's own path to the pixels, and go in as PNG through img_encode_png.
 */
#include "server/dataset_view.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/layout.h"           /* layout_dataset_dir, layout_file, LAYOUT_*_SPLIT, LAYOUT_MEAN_IMAGE */
#include "engine/dataset.h"        /* ds_split_open, ds_split_read, ds_info_load */
#include "engine/fileio.h"         /* fio_read_file, fio_write_atomic */
#include "engine/image.h"          /* img_encode_png, img_decoder_new */
#include "server/lookup.h"          /* lookup_dataset */

#define MEAN_PNG_MAX ((size_t)64 << 20)      /* a mean.png read back: far past any real one */
#define CACHE_FOREVER "public, max-age=31536000, immutable"
#define CACHE_REVALIDATE "no-cache"

/* The splits a dataset may have, by their query name. */
typedef struct split_def {
    const char *name;
    const char *file;                /* in the dataset's folder */
} split_def;

static const split_def splits[] = {
    { .name = "train", .file = LAYOUT_TRAIN_SPLIT },
    { .name = "val", .file = LAYOUT_VAL_SPLIT },
    { .name = "test", .file = LAYOUT_TEST_SPLIT },
};
#define SPLIT_COUNT (sizeof splits / sizeof splits[0])

/* What a request about one ready dataset holds open. */
typedef struct view {
    int64_t id;
    char dir[PATH_MAX];
    char token[17];                  /* the instance token: 16 hex digits */
    const split_def *split;          /* NULL until open_split */
    ds_split *s;
    ds_info info;                    /* header.json */
    bool have_info;
} view;

static void view_close(view *v)
{
    ds_split_close(v->s);
    v->s = NULL;
    if (v->have_info)
        ds_info_free(&v->info);
    v->have_info = false;
}

/* FNV-1a over the dataset's id and creation time: the same for the life of
 * one dataset, different for a dataset made later under the same id. */
static void instance_token(int64_t id, const char *created_at, char out[17])
{
    char key[128];
    snprintf(key, sizeof key, "%lld|%s", (long long)id, created_at ? created_at : "");
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* ?split= (train when absent): true, or false with a 400 answered. */
static bool parse_split(request *r, const split_def **out, enum MHD_Result *answered)
{
    const char *s = http_arg(r, "split");
    if (!s) {
        *out = &splits[0];
        return true;
    }
    for (size_t i = 0; i < SPLIT_COUNT; i++)
        if (!strcmp(s, splits[i].name)) {
            *out = &splits[i];
            return true;
        }
    *answered = http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                           "split must be train, val or test, not \"%.32s\"", s);
    return false;
}

/* Reads dataset r->id from the store: true when it is ready (v->id, dir and
 * token set); else false with 404, 409 or 500 answered. */
static bool open_dataset(request *r, view *v, enum MHD_Result *answered)
{
    memset(v, 0, sizeof *v);
    v->id = r->id;
    store_dataset d;
    if (!lookup_dataset(r, r->id, &d, answered))
        return false;
    bool ready = d.status && !strcmp(d.status, "ready");
    bool importing = d.status && !strcmp(d.status, "importing");
    instance_token(d.id, d.created_at, v->token);
    store_dataset_clear(&d);
    if (!ready) {
        *answered = importing
                        ? http_error(r, MHD_HTTP_CONFLICT, "dataset_importing",
                                     "dataset %lld is still importing; its images can be seen once it is ready",
                                     (long long)r->id)
                        : http_error(r, MHD_HTTP_CONFLICT, "dataset_failed",
                                     "dataset %lld failed to import and has no images to show", (long long)r->id);
        return false;
    }
    if (layout_dataset_dir(v->dir, sizeof v->dir, r->srv->data_dir, r->id) != 0) {
        *answered = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                               "the data directory's path is too long");
        return false;
    }
    return true;
}

/* Opens split sp of the ready dataset in v and its header: true, or false
 * with 404 split_not_found (no such file) or 500 answered. */
static bool open_split(request *r, view *v, const split_def *sp, enum MHD_Result *answered)
{
    char path[PATH_MAX + 32], err[256];
    if (layout_file(path, sizeof path, v->dir, sp->file) != 0) {
        *answered = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                               "the data directory's path is too long");
        return false;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        *answered = http_error(r, MHD_HTTP_NOT_FOUND, "split_not_found", "dataset %lld has no %s split",
                               (long long)v->id, sp->name);
        return false;
    }
    v->s = ds_split_open(path, err, sizeof err);
    if (!v->s) {
        fprintf(stderr, "kiln: dataset %lld: %s\n", (long long)v->id, err);
        *answered = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "dataset_unreadable",
                               "the %s split of dataset %lld cannot be read: %s", sp->name, (long long)v->id, err);
        return false;
    }
    if (ds_info_load(v->dir, &v->info, err, sizeof err) != 0) {
        fprintf(stderr, "kiln: dataset %lld: %s\n", (long long)v->id, err);
        *answered = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "dataset_unreadable",
                               "the header of dataset %lld cannot be read: %s", (long long)v->id, err);
        return false;
    }
    v->have_info = true;
    v->split = sp;
    return true;
}

/* ---- samples ---------------------------------------------------------------------- */

/* One sample as {"index","label","class","url"}, or NULL when out of memory. */
static cJSON *sample_item(const view *v, size_t index, int label)
{
    char url[160];
    snprintf(url, sizeof url, "/api/v1/datasets/%lld/image.png?split=%s&index=%zu&v=%s", (long long)v->id,
             v->split->name, index, v->token);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddNumberToObject(o, "index", (double)index) ||
        !cJSON_AddNumberToObject(o, "label", label) ||
        !cJSON_AddStringToObject(o, "class", v->info.classes[label]) || !cJSON_AddStringToObject(o, "url", url)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The answer of GET .../samples: the split's images per class and the first
 * n of class want (-1: of every class), grouped by class in label order.
 * NULL when out of memory. */
static cJSON *samples_json(const view *v, int want, int n)
{
    int nc = v->info.nclasses;
    size_t count = ds_split_count(v->s);
    size_t *per = calloc((size_t)nc + 1, sizeof *per);     /* the split's images per class */
    size_t *start = calloc((size_t)nc + 1, sizeof *start);
    size_t *taken = calloc((size_t)nc + 1, sizeof *taken);
    size_t *chosen = NULL;
    cJSON *o = NULL;
    bool ok = per && start && taken;
    for (size_t i = 0; ok && i < count; i++) {
        int l = ds_split_label(v->s, i);
        if (l >= 0 && l < nc)
            per[l]++;
    }
    /* Slots: class k's chosen images go to chosen[start[k] .. start[k+1]). */
    for (int k = 0; ok && k < nc; k++) {
        size_t m = want < 0 || want == k ? (per[k] < (size_t)n ? per[k] : (size_t)n) : 0;
        start[k + 1] = start[k] + m;
    }
    size_t total = ok ? start[nc] : 0;
    chosen = ok ? malloc((total ? total : 1) * sizeof *chosen) : NULL;
    ok = ok && chosen;
    for (size_t i = 0, placed = 0; ok && i < count && placed < total; i++) {
        int l = ds_split_label(v->s, i);
        if (l < 0 || l >= nc || taken[l] >= start[l + 1] - start[l])
            continue;
        chosen[start[l] + taken[l]++] = i;
        placed++;
    }
    int c = 0, h = 0, w = 0;
    ds_split_shape(v->s, &c, &h, &w);
    const int shape[3] = { c, h, w };
    o = ok ? cJSON_CreateObject() : NULL;
    cJSON *counts = NULL, *items = NULL;
    ok = o && cJSON_AddNumberToObject(o, "dataset_id", (double)v->id) &&
         cJSON_AddStringToObject(o, "split", v->split->name) && cJSON_AddNumberToObject(o, "count", (double)count) &&
         cJSON_AddItemToObject(o, "shape", cJSON_CreateIntArray(shape, 3)) &&
         cJSON_AddNumberToObject(o, "n", n) &&
         (want < 0 ? cJSON_AddNullToObject(o, "class") : cJSON_AddNumberToObject(o, "class", want)) &&
         cJSON_AddItemToObject(o, "classes", cJSON_CreateStringArray((const char *const *)v->info.classes, nc)) &&
         (counts = cJSON_AddArrayToObject(o, "class_counts")) && (items = cJSON_AddArrayToObject(o, "items"));
    for (int k = 0; ok && k < nc; k++)
        ok = cJSON_AddItemToArray(counts, cJSON_CreateNumber((double)per[k]));
    for (int k = 0; ok && k < nc; k++)
        for (size_t j = start[k]; ok && j < start[k] + taken[k]; j++) {
            cJSON *it = sample_item(v, chosen[j], k);
            ok = it && cJSON_AddItemToArray(items, it);
            if (!ok)
                cJSON_Delete(it);
        }
    if (!ok) {
        cJSON_Delete(o);
        o = NULL;
    }
    free(per);
    free(start);
    free(taken);
    free(chosen);
    return o;
}

int dsview_samples(request *r)
{
    enum MHD_Result answered;
    const split_def *sp;
    if (!parse_split(r, &sp, &answered))
        return answered;
    int64_t n = DSVIEW_N_DEFAULT, want = -1;
    const char *ns = http_arg(r, "n"), *cs = http_arg(r, "class");
    if (ns && !http_parse_i64(ns, 1, DSVIEW_N_MAX, &n))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                          "n must be a whole number from 1 to %d, not \"%.32s\"", DSVIEW_N_MAX, ns);
    if (cs && !http_parse_i64(cs, 0, INT_MAX, &want))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                          "class must be a class index (a whole number from 0), not \"%.32s\"", cs);
    view v;
    if (!open_dataset(r, &v, &answered) || !open_split(r, &v, sp, &answered)) {
        view_close(&v);
        return answered;
    }
    if (cs && want >= v.info.nclasses) {
        int nc = v.info.nclasses;
        view_close(&v);
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                          "class must be a class index from 0 to %d (dataset %lld has %d classes), not %lld",
                          nc - 1, (long long)r->id, nc, (long long)want);
    }
    cJSON *o = samples_json(&v, (int)want, (int)n);
    view_close(&v);
    return http_json(r, MHD_HTTP_OK, o);
}

/* ---- images ------------------------------------------------------------------------- */

/* True when the request's If-None-Match names etag (or is "*"). */
static bool not_modified(request *r, const char *etag)
{
    const char *inm = http_header(r, MHD_HTTP_HEADER_IF_NONE_MATCH);
    return inm && (!strcmp(inm, "*") || strstr(inm, etag) != NULL);
}

/* Answers a PNG of len bytes (taken over: freed here in every case), or a
 * 304 when the client holds it already. */
static enum MHD_Result answer_png(request *r, const view *v, const char *etag, uint8_t *png, size_t len)
{
    const char *asked = http_arg(r, "v");
    bool pinned = asked && !strcmp(asked, v->token);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, png, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(png);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "image/png");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, pinned ? CACHE_FOREVER : CACHE_REVALIDATE);
    return http_queue(r, MHD_HTTP_OK, resp);
}

static enum MHD_Result answer_not_modified(request *r, const view *v, const char *etag)
{
    const char *asked = http_arg(r, "v");
    bool pinned = asked && !strcmp(asked, v->token);
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, pinned ? CACHE_FOREVER : CACHE_REVALIDATE);
    return http_queue(r, MHD_HTTP_NOT_MODIFIED, resp);
}

/* Image index of the open split as PNG in *png (malloc'ed): 0, or -1 with why. */
static int split_png(const view *v, size_t index, uint8_t **png, size_t *len, char *why, size_t whylen)
{
    int c = 0, h = 0, w = 0;
    ds_split_shape(v->s, &c, &h, &w);
    uint8_t *chw = malloc((size_t)c * (size_t)h * (size_t)w);
    if (!chw)
        return set_err(why, whylen, "out of memory");
    int rc = ds_split_read(v->s, index, NULL, chw, why, whylen);
    if (rc == 0)
        rc = img_encode_png(chw, c, h, w, png, len, why, whylen);
    free(chw);
    return rc;
}

int dsview_image(request *r)
{
    enum MHD_Result answered;
    const split_def *sp;
    if (!parse_split(r, &sp, &answered))
        return answered;
    const char *is = http_arg(r, "index");
    int64_t index = 0;
    if (!is)
        return http_error(r, MHD_HTTP_BAD_REQUEST, "missing_field",
                          "index is required: the image's place in the split, from 0");
    if (!http_parse_i64(is, 0, INT64_MAX, &index))
        return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                          "index must be a whole number from 0, not \"%.32s\"", is);
    view v;
    if (!open_dataset(r, &v, &answered) || !open_split(r, &v, sp, &answered)) {
        view_close(&v);
        return answered;
    }
    size_t count = ds_split_count(v.s);
    if ((uint64_t)index >= count) {
        view_close(&v);
        return http_error(r, MHD_HTTP_NOT_FOUND, "image_not_found",
                          "the %s split of dataset %lld has %zu images; there is no index %lld", sp->name,
                          (long long)r->id, count, (long long)index);
    }
    char etag[80];
    snprintf(etag, sizeof etag, "\"%s-%s-%lld\"", v.token, sp->name, (long long)index);
    if (not_modified(r, etag)) {
        answered = answer_not_modified(r, &v, etag);
        view_close(&v);
        return answered;
    }
    uint8_t *png = NULL;
    size_t len = 0;
    char why[256];
    if (split_png(&v, (size_t)index, &png, &len, why, sizeof why) != 0) {
        fprintf(stderr, "kiln: dataset %lld: %s image %lld: %s\n", (long long)r->id, sp->name, (long long)index,
                why);
        view_close(&v);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "image_unreadable",
                          "image %lld of the %s split of dataset %lld cannot be read: %s", (long long)index,
                          sp->name, (long long)r->id, why);
    }
    answered = answer_png(r, &v, etag, png, len);
    view_close(&v);
    return answered;
}

/* ---- the mean image --------------------------------------------------------------------- */

/* One mean computation at a time in the server (see the header). */
static pthread_mutex_t mean_mu = PTHREAD_MUTEX_INITIALIZER;

/* The per-pixel mean of the open (training) split as PNG: 0, or -1 with why. */
static int mean_png(const ds_split *s, uint8_t **png, size_t *len, char *why, size_t whylen)
{
    int c = 0, h = 0, w = 0;
    ds_split_shape(s, &c, &h, &w);
    size_t px = (size_t)c * (size_t)h * (size_t)w, count = ds_split_count(s);
    uint64_t *sum = calloc(px, sizeof *sum);
    uint8_t *img = malloc(px);
    img_decoder *dec = img_decoder_new();
    int rc = -1;
    if (!sum || !img || !dec) {
        set_err(why, whylen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        if (ds_split_read(s, i, dec, img, why, whylen) != 0) {
            set_err_prefix(why, whylen, "reading the training images");
            goto out;
        }
        for (size_t p = 0; p < px; p++)
            sum[p] += img[p];
    }
    for (size_t p = 0; p < px; p++)
        img[p] = (uint8_t)((sum[p] + count / 2) / count);
    rc = img_encode_png(img, c, h, w, png, len, why, whylen);
out:
    img_decoder_free(dec);
    free(sum);
    free(img);
    return rc;
}

/* 503 mean_in_progress with Retry-After: another thread computes a mean. */
static enum MHD_Result answer_busy(request *r)
{
    static const char body[] = "{\"error\":{\"code\":\"mean_in_progress\",\"message\":"
                               "\"a mean image is being computed; ask again in a moment\"}}\n";
    struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof body - 1, (void *)body,
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    return http_queue(r, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
}

/* Reads path into *png: 0, 1 when there is no such file, -1 on another error. */
static int read_mean(const char *path, uint8_t **png, size_t *len, char *err, size_t errlen)
{
    char *bytes = fio_read_file(path, MEAN_PNG_MAX, len, err, errlen);
    if (!bytes)
        return errno == ENOENT ? 1 : -1;
    *png = (uint8_t *)bytes;
    return 0;
}

/* How mean_get ended. */
typedef enum mean_got { MEAN_OK, MEAN_BUSY, MEAN_ANSWERED, MEAN_FAILED } mean_got;

/* The mean image of the ready dataset in v as PNG in *png (malloc'ed): read
 * from path, or computed from the training split and kept at path. MEAN_BUSY
 * when another thread computes a mean; MEAN_ANSWERED when an answer has been
 * queued (*answered); MEAN_FAILED with why. */
static mean_got mean_get(request *r, view *v, const char *path, uint8_t **png, size_t *len, char *why,
                         size_t whylen, enum MHD_Result *answered)
{
    int got = read_mean(path, png, len, why, whylen);
    if (got != 1)
        return got == 0 ? MEAN_OK : MEAN_FAILED;
    if (pthread_mutex_trylock(&mean_mu) != 0)
        return MEAN_BUSY;
    mean_got res = MEAN_OK;
    got = read_mean(path, png, len, why, whylen);      /* kept between the first look and the lock? */
    if (got == -1)
        res = MEAN_FAILED;
    else if (got == 1 && !open_split(r, v, &splits[0], answered))
        res = MEAN_ANSWERED;
    else if (got == 1 && ds_split_count(v->s) == 0) {
        *answered = http_error(r, MHD_HTTP_NOT_FOUND, "image_not_found",
                               "dataset %lld has no training images to average", (long long)v->id);
        res = MEAN_ANSWERED;
    } else if (got == 1 && mean_png(v->s, png, len, why, whylen) != 0) {
        res = MEAN_FAILED;
    } else if (got == 1) {
        char werr[256];
        if (fio_write_atomic(path, *png, *len, werr, sizeof werr) != 0)     /* served all the same */
            fprintf(stderr, "kiln: dataset %lld: the mean image is not kept: %s\n", (long long)v->id, werr);
    }
    pthread_mutex_unlock(&mean_mu);
    return res;
}

int dsview_mean(request *r)
{
    enum MHD_Result answered;
    view v;
    if (!open_dataset(r, &v, &answered)) {
        view_close(&v);
        return answered;
    }
    char etag[40], path[PATH_MAX + 32], why[256];
    snprintf(etag, sizeof etag, "\"%s-mean\"", v.token);
    if (not_modified(r, etag))
        return answer_not_modified(r, &v, etag);
    if (layout_file(path, sizeof path, v.dir, LAYOUT_MEAN_IMAGE) != 0)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error",
                          "the data directory's path is too long");
    uint8_t *png = NULL;
    size_t len = 0;
    switch (mean_get(r, &v, path, &png, &len, why, sizeof why, &answered)) {
    case MEAN_OK:
        answered = answer_png(r, &v, etag, png, len);
        break;
    case MEAN_BUSY:
        answered = answer_busy(r);
        break;
    case MEAN_ANSWERED:
        break;
    case MEAN_FAILED:
        fprintf(stderr, "kiln: dataset %lld: mean image: %s\n", (long long)r->id, why);
        answered = http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "image_unreadable",
                              "the mean image of dataset %lld cannot be made: %s", (long long)r->id, why);
        break;
    }
    view_close(&v);
    return answered;
}
