/* engine/net_build.c: one net (one replica) built from a spec
 * (engine/net_internal.h): its parameters initialised from the seed, the
 * layout and element type of every activation, the activation and gradient
 * buffers, the memory check before any of it is allocated, the plans for
 * max_batch and the optimizer; and net_build_free, which undoes all of it.
 * Nothing here runs a step. */
#include "engine/net_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/init.h"      /* init_fill */
#include "engine/rng.h"       /* rng_derive: dropout streams */
#include "engine/summary.h"   /* summary_check_memory: the check before allocating */

/* "layer 2 (conv2d \"conv2\")" prefix on a backend error. */
int net_layer_fail(const layer *l, char *err, size_t errlen)
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
                return net_layer_fail(l, err, errlen);
            continue;
        } else {
            continue;
        }
        l->w = n->nparams;
        if (add_param(n, s, "weight", ndim, shape, true, wi, fan_in, fan_out, seed,
                      err, errlen) < 0)
            return net_layer_fail(l, err, errlen);
        if (bias) {
            l->b = n->nparams;
            if (add_param(n, s, "bias", 1, bshape, false, INIT_ZERO, 0, 0, seed,
                          err, errlen) < 0)
                return net_layer_fail(l, err, errlen);
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
            return net_layer_fail(l, err, errlen);
    }
    return 0;
}

/* The copies made from the FP32 weights again (after every update), and a
 * new generation for the folded inference weights (engine/net_fuse.c). */
int net_refresh_copies(net *n, char *err, size_t errlen)
{
    n->gen++;
    for (int i = 0; i < n->nparams; i++) {
        param *p = &n->params[i];
        if (p->h && n->be->cast(n->ctx, p->w, BE_F32, p->h, n->half, p->count, err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* Floats one image of activation a (and of its gradient) takes in its
 * layout: blocked ones pad their channels to a multiple of 16. */
size_t net_act_elems(const net *n, int a)
{
    net_shape s = spec_act_shape(&n->spec, a);
    return be_act_elems(s.c, (size_t)s.h * (size_t)s.w, n->layout[a]);
}

static size_t act_count(const net *n, int a)
{
    return (size_t)n->max_batch * net_act_elems(n, a);
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

/* Activations kept in the backend's own layout (engine/backend.h,
 * be_layout, backend.act_layout): groups of activations joined by
 * layout-preserving layers take it together when every member has at least
 * BLOCK_MIN_C channels (fewer would more than double in size when padded to
 * 16; a sigmoid's, a multiple of 16 where the layout pads), is made by a
 * convolution, a pooling or a preserving layer, and is read only by such
 * layers; the images, the logits and whatever feeds flatten, dense or concat
 * stay plain. The layout is the backend's for the group's channel count and
 * type (blocked where the members' types differ and would pick differently).
 * So the data is reordered only where a convolution's or pooling's kernel
 * wants another layout, not around every layer.
 * KILN_CPU_PLAIN_LAYOUTS=1 in the environment keeps everything plain (for
 * comparisons). Needs the types (plan_dtypes). */
#define BLOCK_MIN_C 8

static int plan_layouts(net *n, char *err, size_t errlen)
{
    int L = n->nlayers;
    int *parent = calloc((size_t)L + 1, sizeof *parent);
    bool *bad = calloc((size_t)L + 1, sizeof *bad);
    int *want = calloc((size_t)L + 1, sizeof *want);    /* per group: a be_layout, or -1 */
    const char *env = getenv("KILN_CPU_PLAIN_LAYOUTS");
    bool off = env && strcmp(env, "1") == 0;
    if (!parent || !bad || !want) {
        free(parent);
        free(bad);
        free(want);
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
    for (int a = 0; a <= L; a++)
        want[a] = -1;
    for (int a = 1; a <= L && n->be->act_layout; a++) {
        int r = uf_find(parent, a);
        be_layout l = n->be->act_layout(spec_act_shape(&n->spec, a).c, n->dtype[a]);
        want[r] = want[r] < 0 || want[r] == (int)l ? (int)l : BE_BLOCKED16;
    }
    for (int a = 1; a <= L; a++) {
        layer_kind made = n->spec.layers[a - 1].kind;
        int c = spec_act_shape(&n->spec, a).c, r = uf_find(parent, a);
        /* oneDNN runs the logistic function on padded blocks with its slow
         * reference kernel (it maps the zero padding to 0.5) */
        if (off || want[r] < 0 || want[r] == BE_PLAIN || c < BLOCK_MIN_C ||
            (c % 16 && made == LAYER_SIGMOID && want[r] == BE_BLOCKED16) ||
            !(layout_preserving(made) || layout_converting(made)))
            bad[r] = true;
    }
    for (int i = 0; i < L; i++) {
        const layer_spec *s = &n->spec.layers[i];
        if (!layout_preserving(s->kind) && !layout_converting(s->kind))
            for (int k = 0; k < s->ninputs; k++)
                bad[uf_find(parent, s->inputs[k])] = true;
    }
    for (int a = 0; a <= L; a++) {
        int r = uf_find(parent, a);
        n->layout[a] = bad[r] ? BE_PLAIN : (be_layout)want[r];
    }
    free(parent);
    free(bad);
    free(want);
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

int net_consumers(const net *n, int a)
{
    int c = 0;
    for (int i = 0; i < n->nlayers; i++)
        for (int k = 0; k < n->spec.layers[i].ninputs; k++)
            c += n->spec.layers[i].inputs[k] == a;
    return c;
}

/* Whether layer i may run a ReLU after it in its own pass: a batch norm,
 * or an add of two inputs of which one takes the gradient first (the ReLU's
 * gradient is written there and copied or added to the other), where the
 * backend can; or a convolution (its forward pass only: the ReLU's backward
 * pass still runs, from the shared output, into the convolution's gradient). */
static bool relu_host(const net *n, int i)
{
    const layer *l = &n->layers[i];
    if (l->s->kind == LAYER_BATCHNORM)
        return n->be->bn_relu;
    if (l->s->kind == LAYER_CONV2D)
        return n->be->conv_relu;
    if (l->s->kind != LAYER_ADD || l->s->ninputs != 2 || !n->be->add_relu)
        return false;
    return !n->need_grad[i + 1] || (l->dx[0] && l->first[0]) || (l->dx[1] && l->first[1]);
}

/* Each batch norm or add that a plain ReLU alone reads, with the same layout
 * and type, runs that ReLU in its own pass (be_bn_desc.relu,
 * be_add_desc.relu): one pass over the activation instead of two, forward
 * and backward. The ReLU is then skipped, and the host's output and gradient
 * are the ReLU's buffers (make_buffers): nothing else reads them. A
 * convolution hosts its ReLU in the forward pass only (be_conv_desc.relu):
 * they share the output, and the ReLU's backward pass still runs, into the
 * convolution's own gradient (cifar10-cnn's step 1.4% faster in amp-bf16,
 * 6 paired rounds). The
 * results are the unfused ones (the ReLU is exact, and its gradient masks
 * dy with the same sign test); KILN_RELU_FUSE=0 in the environment turns it
 * off, for comparisons. */
static void plan_relu_pairs(net *n)
{
    const char *env = getenv("KILN_RELU_FUSE");
    if (env && strcmp(env, "0") == 0)
        return;
    for (int i = 0; i < n->nlayers; i++) {
        int a = i + 1;
        if (a >= n->nlayers || !relu_host(n, i) || net_consumers(n, a) != 1)
            continue;
        for (int r = a; r < n->nlayers; r++) {
            const layer_spec *s = n->layers[r].s;
            if (s->ninputs < 1 || s->inputs[0] != a)
                continue;
            if (s->kind == LAYER_RELU && n->layout[r + 1] == n->layout[a] &&
                n->dtype[r + 1] == n->dtype[a]) {
                n->layers[i].relu_pair = r;
                n->layers[r].relu_pair = i;
            }
            break;
        }
    }
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
    if (plan_dtypes(n, err, errlen) < 0 || plan_layouts(n, err, errlen) < 0)
        return -1;
    bool *seen = calloc((size_t)L + 1, sizeof *seen);
    if (!seen)
        return set_err(err, errlen, "out of memory");
    plan_gradients(n, seen);
    free(seen);
    plan_relu_pairs(n);
    for (int a = 0; a <= L; a++) {
        const layer *l = a > 0 ? &n->layers[a - 1] : NULL;
        if (l && l->s->kind == LAYER_FLATTEN) {
            n->act[a] = n->act[l->s->inputs[0]];
            continue;
        }
        if (l && l->s->kind == LAYER_RELU && l->relu_pair >= 0) {
            n->act[a] = n->act[l->relu_pair + 1];   /* the layer before writes it */
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
        if (l->s->kind != LAYER_RELU && l->relu_pair >= 0 && net_relu_bwd_hosted(l))
            n->grad[a] = n->grad[l->relu_pair + 1]; /* what its backward pass reads */
        if (!n->grad[a]) {
            if (!(n->grad[a] = alloc_act(n, a, err, errlen)))
                return -1;
            n->grad_own[a] = true;
        }
        if (l->s->kind == LAYER_FLATTEN && l->dx[0] && net_consumers(n, l->s->inputs[0]) == 1) {
            n->grad[l->s->inputs[0]] = n->grad[a];
            l->grad_alias = true;
        }
    }
    for (int i = 0; i < L; i++) {
        layer *l = &n->layers[i];
        if (l->s->kind == LAYER_DROPOUT &&
            !(l->mask = alloc_floats(n, act_count(n, i + 1), err, errlen)))
            return net_layer_fail(l, err, errlen);
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

/* The optimizer over the net's parameters (engine/optim.h). */
static optim *make_optim(const net *n, char *err, size_t errlen)
{
    net_param *ps = calloc(n->nparams ? (size_t)n->nparams : 1, sizeof *ps);
    if (!ps) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    size_t np = net_param_tensors(n, ps, (size_t)n->nparams);
    optim *o = optim_create(n->be, n->ctx, ps, np, &n->solver, err, errlen);
    free(ps);
    return o;
}

net *net_build(const cJSON *spec, net_shape in, int classes, int max_batch,
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
        l->w = l->b = l->rm = l->rv = l->relu_pair = -1;
        /* replicas drop other elements than the primary: other images */
        l->seed = rng_derive(seed, l->s->name) ^ ((uint64_t)rank * 0x9e3779b97f4a7c15ULL);
    }
    if (n->be->ctx_create(device, &n->ctx, err, errlen) < 0 ||
        (n->be->mem_info && check_memory(n, max_batch, err, errlen) < 0) ||
        n->be->dtype_check(n->ctx, n->half, err, errlen) < 0 ||
        make_params(n, seed, err, errlen) < 0 ||
        make_copies(n, err, errlen) < 0 ||
        net_refresh_copies(n, err, errlen) < 0 ||
        make_buffers(n, err, errlen) < 0 ||
        net_fuse_build(n, err, errlen) < 0 ||
        !net_plans_for(n, max_batch, err, errlen) ||
        !(n->opt = make_optim(n, err, errlen)))
        goto out;
    ret = n;
    n = NULL;
out:
    net_build_free(n);
    return ret;
}

void net_build_free(net *n)
{
    if (!n)
        return;
    const backend *be = n->be;
    free(n->zeros);
    if (be) {
        net_plans_free(n);
        net_fuse_free(n);
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
