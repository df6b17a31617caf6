/* engine/cpu/pool.c: max and average pooling on oneDNN. The forward pass of
 * a max-pooling plan made for the backward pass records the argmax of each
 * window in the plan's workspace, which pool_bwd reads; average pooling
 * needs none (its backward spreads dy evenly over each window: over the
 * positions inside the input when excluding padding, over the whole kernel
 * area when including it). The primitive runs in the input's layout; an
 * output wanted in another layout (a global pooling feeding a dense layer) is
 * reordered through the context's staging buffer, and so is its gradient. */
#include "engine/cpu/cpu.h"

#include <stdlib.h>

#include "base/err.h"

int cpu_pool_plan(be_ctx *ctx, const be_pool_desc *d, unsigned passes, be_plan **out,
                  char *err, size_t errlen)
{
    int rc = -1;
    dnnl_memory_desc_t src, dst, udst;
    dnnl_pooling_v2_desc_t pdsc;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    be_plan *p = NULL;
    dnnl_dims_t strides = { d->stride_h, d->stride_w }, kernel = { d->kh, d->kw };
    dnnl_dims_t dil = { 0, 0 }, pad_l = { d->pad_t, d->pad_l }, pad_r = { d->pad_b, d->pad_r };
    bool train = (passes & BE_BWD_DATA) != 0;

    *out = NULL;
    dnnl_alg_kind_t alg;
    switch (d->alg) {
    case BE_POOL_MAX:
        alg = dnnl_pooling_max;
        break;
    case BE_POOL_AVG_EXCLUDE_PAD:
        alg = dnnl_pooling_avg_exclude_padding;
        break;
    case BE_POOL_AVG_INCLUDE_PAD:
        alg = dnnl_pooling_avg_include_padding;
        break;
    default:
        set_err(err, errlen, "cpu backend: pooling algorithm %d is not supported", (int)d->alg);
        goto out;
    }
    if (cpu_act_md(&src, d->n, d->c, d->h, d->w, d->src_layout, d->dtype, err, errlen) < 0 ||
        cpu_act_md(&dst, d->n, d->c, d->oh, d->ow, d->src_layout, d->dtype, err, errlen) < 0 ||
        cpu_act_md(&udst, d->n, d->c, d->oh, d->ow, d->dst_layout, d->dtype, err, errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_POOL, err, errlen)))
        goto out;
    p->round_y = cpu_round_count(&udst, d->dtype);      /* averages of FP16 values */
    p->round_dx = cpu_round_count(&src, d->dtype);
    if (cpu_reorder_make(ctx, &dst, &udst, CPU_TMP_DST, &p->re[0], err, errlen) < 0 ||
        (train && cpu_reorder_make(ctx, &udst, &dst, CPU_TMP_DST, &p->re[1], err, errlen) < 0))
        goto out;
    DNNL_TRY(dnnl_pooling_v2_forward_desc_init(&pdsc,
             train ? dnnl_forward_training : dnnl_forward_inference, alg,
             &src, &dst, strides, kernel, dil, pad_l, pad_r), "pooling_forward_desc_init");
    if (cpu_pd(ctx, &pdsc, NULL, &fwd_pd, err, errlen) < 0)
        goto out;
    const dnnl_memory_desc_t *wmd = dnnl_primitive_desc_query_md(fwd_pd,
                                                                 dnnl_query_workspace_md, 0);
    size_t wbytes = wmd ? dnnl_memory_desc_get_size(wmd) : 0;
    if (train && wbytes > 0) {
        if (!(p->workspace = aligned_alloc(64, (wbytes + 63) / 64 * 64))) {
            set_err(err, errlen, "cpu backend: cannot allocate a %zu-byte pooling workspace",
                    wbytes);
            goto out;
        }
    }
    if (passes & BE_FWD) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_WORKSPACE };
        if (cpu_prim_make(ctx, fwd_pd, p->workspace ? 3 : 2, args, &p->fwd, err, errlen) < 0)
            goto out;
    }
    if (train) {
        const int args[] = { DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_WORKSPACE };
        DNNL_TRY(dnnl_pooling_v2_backward_desc_init(&pdsc, alg, &src, &dst,
                 strides, kernel, dil, pad_l, pad_r), "pooling_backward_desc_init");
        if (cpu_pd(ctx, &pdsc, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, p->workspace ? 3 : 2, args, &p->bwd_data, err, errlen) < 0)
            goto out;
    }
    *out = p;
    p = NULL;
    rc = 0;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    cpu_backend.plan_free(ctx, p);
    return rc;
}

int cpu_pool_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, be_buf *y, char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(x), cpu_stage_out(ctx, &p->re[0], CPU_TMP_DST, cpu_ptr(y)),
                     p->workspace };
    if (cpu_prim_run(ctx, &p->fwd, data, err, errlen) < 0 ||
        cpu_stage_done(ctx, &p->re[0], CPU_TMP_DST, cpu_ptr(y), err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}

int cpu_pool_bwd(be_ctx *ctx, be_plan *p, const be_buf *dy, be_buf *dx, char *err, size_t errlen)
{
    int fail = 0;
    void *data[] = { cpu_stage_in(ctx, &p->re[1], CPU_TMP_DST, cpu_ptr(dy), &fail, err, errlen),
                     cpu_ptr(dx), p->workspace };
    if (fail || cpu_prim_run(ctx, &p->bwd_data, data, err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(dx), p->round_dx);
    return 0;
}
