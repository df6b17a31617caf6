/* engine/cpu/conv.c: 2-D convolution on oneDNN (direct algorithm, plain
 * NCHW activations, OIHW / GOIHW weights). */
#include "engine/cpu/cpu.h"

#include "engine/errors.h"

typedef struct conv_mds {
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_dims_t strides, dil, pad_l, pad_r;
} conv_mds;

static int conv_mds_init(const be_conv_desc *d, conv_mds *m, char *err, size_t errlen)
{
    const dnnl_dim_t src[] = { d->n, d->c, d->h, d->w };
    const dnnl_dim_t dst[] = { d->n, d->k, d->oh, d->ow };
    const dnnl_dim_t bias[] = { d->k };
    int g = d->groups;
    if (g < 1 || d->c % g || d->k % g)
        return eng_err(err, errlen, "cpu backend: conv groups %d do not divide %d and %d",
                       g, d->c, d->k);
    if (cpu_md(&m->src, 4, src, dnnl_nchw, err, errlen) < 0 ||
        cpu_md(&m->dst, 4, dst, dnnl_nchw, err, errlen) < 0 ||
        cpu_md(&m->bias, 1, bias, dnnl_x, err, errlen) < 0)
        return -1;
    if (g == 1) {
        const dnnl_dim_t wei[] = { d->k, d->c, d->kh, d->kw };
        if (cpu_md(&m->wei, 4, wei, dnnl_oihw, err, errlen) < 0)
            return -1;
    } else {
        /* (G, K/G, C/G, KH, KW) is the same memory as (K, C/G, KH, KW). */
        const dnnl_dim_t wei[] = { g, d->k / g, d->c / g, d->kh, d->kw };
        if (cpu_md(&m->wei, 5, wei, dnnl_goihw, err, errlen) < 0)
            return -1;
    }
    m->strides[0] = d->stride_h;
    m->strides[1] = d->stride_w;
    m->dil[0] = d->dil_h - 1;                   /* oneDNN counts the gaps: 0 = dense */
    m->dil[1] = d->dil_w - 1;
    m->pad_l[0] = d->pad_t;
    m->pad_l[1] = d->pad_l;
    m->pad_r[0] = d->pad_b;
    m->pad_r[1] = d->pad_r;
    return 0;
}

int cpu_conv_plan(be_ctx *ctx, const be_conv_desc *d, unsigned passes, be_plan **out,
                  char *err, size_t errlen)
{
    int rc = -1;
    conv_mds m;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    be_plan *p = NULL;

    *out = NULL;
    if (conv_mds_init(d, &m, err, errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_CONV, err, errlen)))
        goto out;

    /* The forward descriptor is needed as the hint of the backward ones even
     * when the forward pass itself is not asked for. */
    DNNL_TRY(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_training,
             dnnl_convolution_direct, &m.src, &m.wei, d->bias ? &m.bias : NULL, &m.dst,
             m.strides, m.dil, m.pad_l, m.pad_r), "convolution_forward_desc_init");
    if (cpu_pd(ctx, &cd, NULL, &fwd_pd, err, errlen) < 0)
        goto out;
    if (passes & BE_FWD) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS };
        if (cpu_prim_make(ctx, fwd_pd, d->bias ? 4 : 3, args, &p->fwd, err, errlen) < 0)
            goto out;
    }
    if (passes & BE_BWD_DATA) {
        const int args[] = { DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC };
        DNNL_TRY(dnnl_dilated_convolution_backward_data_desc_init(&cd, dnnl_convolution_direct,
                 &m.src, &m.wei, &m.dst, m.strides, m.dil, m.pad_l, m.pad_r),
                 "convolution_backward_data_desc_init");
        if (cpu_pd(ctx, &cd, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, 3, args, &p->bwd_data, err, errlen) < 0)
            goto out;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    if (passes & BE_BWD_WEIGHTS) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                             DNNL_ARG_DIFF_BIAS };
        DNNL_TRY(dnnl_dilated_convolution_backward_weights_desc_init(&cd,
                 dnnl_convolution_direct, &m.src, &m.wei, d->bias ? &m.bias : NULL, &m.dst,
                 m.strides, m.dil, m.pad_l, m.pad_r), "convolution_backward_weights_desc_init");
        if (cpu_pd(ctx, &cd, fwd_pd, &pd, err, errlen) < 0 ||
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

int cpu_conv_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, const be_buf *b,
                 be_buf *y, char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(x), cpu_ptr(w), cpu_ptr(y), cpu_ptr(b) };
    return cpu_prim_run(ctx, &p->fwd, data, err, errlen);
}

int cpu_conv_bwd_data(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w, be_buf *dx,
                      char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(dy), cpu_ptr(w), cpu_ptr(dx) };
    return cpu_prim_run(ctx, &p->bwd_data, data, err, errlen);
}

int cpu_conv_bwd_weights(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                         be_buf *dw, be_buf *db, char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(x), cpu_ptr(dy), cpu_ptr(dw), cpu_ptr(db) };
    return cpu_prim_run(ctx, &p->bwd_weights, data, err, errlen);
}
