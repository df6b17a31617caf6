/* jobs/infer.c: images to the network's input, and classifying a request's
 * images (contract and the preprocessing's steps in infer.h).
 *
 * infer_run works a batch at a time in one or more lanes: a lane is a net
 * and the buffers of one batch (sized once for infer_batch_size images, so a
 * request of any size costs that much memory a lane plus its encoded
 * images). A batch's images are decoded and prepared by an OpenMP loop (one
 * infer_worker per thread, each image written into its own row), the rows
 * of the usable ones packed to the front, and net_predict classifies them.
 * With one lane the loop and the net's oneDNN primitives use every thread.
 * With several, each lane runs on a thread of its own in one parallel
 * region and takes the next batch number from a shared counter; the loop
 * and the primitives, nested in that region, run on the lane's thread alone
 * (OpenMP runs a nested region with a team of one, and oneDNN then runs
 * sequentially). A batch holds the same images whichever lane takes it.
 */
#include "jobs/infer.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <fcntl.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/summary.h"  /* summary_build: infer_replicas */
#include "jobs/import.h"      /* import_archive_files */

const infer_limits INFER_LIMITS = {
    .top_k_default = 5,
    .max_items = 10000,
    .max_image_bytes = (uint64_t)32 << 20,
    .max_total_bytes = (uint64_t)512 << 20,
    .max_name_bytes = 255,
    .batch_max = 64,
    .batch_floats = (uint64_t)1 << 21,
    .replica_bytes = (uint64_t)256 << 20,
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

/* ---- the model ---------------------------------------------------------------------- */

int infer_replicas(const model_bundle *b, int threads)
{
    if (threads <= 1)
        return 1;
    summary sum;
    char err[256];
    if (summary_build(b->spec, b->input, b->nclasses, 1, SOLVER_SGD, false, PREC_FP32, &sum, err, sizeof err) != 0)
        return 1;
    /* weights, and a batch's input and layer outputs (FP32) */
    int64_t in_bytes = (int64_t)4 * b->input.c * b->input.h * b->input.w;
    int64_t one = sum.weight_bytes + (int64_t)infer_batch_size(b->input) * (in_bytes + sum.act_bytes);
    summary_free(&sum);
    int64_t k = one > 0 ? (int64_t)INFER_LIMITS.replica_bytes / one : threads;
    return k < 1 ? 1 : k > threads ? threads : (int)k;
}

int infer_model_open(infer_model *m, const model_bundle *b, int nets, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (nets < 1)
        nets = 1;
    if (!(m->nets = calloc((size_t)nets, sizeof *m->nets)))
        return set_err(err, errlen, "out of memory");
    for (; m->count < nets; m->count++) {
        if (!(m->nets[m->count] = model_bundle_net(b, infer_batch_size(b->input), err, errlen))) {
            infer_model_free(m);
            return -1;
        }
    }
    return 0;
}

void infer_model_free(infer_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->count; i++)
        net_free(m->nets[i]);
    free(m->nets);
    memset(m, 0, sizeof *m);
}

/* ---- classifying ------------------------------------------------------------------ */

typedef struct lane {
    net *n;
    infer_worker *workers;      /* one per thread of its prepare loop */
    int nworkers;
    float *x;                   /* batch rows of in_size floats */
    float *probs;               /* batch x classes */
    int *row_item;              /* the item of each packed row */
    char (*why)[256];           /* a batch of reasons */
    int *rc;
    char err[256];              /* what failed (rc -1) */
} lane;

/* What every lane shares: the batches (runs of `live`, the items still to
 * do) and the next one to take. */
typedef struct run_plan {
    const model_prep *p;
    infer_set *s;
    const int *live;
    int nlive, batch, classes, top_k, nbatches;
    size_t in_size;
    atomic_int next;            /* the next batch to take */
    atomic_bool failed;         /* a lane failed: the others stop */
} run_plan;

static void lane_free(lane *l)
{
    for (int i = 0; l->workers && i < l->nworkers; i++)
        infer_worker_free(&l->workers[i]);
    free(l->workers);
    free(l->x);
    free(l->probs);
    free(l->row_item);
    free(l->why);
    free(l->rc);
}

static int lane_init(lane *l, net *n, int nworkers, const run_plan *rp)
{
    memset(l, 0, sizeof *l);
    l->n = n;
    l->nworkers = nworkers;
    l->workers = calloc((size_t)nworkers, sizeof *l->workers);
    l->x = malloc((size_t)rp->batch * rp->in_size * sizeof(float));
    l->probs = malloc((size_t)rp->batch * (size_t)rp->classes * sizeof(float));
    l->row_item = malloc((size_t)rp->batch * sizeof *l->row_item);
    l->why = malloc((size_t)rp->batch * sizeof *l->why);
    l->rc = malloc((size_t)rp->batch * sizeof *l->rc);
    return l->workers && l->x && l->probs && l->row_item && l->why && l->rc ? 0 : -1;
}

/* The k items of todo prepared into their rows (in parallel when not nested
 * in a lane's region); the usable rows then packed to the front. Returns the
 * rows. */
static int prepare_batch(lane *l, const run_plan *rp, const int *todo, int k)
{
    const size_t in_size = rp->in_size;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < k; i++) {
        infer_item *it = &rp->s->items[todo[i]];
        infer_worker *w = &l->workers[omp_get_thread_num() % l->nworkers];
        l->rc[i] = infer_prepare(w, rp->p, it->data, it->len, l->x + (size_t)i * in_size, l->why[i], sizeof l->why[i]);
    }
    int rows = 0;
    for (int i = 0; i < k; i++) {
        infer_item *it = &rp->s->items[todo[i]];
        if (l->rc[i] != 0) {
            item_fail(it, l->rc[i] < 0 ? "internal_error" : "invalid_image", l->why[i]);
            continue;
        }
        if (rows != i)
            memmove(l->x + (size_t)rows * in_size, l->x + (size_t)i * in_size, in_size * sizeof(float));
        l->row_item[rows++] = todo[i];
    }
    return rows;
}

/* Takes batches until none is left (or a lane failed). 0, or -1 with l->err. */
static int lane_run(lane *l, run_plan *rp)
{
    for (;;) {
        if (atomic_load(&rp->failed))
            return 0;
        int bi = atomic_fetch_add(&rp->next, 1);
        if (bi >= rp->nbatches)
            return 0;
        const int *todo = rp->live + (size_t)bi * (size_t)rp->batch;
        int k = rp->nlive - bi * rp->batch;
        if (k > rp->batch)
            k = rp->batch;
        int rows = prepare_batch(l, rp, todo, k);
        if (rows == 0)
            continue;
        if (net_predict(l->n, l->x, rows, l->probs, l->err, sizeof l->err) != 0)
            goto fail;
        for (int i = 0; i < rows; i++) {
            infer_item *it = &rp->s->items[l->row_item[i]];
            if (!(it->pred = malloc((size_t)rp->top_k * sizeof *it->pred))) {
                set_err(l->err, sizeof l->err, "out of memory");
                goto fail;
            }
            top_k(l->probs + (size_t)i * (size_t)rp->classes, rp->classes, rp->top_k, it->pred);
            it->npred = rp->top_k;
            free(it->data);
            it->data = NULL;
        }
    }
fail:
    atomic_store(&rp->failed, true);
    return -1;
}

int infer_run(const infer_model *m, const model_bundle *b, infer_set *s, int top_k_n, char *err, size_t errlen)
{
    const model_prep *p = &b->prep;
    run_plan rp = {
        .p = p, .s = s, .batch = infer_batch_size(b->input), .classes = b->nclasses, .top_k = top_k_n,
        .in_size = (size_t)p->c * (size_t)p->crop_h * (size_t)p->crop_w,
    };
    atomic_init(&rp.next, 0);
    atomic_init(&rp.failed, false);
    int *live = malloc((size_t)(s->n ? s->n : 1) * sizeof *live);
    if (!live)
        return set_err(err, errlen, "out of memory");
    for (int i = 0; i < s->n; i++)
        if (s->items[i].data)
            live[rp.nlive++] = i;
    rp.live = live;
    rp.nbatches = (rp.nlive + rp.batch - 1) / rp.batch;
    int nlanes = m->count < rp.nbatches ? m->count : rp.nbatches;
    if (nlanes < 1)
        nlanes = 1;
    lane *lanes = calloc((size_t)nlanes, sizeof *lanes);
    int rc = -1;
    if (!lanes) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < nlanes; i++) {
        if (lane_init(&lanes[i], m->nets[i], nlanes == 1 ? omp_get_max_threads() : 1, &rp) != 0) {
            set_err(err, errlen, "out of memory");
            nlanes = i + 1;
            goto out;
        }
    }
    if (nlanes == 1) {
        rc = lane_run(&lanes[0], &rp);
    } else {
        int failed = 0;
#pragma omp parallel num_threads(nlanes) reduction(|:failed)
        failed |= lane_run(&lanes[omp_get_thread_num()], &rp) != 0;
        rc = failed ? -1 : 0;
    }
    for (int i = 0; rc != 0 && i < nlanes; i++) {
        if (lanes[i].err[0]) {
            set_err(err, errlen, "%s", lanes[i].err);
            break;
        }
    }
out:
    for (int i = 0; lanes && i < nlanes; i++)
        lane_free(&lanes[i]);
    free(lanes);
    free(live);
    return rc;
}

/* ---- the answer --------------------------------------------------------------------- */

/* The answer's text, built in one growing buffer: a request of thousands of
 * items answers in a few milliseconds (a cJSON tree of it, printed, took
 * ten times as long, most of it printing each probability twice to find
 * the digits that read back as the same double). Strings go through cJSON's
 * own escaping (cJSON_PrintPreallocated of a string that it only refers
 * to); a probability, a float, is written with the 9 significant digits
 * that read back as the same float. */
typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
} text;

static char *text_room(text *t, size_t n)
{
    if (t->oom)
        return NULL;
    if (t->cap - t->len < n + 1) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap - t->len < n + 1)
            cap *= 2;
        char *np = realloc(t->p, cap);
        if (!np) {
            t->oom = true;
            return NULL;
        }
        t->p = np;
        t->cap = cap;
    }
    return t->p + t->len;
}

static void text_put(text *t, const char *s, size_t n)
{
    char *d = text_room(t, n);
    if (!d)
        return;
    memcpy(d, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

#define TEXT_LIT(t, lit) text_put((t), "" lit, sizeof("" lit) - 1)    /* lit: a string literal */

static void text_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text *t, const char *fmt, ...)
{
    char buf[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof buf)
        text_put(t, buf, (size_t)n);
    else
        t->oom = true;                       /* only short numbers are printed */
}

/* s as a JSON string, quoted and escaped. */
static void text_string(text *t, const char *s)
{
    cJSON item = { .type = cJSON_String | cJSON_IsReference, .valuestring = (char *)s };
    size_t n = strlen(s);
    int room = (int)(6 * n + 8);             /* every byte as \uXXXX, the quotes, cJSON's slack */
    char *d = n < (size_t)INT_MAX / 8 ? text_room(t, (size_t)room) : NULL;
    if (!d || !cJSON_PrintPreallocated(&item, d, room, false)) {
        t->oom = true;
        return;
    }
    t->len += strlen(d);
}

static void item_text(text *t, const model_bundle *b, const infer_item *it)
{
    TEXT_LIT(t, "{\"name\":");
    text_string(t, it->name);
    if (it->err_code[0]) {
        TEXT_LIT(t, ",\"error\":{\"code\":");
        text_string(t, it->err_code);
        TEXT_LIT(t, ",\"message\":");
        text_string(t, it->err);
        TEXT_LIT(t, "}}");
        return;
    }
    TEXT_LIT(t, ",\"predictions\":[");
    for (int k = 0; k < it->npred; k++) {
        int idx = it->pred[k].index;
        if (k)
            TEXT_LIT(t, ",");
        TEXT_LIT(t, "{\"label\":");
        text_string(t, b->labels[idx]);
        text_printf(t, ",\"index\":%d,\"probability\":%.9g}", idx, (double)it->pred[k].probability);
    }
    TEXT_LIT(t, "]}");
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

char *infer_answer(const model_bundle *b, const infer_set *s, int *status, size_t *len)
{
    text t = { 0 };
    int good = 0;
    for (int i = 0; i < s->n; i++)
        good += s->items[i].err_code[0] == '\0';
    *status = good > 0 ? 200 : 422;
    text_printf(&t, "{\"epoch\":%d,", b->epoch);
    if (!good) {
        char msg[1024];
        no_valid_message(s, msg, sizeof msg);
        TEXT_LIT(&t, "\"error\":{\"code\":\"no_valid_images\",\"message\":");
        text_string(&t, msg);
        TEXT_LIT(&t, "},");
    }
    TEXT_LIT(&t, "\"items\":[");
    for (int i = 0; i < s->n; i++) {
        if (i)
            TEXT_LIT(&t, ",");
        item_text(&t, b, &s->items[i]);
    }
    TEXT_LIT(&t, "]}");
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    if (len)
        *len = t.len;
    return t.p;
}
