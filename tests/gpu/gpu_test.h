/* tests/gpu/gpu_test.h: what the CUDA backend's tests share: a minimal
 * checking harness (no cmocka: tests/gpu/check builds them with nvcc alone),
 * device buffers, random data and the host form of each storage type. */
#ifndef KILN_TESTS_GPU_TEST_H
#define KILN_TESTS_GPU_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "engine/backend.h"
#include "engine/cuda/cuda.h"
#include "engine/elementwise.h"
#include "engine/rng.h"

#define SKIP 77

static const backend *be = &cuda_backend;
static be_ctx *ctx;
static int failures, checks;
static char err[512];

#define CHECK(cond, ...) do { checks++; if (!(cond)) { failures++; \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); } } while (0)
#define OK(call) do { if ((call) != 0) { fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, \
    __LINE__, #call, err); exit(1); } } while (0)

static inline be_buf *dev(const void *host, size_t bytes)
{
    be_buf *b = be->buf_alloc(ctx, bytes, err, sizeof err);
    if (!b) {
        fprintf(stderr, "FAIL: buf_alloc: %s\n", err);
        exit(1);
    }
    if (host)
        OK(be->buf_upload(ctx, b, 0, host, bytes, err, sizeof err));
    return b;
}

static inline void get(const be_buf *b, void *host, size_t bytes)
{
    OK(be->buf_download(ctx, b, 0, host, bytes, err, sizeof err));
}

static inline float *randf(rng *r, size_t n, double scale)
{
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(rng_normal(r) * scale);
    return p;
}

/* Four classes of 3x16x16 images: a bright quadrant under noise. */
static inline void synth(rng *r, float *x, int32_t *y, int count)
{
    for (int i = 0; i < count; i++) {
        int c = (int)(rng_next(r) % 4);
        y[i] = c;
        for (int ch = 0; ch < 3; ch++)
            for (int h = 0; h < 16; h++)
                for (int w = 0; w < 16; w++) {
                    int q = (h >= 8) * 2 + (w >= 8);
                    x[(((size_t)i * 3 + ch) * 16 + h) * 16 + w] =
                        (float)((q == c ? 1.0 : 0.0) + 0.5 * rng_normal(r));
                }
    }
}

static inline bool same(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b));
}

/* Host storage of a type, as the CUDA backend stores it (2 bytes for both
 * 16-bit types). */
static inline void to_type(const float *v, void *out, size_t n, be_dtype dt)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == BE_F32)
            ((float *)out)[i] = v[i];
        else
            ((uint16_t *)out)[i] = dt == BE_BF16 ? ew_f32_to_bf16(v[i]) : ew_f32_to_f16(v[i]);
    }
}

static inline float from_type(const void *p, size_t i, be_dtype dt)
{
    if (dt == BE_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == BE_BF16 ? ew_bf16_to_f32(h) : ew_f16_to_f32(h);
}


/* Skips (exit 77, which ctest reports as skipped) without a usable GPU;
 * otherwise makes ctx and prints the device. */
static inline void gpu_start(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIPPED: no CUDA device here; run tests/gpu/check on a GPU machine\n");
        exit(SKIP);
    }
    if (be->ctx_create(0, &ctx, err, sizeof err) != 0) {
        printf("SKIPPED: %s\n", err);
        exit(SKIP);
    }
    struct cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("device 0: %s, compute capability %d.%d\n", p.name, p.major, p.minor);
}

static inline int gpu_finish(void)
{
    be->ctx_free(ctx);
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}

#endif
