/* engine/cuda/cuda.h: internals of the CUDA backend, shared by its C files
 * (context, buffers, the operations table in cuda.c) and its CUDA files (the
 * kernels in ew.cu, compiled by nvcc with the arithmetic of
 * engine/elementwise.h).
 *
 * Every operation of the table runs on the GPU: the context, buffers and
 * element-wise operations (accumulation, casts, dropout, the loss, the
 * optimizers, loss-scale unscale and check, norms, batch-norm running
 * statistics) here and in ew.cu; convolution, pooling, dense, batch norm,
 * activations, add and concat on cuDNN and cuBLAS in layers.c
 * (engine/cuda/internal.h); the communicator on NCCL in comm.c. backend_for
 * (engine/backend.h) offers it to nets as "cuda". tests/gpu/ checks the
 * kernels against the same functions run on the host.
 *
 * Streams: one per context; every operation is queued on it. An operation
 * that returns a value to the host (the loss, a norm, an overflow flag)
 * waits for the stream; the others do not.
 */
#ifndef KILN_ENGINE_CUDA_CUDA_H
#define KILN_ENGINE_CUDA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend's table (engine/cuda/cuda.c). */
extern const backend cuda_backend;

/* Kernels (ew.cu): each queues its work on `stream` (a cudaStream_t) and
 * returns 0, or -1 with err set from the launch error. Pointers are device
 * pointers. Reductions write into `scratch`, a device buffer of at least
 * CUDA_RED_BLOCKS doubles, and `host`, CUDA_RED_BLOCKS pinned doubles; they
 * wait for the stream. */
#define CUDA_RED_BLOCKS 64

int cuda_k_acc(void *stream, void *dst, const void *src, size_t count, be_dtype dt, float beta,
               char *err, size_t errlen);
int cuda_k_cast(void *stream, const void *src, be_dtype sdt, void *dst, be_dtype ddt,
                size_t count, char *err, size_t errlen);
int cuda_k_dropout_fwd(void *stream, const be_dropout_desc *d, bool training, const void *x,
                       float *mask, void *y, uint64_t seed, char *err, size_t errlen);
int cuda_k_dropout_bwd(void *stream, const be_dropout_desc *d, const float *mask,
                       const void *dy, void *dx, float beta, char *err, size_t errlen);
/* Softmax cross-entropy rows (ew_softmax_xent_row): per-row losses and hits
 * into row_loss (n floats) and row_hit (n ints) on the device. */
int cuda_k_xent(void *stream, int n, int classes, const float *logits, const int32_t *labels,
                float eps, float grad_scale, float *dlogits, float *probs, float *row_loss,
                int *row_hit, char *err, size_t errlen);
int cuda_k_sgd(void *stream, float *w, float *v, const float *g, size_t count,
               const be_sgd *hp, char *err, size_t errlen);
int cuda_k_optim(void *stream, const be_optim *hp, float *w, float *s1, float *s2,
                 const float *g, size_t count, char *err, size_t errlen);
int cuda_k_bn_running(void *stream, float *rm, float *rv, const float *mean, const float *var,
                      int c, float momentum, int64_t m, char *err, size_t errlen);
/* *found |= any element non-finite (after unscaling by factor, when unscale). */
int cuda_k_check(void *stream, float *g, size_t count, bool unscale, float factor,
                 double *scratch, double *host, bool *found, char *err, size_t errlen);
/* *out = sum of squares in double, over CUDA_RED_BLOCKS fixed chunks added in
 * order (the same result for every run). */
int cuda_k_sumsq(void *stream, const float *p, size_t count, double *scratch, double *host,
                 double *out, char *err, size_t errlen);

/* Layer kernels the library calls do not cover (ew.cu): a per-channel bias
 * added to an NCHW tensor of type dt; its gradient, one FP32 sum per channel
 * over n images of hw elements (a fixed tree: deterministic); activations
 * (be_act_alg; relu with slope alpha) forward and, from the output y,
 * backward; the sum of k tensors; the variance from cuDNN's saved inverse
 * standard deviation. */
int cuda_k_bias_add(void *stream, void *y, const float *b, int n, int c, size_t hw, be_dtype dt,
                    char *err, size_t errlen);
int cuda_k_bias_grad(void *stream, const void *dy, float *db, int n, int c, size_t hw,
                     be_dtype dt, char *err, size_t errlen);
int cuda_k_act(void *stream, int alg, float alpha, bool backward, const void *y_or_x,
               const void *dy, void *out, size_t count, be_dtype dt, char *err, size_t errlen);
int cuda_k_add(void *stream, const void *const *xs, int k, void *y, size_t count, be_dtype dt,
               char *err, size_t errlen);
int cuda_k_inv_to_var(void *stream, const float *inv, float *var, int c, float eps,
                      char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
