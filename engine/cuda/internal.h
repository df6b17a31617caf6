/* engine/cuda/internal.h: the CUDA backend's context, buffer and plan
 * structures, shared by cuda.c (context, buffers, element-wise ops) and
 * layers.c (convolution, pooling and batch norm on cuDNN, dense layers on
 * cuBLAS, activations, add and concat). C only: ew.cu sees cuda.h. */
#ifndef KILN_ENGINE_CUDA_INTERNAL_H
#define KILN_ENGINE_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "engine/cuda/cuda.h"

struct be_ctx {
    int device;
    cudaStream_t stream;
    cudnnHandle_t dnn;
    cublasHandle_t blas;
    void *ws;                       /* cuDNN workspace, shared by the context's plans */
    size_t ws_bytes;
    double *scratch;                /* CUDA_RED_BLOCKS doubles on the device */
    double *host;                   /* CUDA_RED_BLOCKS pinned doubles */
};

struct be_buf {
    void *p;                        /* device memory */
    size_t bytes;
};

typedef enum cu_kind {
    CU_XENT, CU_CONV, CU_POOL, CU_DENSE, CU_ACT, CU_BN, CU_ADD, CU_CONCAT
} cu_kind;

struct be_plan {
    cu_kind kind;
    /* the loss: per-row results on the device and the host */
    int n, classes;
    float *row_loss;
    int *row_hit;
    float *host_loss;
    int *host_hit;
    /* the layer's descriptor as given */
    be_conv_desc conv;
    be_pool_desc pool;
    be_dense_desc dense;
    be_act_desc act;
    be_bn_desc bn;
    be_add_desc add;
    be_concat_desc cat;
    /* cuDNN: x and y in the type computed in, the filter, the operation */
    cudnnTensorDescriptor_t xd, yd, statd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnPoolingDescriptor_t pd;
    cudnnConvolutionFwdAlgo_t fwd_algo;
    cudnnConvolutionBwdDataAlgo_t bwd_data_algo;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo;
    /* staging, owned: an operand cast into the type computed in, or a result
     * computed there before its cast out */
    void *stage_x, *stage_y, *stage_w;
    /* pooling: the forward pass's operands, which cuDNN's backward reads */
    const void *last_x, *last_y;
    /* batch norm: cuDNN's saved mean and inverse deviation; running
     * statistics it insists on updating (kiln keeps its own) */
    float *save_mean, *save_inv, *run_mean, *run_var;
    void *dx_unused;
};

int cu_err(cudaError_t e, const char *what, char *err, size_t errlen);
int dnn_err(cudnnStatus_t s, const char *what, char *err, size_t errlen);
int blas_err(cublasStatus_t s, const char *what, char *err, size_t errlen);

#define CU_TRY(call, what) do { cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return cu_err(e_, (what), err, errlen); } while (0)

/* The layer ops (layers.c). */
void cu_plan_release(be_plan *p);
int cu_conv_plan(be_ctx *, const be_conv_desc *, unsigned, be_plan **, char *, size_t);
int cu_conv_fwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, const be_buf *, be_buf *,
                char *, size_t);
int cu_conv_bwd_data(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *, char *,
                     size_t);
int cu_conv_bwd_weights(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *, be_buf *,
                        char *, size_t);
int cu_pool_plan(be_ctx *, const be_pool_desc *, unsigned, be_plan **, char *, size_t);
int cu_pool_fwd(be_ctx *, be_plan *, const be_buf *, be_buf *, char *, size_t);
int cu_pool_bwd(be_ctx *, be_plan *, const be_buf *, be_buf *, char *, size_t);
int cu_dense_plan(be_ctx *, const be_dense_desc *, unsigned, be_plan **, char *, size_t);
int cu_dense_fwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, const be_buf *, be_buf *,
                 char *, size_t);
int cu_dense_bwd_data(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *, char *,
                      size_t);
int cu_dense_bwd_weights(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *, be_buf *,
                         char *, size_t);
int cu_act_plan(be_ctx *, const be_act_desc *, unsigned, be_plan **, char *, size_t);
int cu_act_fwd(be_ctx *, be_plan *, const be_buf *, be_buf *, char *, size_t);
int cu_act_bwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, be_buf *, char *, size_t);
int cu_bn_plan(be_ctx *, const be_bn_desc *, unsigned, be_plan **, char *, size_t);
int cu_bn_fwd(be_ctx *, be_plan *, bool, const be_buf *, const be_buf *, const be_buf *, be_buf *,
              be_buf *, be_buf *, char *, size_t);
int cu_bn_bwd(be_ctx *, be_plan *, const be_buf *, const be_buf *, const be_buf *, const be_buf *,
              const be_buf *, const be_buf *, be_buf *, be_buf *, be_buf *, char *, size_t);
int cu_add_plan(be_ctx *, const be_add_desc *, be_plan **, char *, size_t);
int cu_add_fwd(be_ctx *, be_plan *, const be_buf *const *, be_buf *, char *, size_t);
int cu_concat_plan(be_ctx *, const be_concat_desc *, be_plan **, char *, size_t);
int cu_concat_fwd(be_ctx *, be_plan *, const be_buf *const *, be_buf *, char *, size_t);
int cu_concat_bwd(be_ctx *, be_plan *, const be_buf *, int, be_buf *, float, char *, size_t);

/* Data parallelism with NCCL (comm.c). */
void cuda_ctx_bind(be_ctx *ctx);
int cuda_comm_create(be_ctx *const *ctxs, int n, be_comm **out, char *err, size_t errlen);
void cuda_comm_free(be_comm *c);
void cuda_comm_abort(be_comm *c);
int cuda_comm_create_world(be_ctx *ctx, const net_world *w, be_comm **out, char *err,
                           size_t errlen);
int cuda_comm_gather(be_ctx *ctx, be_comm *c, const void *in, size_t bytes, void *out,
                     char *err, size_t errlen);
int cuda_allreduce(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs, const size_t *counts,
                   int k, char *err, size_t errlen);
int cuda_allreduce_wait(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen);

#endif
