/* engine/cpu/bn.c: batch normalization on oneDNN's primitive with separate
 * scale and shift (dnnl_use_scale | dnnl_use_shift).
 *
 * oneDNN's kernel for plain NCHW data is a slow generic one (about ten times
 * slower than its vectorised kernel on channel-blocked data, nChw16c), so from
 * 16 channels up a plan runs the primitive on blocked data and reorders its
 * operands through the context's staging buffers, as conv.c does; below 16
 * channels it works on the plain data directly.
 *
 * A plan holds the training forward pass (batch statistics written out), the
 * inference forward pass (dnnl_use_global_stats: the given statistics read)
 * and, when asked, the backward pass, which yields dx, dscale and dshift in
 * one primitive. When dx is not wanted (the layer's input needs no gradient)
 * the plan owns a buffer for it, since oneDNN always writes one.
 *
 * With a ReLU after it (be_bn_desc.relu) every pass carries oneDNN's
 * dnnl_fuse_norm_relu: the forward pass writes max(y, 0) and, in training,
 * a workspace recording which outputs were positive, which the backward pass
 * reads to apply the ReLU's gradient to dy first. The plan owns the
 * workspace, so a backward pass belongs to its plan's latest forward pass,
 * as the batch statistics already do. */
#include "engine/cpu/cpu.h"

#include <stdint.h>
#include <stdlib.h>

#include "engine/elementwise.h"
#include "base/err.h"

/* The reorders of a plan (be_plan.re[]). */
enum { RE_X, RE_Y, RE_DY, RE_DX };

/* The plan's workspace for the ReLU's record, as the training forward pass
 * fwd_pd asks for it. */
static int relu_workspace(const_dnnl_primitive_desc_t fwd_pd, be_plan *p, char *err,
                          size_t errlen)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(fwd_pd,
                                                                dnnl_query_workspace_md, 0);
    size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0;
    if (bytes == 0)
        return set_err(err, errlen, "cpu backend: batch norm with a ReLU has no workspace");
    if (!(p->relu_ws = aligned_alloc(64, (bytes + 63) / 64 * 64)))
        return set_err(err, errlen, "cpu backend: cannot allocate a %zu-byte batch norm "
                       "workspace", bytes);
    return 0;
}

int cpu_bn_plan(be_ctx *ctx, const be_bn_desc *d, unsigned passes, be_plan **out,
                char *err, size_t errlen)
{
    int rc = -1;
    dnnl_memory_desc_t data, plain;
    dnnl_batch_normalization_desc_t bd;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    be_plan *p = NULL;
    const dnnl_dim_t dims[] = { d->n, d->c, d->h, d->w };
    const unsigned ss = dnnl_use_scale | dnnl_use_shift | (d->relu ? dnnl_fuse_norm_relu : 0);

    *out = NULL;
    if (!(d->eps > 0.0f))
        return set_err(err, errlen, "cpu backend: batch norm eps %g must be positive", d->eps);
    if (cpu_act_md(&plain, d->n, d->c, d->h, d->w, d->layout, d->dtype, err, errlen) < 0 ||
        cpu_md_dt(&data, 4, dims, d->c >= 16 ? dnnl_nChw16c : dnnl_nchw, cpu_dt(d->dtype), err,
                  errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_BN, err, errlen)))
        goto out;
    p->round_y = p->round_dx = cpu_round_count(&plain, d->dtype);
    if (cpu_reorder_make(ctx, &plain, &data, CPU_TMP_SRC, &p->re[RE_X], err, errlen) < 0 ||
        cpu_reorder_make(ctx, &data, &plain, CPU_TMP_DST, &p->re[RE_Y], err, errlen) < 0)
        goto out;
    {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_SCALE,
                             DNNL_ARG_SHIFT, DNNL_ARG_DST };
        DNNL_TRY(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_inference, &data,
                 d->eps, ss | dnnl_use_global_stats), "batch_normalization_forward_desc_init");
        if (cpu_pd(ctx, &bd, NULL, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, 6, args, &p->infer, err, errlen) < 0)
            goto out;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN,
                             DNNL_ARG_VARIANCE, DNNL_ARG_DST, DNNL_ARG_WORKSPACE };
        DNNL_TRY(dnnl_batch_normalization_forward_desc_init(&bd, dnnl_forward_training, &data,
                 d->eps, ss), "batch_normalization_forward_desc_init");
        if (cpu_pd(ctx, &bd, NULL, &fwd_pd, err, errlen) < 0 ||
            (d->relu && relu_workspace(fwd_pd, p, err, errlen) < 0) ||
            cpu_prim_make(ctx, fwd_pd, d->relu ? 7 : 6, args, &p->fwd, err, errlen) < 0)
            goto out;
    }
    if (passes & (BE_BWD_DATA | BE_BWD_WEIGHTS)) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_SCALE, DNNL_ARG_SHIFT,
                             DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_DIFF_SRC,
                             DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT, DNNL_ARG_WORKSPACE };
        DNNL_TRY(dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &data, &data,
                 d->eps, ss), "batch_normalization_backward_desc_init");
        if (cpu_pd(ctx, &bd, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, d->relu ? 10 : 9, args, &p->bwd_data, err, errlen) < 0 ||
            cpu_reorder_make(ctx, &plain, &data, CPU_TMP_DST, &p->re[RE_DY], err, errlen) < 0 ||
            cpu_reorder_make(ctx, &data, &plain, CPU_TMP_WEI, &p->re[RE_DX], err, errlen) < 0)
            goto out;
        if (!(passes & BE_BWD_DATA)) {
            size_t bytes = dnnl_memory_desc_get_size(&data);
            if (!(p->workspace = aligned_alloc(64, (bytes + 63) / 64 * 64))) {
                set_err(err, errlen, "cpu backend: cannot allocate %zu bytes for batch norm",
                        bytes);
                goto out;
            }
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

int cpu_bn_fwd(be_ctx *ctx, be_plan *p, bool training, const be_buf *x, const be_buf *scale,
               const be_buf *shift, be_buf *mean, be_buf *var, be_buf *y,
               char *err, size_t errlen)
{
    int fail = 0, rc;
    void *xs = cpu_stage_in(ctx, &p->re[RE_X], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen);
    void *ys = cpu_stage_out(ctx, &p->re[RE_Y], CPU_TMP_DST, cpu_ptr(y));
    if (fail)
        return -1;
    if (training) {
        void *data[] = { xs, cpu_ptr(scale), cpu_ptr(shift), cpu_ptr(mean), cpu_ptr(var), ys,
                         p->relu_ws };
        rc = cpu_prim_run(ctx, &p->fwd, data, err, errlen);
    } else {
        void *data[] = { xs, cpu_ptr(mean), cpu_ptr(var), cpu_ptr(scale), cpu_ptr(shift), ys };
        rc = cpu_prim_run(ctx, &p->infer, data, err, errlen);
    }
    if (rc < 0 || cpu_stage_done(ctx, &p->re[RE_Y], CPU_TMP_DST, cpu_ptr(y), err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}

int cpu_bn_bwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy, const be_buf *scale,
               const be_buf *shift, const be_buf *mean, const be_buf *var, be_buf *dx,
               be_buf *dscale, be_buf *dshift, char *err, size_t errlen)
{
    int fail = 0;
    void *dxp = dx ? cpu_stage_out(ctx, &p->re[RE_DX], CPU_TMP_WEI, cpu_ptr(dx)) : p->workspace;
    if (!dxp)
        return set_err(err, errlen, "cpu backend: batch norm plan made to compute dx");
    void *data[] = { cpu_stage_in(ctx, &p->re[RE_X], CPU_TMP_SRC, cpu_ptr(x), &fail, err, errlen),
                     cpu_stage_in(ctx, &p->re[RE_DY], CPU_TMP_DST, cpu_ptr(dy), &fail, err,
                                  errlen),
                     cpu_ptr(scale), cpu_ptr(shift), cpu_ptr(mean), cpu_ptr(var), dxp,
                     cpu_ptr(dscale), cpu_ptr(dshift), p->relu_ws };
    if (fail || cpu_prim_run(ctx, &p->bwd_data, data, err, errlen) < 0)
        return -1;
    if (!dx)
        return 0;
    if (cpu_stage_done(ctx, &p->re[RE_DX], CPU_TMP_WEI, cpu_ptr(dx), err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(dx), p->round_dx);
    return 0;
}

int cpu_bn_running(be_ctx *ctx, be_buf *run_mean, be_buf *run_var, const be_buf *mean,
                   const be_buf *var, int c, float momentum, int64_t m, char *err, size_t errlen)
{
    size_t bytes = (size_t)c * sizeof(float);
    if (c < 0 || bytes > run_mean->bytes || bytes > run_var->bytes || bytes > mean->bytes ||
        bytes > var->bytes)
        return set_err(err, errlen, "cpu backend: batch norm statistics of %d channels "
                       "overrun their buffers", c);
    float *rm = run_mean->p, *rv = run_var->p;
    const float *bm = mean->p, *bv = var->p;
    for (int i = 0; i < c; i++)
        ew_bn_running(&rm[i], &rv[i], bm[i], bv[i], momentum, (long long)m);
    return 0;
}

int cpu_bn_fold(be_ctx *ctx, const be_buf *w, const be_buf *b, const be_buf *scale,
                const be_buf *shift, const be_buf *mean, const be_buf *var, float eps, int k,
                size_t per_k, be_buf *wout, be_buf *bout, char *err, size_t errlen)
{
    size_t cb = (size_t)k * sizeof(float);
    if (k < 1 || per_k > SIZE_MAX / cb || per_k * cb > w->bytes || per_k * cb > wout->bytes ||
        (b && cb > b->bytes) || cb > scale->bytes || cb > shift->bytes || cb > mean->bytes ||
        cb > var->bytes || cb > bout->bytes)
        return set_err(err, errlen, "cpu backend: batch norm fold of %d channels of %zu weights "
                       "overruns its buffers", k, per_k);
    const float *wi = w->p, *bi = b ? b->p : NULL, *sc = scale->p, *sh = shift->p,
                *mu = mean->p, *va = var->p;
    float *wo = wout->p, *bo = bout->p;
    for (int c = 0; c < k; c++) {
        float s = ew_bn_fold_factor(sc[c], va[c], eps);
        for (size_t j = 0; j < per_k; j++)
            wo[(size_t)c * per_k + j] = wi[(size_t)c * per_k + j] * s;
        bo[c] = ew_bn_fold_bias(bi ? bi[c] : 0.0f, mu[c], sh[c], s);
    }
    return 0;
}
