/* engine/net_plans.c: the backend's plans (its prepared operations) for a
 * net's layers and loss.
 *
 * Plans depend on the batch size, so a net keeps plan sets: one for max_batch
 * made at net_create, and up to NET_PLAN_SETS - 1 more made on first use for
 * other sizes (the short last batch of an epoch, of validation, a single
 * image to classify), the least recently used replaced when they are all
 * taken; max_batch's set is never replaced. Steps never create plans for
 * sizes they have seen.
 */
#include "engine/net_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static void plan_set_clear(net *n, plan_set *ps)
{
    net_fuse_plans_free(n, ps);
    if (ps->plans)
        for (int i = 0; i <= n->nlayers; i++)
            n->be->plan_free(n->ctx, ps->plans[i]);
    free(ps->plans);
    memset(ps, 0, sizeof *ps);
}

be_conv_desc net_conv_desc(const net *n, int i, int bn)
{
    const layer_spec *s = n->layers[i].s;
    const conv_spec *c = &s->u.conv;
    return (be_conv_desc){
        .n = bn, .c = s->in.c, .h = s->in.h, .w = s->in.w,
        .k = c->filters, .oh = s->out.h, .ow = s->out.w, .kh = c->kh, .kw = c->kw,
        .stride_h = c->stride_h, .stride_w = c->stride_w,
        .pad_t = c->pad_t, .pad_l = c->pad_l, .pad_b = c->pad_b, .pad_r = c->pad_r,
        .dil_h = c->dil_h, .dil_w = c->dil_w, .groups = c->groups, .bias = c->bias,
        .src_layout = n->layout[s->inputs[0]], .dst_layout = n->layout[i + 1],
        .src_dtype = n->dtype[s->inputs[0]], .dst_dtype = n->dtype[i + 1],
        .wdtype = n->half,
    };
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
            be_conv_desc d = net_conv_desc(n, i, bn);
            d.relu = l->relu_pair >= 0;     /* (the ReLU after it skips its forward pass) */
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
                             .eps = s->u.bn.eps, .relu = n->layers[i].relu_pair >= 0,
                             .layout = n->layout[i + 1], .dtype = n->dtype[i + 1] };
            rc = be->bn_plan(n->ctx, &d, passes, &ps->plans[i], err, errlen);
            break;
        }
        case LAYER_ADD: {
            be_add_desc d = { .n = bn, .k = s->ninputs, .size = (size_t)spec_shape_size(s->in),
                              .layout = n->layout[i + 1], .c = s->in.c,
                              .dtype = n->dtype[i + 1], .relu = n->layers[i].relu_pair >= 0 };
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
            return net_layer_fail(l, err, errlen);
    }
    be_xent_desc xd = { .n = bn, .classes = n->classes };
    return be->xent_plan(n->ctx, &xd, &ps->plans[n->nlayers], err, errlen);
}

/* The plan set for batch size bn, made if needed. */
plan_set *net_plans_for(net *n, int bn, char *err, size_t errlen)
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

void net_plans_free(net *n)
{
    for (int i = 0; i < NET_PLAN_SETS; i++)
        plan_set_clear(n, &n->sets[i]);
}
