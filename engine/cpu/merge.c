/* engine/cpu/merge.c: layers that join branches: add (oneDNN's sum primitive,
 * scales 1; with a ReLU after it, be_add_desc.relu, its binary add with the
 * ReLU as a post-op: the same one rounded addition, then max(., 0)) and
 * concat along channels (oneDNN's concat primitive forward; the backward
 * pass copies each input's channel slice of dy, image by image). */
#include "engine/cpu/cpu.h"

#include <string.h>

#include "base/err.h"

int cpu_add_plan(be_ctx *ctx, const be_add_desc *d, be_plan **out, char *err, size_t errlen)
{
    int rc = -1;
    dnnl_memory_desc_t src[BE_MAX_INPUTS], dst;
    float scales[BE_MAX_INPUTS];
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    be_plan *p = NULL;
    const dnnl_dim_t dims[] = { d->n, (dnnl_dim_t)d->size };
    int args[BE_MAX_INPUTS + 1];

    *out = NULL;
    if (d->k < 2 || d->k > BE_MAX_INPUTS)
        return set_err(err, errlen, "cpu backend: add of %d inputs (2 to %d)", d->k,
                       BE_MAX_INPUTS);
    if (d->relu && d->k != 2)
        return set_err(err, errlen, "cpu backend: an add with a ReLU takes 2 inputs, not %d",
                       d->k);
    if (d->layout == BE_BLOCKED16 && (d->c < 1 || d->size % (size_t)d->c))
        return set_err(err, errlen, "cpu backend: a blocked add needs its channel count");
    if (d->layout == BE_BLOCKED16 ?
        cpu_act_md(&dst, d->n, d->c, (int)(d->size / (size_t)d->c), 1, d->layout, d->dtype,
                   err, errlen) < 0 :
        cpu_md_dt(&dst, 2, dims, dnnl_nc, cpu_dt(d->dtype), err, errlen) < 0)
        goto out;
    for (int i = 0; i < d->k; i++) {
        src[i] = dst;
        scales[i] = 1.0f;
        args[i] = DNNL_ARG_MULTIPLE_SRC + i;
    }
    args[d->k] = DNNL_ARG_DST;
    if (!(p = cpu_plan_new(CPU_PLAN_ADD, err, errlen)))
        goto out;
    p->k = d->k;
    p->round_y = cpu_round_count(&dst, d->dtype);
    if (d->relu) {
        dnnl_binary_desc_t bd;
        DNNL_TRY(dnnl_binary_desc_init(&bd, dnnl_binary_add, &src[0], &src[1], &dst),
                 "binary_desc_init");
        if (cpu_post_attr(ctx, NULL, true, 0.0f, &attr, err, errlen) < 0)
            goto out;
        DNNL_TRY(dnnl_primitive_desc_create(&pd, &bd, attr, ctx->eng, NULL),
                 "primitive_desc_create");
        args[0] = DNNL_ARG_SRC_0;
        args[1] = DNNL_ARG_SRC_1;
    } else {
        DNNL_TRY(dnnl_sum_primitive_desc_create(&pd, &dst, d->k, scales, src, ctx->attr,
                                                ctx->eng), "sum_primitive_desc_create");
    }
    if (cpu_prim_make(ctx, pd, d->k + 1, args, &p->fwd, err, errlen) < 0)
        goto out;
    *out = p;
    p = NULL;
    rc = 0;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    cpu_backend.plan_free(ctx, p);
    return rc;
}

/* Runs p->fwd with the k inputs and then the output. */
static int run_multi(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y,
                     char *err, size_t errlen)
{
    void *data[BE_MAX_INPUTS + 1];
    for (int i = 0; i < p->k; i++)
        data[i] = cpu_ptr(xs[i]);
    data[p->k] = cpu_ptr(y);
    return cpu_prim_run(ctx, &p->fwd, data, err, errlen);
}

int cpu_add_fwd(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y,
                char *err, size_t errlen)
{
    if (run_multi(ctx, p, xs, y, err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}

int cpu_concat_plan(be_ctx *ctx, const be_concat_desc *d, be_plan **out,
                    char *err, size_t errlen)
{
    int rc = -1;
    dnnl_memory_desc_t src[BE_MAX_INPUTS], dst;
    dnnl_primitive_desc_t pd = NULL;
    be_plan *p = NULL;
    int args[BE_MAX_INPUTS + 1];

    *out = NULL;
    if (d->k < 2 || d->k > BE_MAX_INPUTS)
        return set_err(err, errlen, "cpu backend: concat of %d inputs (2 to %d)", d->k,
                       BE_MAX_INPUTS);
    if (!(p = cpu_plan_new(CPU_PLAN_CONCAT, err, errlen)))
        goto out;
    p->k = d->k;
    p->n = d->n;
    p->hw = (size_t)d->h * (size_t)d->w;
    for (int i = 0; i < d->k; i++) {
        const dnnl_dim_t dims[] = { d->n, d->c[i], d->h, d->w };
        if (d->c[i] < 1) {
            set_err(err, errlen, "cpu backend: concat input %d has %d channels", i, d->c[i]);
            goto out;
        }
        if (cpu_md_dt(&src[i], 4, dims, dnnl_nchw, cpu_dt(d->dtype), err, errlen) < 0)
            goto out;
        p->coff[i + 1] = p->coff[i] + d->c[i];
        args[i] = DNNL_ARG_MULTIPLE_SRC + i;
    }
    args[d->k] = DNNL_ARG_DST;
    const dnnl_dim_t ddims[] = { d->n, p->coff[d->k], d->h, d->w };
    if (cpu_md_dt(&dst, 4, ddims, dnnl_nchw, cpu_dt(d->dtype), err, errlen) < 0)
        goto out;
    p->esize = d->dtype == BE_BF16 ? 2 : sizeof(float);
    p->dtype = d->dtype;
    DNNL_TRY(dnnl_concat_primitive_desc_create(&pd, &dst, d->k, 1, src, ctx->attr, ctx->eng),
             "concat_primitive_desc_create");
    if (cpu_prim_make(ctx, pd, d->k + 1, args, &p->fwd, err, errlen) < 0)
        goto out;
    *out = p;
    p = NULL;
    rc = 0;
out:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    cpu_backend.plan_free(ctx, p);
    return rc;
}

int cpu_concat_fwd(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y,
                   char *err, size_t errlen)
{
    return run_multi(ctx, p, xs, y, err, errlen);
}

int cpu_concat_bwd(be_ctx *ctx, be_plan *p, const be_buf *dy, int i, be_buf *dx, float beta,
                   char *err, size_t errlen)
{
    if (i < 0 || i >= p->k)
        return set_err(err, errlen, "cpu backend: concat has no input %d", i);
    size_t chunk = (size_t)(p->coff[i + 1] - p->coff[i]) * p->hw;
    size_t stride = (size_t)p->coff[p->k] * p->hw, off = (size_t)p->coff[i] * p->hw;
    const size_t es = p->esize;
    const char *s = dy->p;
    char *d = dx->p;
    if ((size_t)p->n * stride * es > dy->bytes || (size_t)p->n * chunk * es > dx->bytes)
        return set_err(err, errlen, "cpu backend: concat backward overruns its buffers");
#pragma omp parallel for schedule(static) if ((size_t)p->n * chunk > 65536)
    for (int n = 0; n < p->n; n++)
        cpu_acc_span(d + (size_t)n * chunk * es, s + ((size_t)n * stride + off) * es, chunk,
                     p->dtype, beta);
    return 0;
}
