/* jobs/infer.c: images to the network's input, and classifying a request's
 * images (contract and the preprocessing's steps in infer.h).
 *
 * infer_run works a batch at a time: the batch's images are decoded and
 * prepared in parallel (an OpenMP loop, one infer_worker per thread, each
 * image written into its own row of the batch), the rows of the usable ones
 * are packed to the front, and net_predict (whose oneDNN primitives use the
 * same OpenMP threads) classifies them. The batch buffer is sized once for
 * infer_batch_size images, so a request of any size costs that much memory
 * plus its encoded images.
 */
#include "jobs/infer.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs/import.h"      /* import_archive_files */

const infer_limits INFER_LIMITS = {
    .top_k_default = 5,
    .max_items = 10000,
    .max_image_bytes = (uint64_t)32 << 20,
    .max_total_bytes = (uint64_t)512 << 20,
    .max_name_bytes = 255,
    .batch_max = 64,
    .batch_floats = (uint64_t)1 << 21,
    .cached_models = 2,
    .idle_seconds = 300,
};

int infer_batch_size(net_shape in)
{
    uint64_t per = (uint64_t)(in.c > 0 ? in.c : 1) * (uint64_t)(in.h > 0 ? in.h : 1) *
                   (uint64_t)(in.w > 0 ? in.w : 1);
    uint64_t b = INFER_LIMITS.batch_floats / per;
    if (b > (uint64_t)INFER_LIMITS.batch_max)
        b = (uint64_t)INFER_LIMITS.batch_max;
    return b < 1 ? 1 : (int)b;
}

/* ---- one image ------------------------------------------------------------------- */

void infer_worker_init(infer_worker *w)
{
    memset(w, 0, sizeof *w);
}

void infer_worker_free(infer_worker *w)
{
    img_decoder_free(w->dec);
    free(w->chw);
    free(w->scratch);
    memset(w, 0, sizeof *w);
}

/* The centre crop_h x crop_w of a c x h x w CHW image as (pixel - mean) * scale:
 * the validation loader's window ((h - crop_h) / 2 rows down, (w - crop_w) / 2
 * columns in) and its float expression. */
static void centre_to_floats(const uint8_t *chw, const model_prep *p, float *x)
{
    const int y0 = (p->h - p->crop_h) / 2, x0 = (p->w - p->crop_w) / 2;
    const float scale = p->scale;
    for (int ch = 0; ch < p->c; ch++) {
        const float m = p->mean[ch];
        for (int y = 0; y < p->crop_h; y++) {
            const uint8_t *src = chw + ((size_t)ch * (size_t)p->h + (size_t)(y0 + y)) * (size_t)p->w + (size_t)x0;
            float *d = x + ((size_t)ch * (size_t)p->crop_h + (size_t)y) * (size_t)p->crop_w;
            for (int i = 0; i < p->crop_w; i++)
                d[i] = ((float)src[i] - m) * scale;
        }
    }
}

int infer_prepare(infer_worker *w, const model_prep *p, const uint8_t *buf, size_t len, float *x,
                  char *why, size_t whylen)
{
    if (!w->dec && !(w->dec = img_decoder_new()))
        return set_err(why, whylen, "out of memory");
    size_t need = (size_t)p->c * (size_t)p->h * (size_t)p->w;
    if (w->chw_cap < need) {
        uint8_t *nb = malloc(need);
        if (!nb)
            return set_err(why, whylen, "out of memory");
        free(w->chw);
        w->chw = nb;
        w->chw_cap = need;
    }
    uint8_t *pix = NULL;
    int sw = 0, sh = 0;
    if (img_decode(w->dec, buf, len, p->c, p->w, p->h, &pix, &sw, &sh, why, whylen) != 0)
        return 1;
    int rc = img_resize_chw(pix, sw, sh, p->c, p->resize, INFER_NOISE_SEED, w->chw, p->w, p->h, p->c,
                            &w->scratch, &w->scratch_cap);
    free(pix);
    if (rc != 0)
        return set_err(why, whylen, "out of memory");
    centre_to_floats(w->chw, p, x);
    return 0;
}

/* ---- the set of a request's images ------------------------------------------------ */

void infer_set_init(infer_set *s)
{
    memset(s, 0, sizeof *s);
}

void infer_set_free(infer_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) {
        free(s->items[i].name);
        free(s->items[i].data);
        free(s->items[i].pred);
    }
    free(s->items);
    memset(s, 0, sizeof *s);
}

/* The length of the well-formed UTF-8 sequence at p (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    unsigned cp = len == 1 ? c : c & (0xffu >> (len + 1));
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    static const unsigned min[] = { 0, 0, 0x80, 0x800, 0x10000 };
    return cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : len;
}

/* Names come from file names and archive entries in any encoding; the
 * answer is JSON, which is UTF-8: each byte outside a well-formed sequence
 * becomes '?'. */
static void utf8_clean(char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) {
            s[i++] = '?';
            continue;
        }
        i += k;
    }
}

/* A new item named name (cut to max_name_bytes at a UTF-8 boundary), or NULL with e. */
static infer_item *new_item(infer_set *s, const char *name, api_error *e)
{
    if (s->n >= INFER_LIMITS.max_items) {
        api_fail(e, 413, "too_many_images", "the request has more than %d images (the limit); send them in "
                 "several requests", INFER_LIMITS.max_items);
        return NULL;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        infer_item *ni = realloc(s->items, (size_t)cap * sizeof *ni);
        if (!ni) {
            api_fail(e, 500, "internal_error", "out of memory");
            return NULL;
        }
        s->items = ni;
        s->cap = cap;
    }
    char gen[32];
    if (!name || !*name) {
        snprintf(gen, sizeof gen, "image-%d", s->n + 1);
        name = gen;
    }
    size_t n = strlen(name);
    if (n > (size_t)INFER_LIMITS.max_name_bytes) {
        n = (size_t)INFER_LIMITS.max_name_bytes;
        while (n > 0 && ((unsigned char)name[n] & 0xc0) == 0x80)
            n--;
    }
    infer_item *it = &s->items[s->n];
    memset(it, 0, sizeof *it);
    if (!(it->name = strndup(name, n))) {
        api_fail(e, 500, "internal_error", "out of memory");
        return NULL;
    }
    utf8_clean(it->name);
    s->n++;
    return it;
}

static void item_fail(infer_item *it, const char *code, const char *msg)
{
    snprintf(it->err_code, sizeof it->err_code, "%s", code);
    snprintf(it->err, sizeof it->err, "%s", msg);
    free(it->data);
    it->data = NULL;
    it->len = 0;
}

int infer_set_add(infer_set *s, const char *name, uint8_t *data, size_t len, api_error *e)
{
    if (s->bytes + len > INFER_LIMITS.max_total_bytes) {
        free(data);
        return api_fail(e, 413, "request_too_large", "the images come to more than %llu bytes (the limit); "
                        "send them in several requests", (unsigned long long)INFER_LIMITS.max_total_bytes);
    }
    infer_item *it = new_item(s, name, e);
    if (!it) {
        free(data);
        return -1;
    }
    s->bytes += len;
    if (len > INFER_LIMITS.max_image_bytes) {
        char msg[160];
        snprintf(msg, sizeof msg, "the file has %zu bytes, over the limit of %llu bytes for one image", len,
                 (unsigned long long)INFER_LIMITS.max_image_bytes);
        free(data);
        item_fail(it, "image_too_large", msg);
        return 0;
    }
    it->data = data;
    it->len = len;
    return 0;
}

int infer_set_add_failed(infer_set *s, const char *name, const char *code, const char *msg, api_error *e)
{
    infer_item *it = new_item(s, name, e);
    if (!it)
        return -1;
    item_fail(it, code, msg);
    return 0;
}

int infer_set_add_file(infer_set *s, const char *name, const char *path, api_error *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int er = errno;
        if (fd >= 0)
            close(fd);
        if (fd >= 0 && er == 0)
            return infer_set_add_failed(s, name, "invalid_image", "not a regular file", e);
        char msg[200];
        snprintf(msg, sizeof msg, "cannot read the file: %s", strerror(er ? er : EINVAL));
        return infer_set_add_failed(s, name, "invalid_image", msg, e);
    }
    if ((uint64_t)st.st_size > INFER_LIMITS.max_image_bytes) {
        close(fd);
        char msg[160];
        snprintf(msg, sizeof msg, "the file has %lld bytes, over the limit of %llu bytes for one image",
                 (long long)st.st_size, (unsigned long long)INFER_LIMITS.max_image_bytes);
        return infer_set_add_failed(s, name, "image_too_large", msg, e);
    }
    size_t len = (size_t)st.st_size;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) {
        close(fd);
        return api_fail(e, 500, "internal_error", "out of memory");
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    if (got != len) {
        free(buf);
        return api_fail(e, 500, "storage_error", "reading %s back failed", name ? name : "an image");
    }
    return infer_set_add(s, name, buf, len, e);
}

static int add_entry(void *ctx, const char *path, const uint8_t *buf, size_t len, const char *why, api_error *e)
{
    infer_set *s = ctx;
    if (!buf)
        return infer_set_add_failed(s, path, "invalid_image", why ? why : "unreadable entry", e);
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return api_fail(e, 500, "internal_error", "out of memory");
    memcpy(copy, buf, len);
    return infer_set_add(s, path, copy, len, e);
}

int infer_set_add_archive(infer_set *s, const char *path, api_error *e)
{
    uint64_t left = INFER_LIMITS.max_total_bytes - s->bytes;
    unsigned long entries = (unsigned long)INFER_LIMITS.max_items * 2ul;   /* folders count as entries */
    return import_archive_files(path, entries, left, add_entry, s, e);
}

int infer_check_top_k(int top_k, int nclasses, api_error *e)
{
    if (top_k < 1 || top_k > nclasses)
        return api_fail(e, 400, "invalid_field", "top_k must be an integer 1..%d (the model's classes), not %d",
                        nclasses, top_k);
    return 0;
}

/* ---- classifying ------------------------------------------------------------------ */

/* The k best of probs[0..n) into out, best first, ties to the lower index. */
static void top_k(const float *probs, int n, int k, infer_pred *out)
{
    int have = 0;
    for (int i = 0; i < n; i++) {
        float v = probs[i];
        if (have == k && !(v > out[k - 1].probability))
            continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && v > out[at - 1].probability) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = (infer_pred){ i, v };
    }
}

typedef struct run_state {
    infer_worker *workers;      /* one per OpenMP thread */
    int nworkers;
    float *x;                   /* batch rows of in_size floats */
    float *probs;               /* batch x classes */
    int *row_item;              /* the item of each packed row */
    char (*why)[256];           /* a batch of reasons */
    int *rc;
} run_state;

static void run_state_free(run_state *r)
{
    for (int i = 0; r->workers && i < r->nworkers; i++)
        infer_worker_free(&r->workers[i]);
    free(r->workers);
    free(r->x);
    free(r->probs);
    free(r->row_item);
    free(r->why);
    free(r->rc);
}

/* Items first..first+k-1 (the ones still to do) prepared into their rows in
 * parallel; the usable rows then packed to the front. Returns the rows. */
static int prepare_batch(run_state *r, const model_prep *p, infer_set *s, const int *todo, int k, size_t in_size)
{
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < k; i++) {
        infer_item *it = &s->items[todo[i]];
        infer_worker *w = &r->workers[omp_get_thread_num() % r->nworkers];
        r->rc[i] = infer_prepare(w, p, it->data, it->len, r->x + (size_t)i * in_size, r->why[i], sizeof r->why[i]);
    }
    int rows = 0;
    for (int i = 0; i < k; i++) {
        infer_item *it = &s->items[todo[i]];
        if (r->rc[i] != 0) {
            item_fail(it, r->rc[i] < 0 ? "internal_error" : "invalid_image", r->why[i]);
            continue;
        }
        if (rows != i)
            memmove(r->x + (size_t)rows * in_size, r->x + (size_t)i * in_size, in_size * sizeof(float));
        r->row_item[rows++] = todo[i];
    }
    return rows;
}

int infer_run(net *n, const model_bundle *b, infer_set *s, int top_k_n, char *err, size_t errlen)
{
    const model_prep *p = &b->prep;
    const int batch = infer_batch_size(b->input), classes = b->nclasses;
    const size_t in_size = (size_t)p->c * (size_t)p->crop_h * (size_t)p->crop_w;
    run_state r;
    memset(&r, 0, sizeof r);
    int *todo = malloc((size_t)batch * sizeof *todo);
    r.nworkers = omp_get_max_threads();
    r.workers = calloc((size_t)r.nworkers, sizeof *r.workers);
    r.x = malloc((size_t)batch * in_size * sizeof(float));
    r.probs = malloc((size_t)batch * (size_t)classes * sizeof(float));
    r.row_item = malloc((size_t)batch * sizeof *r.row_item);
    r.why = malloc((size_t)batch * sizeof *r.why);
    r.rc = malloc((size_t)batch * sizeof *r.rc);
    int rc = -1;
    if (!todo || !r.workers || !r.x || !r.probs || !r.row_item || !r.why || !r.rc) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    for (int next = 0; next < s->n;) {
        int k = 0;
        for (; next < s->n && k < batch; next++)
            if (s->items[next].data)
                todo[k++] = next;
        if (k == 0)
            continue;
        int rows = prepare_batch(&r, p, s, todo, k, in_size);
        if (rows == 0)
            continue;
        if (net_predict(n, r.x, rows, r.probs, err, errlen) != 0)
            goto out;
        for (int i = 0; i < rows; i++) {
            infer_item *it = &s->items[r.row_item[i]];
            if (!(it->pred = malloc((size_t)top_k_n * sizeof *it->pred))) {
                set_err(err, errlen, "out of memory");
                goto out;
            }
            top_k(r.probs + (size_t)i * (size_t)classes, classes, top_k_n, it->pred);
            it->npred = top_k_n;
            free(it->data);
            it->data = NULL;
        }
    }
    rc = 0;
out:
    free(todo);
    run_state_free(&r);
    return rc;
}

/* ---- the answer --------------------------------------------------------------------- */

static cJSON *item_json(const model_bundle *b, const infer_item *it)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "name", it->name))
        goto fail;
    if (it->err_code[0]) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        if (!e || !cJSON_AddStringToObject(e, "code", it->err_code) ||
            !cJSON_AddStringToObject(e, "message", it->err))
            goto fail;
        return o;
    }
    cJSON *preds = cJSON_AddArrayToObject(o, "predictions");
    if (!preds)
        goto fail;
    for (int k = 0; k < it->npred; k++) {
        cJSON *pj = cJSON_CreateObject();
        if (!pj || !cJSON_AddItemToArray(preds, pj)) {
            cJSON_Delete(pj);
            goto fail;
        }
        int idx = it->pred[k].index;
        if (!cJSON_AddStringToObject(pj, "label", b->labels[idx]) || !cJSON_AddNumberToObject(pj, "index", idx) ||
            !cJSON_AddNumberToObject(pj, "probability", (double)it->pred[k].probability))
            goto fail;
    }
    return o;
fail:
    cJSON_Delete(o);
    return NULL;
}

/* "no image could be classified: a.png: not a PNG or JPEG image; b.jpg: ..." */
static void no_valid_message(const infer_set *s, char *msg, size_t len)
{
    size_t o = (size_t)snprintf(msg, len, "no image could be classified");
    if (s->n == 0 && o < len)
        snprintf(msg + o, len - o, ": the request has no images");
    for (int i = 0; i < s->n && o < len; i++) {
        int w = snprintf(msg + o, len - o, "%s %s: %s", i ? ";" : ":", s->items[i].name, s->items[i].err);
        o = w < 0 ? len : o + (size_t)w;
    }
    if (o >= len && len > 4)
        memcpy(msg + len - 4, "...", 4);
}

cJSON *infer_answer(const model_bundle *b, const infer_set *s, int *status)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *items = root ? cJSON_CreateArray() : NULL;
    int good = 0;
    if (!items)
        goto fail;
    if (!cJSON_AddNumberToObject(root, "epoch", b->epoch))
        goto fail;
    for (int i = 0; i < s->n; i++) {
        cJSON *ij = item_json(b, &s->items[i]);
        if (!ij || !cJSON_AddItemToArray(items, ij)) {
            cJSON_Delete(ij);
            goto fail;
        }
        good += s->items[i].err_code[0] == '\0';
    }
    *status = good > 0 ? 200 : 422;
    if (!good) {
        char msg[1024];
        no_valid_message(s, msg, sizeof msg);
        cJSON *e = cJSON_AddObjectToObject(root, "error");
        if (!e || !cJSON_AddStringToObject(e, "code", "no_valid_images") || !cJSON_AddStringToObject(e, "message", msg))
            goto fail;
    }
    if (!cJSON_AddItemToObject(root, "items", items)) {
        items = NULL;
        goto fail;
    }
    return root;
fail:
    cJSON_Delete(items);
    cJSON_Delete(root);
    return NULL;
}
