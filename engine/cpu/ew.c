/* engine/cpu/ew.c: element-wise ops without a oneDNN primitive: gradient
 * accumulation, casts and dropout (engine/elementwise.h). Each element is
 * computed on its own, in FP32, so results do not depend on the thread count.
 * Tensors of a 16-bit type are read and written through the casts of
 * engine/elementwise.h: bfloat16 as 2-byte values, BE_F16 as FP32 rounded
 * through FP16 (engine/backend.h, be_dtype). */
#include "engine/cpu/cpu.h"

#include <string.h>

#include "engine/elementwise.h"
#include "base/err.h"

#define EW_PAR 65536               /* elements below which one thread is faster */
#define EW_CHUNK 16384             /* elements a thread takes at a time */
#define EW_CHUNK_BYTES (EW_CHUNK * sizeof(float))

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

/* d += s over n bfloat16 values, each one FP32 addition rounded once (the
 * generic loop's arithmetic with beta 1), written on the 2-byte values so
 * that it vectorises, and compiled twice: for AVX-512 and for any x86-64,
 * picked when the program loads. Integer bit operations and one addition,
 * nothing a compiler may contract, so both give the same bits. Residual
 * networks accumulate every block's input gradient here under AMP. */
__attribute__((target_clones("arch=x86-64-v4", "default")))
static void add_bf16(unsigned short *d, const unsigned short *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = ew_f32_to_bf16(ew_bf16_to_f32(s[i]) + ew_bf16_to_f32(d[i]));
}

/* memcpy by both threads: a gradient copied to an add's inputs is several
 * megabytes, and one core alone does not reach the memory's bandwidth. */
static void copy_par(void *d, const void *s, size_t bytes)
{
    size_t chunks = (bytes + EW_CHUNK_BYTES - 1) / EW_CHUNK_BYTES;
#pragma omp parallel for schedule(static) if (bytes > EW_PAR * sizeof(float))
    for (size_t c = 0; c < chunks; c++) {
        size_t at = c * EW_CHUNK_BYTES;
        memcpy((char *)d + at, (const char *)s + at,
               bytes - at < EW_CHUNK_BYTES ? bytes - at : EW_CHUNK_BYTES);
    }
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
        return set_err(err, errlen, "cpu backend: accumulate of %zu elements overruns its "
                       "buffers", count);
    if (beta == 0.0f) {
        if (dst->p != src->p)
            copy_par(dst->p, src->p, count * (dt == BE_BF16 ? 2 : sizeof(float)));
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
    if (dt == BE_BF16 && beta == 1.0f) {
        unsigned short *d = dst->p;
        const unsigned short *s = src->p;
        size_t chunks = (count + EW_CHUNK - 1) / EW_CHUNK;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
        for (size_t c = 0; c < chunks; c++) {
            size_t at = c * EW_CHUNK;
            add_bf16(d + at, s + at, count - at < EW_CHUNK ? count - at : EW_CHUNK);
        }
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
        return set_err(err, errlen, "cpu backend: cast of %zu elements overruns its buffers",
                       count);
    const void *s = src->p;
    void *d = dst->p;
    if (sdt == BE_F32 && ddt == BE_BF16) {        /* the weight copies: every step */
        const float *sf = s;
        unsigned short *dh = d;
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
        for (size_t i = 0; i < count; i++)
            dh[i] = ew_f32_to_bf16(sf[i]);
        return 0;
    }
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++)
        store(d, i, ddt, load(s, i, sdt));
    return 0;
}

/* One element of dropout: its mask from its plain (NCHW) index li (whatever
 * the layout, so that the layout does not change which elements drop). */
static inline float drop_mask(uint64_t seed, size_t li, float rate, float keep)
{
    /* keep or 0, as a product rather than a choice: it vectorises (drop_f32) */
    return (float)ew_dropout_keep(seed, li, rate) * keep;
}

/* The FP32 and bfloat16 runs of drop_run, compiled for AVX-512 beside the
 * generic x86-64 (picked at load, as add_bf16): the splitmix64 draw
 * vectorises there (64-bit multiplies, AVX-512DQ), about 1.3 ns an element
 * as a scalar loop, 2.7% of cifar10-cnn's amp-bf16 step. The same integer
 * operations and one multiplication per element, so both give the same
 * bits. */
__attribute__((target_clones("arch=x86-64-v4", "default")))
static void drop_f32(const float *x, float *y, float *mask, size_t n, size_t li0, size_t step,
                     uint64_t seed, float rate, float keep)
{
    for (size_t k = 0; k < n; k++) {
        float m = drop_mask(seed, li0 + k * step, rate, keep);
        mask[k] = m;
        y[k] = x[k] * m;
    }
}

__attribute__((target_clones("arch=x86-64-v4", "default")))
static void drop_bf16(const unsigned short *x, unsigned short *y, float *mask, size_t n,
                      size_t li0, size_t step, uint64_t seed, float rate, float keep)
{
    for (size_t k = 0; k < n; k++) {
        float m = drop_mask(seed, li0 + k * step, rate, keep);
        mask[k] = m;
        y[k] = ew_f32_to_bf16(ew_bf16_to_f32(x[k]) * m);
    }
}

/* y = x m over one run of n elements whose plain indices are li0 + k * step,
 * in type dt; mask m written. */
static inline void drop_run(const void *x, void *y, float *mask, size_t at, size_t n,
                            size_t li0, size_t step, be_dtype dt, uint64_t seed, float rate,
                            float keep)
{
    if (dt == BE_F32) {
        drop_f32((const float *)x + at, (float *)y + at, mask + at, n, li0, step, seed, rate,
                 keep);
    } else if (dt == BE_BF16) {
        drop_bf16((const unsigned short *)x + at, (unsigned short *)y + at, mask + at, n, li0,
                  step, seed, rate, keep);
    } else {
        for (size_t k = 0; k < n; k++) {
            float m = drop_mask(seed, li0 + k * step, rate, keep);
            mask[at + k] = m;
            store(y, at + k, dt, load(x, at + k, dt) * m);
        }
    }
}

int cpu_dropout_fwd(be_ctx *ctx, const be_dropout_desc *d, bool training, const be_buf *x,
                    be_buf *mask, be_buf *y, uint64_t seed, char *err, size_t errlen)
{
    const size_t count = d->count, c = (size_t)d->c, c16 = (c + 15) / 16 * 16, hw = d->hw;
    const float rate = d->rate;
    const be_dtype dt = d->dtype;
    const bool blocked = d->layout == BE_BLOCKED16, nhwc = d->layout == BE_NHWC;
    if ((blocked || nhwc) && (c == 0 || hw == 0 || count % ((blocked ? c16 : c) * hw)))
        return set_err(err, errlen, "cpu backend: %s dropout of %zu elements in images of "
                       "%zu x %zu", blocked ? "blocked" : "channels-last", count, c, hw);
    if (!fits(x, count, dt) || !fits(y, count, dt) || (training && !fits(mask, count, BE_F32)))
        return set_err(err, errlen, "cpu backend: dropout of %zu elements overruns its "
                       "buffers", count);
    if (!(rate >= 0.0f && rate < 1.0f))
        return set_err(err, errlen, "cpu backend: dropout rate %g must be in [0, 1)", rate);
    if (!training) {
        if (x->p != y->p)
            memcpy(y->p, x->p, count * (dt == BE_BF16 ? 2 : sizeof(float)));
        return 0;
    }
    float *mp = mask->p;
    const float keep = 1.0f / (1.0f - rate);
    if (nhwc) {
        /* per image and position, its c channels: plain indices hw apart */
        const size_t runs = count / c;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
        for (size_t q = 0; q < runs; q++)
            drop_run(x->p, y->p, mp, q * c, c, (q / hw) * c * hw + q % hw, hw, dt, seed, rate,
                     keep);
        return 0;
    }
    if (!blocked) {
        const size_t chunk = 4096;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
        for (size_t at = 0; at < count; at += chunk)
            drop_run(x->p, y->p, mp, at, count - at < chunk ? count - at : chunk, at, 1, dt, seed,
                     rate, keep);
        return 0;
    }
    /* nChw16c: per image and block of 16 channels, hw positions of 16
     * channels each; a padding channel's mask is 0 (its values stay 0). */
    const size_t blocks = count / (16 * hw), cb = c16 / 16;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t b = 0; b < blocks; b++) {
        size_t img = b / cb, ch0 = (b % cb) * 16;
        for (size_t j = 0; j < 16; j++) {
            size_t ch = ch0 + j;
            if (ch >= c) {
                for (size_t s = 0; s < hw; s++) {
                    size_t at = (b * hw + s) * 16 + j;
                    mp[at] = 0.0f;
                    store(y->p, at, dt, 0.0f);
                }
                continue;
            }
            size_t li0 = (img * c + ch) * hw;
            for (size_t s = 0; s < hw; s++) {
                size_t at = (b * hw + s) * 16 + j;
                float m = drop_mask(seed, li0 + s, rate, keep);
                mp[at] = m;
                store(y->p, at, dt, load(x->p, at, dt) * m);
            }
        }
    }
    return 0;
}

int cpu_dropout_bwd(be_ctx *ctx, const be_dropout_desc *d, const be_buf *mask, const be_buf *dy,
                    be_buf *dx, float beta, char *err, size_t errlen)
{
    const size_t count = d->count;
    const be_dtype dt = d->dtype;
    if (!fits(mask, count, BE_F32) || !fits(dy, count, dt) || !fits(dx, count, dt))
        return set_err(err, errlen, "cpu backend: dropout backward of %zu elements overruns "
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
    if (dt == BE_BF16) {
        const unsigned short *g = dy->p;
        unsigned short *o = dx->p;
        if (beta == 0.0f) {
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
            for (size_t i = 0; i < count; i++)
                o[i] = ew_f32_to_bf16(ew_bf16_to_f32(g[i]) * mp[i]);
        } else {
#pragma omp parallel for simd schedule(static) if (count > EW_PAR)
            for (size_t i = 0; i < count; i++)
                o[i] = ew_f32_to_bf16(ew_bf16_to_f32(g[i]) * mp[i] + beta * ew_bf16_to_f32(o[i]));
        }
        return 0;
    }
    const void *g = dy->p;
    void *o = dx->p;
#pragma omp parallel for schedule(static) if (count > EW_PAR)
    for (size_t i = 0; i < count; i++)
        store(o, i, dt, beta == 0.0f ? load(g, i, dt) * mp[i]
                                     : load(g, i, dt) * mp[i] + beta * load(o, i, dt));
    return 0;
}
