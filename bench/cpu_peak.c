/* bench/cpu_peak.c: this CPU's multiply-add peak, the denominator of "what
 * fraction of the machine a layer reaches" (bench/layer_peak). Each thread
 * runs chains of independent AVX-512 instructions on registers only, no
 * memory traffic: FP32 multiply-adds (vfmadd231ps, 32 FLOP each: 16 lanes,
 * a multiply and an add) and bfloat16 dot products (vdpbf16ps, 64 FLOP
 * each: 16 lanes of two products and their sum into an FP32 accumulator),
 * 12 accumulators deep so that latency never binds. Prints GFLOP/s per
 * kind for 1 thread and for the threads OpenMP runs (OMP_NUM_THREADS), best
 * of 5 runs of about 0.2 s.
 *
 * Usage: cpu_peak [--json] */
#include <immintrin.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define CHAINS 12
#define ITERS 2000000L

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ITERS x CHAINS FP32 multiply-adds; returns a value the compiler must keep. */
__attribute__((target("avx512f"))) static float fma_loop(float seed)
{
    __m512 acc[CHAINS], a = _mm512_set1_ps(seed), b = _mm512_set1_ps(0.999f);
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < ITERS; k++)
#pragma GCC unroll 12   /* the accumulators in registers, not in an array in memory */
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    __m512 s = acc[0];
#pragma GCC unroll 12
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512bf16"))) static float dpbf16_loop(float seed)
{
    __m512 acc[CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(seed), _mm512_set1_ps(seed)),
             b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < ITERS; k++)
#pragma GCC unroll 12   /* the accumulators in registers, not in an array in memory */
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
#pragma GCC unroll 12
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* Best GFLOP/s of 5 runs of kind (0: FP32 FMA, 1: bf16 dot) on nt threads. */
static double rate(int kind, int nt)
{
    double best = 0;
    volatile float sink = 0;
    for (int run = 0; run < 5; run++) {
        double t = now();
        float s = 0;
#pragma omp parallel num_threads(nt) reduction(+ : s)
        s += kind ? dpbf16_loop(1.0f + (float)omp_get_thread_num())
                  : fma_loop(1.0f + (float)omp_get_thread_num());
        t = now() - t;
        sink += s;
        double flop = (double)nt * ITERS * CHAINS * (kind ? 64.0 : 32.0);
        if (flop / t > best)
            best = flop / t;
    }
    (void)sink;
    return best * 1e-9;
}

int main(int argc, char **argv)
{
    const int nt = omp_get_max_threads();
    const bool json = argc > 1 && strcmp(argv[1], "--json") == 0;
    if (!__builtin_cpu_supports("avx512f")) {
        fprintf(stderr, "cpu_peak: this CPU has no AVX-512\n");
        return 2;
    }
    const bool bf16 = __builtin_cpu_supports("avx512bf16");
    double f1 = rate(0, 1), fn = rate(0, nt), b1 = bf16 ? rate(1, 1) : 0,
           bn = bf16 ? rate(1, nt) : 0;
    if (json) {
        printf("{\"threads\": %d, \"fp32_fma_gflops\": %.1f, \"bf16_dot_gflops\": %.1f, "
               "\"fp32_fma_gflops_1t\": %.1f, \"bf16_dot_gflops_1t\": %.1f}\n",
               nt, fn, bn, f1, b1);
        return 0;
    }
    printf("FP32 multiply-add (vfmadd231ps): %8.1f GFLOP/s on 1 thread, %8.1f on %d\n", f1, fn, nt);
    if (bf16)
        printf("bfloat16 dot (vdpbf16ps):        %8.1f GFLOP/s on 1 thread, %8.1f on %d\n", b1, bn,
               nt);
    else
        printf("bfloat16 dot: this CPU has no AVX-512 BF16\n");
    return 0;
}
