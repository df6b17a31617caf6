/* engine/cpu/wino16.c: kiln's own Winograd F(2x2, 3x3) kernel for the one
 * shape oneDNN 2.6 serves worst: 3x3, stride 1, padding 1 convolutions of 16
 * FP32 channels in and out (resnet20's first stage, a third of its step).
 * oneDNN's direct kernel runs these at about the machine's multiply-add
 * rate, and its Winograd F(4x4, 3x3) is slower still at 16 channels (conv.c
 * has the table); this one does 16 multiply-adds per channel pair and output
 * tile of 2x2 instead of 36, and keeps each block of tiles in L1 from the
 * input transform to the output. resnet20's forward pass, b128 32x32 on 2
 * threads: 1.02 ms against oneDNN's 1.87.
 *
 * Per 2x2 output tile t of image n, with the 4x4 input patch d (padding
 * zeros) and each (input c, output k) kernel g:
 *   y = A^T [ sum_c (G g G^T) . (B^T d B) ] A (+ bias)
 * with Lavin and Gray's matrices (wino_tf.h, which holds the transforms
 * this file shares with wino_nhwc.c).
 * The data are nChw16c, which for 16 channels is one 64-byte vector of
 * channels per pixel, so a transform works on whole vectors and the
 * channel sum is 16 multiply-adds of a broadcast input value into a
 * vector of 16 outputs. The input gradient is the same computation on dy
 * with each kernel turned by 180 degrees and its channels swapped
 * (wino16_weights, flip).
 *
 * Every output is computed by one thread in a fixed order, so the results
 * do not depend on the thread count. tests/unit/test_engine_ops.c bounds the
 * rounding (the header comment there). */
#include "engine/cpu/cpu.h"
#include "engine/cpu/wino_tf.h"

#include "engine/elementwise.h"   /* ew_bf16_to_f32, ew_f32_to_bf16 */

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define WT 8                        /* tiles a block: 8 accumulators in the products */

bool cpu_wino16_supported(void)
{
    return __builtin_cpu_supports("avx512f");
}

void cpu_wino16_weights(const float *w, bool flip, float *u)
{
    for (int k = 0; k < 16; k++)
        for (int c = 0; c < 16; c++) {
            float t[4][4];
            weight_transform(w + (k * 16 + c) * 9, flip, t);
            /* forward: u[p][c][k]; flipped (input gradient): u[p][k][c] */
            int in = flip ? k : c, out = flip ? c : k;
            for (int p = 0; p < 16; p++)
                u[(p * 16 + in) * 16 + out] = t[p / 4][p % 4];
        }
}

/* B^T d B of one tile's 4x4 patch, whose top left pixel is (h0, w0) (-1 at
 * the edges: the padding), into v[p * bt * 16] for p = 0..15 (bt: the tiles
 * of the block the buffer holds). */
__attribute__((target("avx512f")))
static void in_tile(const float *x, int h, int w, int h0, int w0, float *v, int bt)
{
    __m512 d[4][4], t[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int hh = h0 + i, ww = w0 + j;
            d[i][j] = hh >= 0 && hh < h && ww >= 0 && ww < w ?
                      _mm512_loadu_ps(x + ((size_t)hh * w + ww) * 16) : _mm512_setzero_ps();
        }
    in_transform(d, t);
    for (int p = 0; p < 16; p++)
        _mm512_store_ps(v + p * bt * 16, t[p]);
}

/* out_transform written to the 2x2 outputs at (h0, w0) that lie inside the
 * image. */
__attribute__((target("avx512f")))
static void out_tile(const float *m, __m512 bias, bool relu, float *y, int h, int w, int h0,
                     int w0)
{
    __m512 o[2][2];
    out_transform(m, WT * 16, bias, relu, o);
    for (int i = 0; i < 2 && h0 + i < h; i++) {
        _mm512_storeu_ps(y + ((size_t)(h0 + i) * w + w0) * 16, o[i][0]);
        if (w0 + 1 < w)
            _mm512_storeu_ps(y + ((size_t)(h0 + i) * w + w0 + 1) * 16, o[i][1]);
    }
}

/* One job of cpu_wino16_run: tile row r of image img (2 output rows). */
__attribute__((target("avx512f")))
static void run_row(const float *x, const float *u, const float *bias, bool relu, float *y, int h,
                    int w, int r)
{
    _Alignas(64) float v[16 * WT * 16], m[16 * WT * 16];
    const int tw = (w + 1) / 2;
    const __m512 b = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    for (int t0 = 0; t0 < tw; t0 += WT) {
        const int nt = tw - t0 < WT ? tw - t0 : WT;
        for (int t = 0; t < nt; t++)
            in_tile(x, h, w, 2 * r - 1, 2 * (t0 + t) - 1, v + t * 16, WT);
        for (int t = nt; t < WT; t++)           /* a short last block: products of zeros */
            for (int p = 0; p < 16; p++)
                _mm512_store_ps(v + (p * WT + t) * 16, _mm512_setzero_ps());
        for (int p = 0; p < 16; p++) {
            const float *up = u + p * 256, *vp = v + p * WT * 16;
            __m512 acc[WT];
            for (int t = 0; t < WT; t++)
                acc[t] = _mm512_setzero_ps();
            for (int c = 0; c < 16; c++) {
                __m512 uc = _mm512_load_ps(up + c * 16);
                for (int t = 0; t < WT; t++)
                    acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(vp[t * 16 + c]), uc, acc[t]);
            }
            for (int t = 0; t < WT; t++)
                _mm512_store_ps(m + (p * WT + t) * 16, acc[t]);
        }
        for (int t = 0; t < nt; t++)
            out_tile(m + t * 16, b, relu, y, h, w, 2 * r, 2 * (t0 + t));
    }
}

/* (No vector types out here: an OpenMP region's outlined function does not
 * take the target attribute, and clang refuses AVX-512 values in it.) */
void cpu_wino16_run(const float *x, const float *u, const float *bias, bool relu, float *y, int n,
                    int h, int w)
{
    const int th = (h + 1) / 2;
    const size_t plane = (size_t)h * w * 16;
#pragma omp parallel for schedule(static) if ((size_t)n * plane > 65536)
    for (long long job = 0; job < (long long)n * th; job++) {
        const int img = (int)(job / th);
        run_row(x + (size_t)img * plane, u, bias, relu, y + (size_t)img * plane, h, w,
                (int)(job % th));
    }
}

/* ---- bfloat16 (amp-bf16): the forward pass and the input gradient ------------------- */

/* The same algorithm on bfloat16 tensors, with AVX-512 BF16 dot products:
 * the inputs widened to FP32 (exactly), both transforms in FP32 and then
 * rounded to bfloat16 (round to nearest even, as oneDNN's casts), each
 * product of a channel pair summed into FP32 by vdpbf16ps, the output
 * transform and the bias in FP32 and the result rounded to bfloat16. Half
 * the multiply instructions of the FP32 kernel, on half the bytes. The
 * roundings of V and U add at most (2u + u^2) |A^T| (sum_c |U||V|) |A| to
 * the error of the direct algorithm (u = 2^-8; tests/unit/
 * test_engine_amp_ops.c computes that bound per output). The weight
 * gradient stays with oneDNN's bfloat16 kernel. */

bool cpu_wino16_bf16_supported(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512bf16");
}

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

void cpu_wino16_weights_bf16(const uint16_t *w, bool flip, uint16_t *u)
{
    for (int k = 0; k < 16; k++)
        for (int c = 0; c < 16; c++) {
            float g[9], t[4][4];
            for (int i = 0; i < 9; i++)
                g[i] = ew_bf16_to_f32(w[(k * 16 + c) * 9 + i]);
            weight_transform(g, flip, t);
            /* u[p][in / 2][out][in % 2]: per position, 8 vectors of (channel
             * pair, 16 outputs), vdpbf16ps's operand; rounded to nearest even,
             * as vcvtneps2bf16 and oneDNN's casts */
            int in = flip ? k : c, out = flip ? c : k;
            for (int p = 0; p < 16; p++)
                u[((p * 8 + in / 2) * 16 + out) * 2 + in % 2] = ew_f32_to_bf16(t[p / 4][p % 4]);
        }
}

BF16_TARGET static inline __m512 bf16_load(const uint16_t *p)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

BF16_TARGET static inline void bf16_store(uint16_t *p, __m512 v)
{
    _mm256_storeu_si256((__m256i *)p, (__m256i)_mm512_cvtneps_pbh(v));
}

/* in_tile on bfloat16: B^T d B rounded to bfloat16, v[p * bt * 16]. */
BF16_TARGET static void in_tile_bf16(const uint16_t *x, int h, int w, int h0, int w0,
                                     uint16_t *v, int bt)
{
    __m512 d[4][4], t[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int hh = h0 + i, ww = w0 + j;
            d[i][j] = hh >= 0 && hh < h && ww >= 0 && ww < w ?
                      bf16_load(x + ((size_t)hh * w + ww) * 16) : _mm512_setzero_ps();
        }
    in_transform(d, t);
    for (int p = 0; p < 16; p++)
        bf16_store(v + p * bt * 16, t[p]);
}

/* out_tile writing bfloat16. */
BF16_TARGET static void out_tile_bf16(const float *m, __m512 bias, bool relu, uint16_t *y, int h,
                                      int w, int h0, int w0)
{
    __m512 o[2][2];
    out_transform(m, WT * 16, bias, relu, o);
    for (int i = 0; i < 2 && h0 + i < h; i++) {
        bf16_store(y + ((size_t)(h0 + i) * w + w0) * 16, o[i][0]);
        if (w0 + 1 < w)
            bf16_store(y + ((size_t)(h0 + i) * w + w0 + 1) * 16, o[i][1]);
    }
}

BF16_TARGET static void run_row_bf16(const uint16_t *x, const uint16_t *u, const float *bias,
                                     bool relu, uint16_t *y, int h, int w, int r)
{
    _Alignas(64) uint16_t v[16 * WT * 16];
    _Alignas(64) float m[16 * WT * 16];
    const int tw = (w + 1) / 2;
    const __m512 b = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    for (int t0 = 0; t0 < tw; t0 += WT) {
        const int nt = tw - t0 < WT ? tw - t0 : WT;
        for (int t = 0; t < nt; t++)
            in_tile_bf16(x, h, w, 2 * r - 1, 2 * (t0 + t) - 1, v + t * 16, WT);
        for (int t = nt; t < WT; t++)           /* a short last block: products of zeros */
            for (int p = 0; p < 16; p++)
                memset(v + (p * WT + t) * 16, 0, 16 * sizeof *v);
        for (int p = 0; p < 16; p++) {
            const uint16_t *up = u + p * 256, *vp = v + p * WT * 16;
            __m512 acc[WT];
            for (int t = 0; t < WT; t++)
                acc[t] = _mm512_setzero_ps();
            for (int c2 = 0; c2 < 8; c2++) {
                __m512bh uc = (__m512bh)_mm512_load_si512(up + c2 * 32);
                for (int t = 0; t < WT; t++) {
                    int32_t pair;               /* channels 2 c2 and 2 c2 + 1 of tile t */
                    memcpy(&pair, vp + t * 16 + 2 * c2, sizeof pair);
                    acc[t] = _mm512_dpbf16_ps(acc[t], (__m512bh)_mm512_set1_epi32(pair), uc);
                }
            }
            for (int t = 0; t < WT; t++)
                _mm512_store_ps(m + (p * WT + t) * 16, acc[t]);
        }
        for (int t = 0; t < nt; t++)
            out_tile_bf16(m + t * 16, b, relu, y, h, w, 2 * r, 2 * (t0 + t));
    }
}

void cpu_wino16_run_bf16(const uint16_t *x, const uint16_t *u, const float *bias, bool relu,
                         uint16_t *y, int n, int h, int w)
{
    const int th = (h + 1) / 2;
    const size_t plane = (size_t)h * w * 16;
#pragma omp parallel for schedule(static) if ((size_t)n * plane > 65536)
    for (long long job = 0; job < (long long)n * th; job++) {
        const int img = (int)(job / th);
        run_row_bf16(x + (size_t)img * plane, u, bias, relu, y + (size_t)img * plane, h, w,
                     (int)(job % th));
    }
}

/* ---- the weight gradient ------------------------------------------------------------- */

/* With M = U . V per tile and channel pair (U = G g G^T, V = B^T d B) and
 * y = A^T M A, the gradient of M is A dy A^T, of U the sum over images and
 * tiles of (A dy A^T) . V, and of g G^T dU G. */

#define WB 16                       /* tiles a block: a row of a 32-wide image */
#define WCHUNKS 32                  /* fixed partial sums: the same for any thread count */

/* A dy A^T of one tile's 2x2 gradient at (h0, w0) (zeros outside the image)
 * into m[p * WB * 16]. */
__attribute__((target("avx512f")))
static void grad_tile(const float *dy, int h, int w, int h0, int w0, float *m)
{
    __m512 d[2][2], e[4][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            d[i][j] = h0 + i < h && w0 + j < w ?
                      _mm512_loadu_ps(dy + ((size_t)(h0 + i) * w + w0 + j) * 16) :
                      _mm512_setzero_ps();
    const __m512 z = _mm512_setzero_ps();
    for (int j = 0; j < 2; j++) {           /* A dy, A = [1 0; 1 1; 1 -1; 0 -1] */
        e[0][j] = d[0][j];
        e[1][j] = _mm512_add_ps(d[0][j], d[1][j]);
        e[2][j] = _mm512_sub_ps(d[0][j], d[1][j]);
        e[3][j] = _mm512_sub_ps(z, d[1][j]);
    }
    for (int i = 0; i < 4; i++) {           /* (A dy) A^T */
        _mm512_store_ps(m + (i * 4 + 0) * WB * 16, e[i][0]);
        _mm512_store_ps(m + (i * 4 + 1) * WB * 16, _mm512_add_ps(e[i][0], e[i][1]));
        _mm512_store_ps(m + (i * 4 + 2) * WB * 16, _mm512_sub_ps(e[i][0], e[i][1]));
        _mm512_store_ps(m + (i * 4 + 3) * WB * 16, _mm512_sub_ps(z, e[i][1]));
    }
}

/* One chunk's dU (du[p][c][k]) and bias gradient (du[4096 + k]) over the
 * tile rows [j0, j1) of all images (job = image * tile rows + row). */
__attribute__((target("avx512f")))
static void bwd_w_chunk(const float *x, const float *dy, float *du, int h, int w, int th,
                        long long j0, long long j1)
{
    _Alignas(64) float v[16 * WB * 16], m[16 * WB * 16];
    const int tw = (w + 1) / 2;
    const size_t plane = (size_t)h * w * 16;
    __m512 db = _mm512_setzero_ps();
    memset(du, 0, (16 * 256 + 16) * sizeof *du);
    for (long long job = j0; job < j1; job++) {
        const int img = (int)(job / th), r = (int)(job % th);
        const float *xn = x + (size_t)img * plane, *dyn = dy + (size_t)img * plane;
        for (int t0 = 0; t0 < tw; t0 += WB) {
            const int nt = tw - t0 < WB ? tw - t0 : WB;
            for (int t = 0; t < nt; t++) {
                in_tile(xn, h, w, 2 * r - 1, 2 * (t0 + t) - 1, v + t * 16, WB);
                grad_tile(dyn, h, w, 2 * r, 2 * (t0 + t), m + t * 16);
            }
            for (int p = 0; p < 16; p++) {
                float *dup = du + p * 256;
                const float *vp = v + p * WB * 16, *mp = m + p * WB * 16;
                __m512 acc[16];
                for (int c = 0; c < 16; c++)
                    acc[c] = _mm512_load_ps(dup + c * 16);
                for (int t = 0; t < nt; t++) {
                    __m512 g = _mm512_load_ps(mp + t * 16);
                    for (int c = 0; c < 16; c++)
                        acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(vp[t * 16 + c]), g, acc[c]);
                }
                for (int c = 0; c < 16; c++)
                    _mm512_store_ps(dup + c * 16, acc[c]);
            }
        }
        for (int i = 2 * r; i < 2 * r + 2 && i < h; i++)
            for (int j = 0; j < w; j++)
                db = _mm512_add_ps(db, _mm512_loadu_ps(dyn + ((size_t)i * w + j) * 16));
    }
    _mm512_store_ps(du + 16 * 256, db);
}

size_t cpu_wino16_bwd_w_scratch(void)
{
    return (size_t)WCHUNKS * (16 * 256 + 16) * sizeof(float);
}

__attribute__((target("avx512f")))
void cpu_wino16_bwd_w(const float *x, const float *dy, float *dw, float *db, int n, int h,
                      int w, float *scratch)
{
    const int th = (h + 1) / 2;
    const long long jobs = (long long)n * th;
    const int chunks = jobs < WCHUNKS ? (int)jobs : WCHUNKS;
    const size_t per = 16 * 256 + 16;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int ch = 0; ch < chunks; ch++)
        bwd_w_chunk(x, dy, scratch + ch * per, h, w, th, jobs * ch / chunks,
                    jobs * (ch + 1) / chunks);
    for (int ch = 1; ch < chunks; ch++)         /* in chunk order */
        for (size_t i = 0; i < per; i += 16)
            _mm512_store_ps(scratch + i, _mm512_add_ps(_mm512_load_ps(scratch + i),
                                                       _mm512_load_ps(scratch + ch * per + i)));
    for (int k = 0; k < 16; k++)
        for (int c = 0; c < 16; c++) {
            float t[3][4];                      /* G^T dU, then (G^T dU) G */
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++) {
                    float s = 0;
                    for (int a = 0; a < 4; a++)
                        s += G[a][i] * scratch[((a * 4 + j) * 16 + c) * 16 + k];
                    t[i][j] = s;
                }
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) {
                    float s = 0;
                    for (int b = 0; b < 4; b++)
                        s += t[i][b] * G[b][j];
                    dw[(k * 16 + c) * 9 + i * 3 + j] = s;
                }
        }
    if (db)
        memcpy(db, scratch + 16 * 256, 16 * sizeof *db);
}
