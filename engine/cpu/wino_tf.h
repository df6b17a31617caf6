/* engine/cpu/wino_tf.h: the transforms of kiln's Winograd F(2x2, 3x3)
 * kernels (wino16.c: 16 channels, nChw16c; wino_nhwc.c: bfloat16,
 * channels-last, other channel counts), in FP32 on vectors of 16 channels.
 * Lavin and Gray's matrices:
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 * and per 2x2 output tile y = A^T [ sum_c (G g G^T) . (B^T d B) ] A. */
#ifndef KILN_ENGINE_CPU_WINO_TF_H
#define KILN_ENGINE_CPU_WINO_TF_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

/* G: the weights' transform, and its transpose's in the weight gradient. */
static const float G[4][3] = {
    { 1, 0, 0 }, { 0.5f, 0.5f, 0.5f }, { 0.5f, -0.5f, 0.5f }, { 0, 0, 1 },
};

/* G g G^T of one 3x3 kernel g (row-major), turned 180 degrees where flip
 * (the input gradient): u[i][j]. */
static inline void weight_transform(const float g[9], bool flip, float u[4][4])
{
    float gk[9], t[4][3];
    for (int i = 0; i < 9; i++)
        gk[i] = flip ? g[8 - i] : g[i];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            t[i][j] = G[i][0] * gk[j] + G[i][1] * gk[3 + j] + G[i][2] * gk[6 + j];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            u[i][j] = t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
}

/* B^T d B of a 4x4 patch d of channel vectors: v[i * 4 + j]. */
__attribute__((target("avx512f")))
static inline void in_transform(__m512 d[4][4], __m512 v[16])
{
    __m512 r[4][4];
    for (int j = 0; j < 4; j++) {
        r[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        r[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        r[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        r[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
    }
    for (int i = 0; i < 4; i++) {
        v[i * 4 + 0] = _mm512_sub_ps(r[i][0], r[i][2]);
        v[i * 4 + 1] = _mm512_add_ps(r[i][1], r[i][2]);
        v[i * 4 + 2] = _mm512_sub_ps(r[i][2], r[i][1]);
        v[i * 4 + 3] = _mm512_sub_ps(r[i][1], r[i][3]);
    }
}

/* A^T m A of one tile (the products of position p at m[p * stride] floats,
 * p = 0..15, FP32 in every kernel) plus the bias, then max(0, .) where
 * relu: the 2x2 outputs o[i][j]. */
__attribute__((target("avx512f")))
static inline void out_transform(const float *m, size_t stride, __m512 bias, bool relu,
                                 __m512 o[2][2])
{
    __m512 q[2][4];
    for (int j = 0; j < 4; j++) {
        __m512 m0 = _mm512_load_ps(m + (0 * 4 + j) * stride),
               m1 = _mm512_load_ps(m + (1 * 4 + j) * stride),
               m2 = _mm512_load_ps(m + (2 * 4 + j) * stride),
               m3 = _mm512_load_ps(m + (3 * 4 + j) * stride);
        q[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        q[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
    }
    for (int i = 0; i < 2; i++) {
        o[i][0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(q[i][0], q[i][1]), q[i][2]), bias);
        o[i][1] = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(q[i][1], q[i][2]), q[i][3]), bias);
        if (relu) {                 /* max(0, o): a NaN stays NaN, as in a ReLU of its own */
            o[i][0] = _mm512_max_ps(_mm512_setzero_ps(), o[i][0]);
            o[i][1] = _mm512_max_ps(_mm512_setzero_ps(), o[i][1]);
        }
    }
}

#endif
