/* engine/cpu/optim.c: optimizer updates on the CPU, one element-wise formula
 * from engine/elementwise.h per element (each element independent, so the
 * result does not depend on the thread count). */
#include "engine/cpu/cpu.h"

#include <math.h>

#include "engine/elementwise.h"
#include "base/err.h"

int cpu_sgd_update(be_ctx *ctx, be_buf *w, be_buf *v, const be_buf *g, size_t count,
                   const be_sgd *hp, char *err, size_t errlen)
{
    size_t bytes = count * sizeof(float);
    if (bytes > w->bytes || bytes > v->bytes || bytes > g->bytes)
        return set_err(err, errlen, "cpu backend: sgd update of %zu elements overruns its "
                       "buffers", count);
    float *wp = w->p, *vp = v->p;
    const float *gp = g->p;
    const float lr = hp->lr, mu = hp->momentum, wd = hp->weight_decay;
#pragma omp parallel for simd schedule(static) if (count > 65536)
    for (size_t i = 0; i < count; i++)
        ew_sgd_momentum(&wp[i], &vp[i], gp[i], lr, mu, wd);
    return 0;
}

int cpu_nonfinite(be_ctx *ctx, const be_buf *b, size_t count, bool *found,
                  char *err, size_t errlen)
{
    if (count * sizeof(float) > b->bytes)
        return set_err(err, errlen, "cpu backend: check of %zu elements overruns its buffer",
                       count);
    const float *p = b->p;
    int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (count > 65536)
    for (size_t i = 0; i < count; i++)
        bad |= !isfinite(p[i]);
    *found = bad != 0;
    return 0;
}

int cpu_unscale(be_ctx *ctx, be_buf *g, size_t count, float factor, bool *found,
                char *err, size_t errlen)
{
    if (count * sizeof(float) > g->bytes)
        return set_err(err, errlen, "cpu backend: unscale of %zu elements overruns its buffer",
                       count);
    float *p = g->p;
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(|:bad) if (count > 65536)
    for (size_t i = 0; i < count; i++)
        bad |= ew_unscale(&p[i], factor);
    if (bad)
        *found = true;
    return 0;
}

int cpu_optim_update(be_ctx *ctx, const be_optim *hp, be_buf *w, be_buf *s1, be_buf *s2,
                     const be_buf *g, size_t count, char *err, size_t errlen)
{
    size_t bytes = count * sizeof(float);
    bool adam = hp->kind == BE_OPT_ADAM;
    if (hp->kind != BE_OPT_SGD && !adam)
        return set_err(err, errlen, "cpu backend: unknown optimizer kind %d", (int)hp->kind);
    if (bytes > w->bytes || bytes > s1->bytes || bytes > g->bytes ||
        (adam && (!s2 || bytes > s2->bytes)))
        return set_err(err, errlen, "cpu backend: optimizer update of %zu elements overruns "
                       "its buffers", count);
    float *wp = w->p, *ap = s1->p;
    const float *gp = g->p;
    const float lr = hp->lr, gs = hp->grad_scale, wd = hp->weight_decay;
    if (!adam) {
        const float mu = hp->momentum;
        const int nes = hp->nesterov;
#pragma omp parallel for simd schedule(static) if (count > 65536)
        for (size_t i = 0; i < count; i++)
            ew_sgd(&wp[i], &ap[i], gp[i], gs, lr, mu, wd, nes);
        return 0;
    }
    float *bp = s2->p;
    const float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, dwd = hp->decoupled_wd;
    const float bc1 = hp->bc1, sbc2 = hp->sbc2;
#pragma omp parallel for simd schedule(static) if (count > 65536)
    for (size_t i = 0; i < count; i++)
        ew_adam(&wp[i], &ap[i], &bp[i], gp[i], gs, lr, b1, b2, eps, wd, dwd, bc1, sbc2);
    return 0;
}

/* Fixed chunks summed in order: the same result for every thread count. */
#define SUMSQ_CHUNKS 64

int cpu_sumsq(be_ctx *ctx, const be_buf *b, size_t count, double *out, char *err, size_t errlen)
{
    if (count * sizeof(float) > b->bytes)
        return set_err(err, errlen, "cpu backend: norm of %zu elements overruns its buffer",
                       count);
    const float *p = b->p;
    double part[SUMSQ_CHUNKS];
    size_t per = (count + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
#pragma omp parallel for schedule(static) if (count > 65536)
    for (int c = 0; c < SUMSQ_CHUNKS; c++) {
        size_t lo = (size_t)c * per, hi = lo + per < count ? lo + per : count;
        double s = 0;
        for (size_t i = lo; i < hi; i++)
            s += (double)p[i] * (double)p[i];
        part[c] = s;
    }
    double total = 0;
    for (int c = 0; c < SUMSQ_CHUNKS; c++)
        total += part[c];
    *out = total;
    return 0;
}
