/* engine/cpu/ew.c: element-wise ops without a oneDNN primitive: gradient
 * accumulation and dropout (engine/elementwise.h). Each element is computed
 * on its own, so results do not depend on the thread count. */
#include "engine/cpu/cpu.h"

#include <string.h>

#include "engine/elementwise.h"
#include "engine/errors.h"

#define EW_PAR 65536               /* elements below which one thread is faster */

static bool fits(const be_buf *b, size_t count)
{
    return count <= b->bytes / sizeof(float);
}

int cpu_acc(be_ctx *ctx, be_buf *dst, const be_buf *src, size_t count, float beta,
            char *err, size_t errlen)
{
    if (!fits(dst, count) || !fits(src, count))
        return eng_err(err, errlen, "cpu backend: accumulate of %zu elements overruns its "
                       "buffers", count);
    float *d = dst->p;
    const float *s = src->p;
    if (beta == 0.0f) {
        if (d != s)
            memcpy(d, s, count * sizeof *d);
        return 0;
    }
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++)
        d[i] = s[i] + beta * d[i];
    return 0;
}

/* The plain (NCHW) index of element i of an nChw16c tensor of c channels
 * padded to c16, or SIZE_MAX for a padding channel. */
static inline size_t blocked_to_plain(size_t i, size_t c, size_t c16, size_t hw)
{
    size_t img = i / (c16 * hw), r = i % (c16 * hw);
    size_t cb = r / (hw * 16), r2 = r % (hw * 16), ch = cb * 16 + r2 % 16;
    return ch < c ? img * c * hw + ch * hw + r2 / 16 : SIZE_MAX;
}

int cpu_dropout_fwd(be_ctx *ctx, const be_dropout_desc *d, bool training, const be_buf *x,
                    be_buf *mask, be_buf *y, uint64_t seed, char *err, size_t errlen)
{
    const size_t count = d->count, c = (size_t)d->c, c16 = (c + 15) / 16 * 16, hw = d->hw;
    const float rate = d->rate;
    const bool blocked = d->layout == BE_BLOCKED16;
    if (blocked && (c == 0 || hw == 0 || count % (c16 * hw)))
        return eng_err(err, errlen, "cpu backend: blocked dropout of %zu elements in images of "
                       "%zu x %zu", count, c, hw);
    if (!fits(x, count) || !fits(y, count) || (training && !fits(mask, count)))
        return eng_err(err, errlen, "cpu backend: dropout of %zu elements overruns its "
                       "buffers", count);
    if (!(rate >= 0.0f && rate < 1.0f))
        return eng_err(err, errlen, "cpu backend: dropout rate %g must be in [0, 1)", rate);
    const float *xp = x->p;
    float *yp = y->p;
    if (!training) {
        if (xp != yp)
            memcpy(yp, xp, count * sizeof *yp);
        return 0;
    }
    float *mp = mask->p;
    const float keep = 1.0f / (1.0f - rate);
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++) {
        size_t li = blocked ? blocked_to_plain(i, c, c16, hw) : i;
        float m = li != SIZE_MAX && ew_dropout_keep(seed, li, rate) ? keep : 0.0f;
        mp[i] = m;
        yp[i] = xp[i] * m;
    }
    return 0;
}

int cpu_dropout_bwd(be_ctx *ctx, const be_buf *mask, const be_buf *dy, be_buf *dx,
                    size_t count, float beta, char *err, size_t errlen)
{
    if (!fits(mask, count) || !fits(dy, count) || !fits(dx, count))
        return eng_err(err, errlen, "cpu backend: dropout backward of %zu elements overruns "
                       "its buffers", count);
    const float *mp = mask->p, *g = dy->p;
    float *d = dx->p;
    if (beta == 0.0f) {
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
        for (size_t i = 0; i < count; i++)
            d[i] = g[i] * mp[i];
    } else {
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
        for (size_t i = 0; i < count; i++)
            d[i] = g[i] * mp[i] + beta * d[i];
    }
    return 0;
}
