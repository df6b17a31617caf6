/* engine/cpu/dense.c: dense (fully connected) layers on oneDNN's inner
 * product, the input read as N x IN (an NCHW tensor flattened in place).
 *
 * Types as in conv.c: the products in the weights' type (bfloat16 under
 * amp-bf16, with FP32 accumulation), the output and the input gradient in
 * their tensors' types, the weight and bias gradients in FP32. An operand
 * whose tensor has another type than the products (the images into a first
 * dense layer, the FP32 gradient of the logits) is cast on its way in,
 * through the context's staging buffers. */
#include "engine/cpu/cpu.h"

#include "base/err.h"

/* The reorders of a plan (be_plan.re[]): casts of x and dy into the
 * products' type, per pass. */
enum { RE_FX, RE_BDY, RE_WX, RE_WDY };

static const dnnl_memory_desc_t *pd_md(const_dnnl_primitive_desc_t pd, int arg)
{
    return dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
}

int cpu_dense_plan(be_ctx *ctx, const be_dense_desc *d, unsigned passes, be_plan **out,
                   char *err, size_t errlen)
{
    int rc = -1;
    /* usrc, udst: the caller's tensors; src, dst: in the products' type */
    dnnl_memory_desc_t usrc, udst, src, wei, dwei, bias, dst;
    dnnl_inner_product_desc_t ipd;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    be_plan *p = NULL;
    const dnnl_dim_t sdims[] = { d->n, d->in }, wdims[] = { d->out, d->in };
    const dnnl_dim_t bdims[] = { d->out }, ddims[] = { d->n, d->out };
    const dnnl_data_type_t ct = cpu_dt(d->wdtype);

    *out = NULL;
    if (cpu_md_dt(&usrc, 2, sdims, dnnl_nc, cpu_dt(d->src_dtype), err, errlen) < 0 ||
        cpu_md_dt(&udst, 2, ddims, dnnl_nc, cpu_dt(d->dst_dtype), err, errlen) < 0 ||
        cpu_md_dt(&src, 2, sdims, dnnl_nc, ct, err, errlen) < 0 ||
        cpu_md_dt(&wei, 2, wdims, dnnl_oi, ct, err, errlen) < 0 ||
        cpu_md(&dwei, 2, wdims, dnnl_oi, err, errlen) < 0 ||
        cpu_md(&bias, 1, bdims, dnnl_x, err, errlen) < 0 ||
        cpu_md_dt(&dst, 2, ddims, dnnl_nc, ct, err, errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_DENSE, err, errlen)))
        goto out;
    p->round_y = cpu_round_count(&udst, d->dst_dtype);
    p->round_dx = cpu_round_count(&usrc, d->src_dtype);
    DNNL_TRY(dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_training, &src, &wei,
             d->bias ? &bias : NULL, &udst), "inner_product_forward_desc_init");
    if (cpu_pd(ctx, &ipd, NULL, &fwd_pd, err, errlen) < 0)
        goto out;
    if (passes & BE_FWD) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS };
        if (cpu_prim_make(ctx, fwd_pd, d->bias ? 4 : 3, args, &p->fwd, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &usrc, pd_md(fwd_pd, DNNL_ARG_SRC), CPU_TMP_SRC,
                             &p->re[RE_FX], err, errlen) < 0)
            goto out;
    }
    if (passes & BE_BWD_DATA) {
        const int args[] = { DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC };
        DNNL_TRY(dnnl_inner_product_backward_data_desc_init(&ipd, &usrc, &wei, &dst),
                 "inner_product_backward_data_desc_init");
        if (cpu_pd(ctx, &ipd, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, 3, args, &p->bwd_data, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &udst, pd_md(pd, DNNL_ARG_DIFF_DST), CPU_TMP_DST,
                             &p->re[RE_BDY], err, errlen) < 0)
            goto out;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    if (passes & BE_BWD_WEIGHTS) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                             DNNL_ARG_DIFF_BIAS };
        DNNL_TRY(dnnl_inner_product_backward_weights_desc_init(&ipd, &src, &dwei,
                 d->bias ? &bias : NULL, &dst), "inner_product_backward_weights_desc_init");
        if (cpu_pd(ctx, &ipd, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, d->bias ? 4 : 3, args, &p->bwd_weights, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &usrc, pd_md(pd, DNNL_ARG_SRC), CPU_TMP_SRC,
                             &p->re[RE_WX], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &udst, pd_md(pd, DNNL_ARG_DIFF_DST), CPU_TMP_DST,
                             &p->re[RE_WDY], err, errlen) < 0)
            goto out;
        if (!dnnl_memory_desc_equal(pd_md(pd, DNNL_ARG_DIFF_WEIGHTS), &dwei)) {
            set_err(err, errlen, "cpu backend: the inner product wants its weight gradient in "
                    "another layout");
            goto out;
        }
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

int cpu_dense_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, const be_buf *b,
                  be_buf *y, char *err, size_t errlen)
{
    int fail = 0;
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_FX], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen),
                     cpu_ptr(w), cpu_ptr(y), cpu_ptr(b) };
    if (fail || cpu_prim_run(ctx, &p->fwd, data, err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}

int cpu_dense_bwd_data(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w, be_buf *dx,
                       char *err, size_t errlen)
{
    int fail = 0;
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_BDY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                  errlen),
                     cpu_ptr(w), cpu_ptr(dx) };
    if (fail || cpu_prim_run(ctx, &p->bwd_data, data, err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(dx), p->round_dx);
    return 0;
}

int cpu_dense_bwd_weights(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                          be_buf *dw, be_buf *db, char *err, size_t errlen)
{
    int fail = 0;
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_WX], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen),
                     cpu_stage_in(ctx, &p->re[RE_WDY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                  errlen),
                     cpu_ptr(dw), cpu_ptr(db) };
    if (fail)
        return -1;
    return cpu_prim_run(ctx, &p->bwd_weights, data, err, errlen);
}
