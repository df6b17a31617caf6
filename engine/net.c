/* engine/net.c: networks from specs, trained on a backend (engine/net.h).
 *
 * A net is a chain of layers (engine/spec.h) over buffers the backend owns:
 *   act[i]   the input of layer i (act[0] the images, act[L] the logits)
 *   grad[i]  dL/d act[i], only where some layer before i has parameters
 *            (the first layers' input gradients are never computed)
 * Flatten is a view: its act and grad are its input's buffers. Every buffer is
 * sized for max_batch; a batch of n uses the first n images.
 *
 * Plans (the backend's prepared operations) depend on the batch size, so a net
 * keeps plan sets: one for max_batch made at net_create, and up to
 * NET_PLAN_SETS - 1 more made on first use for other sizes (the short last
 * batch of an epoch, of validation, a single image to classify), the least
 * recently used replaced when they are all taken. Steps never create plans
 * for sizes they have seen.
 *
 * Determinism: initialisation draws from seed-derived streams per parameter;
 * the backend's ops are deterministic for a given thread count; the loss is
 * added in row order. So the same seed, data and thread count give the same
 * losses bit for bit.
 */
#include "engine/net.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/errors.h"
#include "engine/init.h"
#include "engine/safetensors.h"   /* st_write, st_open, st_find */
#include "engine/spec.h"

#define NET_PLAN_SETS 4
#define PARAM_NAME_MAX (SPEC_NAME_MAX + 8)

/* Generated from the specs in engine/networks/ by cmake/embed_specs.cmake. */
extern const struct kiln_builtin_spec {
    const char *name;
    const char *json;
} kiln_builtin_specs[];

typedef struct param {
    char name[PARAM_NAME_MAX];      /* "<layer>.weight" */
    int ndim;
    int64_t shape[4];
    size_t count;
    bool decay;                     /* weight decay applies (weights, not biases) */
    be_buf *w, *g, *v;              /* value, gradient, momentum */
} param;

typedef struct layer {
    const layer_spec *s;
    int w, b;                       /* parameter indices, -1 for none */
    bool need_dx;                   /* compute grad of the input */
} layer;

typedef struct plan_set {
    int n;                          /* batch size; 0: slot unused */
    be_plan **plans;                /* nlayers + 1: one per layer (NULL for flatten), loss */
    unsigned long used;
} plan_set;

struct net {
    const backend *be;
    be_ctx *ctx;
    net_spec spec;
    int max_batch, classes;
    net_solver solver;
    int nlayers;
    layer *layers;
    int nparams;
    param *params;
    be_buf **act, **grad;           /* nlayers + 1 each */
    bool *act_own, *grad_own;
    be_buf *labels;                 /* int32 x max_batch */
    be_buf *probs;                  /* float x max_batch x classes */
    plan_set sets[NET_PLAN_SETS];
    unsigned long clock;
};

/* ---- built-in specs -------------------------------------------------------- */

const char *net_builtin(const char *name)
{
    for (int i = 0; name && kiln_builtin_specs[i].name; i++)
        if (strcmp(kiln_builtin_specs[i].name, name) == 0)
            return kiln_builtin_specs[i].json;
    return NULL;
}

#define NET_BUILTIN_MAX 64
static const char *builtin_names[NET_BUILTIN_MAX + 1];
static pthread_once_t builtin_once = PTHREAD_ONCE_INIT;

static void builtin_names_init(void)
{
    int n = 0;
    for (int i = 0; kiln_builtin_specs[i].name && n < NET_BUILTIN_MAX; i++)
        builtin_names[n++] = kiln_builtin_specs[i].name;
    builtin_names[n] = NULL;
}

const char *const *net_builtin_names(void)
{
    pthread_once(&builtin_once, builtin_names_init);
    return builtin_names;
}

/* ---- validation ------------------------------------------------------------ */

int net_validate(const cJSON *spec, net_shape in, int classes, char *err, size_t errlen)
{
    net_spec s;
    if (spec_parse(spec, in, classes, &s, err, errlen) < 0)
        return -1;
    spec_free(&s);
    return 0;
}

/* ---- building -------------------------------------------------------------- */

/* "layer 2 (conv2d \"conv2\")" prefix on a backend error. */
static int layer_fail(const layer *l, char *err, size_t errlen)
{
    char prefix[SPEC_NAME_MAX + 48];
    snprintf(prefix, sizeof prefix, "layer %d (%s \"%s\")", l->s->number, l->s->type,
             l->s->name);
    eng_err_prefix(err, errlen, prefix);
    return -1;
}

static be_buf *alloc_floats(net *n, size_t count, char *err, size_t errlen)
{
    if (count > SIZE_MAX / sizeof(float)) {
        eng_err(err, errlen, "buffer of %zu floats is too large", count);
        return NULL;
    }
    return n->be->buf_alloc(n->ctx, count * sizeof(float), err, errlen);
}

static int add_param(net *n, const layer_spec *s, const char *suffix, int ndim,
                     const int64_t *shape, bool decay, init_kind init, int64_t fan_in,
                     int64_t fan_out, uint64_t seed, char *err, size_t errlen)
{
    param *p = &n->params[n->nparams];
    float *host = NULL;
    int rc = -1;
    snprintf(p->name, sizeof p->name, "%s.%s", s->name, suffix);
    p->ndim = ndim;
    p->count = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->count *= (size_t)shape[i];
    }
    p->decay = decay;
    n->nparams++;
    if (!(p->w = alloc_floats(n, p->count, err, errlen)) ||
        !(p->g = alloc_floats(n, p->count, err, errlen)) ||
        !(p->v = alloc_floats(n, p->count, err, errlen)))
        goto out;
    if (init != INIT_ZERO) {                 /* buffers start zeroed */
        if (!(host = malloc(p->count * sizeof *host))) {
            eng_err(err, errlen, "out of memory initialising %s", p->name);
            goto out;
        }
        init_fill(host, p->count, init, fan_in, fan_out, seed, p->name);
        if (n->be->buf_upload(n->ctx, p->w, 0, host, p->count * sizeof *host, err, errlen) < 0)
            goto out;
    }
    rc = 0;
out:
    free(host);
    return rc;
}

static int make_params(net *n, uint64_t seed, char *err, size_t errlen)
{
    int max = 0;
    for (int i = 0; i < n->nlayers; i++)
        max += (n->spec.layers[i].kind == LAYER_CONV2D || n->spec.layers[i].kind == LAYER_DENSE)
               ? 2 : 0;
    if (max && !(n->params = calloc((size_t)max, sizeof *n->params)))
        return eng_err(err, errlen, "out of memory");
    for (int i = 0; i < n->nlayers; i++) {
        layer *l = &n->layers[i];
        const layer_spec *s = l->s;
        init_kind wi = spec_feeds_relu(&n->spec, i) ? INIT_HE_UNIFORM : INIT_GLOROT_UNIFORM;
        int64_t shape[4], bshape[1];
        bool bias;
        int ndim;
        int64_t fan_in, fan_out;
        if (s->kind == LAYER_CONV2D) {
            const conv_spec *c = &s->u.conv;
            shape[0] = c->filters;
            shape[1] = s->in.c / c->groups;
            shape[2] = c->kh;
            shape[3] = c->kw;
            ndim = 4;
            fan_in = shape[1] * c->kh * c->kw;
            fan_out = (int64_t)c->filters * c->kh * c->kw;
            bias = c->bias;
            bshape[0] = c->filters;
        } else if (s->kind == LAYER_DENSE) {
            shape[0] = s->u.dense.units;
            shape[1] = spec_shape_size(s->in);
            ndim = 2;
            fan_in = shape[1];
            fan_out = shape[0];
            bias = s->u.dense.bias;
            bshape[0] = s->u.dense.units;
        } else {
            continue;
        }
        l->w = n->nparams;
        if (add_param(n, s, "weight", ndim, shape, true, wi, fan_in, fan_out, seed,
                      err, errlen) < 0)
            return layer_fail(l, err, errlen);
        if (bias) {
            l->b = n->nparams;
            if (add_param(n, s, "bias", 1, bshape, false, INIT_ZERO, 0, 0, seed,
                          err, errlen) < 0)
                return layer_fail(l, err, errlen);
        }
    }
    return 0;
}

static size_t act_count(const net *n, int i)
{
    net_shape s = i == 0 ? n->spec.in : n->spec.layers[i - 1].out;
    return (size_t)n->max_batch * (size_t)spec_shape_size(s);
}

/* Activation and gradient buffers (see the top of this file). */
static int make_buffers(net *n, char *err, size_t errlen)
{
    int L = n->nlayers;
    if (!(n->act = calloc((size_t)L + 1, sizeof *n->act)) ||
        !(n->grad = calloc((size_t)L + 1, sizeof *n->grad)) ||
        !(n->act_own = calloc((size_t)L + 1, sizeof *n->act_own)) ||
        !(n->grad_own = calloc((size_t)L + 1, sizeof *n->grad_own)))
        return eng_err(err, errlen, "out of memory");
    for (int i = 0; i <= L; i++) {
        if (i > 0 && n->layers[i - 1].s->kind == LAYER_FLATTEN) {
            n->act[i] = n->act[i - 1];
            continue;
        }
        if (!(n->act[i] = alloc_floats(n, act_count(n, i), err, errlen)))
            return -1;
        n->act_own[i] = true;
    }
    for (int i = L; i >= 1; i--) {
        if (i < L && !n->layers[i].need_dx)
            continue;
        if (i < L && n->layers[i].s->kind == LAYER_FLATTEN) {
            n->grad[i] = n->grad[i + 1];
            continue;
        }
        if (!(n->grad[i] = alloc_floats(n, act_count(n, i), err, errlen)))
            return -1;
        n->grad_own[i] = true;
    }
    if (!(n->labels = n->be->buf_alloc(n->ctx, (size_t)n->max_batch * sizeof(int32_t),
                                       err, errlen)) ||
        !(n->probs = alloc_floats(n, (size_t)n->max_batch * (size_t)n->classes, err, errlen)))
        return -1;
    return 0;
}

/* Bytes a net of this spec needs for batch max_batch: parameters with their
 * gradient and momentum, activations and gradients. */
static double memory_estimate(const net_spec *s, int max_batch)
{
    double params = 0, acts = (double)spec_shape_size(s->in);
    for (int i = 0; i < s->nlayers; i++) {
        params += (double)spec_layer_params(&s->layers[i]);
        if (s->layers[i].kind != LAYER_FLATTEN)
            acts += 2.0 * (double)spec_shape_size(s->layers[i].out);
    }
    return 4.0 * (3.0 * params + (double)max_batch * acts);
}

static int check_solver(const net_solver *sv, net_solver *out, char *err, size_t errlen)
{
    if (!sv) {
        *out = (net_solver){ .type = "sgd", .lr = 0.01f, .momentum = 0.0f };
        return 0;
    }
    if (strcmp(sv->type, "sgd") != 0)
        return eng_err(err, errlen, "solver \"%.16s\" is not supported yet (only \"sgd\")",
                       sv->type);
    if (!isfinite(sv->lr) || sv->lr < 0)
        return eng_err(err, errlen, "solver lr must be a finite number >= 0");
    if (!isfinite(sv->momentum) || sv->momentum < 0 || sv->momentum >= 1)
        return eng_err(err, errlen, "solver momentum must be in [0, 1)");
    if (!isfinite(sv->weight_decay) || sv->weight_decay < 0)
        return eng_err(err, errlen, "solver weight_decay must be a finite number >= 0");
    *out = *sv;
    return 0;
}

static void plan_set_clear(net *n, plan_set *ps)
{
    if (ps->plans)
        for (int i = 0; i <= n->nlayers; i++)
            n->be->plan_free(n->ctx, ps->plans[i]);
    free(ps->plans);
    memset(ps, 0, sizeof *ps);
}

/* The backend's plans for every layer and the loss at batch size bn. */
static int plan_set_build(net *n, plan_set *ps, int bn, char *err, size_t errlen)
{
    const backend *be = n->be;
    if (!(ps->plans = calloc((size_t)n->nlayers + 1, sizeof *ps->plans)))
        return eng_err(err, errlen, "out of memory");
    ps->n = bn;
    for (int i = 0; i < n->nlayers; i++) {
        const layer *l = &n->layers[i];
        const layer_spec *s = l->s;
        unsigned passes = BE_FWD | (l->need_dx ? BE_BWD_DATA : 0) |
                          (l->w >= 0 ? BE_BWD_WEIGHTS : 0);
        int rc = 0;
        switch (s->kind) {
        case LAYER_CONV2D: {
            const conv_spec *c = &s->u.conv;
            be_conv_desc d = {
                .n = bn, .c = s->in.c, .h = s->in.h, .w = s->in.w,
                .k = c->filters, .oh = s->out.h, .ow = s->out.w, .kh = c->kh, .kw = c->kw,
                .stride_h = c->stride_h, .stride_w = c->stride_w,
                .pad_t = c->pad_t, .pad_l = c->pad_l, .pad_b = c->pad_b, .pad_r = c->pad_r,
                .dil_h = c->dil_h, .dil_w = c->dil_w, .groups = c->groups, .bias = c->bias,
            };
            rc = be->conv_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_MAXPOOL: {
            const pool_spec *p = &s->u.pool;
            be_pool_desc d = {
                .alg = BE_POOL_MAX, .n = bn, .c = s->in.c, .h = s->in.h, .w = s->in.w,
                .oh = s->out.h, .ow = s->out.w, .kh = p->kh, .kw = p->kw,
                .stride_h = p->stride_h, .stride_w = p->stride_w,
                .pad_t = p->pad_h, .pad_l = p->pad_w, .pad_b = p->pad_h, .pad_r = p->pad_w,
            };
            rc = be->pool_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_DENSE: {
            be_dense_desc d = { .n = bn, .in = (int)spec_shape_size(s->in),
                                .out = s->u.dense.units, .bias = s->u.dense.bias };
            rc = be->dense_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_RELU: {
            be_act_desc d = { .alg = BE_ACT_RELU, .n = bn,
                              .size = (size_t)spec_shape_size(s->in) };
            rc = be->act_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_FLATTEN:
            break;
        }
        if (rc < 0)
            return layer_fail(l, err, errlen);
    }
    be_xent_desc xd = { .n = bn, .classes = n->classes };
    return be->xent_plan(n->ctx, &xd, &ps->plans[n->nlayers], err, errlen);
}

/* The plan set for batch size bn, made if needed. */
static plan_set *plans_for(net *n, int bn, char *err, size_t errlen)
{
    plan_set *victim = NULL;
    n->clock++;
    for (int i = 0; i < NET_PLAN_SETS; i++) {
        if (n->sets[i].n == bn) {
            n->sets[i].used = n->clock;
            return &n->sets[i];
        }
    }
    /* An empty slot, else the least recently used one; max_batch's stays. */
    for (int i = 0; i < NET_PLAN_SETS; i++) {
        plan_set *ps = &n->sets[i];
        if (ps->n == 0) {
            victim = ps;
            break;
        }
        if (ps->n != n->max_batch && (!victim || ps->used < victim->used))
            victim = ps;
    }
    plan_set_clear(n, victim);
    if (plan_set_build(n, victim, bn, err, errlen) < 0) {
        plan_set_clear(n, victim);
        return NULL;
    }
    victim->used = n->clock;
    return victim;
}

net *net_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                const char *backend_name, const net_solver *solver, uint64_t seed,
                char *err, size_t errlen)
{
    net *n = calloc(1, sizeof *n);
    net *ret = NULL;
    if (!n) {
        eng_err(err, errlen, "out of memory");
        return NULL;
    }
    if (spec_parse(spec, in, classes, &n->spec, err, errlen) < 0)
        goto out;
    if (max_batch < 1) {
        eng_err(err, errlen, "batch size must be positive (got %d)", max_batch);
        goto out;
    }
    if (check_solver(solver, &n->solver, err, errlen) < 0)
        goto out;
    if (!(n->be = backend_find(backend_name ? backend_name : "cpu"))) {
        eng_err(err, errlen, "backend \"%s\" is not compiled into this kiln", backend_name);
        goto out;
    }
    if (strcmp(n->be->name, "cpu") == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
        double need = memory_estimate(&n->spec, max_batch);
        double have = pages > 0 && psize > 0 ? (double)pages * (double)psize : 0;
        if (have > 0 && need > have) {
            eng_err(err, errlen, "the network needs about %.0f MiB at batch size %d, more than "
                    "this machine's %.0f MiB; use a smaller batch", need / 1048576.0, max_batch,
                    have / 1048576.0);
            goto out;
        }
    }
    n->max_batch = max_batch;
    n->classes = classes;
    n->nlayers = n->spec.nlayers;
    if (!(n->layers = calloc((size_t)n->nlayers, sizeof *n->layers))) {
        eng_err(err, errlen, "out of memory");
        goto out;
    }
    bool params_before = false;
    for (int i = 0; i < n->nlayers; i++) {
        layer *l = &n->layers[i];
        l->s = &n->spec.layers[i];
        l->w = l->b = -1;
        l->need_dx = params_before;
        params_before = params_before || spec_layer_params(l->s) > 0;
    }
    if (n->be->ctx_create(0, &n->ctx, err, errlen) < 0 ||
        make_params(n, seed, err, errlen) < 0 ||
        make_buffers(n, err, errlen) < 0 ||
        !plans_for(n, max_batch, err, errlen))
        goto out;
    ret = n;
    n = NULL;
out:
    net_free(n);
    return ret;
}

void net_free(net *n)
{
    if (!n)
        return;
    const backend *be = n->be;
    if (be) {
        for (int i = 0; i < NET_PLAN_SETS; i++)
            plan_set_clear(n, &n->sets[i]);
        for (int i = 0; i < n->nparams; i++) {
            be->buf_free(n->ctx, n->params[i].w);
            be->buf_free(n->ctx, n->params[i].g);
            be->buf_free(n->ctx, n->params[i].v);
        }
        for (int i = 0; n->act_own && n->grad_own && i <= n->nlayers; i++) {
            if (n->act_own[i])
                be->buf_free(n->ctx, n->act[i]);
            if (n->grad_own[i])
                be->buf_free(n->ctx, n->grad[i]);
        }
        be->buf_free(n->ctx, n->labels);
        be->buf_free(n->ctx, n->probs);
        be->ctx_free(n->ctx);
    }
    free(n->act);
    free(n->grad);
    free(n->act_own);
    free(n->grad_own);
    free(n->params);
    free(n->layers);
    spec_free(&n->spec);
    free(n);
}

/* ---- running --------------------------------------------------------------- */

static const be_buf *param_w(const net *n, int i)
{
    return i >= 0 ? n->params[i].w : NULL;
}

static be_buf *param_g(const net *n, int i)
{
    return i >= 0 ? n->params[i].g : NULL;
}

static int forward(net *n, plan_set *ps, char *err, size_t errlen)
{
    const backend *be = n->be;
    for (int i = 0; i < n->nlayers; i++) {
        const layer *l = &n->layers[i];
        be_plan *p = ps->plans[i];
        const be_buf *x = n->act[i];
        be_buf *y = n->act[i + 1];
        int rc = 0;
        switch (l->s->kind) {
        case LAYER_CONV2D:
            rc = be->conv_fwd(n->ctx, p, x, param_w(n, l->w), param_w(n, l->b), y, err, errlen);
            break;
        case LAYER_DENSE:
            rc = be->dense_fwd(n->ctx, p, x, param_w(n, l->w), param_w(n, l->b), y, err, errlen);
            break;
        case LAYER_MAXPOOL:
            rc = be->pool_fwd(n->ctx, p, x, y, err, errlen);
            break;
        case LAYER_RELU:
            rc = be->act_fwd(n->ctx, p, x, y, err, errlen);
            break;
        case LAYER_FLATTEN:
            break;
        }
        if (rc < 0)
            return layer_fail(l, err, errlen);
    }
    return 0;
}

static int backward(net *n, plan_set *ps, char *err, size_t errlen)
{
    const backend *be = n->be;
    for (int i = n->nlayers - 1; i >= 0; i--) {
        const layer *l = &n->layers[i];
        be_plan *p = ps->plans[i];
        const be_buf *x = n->act[i], *y = n->act[i + 1], *dy = n->grad[i + 1];
        be_buf *dx = n->grad[i];
        int rc = 0;
        switch (l->s->kind) {
        case LAYER_CONV2D:
            rc = be->conv_bwd_weights(n->ctx, p, x, dy, param_g(n, l->w), param_g(n, l->b),
                                      err, errlen);
            if (rc == 0 && l->need_dx)
                rc = be->conv_bwd_data(n->ctx, p, dy, param_w(n, l->w), dx, err, errlen);
            break;
        case LAYER_DENSE:
            rc = be->dense_bwd_weights(n->ctx, p, x, dy, param_g(n, l->w), param_g(n, l->b),
                                       err, errlen);
            if (rc == 0 && l->need_dx)
                rc = be->dense_bwd_data(n->ctx, p, dy, param_w(n, l->w), dx, err, errlen);
            break;
        case LAYER_MAXPOOL:
            if (l->need_dx)
                rc = be->pool_bwd(n->ctx, p, dy, dx, err, errlen);
            break;
        case LAYER_RELU:
            if (l->need_dx)
                rc = be->act_bwd(n->ctx, p, y, dy, dx, err, errlen);
            break;
        case LAYER_FLATTEN:
            break;
        }
        if (rc < 0)
            return layer_fail(l, err, errlen);
        if (!l->need_dx)
            break;                          /* nothing before this layer learns */
    }
    return 0;
}

static int check_batch(const net *n, const int32_t *labels, int count, bool chunked,
                       char *err, size_t errlen)
{
    if (count < 1 || (!chunked && count > n->max_batch))
        return eng_err(err, errlen, "batch of %d images: must be 1 to %d", count, n->max_batch);
    for (int i = 0; labels && i < count; i++)
        if (labels[i] < 0 || labels[i] >= n->classes)
            return eng_err(err, errlen, "label %d of image %d is outside [0, %d)",
                           (int)labels[i], i, n->classes);
    return 0;
}

/* Uploads count images (and labels when not NULL) and runs the forward pass. */
static plan_set *load_and_forward(net *n, const float *x, const int32_t *labels, int count,
                                  char *err, size_t errlen)
{
    plan_set *ps = plans_for(n, count, err, errlen);
    size_t in_bytes = (size_t)count * (size_t)spec_shape_size(n->spec.in) * sizeof(float);
    if (!ps ||
        n->be->buf_upload(n->ctx, n->act[0], 0, x, in_bytes, err, errlen) < 0 ||
        (labels && n->be->buf_upload(n->ctx, n->labels, 0, labels,
                                     (size_t)count * sizeof *labels, err, errlen) < 0) ||
        forward(n, ps, err, errlen) < 0)
        return NULL;
    return ps;
}

int net_train_step(net *n, const float *x, const int32_t *labels, int count,
                   float lr, net_stats *out, char *err, size_t errlen)
{
    double loss_sum = 0;
    int correct = 0;
    if (check_batch(n, labels, count, false, err, errlen) < 0)
        return -1;
    if (!isfinite(lr) || lr < 0)
        return eng_err(err, errlen, "learning rate %g must be a finite number >= 0", lr);
    plan_set *ps = load_and_forward(n, x, labels, count, err, errlen);
    if (!ps)
        return -1;
    if (n->be->xent(n->ctx, ps->plans[n->nlayers], n->act[n->nlayers], n->labels,
                    1.0f / (float)count, n->grad[n->nlayers], NULL, &loss_sum, &correct,
                    err, errlen) < 0)
        return -1;
    if (!isfinite(loss_sum))
        return eng_err(err, errlen, "training diverged: the loss is %s (try a smaller "
                       "learning rate)", isnan(loss_sum) ? "NaN" : "infinite");
    if (backward(n, ps, err, errlen) < 0)
        return -1;
    /* A NaN can hide from the loss (a ReLU maps it to 0) and still reach a
     * gradient; refuse the step before any weight changes. */
    for (int i = 0; i < n->nparams; i++) {
        bool bad = false;
        if (n->be->nonfinite(n->ctx, n->params[i].g, n->params[i].count, &bad, err, errlen) < 0)
            return -1;
        if (bad)
            return eng_err(err, errlen, "training diverged: the gradient of %s is not finite "
                           "(check the data, or try a smaller learning rate)", n->params[i].name);
    }
    for (int i = 0; i < n->nparams; i++) {
        param *p = &n->params[i];
        be_sgd hp = { .lr = lr, .momentum = n->solver.momentum,
                      .weight_decay = p->decay ? n->solver.weight_decay : 0.0f };
        if (n->be->sgd_update(n->ctx, p->w, p->v, p->g, p->count, &hp, err, errlen) < 0)
            return -1;
    }
    if (out) {
        out->loss = loss_sum / count;
        out->correct = correct;
        out->count = count;
    }
    return 0;
}

int net_eval(net *n, const float *x, const int32_t *labels, int count,
             net_stats *out, char *err, size_t errlen)
{
    double total = 0;
    int correct = 0;
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    if (!labels)
        return eng_err(err, errlen, "net_eval needs labels");
    if (check_batch(n, labels, count, true, err, errlen) < 0)
        return -1;
    for (int done = 0; done < count;) {
        int bn = count - done < n->max_batch ? count - done : n->max_batch;
        double ls = 0;
        int hits = 0;
        plan_set *ps = load_and_forward(n, x + (size_t)done * in_size, labels + done, bn,
                                        err, errlen);
        if (!ps || n->be->xent(n->ctx, ps->plans[n->nlayers], n->act[n->nlayers], n->labels,
                               1.0f, NULL, NULL, &ls, &hits, err, errlen) < 0)
            return -1;
        total += ls;
        correct += hits;
        done += bn;
    }
    if (out) {
        out->loss = total / count;
        out->correct = correct;
        out->count = count;
    }
    return 0;
}

int net_predict(net *n, const float *x, int count, float *probs, char *err, size_t errlen)
{
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    if (check_batch(n, NULL, count, true, err, errlen) < 0)
        return -1;
    for (int done = 0; done < count;) {
        int bn = count - done < n->max_batch ? count - done : n->max_batch;
        size_t pbytes = (size_t)bn * (size_t)n->classes * sizeof(float);
        plan_set *ps = load_and_forward(n, x + (size_t)done * in_size, NULL, bn, err, errlen);
        if (!ps ||
            n->be->xent(n->ctx, ps->plans[n->nlayers], n->act[n->nlayers], NULL, 1.0f, NULL,
                        n->probs, NULL, NULL, err, errlen) < 0 ||
            n->be->buf_download(n->ctx, n->probs, 0, probs + (size_t)done * n->classes, pbytes,
                                err, errlen) < 0)
            return -1;
        done += bn;
    }
    return 0;
}

/* ---- parameters ------------------------------------------------------------ */

size_t net_param_count(const net *n)
{
    size_t total = 0;
    for (int i = 0; i < n->nparams; i++)
        total += n->params[i].count;
    return total;
}

int net_save(const net *n, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    size_t total = net_param_count(n), off = 0;
    float *host = malloc((total ? total : 1) * sizeof *host);
    st_tensor *t = calloc((size_t)n->nparams + 1, sizeof *t);
    const char *meta[] = { "kiln_format", "1", "network", n->spec.name, NULL };
    if (!host || !t) {
        eng_err(err, errlen, "out of memory saving %zu parameters", total);
        goto out;
    }
    for (int i = 0; i < n->nparams; i++) {
        const param *p = &n->params[i];
        if (n->be->buf_download(n->ctx, p->w, 0, host + off, p->count * sizeof *host,
                                err, errlen) < 0)
            goto out;
        t[i] = (st_tensor){ .name = p->name, .dtype = ST_F32, .ndim = p->ndim,
                            .data = host + off, .bytes = p->count * sizeof *host };
        memcpy(t[i].shape, p->shape, sizeof p->shape);
        off += p->count;
    }
    rc = st_write(path, t, n->nparams, meta, err, errlen);
out:
    free(host);
    free(t);
    return rc;
}

static void shape_str(char *buf, size_t len, const int64_t *shape, int ndim)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

int net_load(net *n, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    st_file *f = st_open(path, err, errlen);
    if (!f)
        return -1;
    /* Check everything before changing anything: all or nothing. */
    for (int i = 0; i < n->nparams; i++) {
        const param *p = &n->params[i];
        const st_tensor *t = st_find(f, p->name);
        char want[96], got[96];
        if (!t) {
            eng_err(err, errlen, "%s has no tensor \"%s\" (was it saved from this network?)",
                    path, p->name);
            goto out;
        }
        if (t->dtype != ST_F32) {
            eng_err(err, errlen, "%s: tensor \"%s\" is %s, expected F32", path, p->name,
                    st_dtype_name(t->dtype));
            goto out;
        }
        if (t->ndim != p->ndim || memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof(int64_t))) {
            shape_str(want, sizeof want, p->shape, p->ndim);
            shape_str(got, sizeof got, t->shape, t->ndim);
            eng_err(err, errlen, "%s: tensor \"%s\" has shape %s, this network needs %s",
                    path, p->name, got, want);
            goto out;
        }
    }
    for (int i = 0; i < n->nparams; i++) {
        const param *p = &n->params[i];
        const st_tensor *t = st_find(f, p->name);
        if (n->be->buf_upload(n->ctx, p->w, 0, t->data, t->bytes, err, errlen) < 0)
            goto out;
    }
    rc = 0;
out:
    st_close(f);
    return rc;
}
