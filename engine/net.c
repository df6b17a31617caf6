/* engine/net.c: networks from specs, trained on a backend (engine/net.h).
 *
 * A net is a DAG of layers (engine/spec.h; each layer's inputs are earlier
 * layers, so list order is a topological order) over buffers the backend owns:
 *   act[a]   activation a: act[0] the images, act[i + 1] layer i's output,
 *            act[L] the logits
 *   grad[a]  dL/d act[a], only where a depends on some parameter (need_grad;
 *            the first layers' input gradients are never computed)
 * Flatten is a view: its act is its input's buffer, and so is its grad when
 * the flatten is its input's only consumer. Where an activation feeds several
 * layers, its gradient is the sum of their contributions: backward runs the
 * layers in reverse order, the first contribution (from the last consumer)
 * overwrites grad[a] and later ones are added (directly by ops that take a
 * beta, through the scratch buffer `tmp` otherwise). Every buffer is sized for
 * max_batch; a batch of n uses the first n images.
 *
 * Training and inference differ in dropout (a mask in training, the identity
 * otherwise) and batch norm (batch statistics, which also update the running
 * ones, in training; the running statistics otherwise). Dropout masks come
 * from a stream derived from the seed, the layer's name and the step count,
 * so runs repeat and a restored step count (net_set_step) resumes them.
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

#include "engine/amp.h"
#include "engine/backend.h"
#include "base/err.h"
#include "engine/init.h"
#include "engine/rng.h"       /* rng_derive, rng_splitmix64: dropout streams */
#include "engine/safetensors.h"   /* st_write, st_open, st_find */
#include "engine/spec.h"
#include "engine/summary.h"     /* summary_check_memory: the check before allocating */
#include "engine/optim.h"       /* optim_check, optim_create, optim_step */

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
    be_buf *h;                      /* AMP: the 16-bit copy of a conv or dense weight, which
                                     * the forward and backward passes read; else NULL */
} param;

typedef struct layer {
    const layer_spec *s;
    int w, b;                       /* parameter indices, -1 for none */
    int rm, rv;                     /* batchnorm: running mean and variance (n->stats) */
    bool need_dx;                   /* compute the gradient of some input */
    bool dx[SPEC_MAX_INPUTS];       /* ... of input k */
    bool first[SPEC_MAX_INPUTS];    /* input k's gradient is overwritten, not added to */
    bool grad_alias;                /* flatten: grad[out] is grad[in] */
    uint64_t seed;                  /* dropout: the layer's stream */
    be_buf *mask;                   /* dropout: the latest training mask */
    be_buf *mean, *var;             /* batchnorm: the latest batch statistics */
    int bucket_lo, bucket_hi;       /* data parallelism: after this layer's backward pass,
                                     * the gradients of parameters [lo, hi) are final and
                                     * travel as one bucket (none when equal) */
} layer;

_Static_assert(SPEC_MAX_INPUTS == BE_MAX_INPUTS, "the spec's inputs fit the backend's");

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
    optim *opt;                     /* the solver's update and state (engine/optim.h) */
    int nlayers;
    layer *layers;
    int nparams;
    param *params;
    int nstats;
    param *stats;                   /* not trained: batch norm running statistics */
    be_buf **act, **grad;           /* nlayers + 1 each */
    bool *act_own, *grad_own;
    bool *need_grad;                /* nlayers + 1: activation depends on a parameter */
    be_layout *layout;              /* nlayers + 1: how activation a and its gradient lie */
    be_dtype *dtype;                /* nlayers + 1: activation a's type, and its gradient's */
    be_dtype half;                  /* the 16-bit type of AMP (BE_BF16, BE_F16), or BE_F32 */
    amp_scaler scaler;              /* the dynamic loss scaler (engine/amp.h) */
    be_buf *logits32, *dlogits32;   /* the logits and their gradient in FP32 for the loss,
                                     * when the last layer writes a 16-bit type */
    be_buf *tmp;                    /* one activation: gradient contributions to add */
    uint64_t seed, steps;           /* training steps run (dropout streams) */
    be_buf *labels;                 /* int32 x max_batch */
    be_buf *probs;                  /* float x max_batch x classes */
    plan_set sets[NET_PLAN_SETS];
    unsigned long clock;
    int last_batch;                 /* images of the latest training step (batch norm's m) */
    /* Data parallelism (engine/net.h, net_create): a net on several devices
     * is this net, rank 0 (the primary), and nrep - 1 replicas, nets of
     * their own built alike from the same seed, one per device. */
    int nrep, rank;
    int device;                     /* the backend's device number this net runs on */
    int global_batch;               /* the primary: the largest batch a step takes in all */
    net **rep;                      /* the primary: nrep nets, rep[0] itself; else NULL */
    be_comm *comm;                  /* shared by the replicas; the primary owns it */
    bool broken;                    /* a replica failed mid-step; the replicas may differ */
    float *zeros;                   /* host zeros for a replica without images in a step */
    size_t zeros_count;
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
    set_err_prefix(err, errlen, prefix);
    return -1;
}

static be_buf *alloc_floats(net *n, size_t count, char *err, size_t errlen)
{
    if (count > SIZE_MAX / sizeof(float)) {
        set_err(err, errlen, "buffer of %zu floats is too large", count);
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
            set_err(err, errlen, "out of memory initialising %s", p->name);
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

/* Batch norm: scale (1) and shift (0), trained without weight decay, and the
 * running mean (0) and variance (1), which are state, not parameters. */
static int make_bn_params(net *n, layer *l, uint64_t seed, char *err, size_t errlen)
{
    const layer_spec *s = l->s;
    int64_t shape[1] = { s->in.c };
    l->w = n->nparams;
    if (add_param(n, s, "weight", 1, shape, false, INIT_ONE, 0, 0, seed, err, errlen) < 0)
        return -1;
    l->b = n->nparams;
    if (add_param(n, s, "bias", 1, shape, false, INIT_ZERO, 0, 0, seed, err, errlen) < 0)
        return -1;
    /* The running statistics go through add_param into the params array's
     * slots past the end, then move to stats. */
    for (int k = 0; k < 2; k++) {
        int keep = n->nparams;
        if (add_param(n, s, k ? "running_var" : "running_mean", 1, shape, false,
                      k ? INIT_ONE : INIT_ZERO, 0, 0, seed, err, errlen) < 0) {
            n->stats[n->nstats++] = n->params[keep];
            memset(&n->params[keep], 0, sizeof n->params[keep]);
            n->nparams = keep;
            return -1;
        }
        n->stats[n->nstats] = n->params[keep];
        memset(&n->params[keep], 0, sizeof n->params[keep]);
        n->nparams = keep;
        *(k ? &l->rv : &l->rm) = n->nstats++;
    }
    if (!(l->mean = alloc_floats(n, (size_t)s->in.c, err, errlen)) ||
        !(l->var = alloc_floats(n, (size_t)s->in.c, err, errlen)))
        return -1;
    return 0;
}

static int make_params(net *n, uint64_t seed, char *err, size_t errlen)
{
    int max = 0;
    for (int i = 0; i < n->nlayers; i++)
        max += (n->spec.layers[i].kind == LAYER_CONV2D || n->spec.layers[i].kind == LAYER_DENSE ||
                n->spec.layers[i].kind == LAYER_BATCHNORM) ? 2 : 0;
    /* one spare slot: make_bn_params passes statistics through it */
    if (max && (!(n->params = calloc((size_t)max + 1, sizeof *n->params)) ||
                !(n->stats = calloc((size_t)max, sizeof *n->stats))))
        return set_err(err, errlen, "out of memory");
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
        } else if (s->kind == LAYER_BATCHNORM) {
            if (make_bn_params(n, l, seed, err, errlen) < 0)
                return layer_fail(l, err, errlen);
            continue;
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

/* AMP: a 16-bit copy of every convolution and dense weight (biases and
 * batch-norm parameters are used in FP32). */
static int make_copies(net *n, char *err, size_t errlen)
{
    if (n->half == BE_F32)
        return 0;
    for (int i = 0; i < n->nlayers; i++) {
        const layer *l = &n->layers[i];
        if ((l->s->kind != LAYER_CONV2D && l->s->kind != LAYER_DENSE) || l->w < 0)
            continue;
        param *p = &n->params[l->w];
        if (!(p->h = n->be->buf_alloc(n->ctx, p->count * n->be->dtype_bytes(n->half), err,
                                      errlen)))
            return layer_fail(l, err, errlen);
    }
    return 0;
}

/* The copies made from the FP32 weights again (after every update). */
static int refresh_copies(net *n, char *err, size_t errlen)
{
    for (int i = 0; i < n->nparams; i++) {
        param *p = &n->params[i];
        if (p->h && n->be->cast(n->ctx, p->w, BE_F32, p->h, n->half, p->count, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* Floats one image of activation a (and of its gradient) takes in its
 * layout: blocked ones pad their channels to a multiple of 16. */
static size_t act_elems(const net *n, int a)
{
    net_shape s = spec_act_shape(&n->spec, a);
    return be_act_elems(s.c, (size_t)s.h * (size_t)s.w, n->layout[a]);
}

static size_t act_count(const net *n, int a)
{
    return (size_t)n->max_batch * act_elems(n, a);
}

/* Bytes of activation a's buffer (and its gradient's) in its type. */
static size_t act_bytes(const net *n, int a)
{
    return act_count(n, a) * n->be->dtype_bytes(n->dtype[a]);
}

static be_buf *alloc_act(net *n, int a, char *err, size_t errlen)
{
    if (act_count(n, a) > SIZE_MAX / 4) {
        set_err(err, errlen, "activation %d of %zu values is too large", a, act_count(n, a));
        return NULL;
    }
    return n->be->buf_alloc(n->ctx, act_bytes(n, a), err, errlen);
}

/* Which activations need gradients, which inputs each layer differentiates,
 * and which contribution to each gradient comes first in backward order
 * (seen: L + 1 zeroed flags to work in). */
static void plan_gradients(net *n, bool *seen)
{
    int L = n->nlayers;
    n->need_grad[0] = false;
    for (int i = 0; i < L; i++) {
        layer *l = &n->layers[i];
        bool any = spec_layer_params(l->s) > 0;
        l->need_dx = false;
        for (int k = 0; k < l->s->ninputs; k++) {
            l->dx[k] = n->need_grad[l->s->inputs[k]];
            l->need_dx = l->need_dx || l->dx[k];
            any = any || l->dx[k];
        }
        n->need_grad[i + 1] = any;
    }
    for (int i = L - 1; i >= 0; i--) {
        layer *l = &n->layers[i];
        for (int k = 0; k < l->s->ninputs; k++) {
            int a = l->s->inputs[k];
            l->first[k] = !seen[a];
            seen[a] = true;
        }
    }
}

/* Layers that map an input layout to the same output layout (element-wise
 * and per-channel), layers that take any input layout and write any output
 * layout (convolution, pooling), and those that need plain data. */
static bool layout_preserving(layer_kind k)
{
    return k == LAYER_RELU || k == LAYER_LEAKY_RELU || k == LAYER_SIGMOID || k == LAYER_TANH ||
           k == LAYER_BATCHNORM || k == LAYER_ADD || k == LAYER_DROPOUT;
}

static bool layout_converting(layer_kind k)
{
    return k == LAYER_CONV2D || k == LAYER_MAXPOOL || k == LAYER_AVGPOOL ||
           k == LAYER_GLOBAL_AVGPOOL;
}

static int uf_find(int *parent, int a)
{
    while (parent[a] != a)
        a = parent[a] = parent[parent[a]];
    return a;
}

/* Activations kept in the blocked layout (engine/backend.h, be_layout):
 * groups of activations joined by layout-preserving layers are blocked
 * together when every member has at least BLOCK_MIN_C channels (fewer would
 * more than double in size when padded to 16; a sigmoid's, a multiple of 16),
 * is made by a convolution, a pooling or a preserving layer, and is read only
 * by such layers; the images, the logits and whatever feeds flatten, dense or concat stay plain.
 * So the data is reordered only where a convolution's or pooling's kernel
 * wants another layout, not around every layer.
 * KILN_CPU_PLAIN_LAYOUTS=1 in the environment keeps everything plain (for
 * comparisons). */
#define BLOCK_MIN_C 8

static int plan_layouts(net *n, char *err, size_t errlen)
{
    int L = n->nlayers;
    int *parent = calloc((size_t)L + 1, sizeof *parent);
    bool *bad = calloc((size_t)L + 1, sizeof *bad);
    const char *env = getenv("KILN_CPU_PLAIN_LAYOUTS");
    bool off = env && strcmp(env, "1") == 0;
    if (!parent || !bad) {
        free(parent);
        free(bad);
        return set_err(err, errlen, "out of memory");
    }
    for (int a = 0; a <= L; a++)
        parent[a] = a;
    for (int i = 0; i < L; i++) {
        const layer_spec *s = &n->spec.layers[i];
        if (layout_preserving(s->kind))
            for (int k = 0; k < s->ninputs; k++)
                parent[uf_find(parent, s->inputs[k])] = uf_find(parent, i + 1);
    }
    bad[uf_find(parent, 0)] = bad[uf_find(parent, L)] = true;
    for (int a = 1; a <= L; a++) {
        layer_kind made = n->spec.layers[a - 1].kind;
        int c = spec_act_shape(&n->spec, a).c;
        /* oneDNN runs the logistic function on padded blocks with its slow
         * reference kernel (it maps the zero padding to 0.5) */
        if (off || !n->be->blocked_layouts || c < BLOCK_MIN_C || (c % 16 && made == LAYER_SIGMOID) ||
            !(layout_preserving(made) || layout_converting(made)))
            bad[uf_find(parent, a)] = true;
    }
    for (int i = 0; i < L; i++) {
        const layer_spec *s = &n->spec.layers[i];
        if (!layout_preserving(s->kind) && !layout_converting(s->kind))
            for (int k = 0; k < s->ninputs; k++)
                bad[uf_find(parent, s->inputs[k])] = true;
    }
    for (int a = 0; a <= L; a++)
        n->layout[a] = bad[uf_find(parent, a)] ? BE_PLAIN : BE_BLOCKED16;
    free(parent);
    free(bad);
    return 0;
}

/* The type of every activation (and of its gradient) under the net's
 * precision, from the op lists (engine/amp.h, amp_layer_class): AMP_LOW
 * layers write the 16-bit type, except the layer that writes the logits,
 * which writes FP32 for the loss; AMP_INPUT layers write the type of their
 * input. The images are FP32 and stay so until the first AMP_LOW layer,
 * which casts them on the way in. A cast of the logits into FP32 is added
 * only where the last layer is not AMP_LOW. */
static int plan_dtypes(net *n, char *err, size_t errlen)
{
    bool *low = calloc((size_t)n->nlayers + 1, sizeof *low);
    if (!low)
        return set_err(err, errlen, "out of memory");
    int rc = amp_plan(&n->spec, n->half != BE_F32, low, err, errlen);
    for (int a = 0; rc == 0 && a <= n->nlayers; a++)
        n->dtype[a] = low[a] ? n->half : BE_F32;
    free(low);
    return rc;
}

/* How many layer inputs read activation a. */
static int consumers(const net *n, int a)
{
    int c = 0;
    for (int i = 0; i < n->nlayers; i++)
        for (int k = 0; k < n->spec.layers[i].ninputs; k++)
            c += n->spec.layers[i].inputs[k] == a;
    return c;
}

/* Activation and gradient buffers (see the top of this file). */
static int make_buffers(net *n, char *err, size_t errlen)
{
    int L = n->nlayers;
    size_t most = 0;
    bool want_tmp = false;
    if (!(n->act = calloc((size_t)L + 1, sizeof *n->act)) ||
        !(n->grad = calloc((size_t)L + 1, sizeof *n->grad)) ||
        !(n->act_own = calloc((size_t)L + 1, sizeof *n->act_own)) ||
        !(n->grad_own = calloc((size_t)L + 1, sizeof *n->grad_own)) ||
        !(n->need_grad = calloc((size_t)L + 1, sizeof *n->need_grad)) ||
        !(n->layout = calloc((size_t)L + 1, sizeof *n->layout)) ||
        !(n->dtype = calloc((size_t)L + 1, sizeof *n->dtype)))
        return set_err(err, errlen, "out of memory");
    if (plan_layouts(n, err, errlen) < 0 || plan_dtypes(n, err, errlen) < 0)
        return -1;
    bool *seen = calloc((size_t)L + 1, sizeof *seen);
    if (!seen)
        return set_err(err, errlen, "out of memory");
    plan_gradients(n, seen);
    free(seen);
    for (int a = 0; a <= L; a++) {
        const layer *l = a > 0 ? &n->layers[a - 1] : NULL;
        if (l && l->s->kind == LAYER_FLATTEN) {
            n->act[a] = n->act[l->s->inputs[0]];
            continue;
        }
        if (!(n->act[a] = alloc_act(n, a, err, errlen)))
            return -1;
        n->act_own[a] = true;
        if (act_bytes(n, a) > most)
            most = act_bytes(n, a);
    }
    n->need_grad[L] = true;                 /* the loss writes it even with no parameters */
    for (int a = L; a >= 1; a--) {
        layer *l = &n->layers[a - 1];
        if (!n->need_grad[a])
            continue;
        for (int k = 0; k < l->s->ninputs; k++)
            if (l->dx[k] && !l->first[k] && l->s->kind != LAYER_ADD &&
                l->s->kind != LAYER_CONCAT && l->s->kind != LAYER_DROPOUT &&
                l->s->kind != LAYER_FLATTEN)
                want_tmp = true;
    }
    /* Descending, so that a flatten (later than its input) hands its gradient
     * buffer down to its input when it is that input's only reader. */
    for (int a = L; a >= 1; a--) {
        layer *l = &n->layers[a - 1];
        if (!n->need_grad[a])
            continue;
        if (!n->grad[a]) {
            if (!(n->grad[a] = alloc_act(n, a, err, errlen)))
                return -1;
            n->grad_own[a] = true;
        }
        if (l->s->kind == LAYER_FLATTEN && l->dx[0] && consumers(n, l->s->inputs[0]) == 1) {
            n->grad[l->s->inputs[0]] = n->grad[a];
            l->grad_alias = true;
        }
    }
    for (int i = 0; i < L; i++) {
        layer *l = &n->layers[i];
        if (l->s->kind == LAYER_DROPOUT &&
            !(l->mask = alloc_floats(n, act_count(n, i + 1), err, errlen)))
            return layer_fail(l, err, errlen);
    }
    if (want_tmp && !(n->tmp = n->be->buf_alloc(n->ctx, most, err, errlen)))
        return -1;
    if (n->dtype[L] != BE_F32) {
        size_t logits = (size_t)n->max_batch * (size_t)n->classes;
        if (!(n->logits32 = alloc_floats(n, logits, err, errlen)) ||
            !(n->dlogits32 = alloc_floats(n, logits, err, errlen)))
            return -1;
    }
    if (!(n->labels = n->be->buf_alloc(n->ctx, (size_t)n->max_batch * sizeof(int32_t),
                                       err, errlen)) ||
        !(n->probs = alloc_floats(n, (size_t)n->max_batch * (size_t)n->classes, err, errlen)))
        return -1;
    return 0;
}

/* Refuses, before allocating anything, a net whose training memory
 * (engine/summary.h's estimate, a lower bound) is beyond this machine's
 * memory or the GPU's free memory; summary_check_memory's message names the
 * layer responsible and the largest batch that fits. */
static int check_memory(const net *n, int max_batch, char *err, size_t errlen)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGE_SIZE);
    int64_t have = pages > 0 && psize > 0 ? (int64_t)pages * (int64_t)psize : 0;
    char where[48] = "this machine's";
    uint64_t dev_free = 0, dev_total = 0;
    if (n->be->mem_info) {                  /* a GPU: what is free on it now */
        if (n->be->mem_info(n->ctx, &dev_free, &dev_total, err, errlen) < 0)
            return -1;
        have = (int64_t)dev_free;
        if (n->nrep > 1)
            snprintf(where, sizeof where, "GPU %d's free", n->device);
        else
            snprintf(where, sizeof where, "the GPU's free");
    }
    int states = summary_opt_states(n->solver.type, n->solver.momentum > 0);
    return summary_check_memory(&n->spec, states, n->solver.precision,
                                max_batch, n->nrep, have, where, err, errlen);
}

static int check_solver(const net_solver *sv, net_solver *out, char *err, size_t errlen)
{
    if (!sv) {
        *out = (net_solver){ .type = SOLVER_SGD, .lr = 0.01f, .momentum = 0.0f };
        return 0;
    }
    return optim_check(sv, out, err, errlen);
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
        return set_err(err, errlen, "out of memory");
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
                .src_layout = n->layout[s->inputs[0]], .dst_layout = n->layout[i + 1],
                .src_dtype = n->dtype[s->inputs[0]], .dst_dtype = n->dtype[i + 1],
                .wdtype = n->half,
            };
            rc = be->conv_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_MAXPOOL:
        case LAYER_AVGPOOL:
        case LAYER_GLOBAL_AVGPOOL: {
            const pool_spec *p = &s->u.pool;
            be_pool_desc d = {
                .alg = s->kind == LAYER_MAXPOOL ? BE_POOL_MAX : BE_POOL_AVG_EXCLUDE_PAD,
                .n = bn, .c = s->in.c, .h = s->in.h, .w = s->in.w,
                .oh = s->out.h, .ow = s->out.w, .kh = p->kh, .kw = p->kw,
                .stride_h = p->stride_h, .stride_w = p->stride_w,
                .pad_t = p->pad_h, .pad_l = p->pad_w, .pad_b = p->pad_h, .pad_r = p->pad_w,
                .src_layout = n->layout[s->inputs[0]], .dst_layout = n->layout[i + 1],
                .dtype = n->dtype[i + 1],
            };
            rc = be->pool_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_DENSE: {
            be_dense_desc d = { .n = bn, .in = (int)spec_shape_size(s->in),
                                .out = s->u.dense.units, .bias = s->u.dense.bias,
                                .src_dtype = n->dtype[s->inputs[0]],
                                .dst_dtype = n->dtype[i + 1], .wdtype = n->half };
            rc = be->dense_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_RELU:
        case LAYER_LEAKY_RELU:
        case LAYER_SIGMOID:
        case LAYER_TANH: {
            be_act_desc d = { .alg = s->kind == LAYER_SIGMOID ? BE_ACT_SIGMOID :
                                     s->kind == LAYER_TANH ? BE_ACT_TANH : BE_ACT_RELU,
                              .n = bn, .size = (size_t)spec_shape_size(s->in),
                              .alpha = s->kind == LAYER_LEAKY_RELU ? s->u.slope : 0.0f,
                              .layout = n->layout[i + 1], .c = s->in.c,
                              .dtype = n->dtype[i + 1] };
            rc = be->act_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_BATCHNORM: {
            be_bn_desc d = { .n = bn, .c = s->in.c, .h = s->in.h, .w = s->in.w,
                             .eps = s->u.bn.eps, .layout = n->layout[i + 1],
                             .dtype = n->dtype[i + 1] };
            rc = be->bn_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_ADD: {
            be_add_desc d = { .n = bn, .k = s->ninputs, .size = (size_t)spec_shape_size(s->in),
                              .layout = n->layout[i + 1], .c = s->in.c,
                              .dtype = n->dtype[i + 1] };
            rc = be->add_plan(n->ctx, &d, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_CONCAT: {
            be_concat_desc d = { .n = bn, .k = s->ninputs, .h = s->in.h, .w = s->in.w,
                                 .dtype = n->dtype[i + 1] };
            for (int k = 0; k < s->ninputs; k++)
                d.c[k] = spec_act_shape(&n->spec, s->inputs[k]).c;
            rc = be->concat_plan(n->ctx, &d, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_FLATTEN:
        case LAYER_DROPOUT:
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

/* Data parallelism: the parameters' gradients in buckets of about this many
 * bytes, each sent as soon as the backward pass has finished it (the last
 * layers' first), so that the transfer overlaps the rest of the pass. */
#define BUCKET_BYTES ((size_t)8 << 20)

static void plan_buckets(net *n)
{
    int hi = n->nparams, first = -1;
    size_t bytes = 0, cap = BUCKET_BYTES;
    /* KILN_BUCKET_BYTES=1: a bucket per layer (the tests' way to exercise
     * several buckets with small nets) */
    const char *env = getenv("KILN_BUCKET_BYTES");
    if (env && atol(env) > 0)
        cap = (size_t)atol(env);
    for (int i = n->nlayers - 1; i >= 0; i--) {
        layer *l = &n->layers[i];
        l->bucket_lo = l->bucket_hi = 0;
        if (l->w < 0)
            continue;
        first = i;
        for (int k = l->w; k < hi; k++)
            bytes += n->params[k].count * sizeof(float);
        if (bytes >= cap) {
            l->bucket_lo = l->w;
            l->bucket_hi = hi;
            hi = l->w;
            bytes = 0;
        }
    }
    if (first >= 0 && hi > 0) {             /* the rest goes with the first layer's */
        n->layers[first].bucket_lo = 0;
        n->layers[first].bucket_hi = hi;
    }
}

/* One net (one replica) on device `device` of backend be. */
static net *net_build(const cJSON *spec, net_shape in, int classes, int max_batch,
                      const backend *be, int device, int rank, int nrep,
                      const net_solver *solver, uint64_t seed, char *err, size_t errlen)
{
    net *n = calloc(1, sizeof *n);
    net *ret = NULL;
    if (!n) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    n->nrep = nrep;
    n->rank = rank;
    n->device = device;
    n->global_batch = max_batch;
    if (spec_parse(spec, in, classes, &n->spec, err, errlen) < 0)
        goto out;
    if (max_batch < 1) {
        set_err(err, errlen, "batch size must be positive (got %d)", max_batch);
        goto out;
    }
    if (check_solver(solver, &n->solver, err, errlen) < 0)
        goto out;
    n->half = n->solver.precision == PREC_AMP_BF16 ? BE_BF16 :
              n->solver.precision == PREC_AMP_FP16 ? BE_F16 : BE_F32;
    amp_scaler_init(&n->scaler, n->solver.loss_scaling == 1 ||
                    (n->solver.loss_scaling == 0 && n->half == BE_F16));
    n->be = be;
    if (!n->be->mem_info && check_memory(n, max_batch, err, errlen) < 0)
        goto out;
    n->max_batch = max_batch;
    n->classes = classes;
    n->nlayers = n->spec.nlayers;
    if (!(n->layers = calloc((size_t)n->nlayers, sizeof *n->layers))) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n->nlayers; i++) {
        layer *l = &n->layers[i];
        l->s = &n->spec.layers[i];
        l->w = l->b = l->rm = l->rv = -1;
        /* replicas drop other elements than the primary: other images */
        l->seed = rng_derive(seed, l->s->name) ^ ((uint64_t)rank * 0x9e3779b97f4a7c15ULL);
    }
    n->seed = seed;
    if (n->be->ctx_create(device, &n->ctx, err, errlen) < 0 ||
        (n->be->mem_info && check_memory(n, max_batch, err, errlen) < 0) ||
        n->be->dtype_check(n->ctx, n->half, err, errlen) < 0 ||
        make_params(n, seed, err, errlen) < 0 ||
        make_copies(n, err, errlen) < 0 ||
        refresh_copies(n, err, errlen) < 0 ||
        make_buffers(n, err, errlen) < 0 ||
        !plans_for(n, max_batch, err, errlen) ||
        !(n->opt = optim_create(n, &n->solver, err, errlen)))
        goto out;
    plan_buckets(n);
    ret = n;
    n = NULL;
out:
    net_free(n);
    return ret;
}

/* Makes the calling thread ready to run n's operations (a GPU's replica). */
static void bind(const net *n)
{
    if (n->be->ctx_bind)
        n->be->ctx_bind(n->ctx);
}

net *net_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                const net_devices *devices, const net_solver *solver, uint64_t seed,
                char *err, size_t errlen)
{
    net_devices cpu = net_devices_cpu();
    const net_devices *d = devices ? devices : &cpu;
    const int *devs = d->ids;
    int nd = d->count;
    if (nd < 1 || nd > KILN_MAX_DEVICES) {
        set_err(err, errlen, "a net trains on 1 to %d devices, not %d", KILN_MAX_DEVICES, nd);
        return NULL;
    }
    for (int i = 0; i < nd; i++)
        for (int k = 0; k < i; k++)
            if (devs[k] == devs[i]) {
                set_err(err, errlen, "device %d is listed twice", devs[i]);
                return NULL;
            }
    const backend *be = backend_for(d->kind);
    if (!be) {
        set_err(err, errlen, "backend \"%s\" is not compiled into this kiln",
                backend_kind_name(d->kind));
        return NULL;
    }
    if (nd == 1)
        return net_build(spec, in, classes, max_batch, be, devs[0], 0, 1, solver, seed, err,
                         errlen);
    if (!be->comm_create) {
        set_err(err, errlen, "backend \"%s\" cannot train on several devices", be->name);
        return NULL;
    }
    if (max_batch < nd) {
        set_err(err, errlen, "batch size %d is smaller than the %d devices it is split across",
                max_batch, nd);
        return NULL;
    }
    /* Each replica takes its share of the global batch. */
    int per = (max_batch + nd - 1) / nd;
    net *n = net_build(spec, in, classes, per, be, devs[0], 0, nd, solver, seed, err, errlen);
    if (!n)
        return NULL;
    be_ctx *ctxs[KILN_MAX_DEVICES];
    if (!(n->rep = calloc((size_t)nd, sizeof *n->rep))) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    n->rep[0] = n;
    n->nrep = nd;
    n->global_batch = max_batch;
    ctxs[0] = n->ctx;
    for (int r = 1; r < nd; r++) {
        char where[48];
        if (!(n->rep[r] = net_build(spec, in, classes, per, be, devs[r], r, nd, solver, seed,
                                    err, errlen))) {
            snprintf(where, sizeof where, "%s device %d", be->name, devs[r]);
            set_err_prefix(err, errlen, where);
            goto fail;
        }
        ctxs[r] = n->rep[r]->ctx;
    }
    if (be->comm_create(ctxs, nd, &n->comm, err, errlen) < 0)
        goto fail;
    for (int r = 1; r < nd; r++)
        n->rep[r]->comm = n->comm;
    bind(n);
    return n;
fail:
    net_free(n);
    return NULL;
}

void net_free(net *n)
{
    if (!n)
        return;
    const backend *be = n->be;
    if (n->rep) {                           /* the primary: the communicator, the replicas */
        if (n->comm)
            be->comm_free(n->comm);
        for (int r = 1; r < n->nrep; r++)
            net_free(n->rep[r]);
        free(n->rep);
        bind(n);
    }
    free(n->zeros);
    if (be) {
        for (int i = 0; i < NET_PLAN_SETS; i++)
            plan_set_clear(n, &n->sets[i]);
        for (int i = 0; i < n->nparams; i++) {
            be->buf_free(n->ctx, n->params[i].w);
            be->buf_free(n->ctx, n->params[i].g);
            be->buf_free(n->ctx, n->params[i].v);
            be->buf_free(n->ctx, n->params[i].h);
        }
        for (int i = 0; i < n->nstats; i++) {
            be->buf_free(n->ctx, n->stats[i].w);
            be->buf_free(n->ctx, n->stats[i].g);
            be->buf_free(n->ctx, n->stats[i].v);
        }
        for (int i = 0; n->layers && i < n->nlayers; i++) {
            be->buf_free(n->ctx, n->layers[i].mask);
            be->buf_free(n->ctx, n->layers[i].mean);
            be->buf_free(n->ctx, n->layers[i].var);
        }
        be->buf_free(n->ctx, n->tmp);
        be->buf_free(n->ctx, n->logits32);
        be->buf_free(n->ctx, n->dlogits32);
        for (int i = 0; n->act_own && n->grad_own && i <= n->nlayers; i++) {
            if (n->act_own[i])
                be->buf_free(n->ctx, n->act[i]);
            if (n->grad_own[i])
                be->buf_free(n->ctx, n->grad[i]);
        }
        be->buf_free(n->ctx, n->labels);
        be->buf_free(n->ctx, n->probs);
        optim_free(n->opt);
        be->ctx_free(n->ctx);
    }
    free(n->act);
    free(n->grad);
    free(n->act_own);
    free(n->grad_own);
    free(n->need_grad);
    free(n->layout);
    free(n->dtype);
    free(n->params);
    free(n->stats);
    free(n->layers);
    spec_free(&n->spec);
    free(n);
}

/* ---- running --------------------------------------------------------------- */

static const be_buf *param_w(const net *n, int i)
{
    return i >= 0 ? n->params[i].w : NULL;
}

/* What a convolution or dense layer multiplies by: the 16-bit copy under AMP. */
static const be_buf *param_mul(const net *n, int i)
{
    return i >= 0 && n->params[i].h ? n->params[i].h : param_w(n, i);
}

static be_buf *param_g(const net *n, int i)
{
    return i >= 0 ? n->params[i].g : NULL;
}

/* The stream of layer l's dropout mask at the current step. */
static uint64_t dropout_seed(const net *n, const layer *l)
{
    uint64_t x = l->seed ^ (n->steps * 0x9e3779b97f4a7c15ULL);
    return rng_splitmix64(&x);
}

static int forward(net *n, plan_set *ps, int bn, bool training, char *err, size_t errlen)
{
    const backend *be = n->be;
    for (int i = 0; i < n->nlayers; i++) {
        const layer *l = &n->layers[i];
        const layer_spec *s = l->s;
        be_plan *p = ps->plans[i];
        const be_buf *x = n->act[s->inputs[0]];
        be_buf *y = n->act[i + 1];
        const be_buf *xs[SPEC_MAX_INPUTS];
        size_t count = (size_t)bn * act_elems(n, i + 1);
        int rc = 0;
        switch (s->kind) {
        case LAYER_CONV2D:
            rc = be->conv_fwd(n->ctx, p, x, param_mul(n, l->w), param_w(n, l->b), y, err,
                              errlen);
            break;
        case LAYER_DENSE:
            rc = be->dense_fwd(n->ctx, p, x, param_mul(n, l->w), param_w(n, l->b), y, err,
                               errlen);
            break;
        case LAYER_MAXPOOL:
        case LAYER_AVGPOOL:
        case LAYER_GLOBAL_AVGPOOL:
            rc = be->pool_fwd(n->ctx, p, x, y, err, errlen);
            break;
        case LAYER_RELU:
        case LAYER_LEAKY_RELU:
        case LAYER_SIGMOID:
        case LAYER_TANH:
            rc = be->act_fwd(n->ctx, p, x, y, err, errlen);
            break;
        case LAYER_DROPOUT:
            rc = be->dropout_fwd(n->ctx, &(be_dropout_desc){ .count = count, .rate = s->u.rate,
                                 .layout = n->layout[i + 1], .c = s->in.c,
                                 .hw = (size_t)s->in.h * s->in.w, .dtype = n->dtype[i + 1] },
                                 training, x, l->mask, y, dropout_seed(n, l), err, errlen);
            break;
        case LAYER_BATCHNORM:
            if (training) {             /* the running statistics follow an applied step */
                rc = be->bn_fwd(n->ctx, p, true, x, param_w(n, l->w), param_w(n, l->b),
                                l->mean, l->var, y, err, errlen);
            } else {
                rc = be->bn_fwd(n->ctx, p, false, x, param_w(n, l->w), param_w(n, l->b),
                                n->stats[l->rm].w, n->stats[l->rv].w, y, err, errlen);
            }
            break;
        case LAYER_ADD:
        case LAYER_CONCAT:
            for (int k = 0; k < s->ninputs; k++)
                xs[k] = n->act[s->inputs[k]];
            rc = s->kind == LAYER_ADD ? be->add_fwd(n->ctx, p, xs, y, err, errlen)
                                      : be->concat_fwd(n->ctx, p, xs, y, err, errlen);
            break;
        case LAYER_FLATTEN:
            break;
        }
        if (rc < 0)
            return layer_fail(l, err, errlen);
    }
    return 0;
}

/* Where an op writing input k's gradient overwrite-style should put it: the
 * gradient itself for the first contribution, else the scratch buffer that
 * add_tmp then adds in. */
static be_buf *dx_target(const net *n, const layer *l, int k)
{
    return l->first[k] ? n->grad[l->s->inputs[k]] : n->tmp;
}

static int add_tmp(net *n, const layer *l, int k, int bn, char *err, size_t errlen)
{
    int a = l->s->inputs[k];
    if (l->first[k])
        return 0;
    size_t count = (size_t)bn * act_elems(n, a);
    return n->be->acc(n->ctx, n->grad[a], n->tmp, count, n->dtype[a], 1.0f, err, errlen);
}

static int backward_layer(net *n, plan_set *ps, int i, int bn, char *err, size_t errlen)
{
    const backend *be = n->be;
    const layer *l = &n->layers[i];
    const layer_spec *s = l->s;
    be_plan *p = ps->plans[i];
    const be_buf *x = n->act[s->inputs[0]], *y = n->act[i + 1], *dy = n->grad[i + 1];
    size_t count = (size_t)bn * act_elems(n, i + 1);
    int rc = 0;
    switch (s->kind) {
    case LAYER_CONV2D:
        rc = be->conv_bwd_weights(n->ctx, p, x, dy, param_g(n, l->w), param_g(n, l->b),
                                  err, errlen);
        if (rc == 0 && l->dx[0])
            rc = be->conv_bwd_data(n->ctx, p, dy, param_mul(n, l->w), dx_target(n, l, 0),
                                   err, errlen);
        break;
    case LAYER_DENSE:
        rc = be->dense_bwd_weights(n->ctx, p, x, dy, param_g(n, l->w), param_g(n, l->b),
                                   err, errlen);
        if (rc == 0 && l->dx[0])
            rc = be->dense_bwd_data(n->ctx, p, dy, param_mul(n, l->w), dx_target(n, l, 0),
                                    err, errlen);
        break;
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
    case LAYER_GLOBAL_AVGPOOL:
        if (l->dx[0])
            rc = be->pool_bwd(n->ctx, p, dy, dx_target(n, l, 0), err, errlen);
        break;
    case LAYER_RELU:
    case LAYER_LEAKY_RELU:
    case LAYER_SIGMOID:
    case LAYER_TANH:
        if (l->dx[0])
            rc = be->act_bwd(n->ctx, p, y, dy, dx_target(n, l, 0), err, errlen);
        break;
    case LAYER_BATCHNORM:
        rc = be->bn_bwd(n->ctx, p, x, dy, param_w(n, l->w), param_w(n, l->b), l->mean, l->var,
                        l->dx[0] ? dx_target(n, l, 0) : NULL, param_g(n, l->w),
                        param_g(n, l->b), err, errlen);
        break;
    case LAYER_DROPOUT:
        if (l->dx[0])
            return be->dropout_bwd(n->ctx, &(be_dropout_desc){ .count = count,
                                   .dtype = n->dtype[i + 1] }, l->mask, dy, n->grad[s->inputs[0]],
                                   l->first[0] ? 0.0f : 1.0f, err, errlen);
        return 0;
    case LAYER_ADD:
        for (int k = 0; k < s->ninputs && rc == 0; k++)
            if (l->dx[k])
                rc = be->acc(n->ctx, n->grad[s->inputs[k]], dy, count, n->dtype[i + 1],
                             l->first[k] ? 0.0f : 1.0f, err, errlen);
        return rc;
    case LAYER_CONCAT:
        for (int k = 0; k < s->ninputs && rc == 0; k++)
            if (l->dx[k])
                rc = be->concat_bwd(n->ctx, p, dy, k, n->grad[s->inputs[k]],
                                    l->first[k] ? 0.0f : 1.0f, err, errlen);
        return rc;
    case LAYER_FLATTEN:
        if (l->dx[0] && !l->grad_alias)
            return be->acc(n->ctx, n->grad[s->inputs[0]], dy, count, n->dtype[i + 1],
                           l->first[0] ? 0.0f : 1.0f,
                           err, errlen);
        return 0;
    }
    if (rc == 0 && l->dx[0])
        rc = add_tmp(n, l, 0, bn, err, errlen);
    return rc;
}

/* Data parallelism: sums tensors [lo, hi) of ps over the replicas, their
 * gradients or (grads false) their values (engine/backend.h, allreduce).
 * Nothing when lo == hi. */
static int allreduce_params(net *n, const param *ps, int lo, int hi, bool grads, char *err,
                            size_t errlen)
{
    be_buf *bufs[64];
    size_t counts[64];
    while (lo < hi) {
        int k = 0;
        for (; lo < hi && k < 64; lo++, k++) {
            bufs[k] = grads ? ps[lo].g : ps[lo].w;
            counts[k] = ps[lo].count;
        }
        if (n->be->allreduce(n->ctx, n->comm, n->rank, bufs, counts, k, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static int backward(net *n, plan_set *ps, int bn, char *err, size_t errlen)
{
    for (int i = n->nlayers - 1; i >= 0; i--) {
        const layer *l = &n->layers[i];
        if (!n->need_grad[i + 1])
            continue;                       /* nothing before this layer learns */
        if (backward_layer(n, ps, i, bn, err, errlen) < 0)
            return layer_fail(l, err, errlen);
        if (n->comm && allreduce_params(n, n->params, l->bucket_lo, l->bucket_hi, true, err,
                                        errlen) < 0)
            return -1;
    }
    return 0;
}

static int check_batch(const net *n, const int32_t *labels, int count, bool chunked,
                       char *err, size_t errlen)
{
    if (count < 1 || (!chunked && count > n->max_batch))
        return set_err(err, errlen, "batch of %d images: must be 1 to %d", count, n->max_batch);
    for (int i = 0; labels && i < count; i++)
        if (labels[i] < 0 || labels[i] >= n->classes)
            return set_err(err, errlen, "label %d of image %d is outside [0, %d)",
                           (int)labels[i], i, n->classes);
    return 0;
}

/* Uploads count images (and labels when not NULL) and runs the forward pass. */
static plan_set *load_and_forward(net *n, const float *x, const int32_t *labels, int count,
                                  bool training, char *err, size_t errlen)
{
    plan_set *ps = plans_for(n, count, err, errlen);
    size_t in_bytes = (size_t)count * (size_t)spec_shape_size(n->spec.in) * sizeof(float);
    if (!ps ||
        n->be->buf_upload(n->ctx, n->act[0], 0, x, in_bytes, err, errlen) < 0 ||
        (labels && n->be->buf_upload(n->ctx, n->labels, 0, labels,
                                     (size_t)count * sizeof *labels, err, errlen) < 0) ||
        forward(n, ps, count, training, err, errlen) < 0)
        return NULL;
    if (n->logits32 && n->be->cast(n->ctx, n->act[n->nlayers], n->dtype[n->nlayers], n->logits32,
                                   BE_F32, (size_t)count * (size_t)n->classes, err, errlen) < 0)
        return NULL;
    return ps;
}

/* The FP32 logits the loss reads (engine/net.c, plan_dtypes). */
static const be_buf *logits_f32(const net *n)
{
    return n->logits32 ? n->logits32 : n->act[n->nlayers];
}

/* Unscales every weight gradient by 1 / the loss scale (when scaling) and
 * checks them for NaN and infinity; *bad names the first parameter found. */
static int check_grads(net *n, const param **bad, char *err, size_t errlen)
{
    float factor = 1.0f / n->scaler.scale;
    *bad = NULL;
    for (int i = 0; i < n->nparams; i++) {
        bool found = false;
        if ((n->scaler.scale != 1.0f ?
             n->be->unscale(n->ctx, n->params[i].g, n->params[i].count, factor, &found, err,
                            errlen) :
             n->be->nonfinite(n->ctx, n->params[i].g, n->params[i].count, &found, err,
                              errlen)) < 0)
            return -1;
        if (found && !*bad)
            *bad = &n->params[i];
    }
    return 0;
}

/* Host zeros for count floats (a replica without images in a step). */
static const float *zeros(net *n, size_t count, char *err, size_t errlen)
{
    if (count > n->zeros_count) {
        free(n->zeros);
        n->zeros_count = 0;
        if (!(n->zeros = calloc(count, sizeof *n->zeros))) {
            set_err(err, errlen, "out of memory");
            return NULL;
        }
        n->zeros_count = count;
    }
    return n->zeros;
}

/* The first half of a training step on one replica: forward, loss and
 * backward on its count images, the loss's gradient divided by the total
 * images of the step over all replicas, so that the gradients summed over
 * the replicas are those of the whole batch. A replica without images
 * contributes zeros. Leaves the gradients summed (allreduced) over the
 * replicas, and this replica's loss sum and hits in *loss_sum, *correct. */
static int step_grads(net *n, const float *x, const int32_t *labels, int count, int total,
                      double *loss_sum, int *correct, char *err, size_t errlen)
{
    const int L = n->nlayers;
    *loss_sum = 0;
    *correct = 0;
    n->last_batch = count;
    if (count == 0) {
        n->steps++;
        for (int i = 0; i < n->nparams; i++) {
            const float *z = zeros(n, n->params[i].count, err, errlen);
            if (!z || n->be->buf_upload(n->ctx, n->params[i].g, 0, z,
                                        n->params[i].count * sizeof *z, err, errlen) < 0)
                return -1;
        }
        for (int i = L - 1; i >= 0; i--)    /* the buckets in backward's order */
            if (allreduce_params(n, n->params, n->layers[i].bucket_lo, n->layers[i].bucket_hi,
                                 true, err, errlen) < 0)
                return -1;
        return n->be->allreduce_wait(n->ctx, n->comm, n->rank, err, errlen);
    }
    plan_set *ps = load_and_forward(n, x, labels, count, true, err, errlen);
    if (!ps)
        return -1;
    n->steps++;
    /* The loss's gradient carries the loss scale (1 without scaling) and the
     * mean over the batch. */
    be_buf *dl = n->dlogits32 ? n->dlogits32 : n->grad[L];
    if (n->be->xent(n->ctx, ps->plans[L], logits_f32(n), n->labels, n->solver.label_smoothing,
                    n->scaler.scale / (float)total, dl, NULL, loss_sum, correct, err,
                    errlen) < 0)
        return -1;
    /* Under dynamic scaling a non-finite loss is an overflow like any other
     * (the gradients will show it); without, the run has diverged. */
    if (!isfinite(*loss_sum) && !n->scaler.dynamic)
        return set_err(err, errlen, "training diverged: the loss is %s (try a smaller "
                       "learning rate)", isnan(*loss_sum) ? "NaN" : "infinite");
    if ((n->dlogits32 && n->be->cast(n->ctx, n->dlogits32, BE_F32, n->grad[L], n->dtype[L],
                                     (size_t)count * (size_t)n->classes, err, errlen) < 0) ||
        backward(n, ps, count, err, errlen) < 0)
        return -1;
    return n->comm ? n->be->allreduce_wait(n->ctx, n->comm, n->rank, err, errlen) : 0;
}

/* Batch norm's running statistics after an applied step, from the batch
 * statistics of the step (a replica without images keeps its own). With
 * replicas, averaged over those that had images, so that every replica
 * keeps the same ones (the average of their batches' statistics). */
static int update_running(net *n, int active, char *err, size_t errlen)
{
    for (int i = 0; i < n->nlayers && n->last_batch > 0; i++) {
        const layer *l = &n->layers[i];
        const layer_spec *s = l->s;
        if (s->kind == LAYER_BATCHNORM &&
            n->be->bn_running(n->ctx, n->stats[l->rm].w, n->stats[l->rv].w, l->mean, l->var,
                              s->in.c, s->u.bn.momentum,
                              (int64_t)n->last_batch * s->in.h * s->in.w, err, errlen) < 0)
            return layer_fail(l, err, errlen);
    }
    if (!n->comm || n->nstats == 0)
        return 0;
    for (int i = 0; i < n->nstats && n->last_batch == 0; i++) {   /* it adds nothing */
        const float *z = zeros(n, n->stats[i].count, err, errlen);
        if (!z || n->be->buf_upload(n->ctx, n->stats[i].w, 0, z, n->stats[i].count * sizeof *z,
                                    err, errlen) < 0)
            return -1;
    }
    if (allreduce_params(n, n->stats, 0, n->nstats, false, err, errlen) < 0 ||
        n->be->allreduce_wait(n->ctx, n->comm, n->rank, err, errlen) < 0)
        return -1;
    for (int i = 0; i < n->nstats && active > 1; i++) {
        bool found = false;
        if (n->be->unscale(n->ctx, n->stats[i].w, n->stats[i].count, 1.0f / (float)active,
                           &found, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* The second half of a training step, on every replica alike (their
 * gradients are the same bits): unscale and check the gradients, let the
 * loss scaler decide, update. loss_finite: the step's loss over all
 * replicas is finite; mean_loss for the divergence message. */
static int step_update(net *n, float lr, bool loss_finite, double mean_loss, int active,
                       bool *skipped, char *err, size_t errlen)
{
    /* A NaN can hide from the loss (a ReLU maps it to 0) and still reach a
     * gradient; refuse the update before any weight changes. */
    const param *bad;
    if (check_grads(n, &bad, err, errlen) < 0)
        return -1;
    bool overflow = bad || !loss_finite;
    *skipped = overflow;
    switch (amp_scaler_update(&n->scaler, overflow)) {
    case AMP_DIVERGED:
        if (n->scaler.dynamic)
            return set_err(err, errlen, "training diverged: the gradients overflowed %s %lld "
                           "times until the loss scale fell below %g (the loss is %s; try a "
                           "smaller learning rate)", n->half == BE_F16 ? "FP16" : "bfloat16",
                           (long long)n->scaler.skipped, (double)AMP_SCALE_FLOOR,
                           isnan(mean_loss) ? "NaN" : isinf(mean_loss) ? "infinite" : "finite");
        if (!loss_finite)
            return set_err(err, errlen, "training diverged: the loss is %s (try a smaller "
                           "learning rate)", isnan(mean_loss) ? "NaN" : "infinite");
        return set_err(err, errlen, "training diverged: the gradient of %s is not finite "
                       "(check the data, or try a smaller learning rate)", bad->name);
    case AMP_SKIP:
        return 0;               /* nothing changes, the running statistics included */
    case AMP_APPLY:
        break;
    }
    if (optim_step(n->opt, lr, NULL, err, errlen) < 0 || refresh_copies(n, err, errlen) < 0 ||
        update_running(n, active, err, errlen) < 0)
        return -1;
    return 0;
}

/* Forward and loss over count images in chunks of max_batch: the summed
 * loss and hits. */
static int eval_chunks(net *n, const float *x, const int32_t *labels, int count, double *total,
                       int *correct, char *err, size_t errlen)
{
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    *total = 0;
    *correct = 0;
    for (int done = 0; done < count;) {
        int bn = count - done < n->max_batch ? count - done : n->max_batch;
        double ls = 0;
        int hits = 0;
        plan_set *ps = load_and_forward(n, x + (size_t)done * in_size, labels + done, bn,
                                        false, err, errlen);
        if (!ps || n->be->xent(n->ctx, ps->plans[n->nlayers], logits_f32(n), n->labels,
                               0.0f, 1.0f, NULL, NULL, &ls, &hits, err, errlen) < 0)
            return -1;
        *total += ls;
        *correct += hits;
        done += bn;
    }
    return 0;
}

/* Replica r's share of count images split over nrep (the first ones take
 * the remainder, one each). */
static int share(int count, int nrep, int r)
{
    return count / nrep + (r < count % nrep);
}

/* Data parallelism: what one replica's thread does in a step's half. */
typedef struct rep_work {
    net *n;
    int phase;                      /* 1: step_grads; 2: step_update; 3: eval_chunks */
    const float *x;
    const int32_t *labels;
    int count, total, active;
    float lr;
    bool loss_finite;
    double mean_loss;
    double loss_sum;                /* out */
    int correct;
    bool skipped;
    int rc;
    char err[512];
} rep_work;

static void *rep_run(void *arg)
{
    rep_work *w = arg;
    bind(w->n);
    switch (w->phase) {
    case 1:
        w->rc = step_grads(w->n, w->x, w->labels, w->count, w->total, &w->loss_sum,
                           &w->correct, w->err, sizeof w->err);
        break;
    case 2:
        w->rc = step_update(w->n, w->lr, w->loss_finite, w->mean_loss, w->active, &w->skipped,
                            w->err, sizeof w->err);
        break;
    default:
        w->rc = eval_chunks(w->n, w->x, w->labels, w->count, &w->loss_sum, &w->correct,
                            w->err, sizeof w->err);
    }
    if (w->rc < 0 && w->n->comm && w->phase != 3)   /* the others must not wait for it */
        w->n->be->comm_abort(w->n->comm);
    return NULL;
}

/* Runs one phase on every replica at once, one thread each (the calling
 * thread runs the primary's). Returns 0, or -1 with the first failure's
 * message (a replica's own failure, before the aborts it caused). */
static int rep_phase(net *n, rep_work *w, char *err, size_t errlen)
{
    pthread_t th[KILN_MAX_DEVICES];
    bool started[KILN_MAX_DEVICES] = { false };
    for (int r = 1; r < n->nrep; r++)
        started[r] = pthread_create(&th[r], NULL, rep_run, &w[r]) == 0;
    for (int r = 1; r < n->nrep; r++)
        if (!started[r]) {                  /* run it here, after the primary cannot */
            w[r].rc = -1;
            snprintf(w[r].err, sizeof w[r].err, "could not start a thread for replica %d", r);
            if (w[0].phase != 3)            /* evaluation has no collectives to abort */
                n->be->comm_abort(n->comm);
        }
    rep_run(&w[0]);
    for (int r = 1; r < n->nrep; r++)
        if (started[r])
            pthread_join(th[r], NULL);
    bind(n);
    /* a replica's own failure, not the abandoned collectives it caused */
    int first = -1;
    for (int r = 0; r < n->nrep; r++)
        if (w[r].rc < 0 && (first < 0 || (strstr(w[first].err, "abandoned") &&
                                          !strstr(w[r].err, "abandoned"))))
            first = r;
    if (first < 0)
        return 0;
    n->broken = true;
    if (first == 0)
        return set_err(err, errlen, "%s", w[first].err);
    return set_err(err, errlen, "replica %d: %s", first, w[first].err);
}

/* A data-parallel step: the batch split over the replicas in order. */
static int group_step(net *n, const float *x, const int32_t *labels, int count, float lr,
                      net_stats *out, char *err, size_t errlen)
{
    rep_work w[KILN_MAX_DEVICES];
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    const float scale = n->scaler.scale;
    int done = 0, active = 0;
    if (n->broken)
        return set_err(err, errlen, "an earlier step failed on one of the devices; the "
                       "replicas may differ, so training cannot go on (resume from the last "
                       "checkpoint)");
    memset(w, 0, sizeof w[0] * (size_t)n->nrep);
    for (int r = 0; r < n->nrep; r++) {
        net *m = n->rep[r];
        int part = share(count, n->nrep, r);
        /* the primary's counters are the ones checkpoints restore */
        m->steps = n->steps;
        m->scaler = n->scaler;
        optim_set_steps(m->opt, optim_steps(n->opt));
        w[r] = (rep_work){ .n = m, .phase = 1, .x = x + (size_t)done * in_size,
                           .labels = labels + done, .count = part, .total = count, .lr = lr };
        done += part;
        active += part > 0;
    }
    if (rep_phase(n, w, err, errlen) < 0)
        return -1;
    double loss_sum = 0;
    int correct = 0;
    for (int r = 0; r < n->nrep; r++) {
        loss_sum += w[r].loss_sum;
        correct += w[r].correct;
    }
    for (int r = 0; r < n->nrep; r++) {
        w[r].phase = 2;
        w[r].loss_finite = isfinite(loss_sum);
        w[r].mean_loss = loss_sum / count;
        w[r].active = active;
    }
    if (rep_phase(n, w, err, errlen) < 0)
        return -1;
    if (out)
        *out = (net_stats){ .loss = loss_sum / count, .correct = correct, .count = count,
                            .loss_scale = scale, .skipped = w[0].skipped };
    return 0;
}

/* Evaluation on replicas: the images split over them as a training batch
 * is, each replica's share in chunks of its batch. No collectives, so a
 * failure leaves the replicas as they were (not broken). */
static int group_eval(net *n, const float *x, const int32_t *labels, int count, double *total,
                      int *correct, char *err, size_t errlen)
{
    rep_work w[KILN_MAX_DEVICES];
    size_t in_size = (size_t)spec_shape_size(n->spec.in);
    int done = 0;
    memset(w, 0, sizeof w[0] * (size_t)n->nrep);
    for (int r = 0; r < n->nrep; r++) {
        int part = share(count, n->nrep, r);
        w[r] = (rep_work){ .n = n->rep[r], .phase = 3, .x = x + (size_t)done * in_size,
                           .labels = labels + done, .count = part };
        done += part;
    }
    bool broken = n->broken;
    int rc = rep_phase(n, w, err, errlen);
    n->broken = broken;
    *total = 0;
    *correct = 0;
    for (int r = 0; r < n->nrep; r++) {
        *total += w[r].loss_sum;
        *correct += w[r].correct;
    }
    return rc;
}

int net_train_step(net *n, const float *x, const int32_t *labels, int count,
                   float lr, net_stats *out, char *err, size_t errlen)
{
    double loss_sum = 0;
    int correct = 0;
    bool skipped = false;
    const float scale = n->scaler.scale;
    if (count < 1 || count > n->global_batch)
        return set_err(err, errlen, "batch of %d images: must be 1 to %d", count,
                       n->global_batch);
    if (check_batch(n, labels, count, true, err, errlen) < 0)
        return -1;
    if (!isfinite(lr) || lr < 0)
        return set_err(err, errlen, "learning rate %g must be a finite number >= 0", lr);
    if (n->nrep > 1)
        return group_step(n, x, labels, count, lr, out, err, errlen);
    if (step_grads(n, x, labels, count, count, &loss_sum, &correct, err, errlen) < 0 ||
        step_update(n, lr, isfinite(loss_sum), loss_sum / count, 1, &skipped, err, errlen) < 0)
        return -1;
    if (out) {
        out->loss = loss_sum / count;
        out->correct = correct;
        out->count = count;
        out->loss_scale = scale;
        out->skipped = skipped;
    }
    return 0;
}

int net_eval(net *n, const float *x, const int32_t *labels, int count,
             net_stats *out, char *err, size_t errlen)
{
    double total = 0;
    int correct = 0;
    if (!labels)
        return set_err(err, errlen, "net_eval needs labels");
    if (check_batch(n, labels, count, true, err, errlen) < 0)
        return -1;
    /* (replicas that may differ after a failed step: the primary alone) */
    if (n->nrep > 1 && !n->broken ?
        group_eval(n, x, labels, count, &total, &correct, err, errlen) < 0
                    : eval_chunks(n, x, labels, count, &total, &correct, err, errlen) < 0)
        return -1;
    if (out) {
        out->loss = total / count;
        out->correct = correct;
        out->count = count;
        out->loss_scale = 1.0f;
        out->skipped = false;
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
        plan_set *ps = load_and_forward(n, x + (size_t)done * in_size, NULL, bn, false,
                                        err, errlen);
        if (!ps ||
            n->be->xent(n->ctx, ps->plans[n->nlayers], logits_f32(n), NULL, 0.0f, 1.0f, NULL,
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

int net_device_count(const net *n)
{
    return n->nrep;
}

size_t net_param_tensors(const net *n, net_param *out, size_t max)
{
    for (int i = 0; i < n->nparams && (size_t)i < max; i++) {
        const param *p = &n->params[i];
        out[i] = (net_param){ .name = p->name, .ndim = p->ndim, .count = p->count,
                              .decay = p->decay, .value = p->w, .grad = p->g,
                              .momentum = p->v };
        memcpy(out[i].shape, p->shape, sizeof p->shape);
    }
    return (size_t)n->nparams;
}

size_t net_state_tensors(const net *n, net_param *out, size_t max)
{
    for (int i = 0; i < n->nstats && (size_t)i < max; i++) {
        const param *p = &n->stats[i];
        out[i] = (net_param){ .name = p->name, .ndim = p->ndim, .count = p->count,
                              .value = p->w };
        memcpy(out[i].shape, p->shape, sizeof p->shape);
    }
    return (size_t)n->nstats;
}

const backend *net_backend(const net *n, be_ctx **ctx)
{
    if (ctx)
        *ctx = n->ctx;
    return n->be;
}

optim *net_optim(net *n)
{
    return n->opt;
}

uint64_t net_get_step(const net *n)
{
    return n->steps;
}

void net_set_step(net *n, uint64_t steps)
{
    n->steps = steps;
}

precision_mode net_precision(const net *n)
{
    return n->solver.precision;
}

void net_amp_get(const net *n, net_amp_state *out)
{
    *out = (net_amp_state){ .dynamic = n->scaler.dynamic, .scale = n->scaler.scale,
                            .clean = n->scaler.clean, .skipped = n->scaler.skipped };
}

int net_amp_set(net *n, const net_amp_state *s, char *err, size_t errlen)
{
    if (s->dynamic != n->scaler.dynamic)
        return set_err(err, errlen, "the saved state %s loss scaling; this run %s",
                       s->dynamic ? "uses" : "has no", n->scaler.dynamic ? "uses it" : "does not");
    if (!amp_scaler_restore(&n->scaler, s->dynamic, s->scale, s->clean, s->skipped))
        return set_err(err, errlen, "loss scale %g (after %lld clean steps) is not a state the "
                       "scaler can be in", s->scale, (long long)s->clean);
    return 0;
}

static int saved_count(const net *n);
static const param *saved_at(const net *n, int i);

/* Data parallelism: count floats of src (on the primary) into dst on
 * replica m, through the host. */
static int copy_to_replica(net *n, const be_buf *src, net *m, be_buf *dst, size_t count,
                           float *host, char *err, size_t errlen)
{
    bind(n);
    if (n->be->buf_download(n->ctx, src, 0, host, count * sizeof *host, err, errlen) < 0)
        return -1;
    bind(m);
    return m->be->buf_upload(m->ctx, dst, 0, host, count * sizeof *host, err, errlen);
}

/* The primary's parameters, statistics and optimizer state copied to every
 * replica (after a checkpoint or a file was loaded into the primary). */
static int broadcast(net *n, char *err, size_t errlen)
{
    size_t most = 0, nos = optim_state_tensors(n->opt, NULL, 0);
    optim_state *os = calloc(nos ? nos : 1, sizeof *os), *ms = calloc(nos ? nos : 1, sizeof *ms);
    float *host = NULL;
    int rc = -1;
    if (!os || !ms)
        goto oom;
    optim_state_tensors(n->opt, os, nos);
    for (int i = 0; i < saved_count(n); i++)
        most = saved_at(n, i)->count > most ? saved_at(n, i)->count : most;
    for (size_t i = 0; i < nos; i++)
        most = os[i].count > most ? os[i].count : most;
    if (!(host = malloc((most ? most : 1) * sizeof *host)))
        goto oom;
    for (int r = 1; r < n->nrep; r++) {
        net *m = n->rep[r];
        if (optim_state_tensors(m->opt, ms, nos) != nos) {
            set_err(err, errlen, "replica %d has another optimizer state", r);
            goto out;
        }
        for (int i = 0; i < saved_count(n); i++)
            if (copy_to_replica(n, saved_at(n, i)->w, m, saved_at(m, i)->w,
                                saved_at(n, i)->count, host, err, errlen) < 0)
                goto out;
        for (size_t i = 0; i < nos; i++)
            if (copy_to_replica(n, os[i].buf, m, ms[i].buf, os[i].count, host, err, errlen) < 0)
                goto out;
        bind(m);
        if (refresh_copies(m, err, errlen) < 0)
            goto out;
    }
    rc = 0;
    goto out;
oom:
    set_err(err, errlen, "out of memory");
out:
    bind(n);
    free(host);
    free(os);
    free(ms);
    return rc;
}

int net_params_changed(net *n, char *err, size_t errlen)
{
    bind(n);
    if (refresh_copies(n, err, errlen) < 0 || (n->rep && broadcast(n, err, errlen) < 0))
        return -1;
    n->broken = false;          /* the replicas agree again */
    return 0;
}

/* What net_save writes and net_load reads: the parameters, then the state
 * that is not trained (batch norm running statistics). */
static int saved_count(const net *n)
{
    return n->nparams + n->nstats;
}

static const param *saved_at(const net *n, int i)
{
    return i < n->nparams ? &n->params[i] : &n->stats[i - n->nparams];
}

int net_save(const net *n, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    size_t total = 0, off = 0;
    for (int i = 0; i < saved_count(n); i++)
        total += saved_at(n, i)->count;
    float *host = malloc((total ? total : 1) * sizeof *host);
    st_tensor *t = calloc((size_t)saved_count(n) + 1, sizeof *t);
    const char *meta[] = { "kiln_format", "1", "network", n->spec.name, NULL };
    if (!host || !t) {
        set_err(err, errlen, "out of memory saving %zu parameters", total);
        goto out;
    }
    for (int i = 0; i < saved_count(n); i++) {
        const param *p = saved_at(n, i);
        if (n->be->buf_download(n->ctx, p->w, 0, host + off, p->count * sizeof *host,
                                err, errlen) < 0)
            goto out;
        t[i] = (st_tensor){ .name = p->name, .dtype = ST_F32, .ndim = p->ndim,
                            .data = host + off, .bytes = p->count * sizeof *host };
        memcpy(t[i].shape, p->shape, sizeof p->shape);
        off += p->count;
    }
    rc = st_write(path, t, saved_count(n), meta, err, errlen);
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
    for (int i = 0; i < saved_count(n); i++) {
        const param *p = saved_at(n, i);
        const st_tensor *t = st_find(f, p->name);
        char want[96], got[96];
        if (!t) {
            set_err(err, errlen, "%s has no tensor \"%s\" (was it saved from this network?)",
                    path, p->name);
            goto out;
        }
        if (t->dtype != ST_F32) {
            set_err(err, errlen, "%s: tensor \"%s\" is %s, expected F32", path, p->name,
                    st_dtype_name(t->dtype));
            goto out;
        }
        if (t->ndim != p->ndim || memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof(int64_t))) {
            shape_str(want, sizeof want, p->shape, p->ndim);
            shape_str(got, sizeof got, t->shape, t->ndim);
            set_err(err, errlen, "%s: tensor \"%s\" has shape %s, this network needs %s",
                    path, p->name, got, want);
            goto out;
        }
    }
    for (int i = 0; i < saved_count(n); i++) {
        const param *p = saved_at(n, i);
        const st_tensor *t = st_find(f, p->name);
        if (n->be->buf_upload(n->ctx, p->w, 0, t->data, t->bytes, err, errlen) < 0)
            goto out;
    }
    rc = net_params_changed(n, err, errlen);
out:
    st_close(f);
    return rc;
}
