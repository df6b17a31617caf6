/* engine/dataset.c: the prepared-dataset format (.kds splits, header.json) and
 * the batch loader. Format in engine/dataset.h.
 *
 * Guarantees:
 * - A split is opened only when its magic, version and exact size agree with its
 *   header; after that every index below ds_split_count() is safe to read.
 *   The image block starts at the first multiple of 64 at or after the end of
 *   the label array (24 + 2 * count bytes), so images are 64-byte aligned.
 * - Writers never leave a half-written file under the final name: images go to
 *   an unlinked scratch file, and commit writes "<path>.tmp", fsyncs it, renames
 *   it into place and fsyncs the folder.
 * - The loader's epoch order depends only on (seed, epoch): a splitmix64 stream
 *   seeded from both drives a Fisher-Yates shuffle. One background thread fills
 *   two batch slots ahead of the consumer. loader_next and loader_start_epoch
 *   must be called from one thread at a time (the consumer); the loader
 *   synchronises them with its producer.
 */
#include "engine/dataset.h"

#include "base/err.h"
#include "base/layout.h"   /* LAYOUT_DATASET_HEADER */
#include "engine/fileio.h"   /* fio_commit, fio_write_atomic, fio_read_file */
#include "engine/rng.h"      /* rng_splitmix64, rng_splitmix64_below */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define KDS_MAGIC "KILNDS\0"     /* 7 bytes; the 8th is the version */
#define KDS_VERSION 1
#define KDS_HEADER 24
#define KDS_ALIGN 64
#define KDS_MAX_CHANNELS 4       /* ds_info.mean has room for 4 */
#define INFO_FORMAT 1
#define INFO_MAX_BYTES (64u << 20)  /* header.json */


static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static char *str_cat(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

/* ---- reading a split ------------------------------------------------------ */

struct ds_split {
    void *map;
    size_t size;
    size_t count;
    int c, h, w;
    size_t image_bytes;
    const uint8_t *labels;       /* count little-endian u16 */
    const uint8_t *images;
};

ds_split *ds_split_open(const char *path, char *err, size_t errlen) {
    ds_split *s = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        goto out;
    }
    size_t size = (size_t)st.st_size;
    if (size < KDS_HEADER) {
        set_err(err, errlen, "%s: truncated (%zu bytes, less than the header); re-import the dataset",
                path, size);
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    s->map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        set_err(err, errlen, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    s->size = size;
    const uint8_t *p = s->map;
    if (memcmp(p, KDS_MAGIC, 7) != 0) {
        set_err(err, errlen, "%s: not a kiln dataset split (bad magic); re-import the dataset", path);
        goto fail;
    }
    if (p[7] != KDS_VERSION) {
        set_err(err, errlen, "%s: split format version %d is not supported (this kiln reads version %d); "
                "re-import the dataset", path, p[7], KDS_VERSION);
        goto fail;
    }
    s->count = rd32(p + 8);
    s->c = rd16(p + 12);
    s->h = rd16(p + 14);
    s->w = rd16(p + 16);
    if (s->c < 1 || s->c > KDS_MAX_CHANNELS || s->h < 1 || s->w < 1) {
        set_err(err, errlen, "%s: bad image shape [%d, %d, %d] in the header", path, s->c, s->h, s->w);
        goto fail;
    }
    s->image_bytes = (size_t)s->c * (size_t)s->h * (size_t)s->w;
    size_t images_at = align_up(KDS_HEADER + 2 * s->count, KDS_ALIGN);
    size_t images_len, expect;
    if (__builtin_mul_overflow(s->count, s->image_bytes, &images_len) ||
        __builtin_add_overflow(images_at, images_len, &expect) || expect != size) {
        set_err(err, errlen, "%s: truncated or damaged (%zu bytes, the header says %zu images of %zu "
                "bytes); re-import the dataset", path, size, s->count, s->image_bytes);
        goto fail;
    }
    s->labels = p + KDS_HEADER;
    s->images = p + images_at;
    close(fd);
    return s;
fail:
    ds_split_close(s);
    s = NULL;
out:
    close(fd);
    return s;
}

void ds_split_close(ds_split *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->size);
    free(s);
}

size_t ds_split_count(const ds_split *s) { return s->count; }

void ds_split_shape(const ds_split *s, int *c, int *h, int *w) {
    if (c) *c = s->c;
    if (h) *h = s->h;
    if (w) *w = s->w;
}

const uint8_t *ds_split_image(const ds_split *s, size_t i) {
    return s->images + i * s->image_bytes;
}

int ds_split_label(const ds_split *s, size_t i) { return rd16(s->labels + 2 * i); }

/* ---- writing a split ------------------------------------------------------ */

struct ds_writer {
    char *path, *tmp;
    FILE *out;               /* "<path>.tmp": the final file being built */
    FILE *scratch;           /* unlinked: images in the order added */
    uint16_t *labels;
    size_t count, cap;
    int c, h, w;
    size_t image_bytes;
};

static void writer_free(ds_writer *wr) {
    if (!wr) return;
    if (wr->out) fclose(wr->out);
    if (wr->scratch) fclose(wr->scratch);
    free(wr->labels);
    free(wr->path);
    free(wr->tmp);
    free(wr);
}

ds_writer *ds_writer_open(const char *path, int c, int h, int w, char *err, size_t errlen) {
    if (c < 1 || c > KDS_MAX_CHANNELS || h < 1 || h > 65535 || w < 1 || w > 65535) {
        set_err(err, errlen, "bad image shape [%d, %d, %d] (channels 1..%d, sides 1..65535)",
                c, h, w, KDS_MAX_CHANNELS);
        return NULL;
    }
    ds_writer *wr = calloc(1, sizeof *wr);
    char *scratch_name = NULL;
    if (!wr) goto oom;
    wr->c = c;
    wr->h = h;
    wr->w = w;
    wr->image_bytes = (size_t)c * (size_t)h * (size_t)w;
    wr->path = strdup(path);
    wr->tmp = str_cat(path, ".tmp");
    scratch_name = str_cat(path, ".images.tmp");
    if (!wr->path || !wr->tmp || !scratch_name) goto oom;
    wr->out = fopen(wr->tmp, "wbe");
    if (!wr->out) {
        set_err(err, errlen, "%s: %s", wr->tmp, strerror(errno));
        goto fail;
    }
    wr->scratch = fopen(scratch_name, "w+be");
    if (!wr->scratch) {
        set_err(err, errlen, "%s: %s", scratch_name, strerror(errno));
        goto fail;
    }
    unlink(scratch_name);      /* lives until closed, never left behind */
    free(scratch_name);
    return wr;
oom:
    set_err(err, errlen, "out of memory");
fail:
    free(scratch_name);
    if (wr && wr->out) unlink(wr->tmp);
    writer_free(wr);
    return NULL;
}

int ds_writer_add(ds_writer *wr, const uint8_t *chw, int label, char *err, size_t errlen) {
    if (label < 0 || label > 65535) {
        set_err(err, errlen, "label %d out of range 0..65535", label);
        return -1;
    }
    if (wr->count >= UINT32_MAX) {
        set_err(err, errlen, "too many images in one split");
        return -1;
    }
    if (wr->count == wr->cap) {
        size_t ncap = wr->cap ? wr->cap * 2 : 1024;
        uint16_t *nl = realloc(wr->labels, ncap * sizeof *nl);
        if (!nl) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
        wr->labels = nl;
        wr->cap = ncap;
    }
    if (fwrite(chw, 1, wr->image_bytes, wr->scratch) != wr->image_bytes) {
        set_err(err, errlen, "writing %s: %s", wr->path, strerror(errno));
        return -1;
    }
    wr->labels[wr->count++] = (uint16_t)label;
    return 0;
}

static int write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? 0 : -1; }

int ds_writer_commit(ds_writer *wr, char *err, size_t errlen) {
    int rc = -1;
    uint8_t *buf = NULL;
    uint8_t hdr[KDS_HEADER] = {0};
    memcpy(hdr, KDS_MAGIC, 7);
    hdr[7] = KDS_VERSION;
    wr32(hdr + 8, (uint32_t)wr->count);
    wr16(hdr + 12, (uint16_t)wr->c);
    wr16(hdr + 14, (uint16_t)wr->h);
    wr16(hdr + 16, (uint16_t)wr->w);
    if (write_all(wr->out, hdr, sizeof hdr) != 0) goto io;
    uint8_t lb[2];
    for (size_t i = 0; i < wr->count; i++) {
        wr16(lb, wr->labels[i]);
        if (write_all(wr->out, lb, 2) != 0) goto io;
    }
    size_t at = KDS_HEADER + 2 * wr->count;
    static const uint8_t zeros[KDS_ALIGN];
    if (write_all(wr->out, zeros, align_up(at, KDS_ALIGN) - at) != 0) goto io;

    if (fflush(wr->scratch) != 0 || ferror(wr->scratch) || fseek(wr->scratch, 0, SEEK_SET) != 0) goto io;
    const size_t bufsz = 1 << 20;
    buf = malloc(bufsz);
    if (!buf) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    size_t left = wr->count * wr->image_bytes;
    while (left > 0) {
        size_t n = left < bufsz ? left : bufsz;
        if (fread(buf, 1, n, wr->scratch) != n || write_all(wr->out, buf, n) != 0) goto io;
        left -= n;
    }
    FILE *out = wr->out;
    wr->out = NULL;
    if (fio_commit(out, wr->tmp, wr->path) != 0) goto io;
    rc = 0;
    goto out;
io:
    set_err(err, errlen, "writing %s: %s", wr->path, errno ? strerror(errno) : "I/O error");
out:
    free(buf);
    if (rc != 0) unlink(wr->tmp);
    writer_free(wr);
    return rc;
}

void ds_writer_abort(ds_writer *wr) {
    if (!wr) return;
    if (wr->out) {
        fclose(wr->out);
        wr->out = NULL;
        unlink(wr->tmp);
    }
    writer_free(wr);
}

/* ---- the header ----------------------------------------------------------- */

void ds_info_free(ds_info *info) {
    if (!info) return;
    if (info->classes) {
        for (int i = 0; i < info->nclasses; i++) free(info->classes[i]);
        free(info->classes);
    }
    info->classes = NULL;
    info->nclasses = 0;
}

static int json_int(const cJSON *o, const char *key, long long lo, long long hi, long long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi || d != (double)(long long)d) return -1;
    *out = (long long)d;
    return 0;
}

int ds_info_load(const char *dir, ds_info *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char *path = str_cat(dir, "/" LAYOUT_DATASET_HEADER);
    char *text = NULL;
    cJSON *root = NULL;
    int rc = -1;
    size_t len = 0;
    if (!path) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    text = fio_read_file(path, INFO_MAX_BYTES, &len, err, errlen);
    if (!text) goto out;
    root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: not a JSON object", path);
        goto out;
    }
    long long format, v;
    if (json_int(root, "format", 0, 1000, &format) != 0 || format != INFO_FORMAT) {
        set_err(err, errlen, "%s: missing or unsupported \"format\" (this kiln reads %d); re-import the dataset",
                path, INFO_FORMAT);
        goto out;
    }
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "shape");
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 3) {
        set_err(err, errlen, "%s: \"shape\" must be [C, H, W]", path);
        goto out;
    }
    int dims[3];
    for (int i = 0; i < 3; i++) {
        const cJSON *d = cJSON_GetArrayItem(shape, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > 65535 ||
            d->valuedouble != (double)(int)d->valuedouble) {
            set_err(err, errlen, "%s: bad \"shape\"", path);
            goto out;
        }
        dims[i] = (int)d->valuedouble;
    }
    if (dims[0] > KDS_MAX_CHANNELS) {
        set_err(err, errlen, "%s: %d channels (at most %d)", path, dims[0], KDS_MAX_CHANNELS);
        goto out;
    }
    out->c = dims[0];
    out->h = dims[1];
    out->w = dims[2];

    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(root, "classes");
    int n = cJSON_IsArray(classes) ? cJSON_GetArraySize(classes) : 0;
    if (n < 1 || n > 65536) {
        set_err(err, errlen, "%s: \"classes\" must be a non-empty array of names", path);
        goto out;
    }
    out->classes = calloc((size_t)n, sizeof *out->classes);
    if (!out->classes) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, classes) {
        if (!cJSON_IsString(it)) {
            set_err(err, errlen, "%s: class names must be strings", path);
            goto out;
        }
        out->classes[out->nclasses] = strdup(it->valuestring);
        if (!out->classes[out->nclasses]) {
            set_err(err, errlen, "out of memory");
            goto out;
        }
        out->nclasses++;
    }

    const cJSON *counts = cJSON_GetObjectItemCaseSensitive(root, "counts");
    if (!cJSON_IsObject(counts) || json_int(counts, "train", 0, UINT32_MAX, &v) != 0) {
        set_err(err, errlen, "%s: bad \"counts\"", path);
        goto out;
    }
    out->train_count = (size_t)v;
    if (json_int(counts, "val", 0, UINT32_MAX, &v) != 0) {
        set_err(err, errlen, "%s: bad \"counts\"", path);
        goto out;
    }
    out->val_count = (size_t)v;
    if (cJSON_GetObjectItemCaseSensitive(counts, "test")) {      /* headers before issue 13 have none */
        if (json_int(counts, "test", 0, UINT32_MAX, &v) != 0) {
            set_err(err, errlen, "%s: bad \"counts\"", path);
            goto out;
        }
        out->test_count = (size_t)v;
    }

    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(root, "mean");
    if (!cJSON_IsArray(mean) || cJSON_GetArraySize(mean) != out->c) {
        set_err(err, errlen, "%s: \"mean\" must hold one value per channel", path);
        goto out;
    }
    for (int i = 0; i < out->c; i++) {
        const cJSON *m = cJSON_GetArrayItem(mean, i);
        if (!cJSON_IsNumber(m) || m->valuedouble < 0 || m->valuedouble > 255) {
            set_err(err, errlen, "%s: bad \"mean\"", path);
            goto out;
        }
        out->mean[i] = (float)m->valuedouble;
    }
    const cJSON *resize = cJSON_GetObjectItemCaseSensitive(root, "resize");
    snprintf(out->resize, sizeof out->resize, "%s",
             cJSON_IsString(resize) ? resize->valuestring : "squash");
    rc = 0;
out:
    if (rc != 0) ds_info_free(out);
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

cJSON *ds_info_to_json(const ds_info *info) {
    cJSON *root = cJSON_CreateObject(), *a, *counts;
    const int shape[3] = { info->c, info->h, info->w };
    bool ok = root &&
              cJSON_AddItemToObject(root, "classes",
                                    cJSON_CreateStringArray((const char *const *)info->classes,
                                                            info->nclasses)) &&
              cJSON_AddItemToObject(root, "shape", cJSON_CreateIntArray(shape, 3)) &&
              (counts = cJSON_AddObjectToObject(root, "counts")) &&
              cJSON_AddNumberToObject(counts, "train", (double)info->train_count) &&
              cJSON_AddNumberToObject(counts, "val", (double)info->val_count) &&
              cJSON_AddNumberToObject(counts, "test", (double)info->test_count) &&
              (a = cJSON_AddArrayToObject(root, "mean"));
    for (int i = 0; ok && i < info->c && i < KDS_MAX_CHANNELS; i++) {
        /* rounded to 1e-4 so the text stays short; plenty for a mean of bytes */
        double m = (double)(long long)(info->mean[i] * 10000.0 + 0.5) / 10000.0;
        ok = cJSON_AddItemToArray(a, cJSON_CreateNumber(m));
    }
    ok = ok && cJSON_AddStringToObject(root, "resize", info->resize[0] ? info->resize : "squash");
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int ds_info_save(const char *dir, const ds_info *info, const char *source, char *err, size_t errlen) {
    int rc = -1;
    char *text = NULL, *path = NULL;
    cJSON *root = ds_info_to_json(info);
    if (!root || !cJSON_AddNumberToObject(root, "format", INFO_FORMAT) ||
        !cJSON_AddStringToObject(root, "source", source ? source : ""))
        goto oom;
    text = cJSON_Print(root);
    path = str_cat(dir, "/" LAYOUT_DATASET_HEADER);
    if (!text || !path) goto oom;
    rc = fio_write_atomic(path, text, strlen(text), err, errlen);
    goto out;
oom:
    set_err(err, errlen, "out of memory");
out:
    cJSON_Delete(root);
    free(text);
    free(path);
    return rc;
}

/* ---- the loader ----------------------------------------------------------- */

enum { SLOT_FREE, SLOT_READY };

typedef struct loader_slot {
    float *x;
    int32_t *labels;
    int n;                   /* images in the batch */
    size_t index;            /* which batch of the epoch it holds when READY */
    int state;
} loader_slot;

struct loader {
    const ds_split *s;
    int batch;
    bool shuffle;
    uint64_t seed;
    bool has_mean;
    float mean[KDS_MAX_CHANNELS];
    float scale;
    size_t count, nbatches;
    uint32_t *perm;          /* this epoch's order; read by the producer */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started;
    loader_slot slot[2];     /* batch b lives in slot[b % 2] */
    int epoch;
    size_t produce_next, consume_next;
    bool busy;               /* the producer is filling a slot outside the lock */
    bool resetting;          /* loader_start_epoch is waiting for the producer */
    bool stop;
};

/* The order of epoch `epoch`: a function of (seed, epoch) only. */
static void make_perm(loader *l) {
    for (size_t i = 0; i < l->count; i++) l->perm[i] = (uint32_t)i;
    if (!l->shuffle || l->count < 2) return;
    uint64_t st = l->seed;
    uint64_t mix = rng_splitmix64(&st);
    st = mix ^ ((uint64_t)(uint32_t)l->epoch * 0xD1B54A32D192ED03ull);
    (void)rng_splitmix64(&st);
    for (size_t i = l->count - 1; i > 0; i--) {
        size_t j = (size_t)rng_splitmix64_below(&st, (uint64_t)i + 1);
        uint32_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
}

static int fill_batch(const loader *l, size_t b, loader_slot *sl) {
    size_t first = b * (size_t)l->batch;
    size_t n = l->count - first < (size_t)l->batch ? l->count - first : (size_t)l->batch;
    int c, h, w;
    ds_split_shape(l->s, &c, &h, &w);
    size_t hw = (size_t)h * (size_t)w;
    for (size_t i = 0; i < n; i++) {
        size_t idx = l->perm[first + i];
        const uint8_t *src = ds_split_image(l->s, idx);
        float *dst = sl->x + i * (size_t)c * hw;
        for (int ch = 0; ch < c; ch++) {
            float m = l->has_mean ? l->mean[ch] : 0.0f;
            const uint8_t *sp = src + (size_t)ch * hw;
            float *dp = dst + (size_t)ch * hw;
            for (size_t p = 0; p < hw; p++) dp[p] = ((float)sp[p] - m) * l->scale;
        }
        sl->labels[i] = ds_split_label(l->s, idx);
    }
    return (int)n;
}

static void *producer_main(void *arg) {
    loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (l->resetting || l->produce_next >= l->nbatches ||
                            l->slot[l->produce_next % 2].state != SLOT_FREE))
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        size_t b = l->produce_next++;
        loader_slot *sl = &l->slot[b % 2];
        l->busy = true;
        pthread_mutex_unlock(&l->mu);
        int n = fill_batch(l, b, sl);
        pthread_mutex_lock(&l->mu);
        l->busy = false;
        sl->n = n;
        sl->index = b;
        sl->state = SLOT_READY;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

loader *loader_open(const ds_split *s, int batch, bool shuffle, uint64_t seed,
                    const float *mean, float scale, char *err, size_t errlen) {
    if (batch < 1) {
        set_err(err, errlen, "batch size must be at least 1");
        return NULL;
    }
    loader *l = calloc(1, sizeof *l);
    if (!l) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    int c, h, w;
    ds_split_shape(s, &c, &h, &w);
    l->s = s;
    l->batch = batch;
    l->shuffle = shuffle;
    l->seed = seed;
    l->scale = scale;
    l->has_mean = mean != NULL;
    for (int i = 0; i < c && mean; i++) l->mean[i] = mean[i];
    l->count = ds_split_count(s);
    l->nbatches = (l->count + (size_t)batch - 1) / (size_t)batch;
    size_t per_image = (size_t)c * (size_t)h * (size_t)w, xlen;
    if (__builtin_mul_overflow(per_image, (size_t)batch, &xlen) ||
        __builtin_mul_overflow(xlen, sizeof(float), &xlen)) {
        set_err(err, errlen, "batch too large");
        free(l);
        return NULL;
    }
    l->perm = malloc((l->count ? l->count : 1) * sizeof *l->perm);
    bool ok = l->perm != NULL;
    for (int i = 0; i < 2 && ok; i++) {
        l->slot[i].x = malloc(xlen);
        l->slot[i].labels = malloc((size_t)batch * sizeof(int32_t));
        ok = l->slot[i].x && l->slot[i].labels;
    }
    if (!ok) {
        set_err(err, errlen, "out of memory for a batch of %d images", batch);
        goto fail;
    }
    make_perm(l);            /* epoch 0, ready before the first loader_start_epoch */
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    int e = pthread_create(&l->thread, NULL, producer_main, l);
    if (e != 0) {
        set_err(err, errlen, "starting the loader thread: %s", strerror(e));
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        goto fail;
    }
    l->thread_started = true;
    return l;
fail:
    for (int i = 0; i < 2; i++) {
        free(l->slot[i].x);
        free(l->slot[i].labels);
    }
    free(l->perm);
    free(l);
    return NULL;
}

void loader_close(loader *l) {
    if (!l) return;
    if (l->thread_started) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
    }
    for (int i = 0; i < 2; i++) {
        free(l->slot[i].x);
        free(l->slot[i].labels);
    }
    free(l->perm);
    free(l);
}

size_t loader_batches(const loader *l) { return l->nbatches; }

void loader_start_epoch(loader *l, int epoch) {
    pthread_mutex_lock(&l->mu);
    if (epoch == l->epoch && l->consume_next == 0) {
        /* already at the start of this epoch: keep what is prefetched */
        pthread_mutex_unlock(&l->mu);
        return;
    }
    l->resetting = true;
    while (l->busy) pthread_cond_wait(&l->cv, &l->mu);
    l->epoch = epoch;
    make_perm(l);
    l->slot[0].state = l->slot[1].state = SLOT_FREE;
    l->produce_next = l->consume_next = 0;
    l->resetting = false;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int loader_next(loader *l, float *x, int32_t *labels) {
    pthread_mutex_lock(&l->mu);
    if (l->consume_next >= l->nbatches) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    size_t b = l->consume_next;
    loader_slot *sl = &l->slot[b % 2];
    while (!(sl->state == SLOT_READY && sl->index == b)) pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);

    /* the producer leaves a READY slot alone, so it is read without the lock */
    int c, h, w;
    ds_split_shape(l->s, &c, &h, &w);
    int n = sl->n;
    memcpy(x, sl->x, (size_t)n * (size_t)c * (size_t)h * (size_t)w * sizeof(float));
    memcpy(labels, sl->labels, (size_t)n * sizeof(int32_t));

    pthread_mutex_lock(&l->mu);
    sl->state = SLOT_FREE;
    l->consume_next++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return n;
}
