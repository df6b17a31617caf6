/* engine/cpu/dense.c: dense (fully connected) layers on oneDNN's inner
 * product, the input read as N x IN (an NCHW tensor flattened in place). */
#include "engine/cpu/cpu.h"

int cpu_dense_plan(be_ctx *ctx, const be_dense_desc *d, unsigned passes, be_plan **out,
                   char *err, size_t errlen)
{
    int rc = -1;
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_inner_product_desc_t ipd;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    be_plan *p = NULL;
    const dnnl_dim_t sdims[] = { d->n, d->in }, wdims[] = { d->out, d->in };
    const dnnl_dim_t bdims[] = { d->out }, ddims[] = { d->n, d->out };

    *out = NULL;
    if (cpu_md(&src, 2, sdims, dnnl_nc, err, errlen) < 0 ||
        cpu_md(&wei, 2, wdims, dnnl_oi, err, errlen) < 0 ||
        cpu_md(&bias, 1, bdims, dnnl_x, err, errlen) < 0 ||
        cpu_md(&dst, 2, ddims, dnnl_nc, err, errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_DENSE, err, errlen)))
        goto out;
    DNNL_TRY(dnnl_inner_product_forward_desc_init(&ipd, dnnl_forward_training, &src, &wei,
             d->bias ? &bias : NULL, &dst), "inner_product_forward_desc_init");
    if (cpu_pd(ctx, &ipd, NULL, &fwd_pd, err, errlen) < 0)
        goto out;
    if (passes & BE_FWD) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS };
        if (cpu_prim_make(ctx, fwd_pd, d->bias ? 4 : 3, args, &p->fwd, err, errlen) < 0)
            goto out;
    }
    if (passes & BE_BWD_DATA) {
        const int args[] = { DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC };
        DNNL_TRY(dnnl_inner_product_backward_data_desc_init(&ipd, &src, &wei, &dst),
                 "inner_product_backward_data_desc_init");
        if (cpu_pd(ctx, &ipd, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, 3, args, &p->bwd_data, err, errlen) < 0)
            goto out;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    if (passes & BE_BWD_WEIGHTS) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                             DNNL_ARG_DIFF_BIAS };
        DNNL_TRY(dnnl_inner_product_backward_weights_desc_init(&ipd, &src, &wei,
                 d->bias ? &bias : NULL, &dst), "inner_product_backward_weights_desc_init");
        if (cpu_pd(ctx, &ipd, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, d->bias ? 4 : 3, args, &p->bwd_weights, err, errlen) < 0)
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

int cpu_dense_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, const be_buf *b,
                  be_buf *y, char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(x), cpu_ptr(w), cpu_ptr(y), cpu_ptr(b) };
    return cpu_prim_run(ctx, &p->fwd, data, err, errlen);
}

int cpu_dense_bwd_data(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w, be_buf *dx,
                       char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(dy), cpu_ptr(w), cpu_ptr(dx) };
    return cpu_prim_run(ctx, &p->bwd_data, data, err, errlen);
}

int cpu_dense_bwd_weights(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                          be_buf *dw, be_buf *db, char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(x), cpu_ptr(dy), cpu_ptr(dw), cpu_ptr(db) };
    return cpu_prim_run(ctx, &p->bwd_weights, data, err, errlen);
}
