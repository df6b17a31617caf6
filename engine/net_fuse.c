/* engine/net_fuse.c: inference with each convolution and the layers after it
 * that only it feeds done in one backend pass (the fuse groups of
 * engine/net_internal.h): batch norm folded into the weights and bias, a
 * residual add and a ReLU as the pass's post-ops (oneDNN's on the CPU).
 *
 * What it guarantees:
 *  - Only inference passes (net_eval, net_predict) use it; training steps,
 *    their gradients, determinism and resume are untouched.
 *  - The folded weights are those of the current parameters: a group folds
 *    again whenever net->gen moved on since it last folded (net_refresh_copies
 *    moves it at every change of parameters or statistics), and the backend
 *    keeps a convolution's weights in its own layout only while the
 *    generation it was given stays the same.
 *  - The results are the unfused ones up to rounding: the fold rounds each
 *    weight once more (w * s instead of s applied to the sum), and the
 *    intermediate activations are not rounded to their storage type (which
 *    matters under AMP). tests/unit/test_engine_fuse.c holds the bounds.
 *  - Both inference entry points run the same groups with the same plans,
 *    so a validation during training and an evaluation of the snapshot
 *    afterwards give the same bits (for the same batch sizes and threads).
 *
 * A backend without conv_infer and bn_fold (CUDA today) gets no groups, and
 * neither does a net built with KILN_INFER_FUSE=0 in the environment (for
 * comparisons: bench/onnx_compare measures both).
 */
#include "engine/net_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static bool fusion_on(const net *n)
{
    const char *env = getenv("KILN_INFER_FUSE");
    return n->be->conv_infer && n->be->bn_fold && !(env && strcmp(env, "0") == 0);
}

/* The layer that alone reads activation a and is in no group yet, or -1
 * (none reads it, several do, or it is the logits, which the loss reads). */
static int sole_reader(const net *n, int a)
{
    if (a >= n->nlayers || net_consumers(n, a) != 1)
        return -1;
    for (int i = a; i < n->nlayers; i++) {          /* readers come after its writer */
        const layer_spec *s = n->layers[i].s;
        for (int k = 0; k < s->ninputs; k++)
            if (s->inputs[k] == a)
                return n->group_of[i] < 0 ? i : -1;
    }
    return -1;
}

/* The activation an add layer r reads besides a, when the group that makes
 * a may add it in its pass: two inputs, the same layout and type as the
 * add's output, and written in inference (not the skipped inside of a
 * group). -1 otherwise. */
static int addend_of(const net *n, int r, int a)
{
    const layer_spec *s = n->layers[r].s;
    if (s->kind != LAYER_ADD || s->ninputs != 2)
        return -1;
    int o = s->inputs[0] == a ? s->inputs[1] : s->inputs[0];
    if (o == a || n->layout[o] != n->layout[r + 1] || n->dtype[o] != n->dtype[r + 1])
        return -1;
    if (o > 0 && n->group_of[o - 1] >= 0 && n->groups[n->group_of[o - 1]].tail != o - 1)
        return -1;
    return o;
}

/* The group headed by convolution c: the batch norm, add and ReLU that
 * follow it, each the sole reader of what came before. */
static void find_group(net *n, int c, fuse_group *g)
{
    int a = c + 1, r = sole_reader(n, a);
    memset(g, 0, sizeof *g);
    g->conv = c;
    g->bn = g->add = g->act = g->addend = -1;
    if (r >= 0 && n->layers[r].s->kind == LAYER_BATCHNORM) {
        g->bn = r;
        a = r + 1;
        r = sole_reader(n, a);
    }
    if (r >= 0 && (g->addend = addend_of(n, r, a)) >= 0) {
        g->add = r;
        a = r + 1;
        r = sole_reader(n, a);
    }
    if (r >= 0 && (n->layers[r].s->kind == LAYER_RELU ||
                   n->layers[r].s->kind == LAYER_LEAKY_RELU)) {
        g->act = r;
        a = r + 1;
    }
    g->out = a;
    g->tail = a - 1;
}

/* The folded weights' buffers of group g (it has a batch norm). */
static int make_fold_buffers(net *n, fuse_group *g, char *err, size_t errlen)
{
    const param *w = &n->params[n->layers[g->conv].w];
    int k = n->layers[g->conv].s->u.conv.filters;
    if (!(g->w32 = n->be->buf_alloc(n->ctx, w->count * sizeof(float), err, errlen)) ||
        !(g->b = n->be->buf_alloc(n->ctx, (size_t)k * sizeof(float), err, errlen)))
        return -1;
    if (n->half != BE_F32 &&
        !(g->wh = n->be->buf_alloc(n->ctx, w->count * n->be->dtype_bytes(n->half), err, errlen)))
        return -1;
    return 0;
}

int net_fuse_build(net *n, char *err, size_t errlen)
{
    int count = 0;
    if (!fusion_on(n))
        return 0;
    for (int i = 0; i < n->nlayers; i++)
        count += n->layers[i].s->kind == LAYER_CONV2D;
    if (count == 0)
        return 0;
    if (!(n->groups = calloc((size_t)count, sizeof *n->groups)) ||
        !(n->group_of = malloc((size_t)n->nlayers * sizeof *n->group_of)))
        return set_err(err, errlen, "out of memory");
    for (int i = 0; i < n->nlayers; i++)
        n->group_of[i] = -1;
    for (int i = 0; i < n->nlayers; i++) {
        if (n->layers[i].s->kind != LAYER_CONV2D)
            continue;
        fuse_group *g = &n->groups[n->ngroups];
        find_group(n, i, g);
        const int members[] = { g->conv, g->bn, g->add, g->act };
        for (size_t m = 0; m < sizeof members / sizeof members[0]; m++)
            if (members[m] >= 0)
                n->group_of[members[m]] = n->ngroups;
        n->ngroups++;
        if (g->bn >= 0 && make_fold_buffers(n, g, err, errlen) < 0)
            return net_layer_fail(&n->layers[i], err, errlen);
    }
    return 0;
}

void net_fuse_plans_free(net *n, plan_set *ps)
{
    for (int i = 0; ps->infer && i < n->ngroups; i++)
        n->be->plan_free(n->ctx, ps->infer[i]);
    free(ps->infer);
    ps->infer = NULL;
}

void net_fuse_free(net *n)
{
    for (int i = 0; i < n->ngroups; i++) {
        n->be->buf_free(n->ctx, n->groups[i].w32);
        n->be->buf_free(n->ctx, n->groups[i].wh);
        n->be->buf_free(n->ctx, n->groups[i].b);
    }
    free(n->groups);
    free(n->group_of);
    n->groups = NULL;
    n->group_of = NULL;
    n->ngroups = 0;
}

/* The inference plans of every group at ps's batch size. */
static int make_plans(net *n, plan_set *ps, char *err, size_t errlen)
{
    if (!(ps->infer = calloc((size_t)n->ngroups, sizeof *ps->infer)))
        return set_err(err, errlen, "out of memory");
    for (int i = 0; i < n->ngroups; i++) {
        const fuse_group *g = &n->groups[i];
        be_conv_desc d = net_conv_desc(n, g->conv, ps->n);
        d.infer = true;
        d.bias = d.bias || g->bn >= 0;
        d.dst_layout = n->layout[g->out];
        d.dst_dtype = n->dtype[g->out];
        d.post_add = g->add >= 0;
        d.post_relu = g->act >= 0;
        d.post_alpha = g->act >= 0 && n->layers[g->act].s->kind == LAYER_LEAKY_RELU ?
                       n->layers[g->act].s->u.slope : 0.0f;
        if (n->be->conv_plan(n->ctx, &d, BE_FWD, &ps->infer[i], err, errlen) < 0) {
            net_fuse_plans_free(n, ps);
            return net_layer_fail(&n->layers[g->conv], err, errlen);
        }
    }
    return 0;
}

/* Group g's batch norm folded into its convolution's weights and bias
 * again, when the parameters moved on since it last was. */
static int refold(net *n, fuse_group *g, char *err, size_t errlen)
{
    if (g->bn < 0 || g->gen == n->gen)
        return 0;
    const layer *c = &n->layers[g->conv], *b = &n->layers[g->bn];
    const param *w = &n->params[c->w];
    int k = c->s->u.conv.filters;
    if (n->be->bn_fold(n->ctx, w->w, c->b >= 0 ? n->params[c->b].w : NULL, n->params[b->w].w,
                       n->params[b->b].w, n->stats[b->rm].w, n->stats[b->rv].w,
                       b->s->u.bn.eps, k, w->count / (size_t)k, g->w32, g->b, err,
                       errlen) < 0 ||
        (g->wh && n->be->cast(n->ctx, g->w32, BE_F32, g->wh, n->half, w->count, err,
                              errlen) < 0))
        return net_layer_fail(b, err, errlen);
    g->gen = n->gen;
    return 0;
}

int net_fuse_layer(net *n, plan_set *ps, int i, char *err, size_t errlen)
{
    if (n->ngroups == 0 || n->group_of[i] < 0)
        return 0;
    fuse_group *g = &n->groups[n->group_of[i]];
    if (i != g->tail)
        return 1;                       /* inside the group: its pass does this layer's work */
    if (!ps->infer && make_plans(n, ps, err, errlen) < 0)
        return -1;
    if (refold(n, g, err, errlen) < 0)
        return -1;
    const layer *c = &n->layers[g->conv];
    const param *w = &n->params[c->w];
    const be_buf *wt = g->bn >= 0 ? (g->wh ? g->wh : g->w32) : (w->h ? w->h : w->w);
    const be_buf *b = g->bn >= 0 ? g->b : c->b >= 0 ? n->params[c->b].w : NULL;
    if (n->be->conv_infer(n->ctx, ps->infer[n->group_of[i]], n->act[c->s->inputs[0]], wt, n->gen,
                          b, g->add >= 0 ? n->act[g->addend] : NULL, n->act[g->out], err,
                          errlen) < 0)
        return net_layer_fail(c, err, errlen);
    return 1;
}
