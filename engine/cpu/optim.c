/* engine/cpu/optim.c: optimizer updates on the CPU, one element-wise formula
 * from engine/elementwise.h per element (each element independent, so the
 * result does not depend on the thread count). */
#include "engine/cpu/cpu.h"

#include <math.h>

#include "engine/elementwise.h"
#include "engine/errors.h"

int cpu_sgd_update(be_ctx *ctx, be_buf *w, be_buf *v, const be_buf *g, size_t count,
                   const be_sgd *hp, char *err, size_t errlen)
{
    size_t bytes = count * sizeof(float);
    if (bytes > w->bytes || bytes > v->bytes || bytes > g->bytes)
        return eng_err(err, errlen, "cpu backend: sgd update of %zu elements overruns its "
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
        return eng_err(err, errlen, "cpu backend: check of %zu elements overruns its buffer",
                       count);
    const float *p = b->p;
    int bad = 0;
#pragma omp parallel for simd schedule(static) reduction(|:bad) if (count > 65536)
    for (size_t i = 0; i < count; i++)
        bad |= !isfinite(p[i]);
    *found = bad != 0;
    return 0;
}
