/* engine/cpu/act.c: element-wise activations on oneDNN's eltwise primitive.
 * Every one uses the "use dst for backward" form (ReLU and leaky ReLU with a
 * slope >= 0, logistic, tanh), so the backward pass needs only the forward
 * output and the forward pass may run in place. */
#include "engine/cpu/cpu.h"

#include "base/err.h"

int cpu_act_plan(be_ctx *ctx, const be_act_desc *d, unsigned passes, be_plan **out,
                 char *err, size_t errlen)
{
    int rc = -1;
    dnnl_memory_desc_t data;
    dnnl_eltwise_desc_t ed;
    dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
    be_plan *p = NULL;
    const dnnl_dim_t dims[] = { d->n, (dnnl_dim_t)d->size };
    dnnl_alg_kind_t alg;
    if (d->layout == BE_BLOCKED16 && (d->c < 1 || d->size % (size_t)d->c)) {
        set_err(err, errlen, "cpu backend: a blocked activation needs its channel count");
        goto out;
    }

    *out = NULL;
    switch (d->alg) {
    case BE_ACT_RELU:
        alg = dnnl_eltwise_relu_use_dst_for_bwd;
        if (!(d->alpha >= 0.0f)) {
            set_err(err, errlen, "cpu backend: leaky relu slope %g must be >= 0", d->alpha);
            goto out;
        }
        break;
    case BE_ACT_SIGMOID:
        alg = dnnl_eltwise_logistic_use_dst_for_bwd;
        break;
    case BE_ACT_TANH:
        alg = dnnl_eltwise_tanh_use_dst_for_bwd;
        break;
    default:
        set_err(err, errlen, "cpu backend: activation %d is not supported", (int)d->alg);
        goto out;
    }
    if (d->layout == BE_BLOCKED16 ?
        cpu_act_md(&data, d->n, d->c, (int)(d->size / (size_t)d->c), 1, d->layout, d->dtype,
                   err, errlen) < 0 :
        cpu_md_dt(&data, 2, dims, dnnl_nc, cpu_dt(d->dtype), err, errlen) < 0)
        goto out;
    if (!(p = cpu_plan_new(CPU_PLAN_ACT, err, errlen)))
        goto out;
    p->round_y = p->round_dx = cpu_round_count(&data, d->dtype);
    DNNL_TRY(dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_training, alg, &data, d->alpha,
                                            0.0f),
             "eltwise_forward_desc_init");
    if (cpu_pd(ctx, &ed, NULL, &fwd_pd, err, errlen) < 0)
        goto out;
    if (passes & BE_FWD) {
        const int args[] = { DNNL_ARG_SRC, DNNL_ARG_DST };
        if (cpu_prim_make(ctx, fwd_pd, 2, args, &p->fwd, err, errlen) < 0)
            goto out;
    }
    if (passes & BE_BWD_DATA) {
        const int args[] = { DNNL_ARG_DST, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC };
        DNNL_TRY(dnnl_eltwise_backward_desc_init(&ed, alg, &data, &data, d->alpha, 0.0f),
                 "eltwise_backward_desc_init");
        if (cpu_pd(ctx, &ed, fwd_pd, &pd, err, errlen) < 0 ||
            cpu_prim_make(ctx, pd, 3, args, &p->bwd_data, err, errlen) < 0)
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

int cpu_act_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, be_buf *y, char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(x), cpu_ptr(y) };
    if (cpu_prim_run(ctx, &p->fwd, data, err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(y), p->round_y);
    return 0;
}

int cpu_act_bwd(be_ctx *ctx, be_plan *p, const be_buf *y, const be_buf *dy, be_buf *dx,
                char *err, size_t errlen)
{
    void *data[] = { cpu_ptr(y), cpu_ptr(dy), cpu_ptr(dx) };
    if (cpu_prim_run(ctx, &p->bwd_data, data, err, errlen) < 0)
        return -1;
    cpu_round_f16(cpu_ptr(dx), p->round_dx);
    return 0;
}
