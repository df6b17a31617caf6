/* engine/cpu/wino_nhwc.c: kiln's Winograd F(2x2, 3x3) for the forward pass
 * and the input gradient of bfloat16 convolutions on channels-last tensors
 * (amp-bf16 keeps a channel count the 16-blocks would pad channels-last:
 * backend.act_layout), 3x3, stride 1, padding 1, of 16 to 128 channels in
 * and out: cifar10-cnn's 50 -> 50, 50 -> 100 and 100 -> 100 layers.
 * oneDNN 2.6 runs these with its direct bfloat16 kernels at 57-82% of the
 * bfloat16 peak; this does 16 products per channel pair and 2x2 tile
 * instead of 36 (b64, 2 threads, ms, oneDNN / this, best of 15, forward
 * and input gradient: 50->50 32x32 5.0 / 3.5 and 4.6 / 3.4; 100->100 16x16
 * 4.0 / 2.6 and 5.5 / 2.5; 50->100 16x16 2.0 / 1.4 and 2.0 / 1.4).
 *
 * The method is wino16.c's bfloat16 one (and its transforms, wino_tf.h):
 * the inputs widened to FP32, V = B^T d B in FP32 and rounded to bfloat16,
 * U = G g G^T likewise, each product of a channel pair summed into FP32 by
 * vdpbf16ps, the output transform and the bias in FP32, the result rounded
 * to bfloat16. Per tile row of an image, a block of GT tiles: V of every
 * channel (16 at a time, the last masked; an odd count padded with a zero
 * channel), then per GK output channels the products of the 16 positions
 * (2 x GT accumulators) and their output transforms. The input gradient is
 * the same on dy with each kernel turned 180 degrees and the channels
 * swapped (cpu_wino_nhwc_weights, flip). tests/unit/test_engine_amp_ops.c
 * bounds the roundings per output; every output is computed by one thread
 * in one order, so the bits do not depend on the thread count. */
#include "engine/cpu/cpu.h"
#include "engine/cpu/wino_tf.h"

#include "engine/elementwise.h"   /* ew_bf16_to_f32, ew_f32_to_bf16 */

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define GT 8                        /* tiles a block */
#define GK 32                       /* output channels a block: two vectors */

#define NHWC_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

bool cpu_wino_nhwc_supported(void)
{
    return cpu_wino16_bf16_supported() && __builtin_cpu_supports("avx512vl");
}

/* u: per position p, per input channel pair, per output channel (padded to
 * 16), the pair: vdpbf16ps's operand. */
size_t cpu_wino_nhwc_u_count(int ci, int ko)
{
    return (size_t)16 * ((ci + 1) / 2) * ((ko + 15) / 16 * 16) * 2;
}

void cpu_wino_nhwc_weights(const uint16_t *w, int k, int c, bool flip, uint16_t *u)
{
    const int ci = flip ? k : c, ko = flip ? c : k, cp = (ci + 1) / 2;
    const int kpad = (ko + 15) / 16 * 16;
    memset(u, 0, cpu_wino_nhwc_u_count(ci, ko) * sizeof *u);
#pragma omp parallel for schedule(static) if ((size_t)k * c > 1024)
    for (int kk = 0; kk < k; kk++)
        for (int cc = 0; cc < c; cc++) {
            float g[9], t[4][4];
            for (int i = 0; i < 9; i++)
                g[i] = ew_bf16_to_f32(w[((size_t)kk * c + cc) * 9 + i]);
            weight_transform(g, flip, t);
            const int in = flip ? kk : cc, out = flip ? cc : kk;
            for (int p = 0; p < 16; p++)   /* rounded to nearest even, as oneDNN's casts */
                u[(((size_t)p * cp + in / 2) * kpad + out) * 2 + in % 2] =
                    ew_f32_to_bf16(t[p / 4][p % 4]);
        }
}

/* n bfloat16 values (n <= 16, the rest zeros) widened to FP32, exactly. */
NHWC_TARGET static inline __m512 load16(const uint16_t *p, __mmask16 n)
{
    __m256i v = _mm256_maskz_loadu_epi16(n, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* v rounded to bfloat16 (nearest even), the lanes of mask n stored. */
NHWC_TARGET static inline void store16(uint16_t *p, __mmask16 n, __m512 v)
{
    _mm256_mask_storeu_epi16(p, n, (__m256i)_mm512_cvtneps_pbh(v));
}

static inline __mmask16 first(int n)
{
    return (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
}

/* The products of position block m (16 x GT x GK floats) for output
 * channels [k0, k0 + 16 nv): m[(p * GT + t) * GK + j]. Inlined with nv a
 * constant (1 or 2), so the accumulators stay in registers. */
NHWC_TARGET static inline __attribute__((always_inline)) void
products_n(const uint16_t *v, int cp, const uint16_t *u, int kpad, int k0, const int nv, float *m)
{
    const int cpad = 2 * cp;
    for (int p = 0; p < 16; p++) {
        const uint16_t *up = u + ((size_t)p * cp * kpad + k0) * 2, *vp = v + p * GT * cpad;
        __m512 acc[GT][GK / 16];
        for (int t = 0; t < GT; t++)
            for (int i = 0; i < nv; i++)
                acc[t][i] = _mm512_setzero_ps();
        for (int c2 = 0; c2 < cp; c2++) {
            __m512bh uc[GK / 16];
            for (int i = 0; i < nv; i++)
                uc[i] = (__m512bh)_mm512_loadu_si512(up + (size_t)c2 * kpad * 2 + 32 * i);
            for (int t = 0; t < GT; t++) {
                int32_t pair;               /* channels 2 c2 and 2 c2 + 1 of tile t */
                memcpy(&pair, vp + t * cpad + 2 * c2, sizeof pair);
                const __m512bh b = (__m512bh)_mm512_set1_epi32(pair);
                for (int i = 0; i < nv; i++)
                    acc[t][i] = _mm512_dpbf16_ps(acc[t][i], b, uc[i]);
            }
        }
        for (int t = 0; t < GT; t++)
            for (int i = 0; i < nv; i++)
                _mm512_store_ps(m + (p * GT + t) * GK + 16 * i, acc[t][i]);
    }
}

NHWC_TARGET static void products(const uint16_t *v, int cp, const uint16_t *u, int kpad, int k0,
                                 int nv, float *m)
{
    if (nv == 2)
        products_n(v, cp, u, kpad, k0, 2, m);
    else
        products_n(v, cp, u, kpad, k0, 1, m);
}

/* Tile row r (output rows 2r, 2r + 1) of one image: x h x w x ci, y h x w x
 * ko. */
NHWC_TARGET static void run_row(const uint16_t *x, int ci, const uint16_t *u, const float *bias,
                                bool relu, uint16_t *y, int ko, int h, int w, int r)
{
    _Alignas(64) uint16_t v[16 * GT * CPU_WINO_NHWC_MAX];
    _Alignas(64) float m[16 * GT * GK];
    const int cp = (ci + 1) / 2, cpad = 2 * cp, kpad = (ko + 15) / 16 * 16, tw = (w + 1) / 2;
    for (int t0 = 0; t0 < tw; t0 += GT) {
        const int nt = tw - t0 < GT ? tw - t0 : GT;
        /* V, per tile and 16 channels; a short block's missing tiles are
         * zeros (their products are not stored) */
        for (int t = 0; t < GT; t++)
            for (int c0 = 0; c0 < cpad; c0 += 16) {
                const __mmask16 in = first(ci - c0), out = first(cpad - c0);
                __m512 d[4][4], tv[16];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) {
                        const int hh = 2 * r - 1 + i, ww = 2 * (t0 + t) - 1 + j;
                        d[i][j] = t < nt && hh >= 0 && hh < h && ww >= 0 && ww < w ?
                                  load16(x + ((size_t)hh * w + ww) * ci + c0, in) :
                                  _mm512_setzero_ps();
                    }
                in_transform(d, tv);
                for (int p = 0; p < 16; p++)
                    store16(v + (p * GT + t) * cpad + c0, out, tv[p]);
            }
        for (int k0 = 0; k0 < kpad; k0 += GK) {
            const int nv = kpad - k0 < GK ? 1 : 2;
            products(v, cp, u, kpad, k0, nv, m);
            for (int i = 0; i < nv && k0 + 16 * i < ko; i++) {
                const int kc = k0 + 16 * i;
                const __mmask16 kn = first(ko - kc);
                const __m512 b = bias ? _mm512_maskz_loadu_ps(kn, bias + kc) : _mm512_setzero_ps();
                for (int t = 0; t < nt; t++) {
                    const int h0 = 2 * r, w0 = 2 * (t0 + t);
                    __m512 o[2][2];
                    out_transform(m + t * GK + 16 * i, GT * GK, b, relu, o);
                    for (int a = 0; a < 2 && h0 + a < h; a++) {
                        store16(y + ((size_t)(h0 + a) * w + w0) * ko + kc, kn, o[a][0]);
                        if (w0 + 1 < w)
                            store16(y + ((size_t)(h0 + a) * w + w0 + 1) * ko + kc, kn, o[a][1]);
                    }
                }
            }
        }
    }
}

void cpu_wino_nhwc_run(const uint16_t *x, int ci, const uint16_t *u, const float *bias, bool relu,
                       uint16_t *y, int ko, int n, int h, int w)
{
    const int th = (h + 1) / 2;
    const size_t xplane = (size_t)h * w * ci, yplane = (size_t)h * w * ko;
#pragma omp parallel for schedule(static) if ((size_t)n * xplane > 65536)
    for (long long job = 0; job < (long long)n * th; job++) {
        const int img = (int)(job / th);
        run_row(x + img * xplane, ci, u, bias, relu, y + img * yplane, ko, h, w, (int)(job % th));
    }
}
