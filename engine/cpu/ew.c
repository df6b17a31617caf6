/* engine/cpu/ew.c: element-wise ops without a oneDNN primitive: gradient
 * accumulation, casts and dropout (engine/elementwise.h). Each element is
 * computed on its own, in FP32, so results do not depend on the thread count.
 * Tensors of a 16-bit type are read and written through the casts of
 * engine/elementwise.h: bfloat16 as 2-byte values, BE_F16 as FP32 rounded
 * through FP16 (engine/backend.h, be_dtype). */
#include "engine/cpu/cpu.h"

#include <string.h>

#include "engine/elementwise.h"
#include "engine/errors.h"

#define EW_PAR 65536               /* elements below which one thread is faster */

static bool fits(const be_buf *b, size_t count, be_dtype dt)
{
    return count <= b->bytes / (dt == BE_BF16 ? 2 : sizeof(float));
}

static inline float load(const void *p, size_t i, be_dtype dt)
{
    return dt == BE_BF16 ? ew_bf16_to_f32(((const unsigned short *)p)[i]) : ((const float *)p)[i];
}

static inline void store(void *p, size_t i, be_dtype dt, float v)
{
    if (dt == BE_BF16)
        ((unsigned short *)p)[i] = ew_f32_to_bf16(v);
    else
        ((float *)p)[i] = dt == BE_F16 ? ew_round_f16(v) : v;
}

void cpu_acc_span(void *d, const void *s, size_t count, be_dtype dt, float beta)
{
    if (beta == 0.0f) {
        if (d != s)
            memcpy(d, s, count * (dt == BE_BF16 ? 2 : sizeof(float)));
        return;
    }
    for (size_t i = 0; i < count; i++)
        store(d, i, dt, load(s, i, dt) + beta * load(d, i, dt));
}

int cpu_acc(be_ctx *ctx, be_buf *dst, const be_buf *src, size_t count, be_dtype dt, float beta,
            char *err, size_t errlen)
{
    if (!fits(dst, count, dt) || !fits(src, count, dt))
        return eng_err(err, errlen, "cpu backend: accumulate of %zu elements overruns its "
                       "buffers", count);
    if (beta == 0.0f) {
        if (dst->p != src->p)
            memcpy(dst->p, src->p, count * (dt == BE_BF16 ? 2 : sizeof(float)));
        return 0;
    }
    if (dt == BE_F32) {
        float *d = dst->p;
        const float *s = src->p;
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
        for (size_t i = 0; i < count; i++)
            d[i] = s[i] + beta * d[i];
        return 0;
    }
    void *d = dst->p;
    const void *s = src->p;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++)
        store(d, i, dt, load(s, i, dt) + beta * load(d, i, dt));
    return 0;
}

int cpu_cast(be_ctx *ctx, const be_buf *src, be_dtype sdt, be_buf *dst, be_dtype ddt,
             size_t count, char *err, size_t errlen)
{
    if (!fits(src, count, sdt) || !fits(dst, count, ddt))
        return eng_err(err, errlen, "cpu backend: cast of %zu elements overruns its buffers",
                       count);
    const void *s = src->p;
    void *d = dst->p;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++)
        store(d, i, ddt, load(s, i, sdt));
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
    const be_dtype dt = d->dtype;
    const bool blocked = d->layout == BE_BLOCKED16;
    if (blocked && (c == 0 || hw == 0 || count % (c16 * hw)))
        return eng_err(err, errlen, "cpu backend: blocked dropout of %zu elements in images of "
                       "%zu x %zu", count, c, hw);
    if (!fits(x, count, dt) || !fits(y, count, dt) || (training && !fits(mask, count, BE_F32)))
        return eng_err(err, errlen, "cpu backend: dropout of %zu elements overruns its "
                       "buffers", count);
    if (!(rate >= 0.0f && rate < 1.0f))
        return eng_err(err, errlen, "cpu backend: dropout rate %g must be in [0, 1)", rate);
    if (!training) {
        if (x->p != y->p)
            memcpy(y->p, x->p, count * (dt == BE_BF16 ? 2 : sizeof(float)));
        return 0;
    }
    float *mp = mask->p;
    const float keep = 1.0f / (1.0f - rate);
    if (dt == BE_F32) {
        const float *xp = x->p;
        float *yp = y->p;
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
        for (size_t i = 0; i < count; i++) {
            size_t li = blocked ? blocked_to_plain(i, c, c16, hw) : i;
            float m = li != SIZE_MAX && ew_dropout_keep(seed, li, rate) ? keep : 0.0f;
            mp[i] = m;
            yp[i] = xp[i] * m;
        }
        return 0;
    }
    const void *xp = x->p;
    void *yp = y->p;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++) {
        size_t li = blocked ? blocked_to_plain(i, c, c16, hw) : i;
        float m = li != SIZE_MAX && ew_dropout_keep(seed, li, rate) ? keep : 0.0f;
        mp[i] = m;
        store(yp, i, dt, load(xp, i, dt) * m);
    }
    return 0;
}

int cpu_dropout_bwd(be_ctx *ctx, const be_dropout_desc *d, const be_buf *mask, const be_buf *dy,
                    be_buf *dx, float beta, char *err, size_t errlen)
{
    const size_t count = d->count;
    const be_dtype dt = d->dtype;
    if (!fits(mask, count, BE_F32) || !fits(dy, count, dt) || !fits(dx, count, dt))
        return eng_err(err, errlen, "cpu backend: dropout backward of %zu elements overruns "
                       "its buffers", count);
    const float *mp = mask->p;
    if (dt == BE_F32) {
        const float *g = dy->p;
        float *o = dx->p;
        if (beta == 0.0f) {
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
            for (size_t i = 0; i < count; i++)
                o[i] = g[i] * mp[i];
        } else {
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
            for (size_t i = 0; i < count; i++)
                o[i] = g[i] * mp[i] + beta * o[i];
        }
        return 0;
    }
    const void *g = dy->p;
    void *o = dx->p;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++)
        store(o, i, dt, load(g, i, dt) * mp[i] + (beta == 0.0f ? 0.0f : beta * load(o, i, dt)));
    return 0;
}
