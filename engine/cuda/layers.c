/* engine/cuda/layers.c: the CUDA backend's layer ops. Convolution, pooling
 * and batch norm run on cuDNN, dense layers on cuBLAS (cublasGemmEx, FP32
 * accumulation, Tensor-Core math for 16-bit operands), activations, bias,
 * add and concat on the kernels of ew.cu.
 *
 * Types (engine/backend.h, be_dtype): a convolution computes in its weights'
 * type (wdtype); cuDNN wants x, w and y in one type, so an operand of another
 * type is cast into the plan's staging buffer on the way in, and a result
 * computed in the plan's type is cast into its tensor on the way out. FP32
 * convolutions use FMA math, not TF32, so that they stay FP32. The weight
 * gradient of a 16-bit convolution is accumulated in FP32 inside cuDNN,
 * written in the 16-bit type and cast to FP32 (PyTorch AMP's practice);
 * dense layers write FP32 weight gradients directly.
 *
 * Layouts: NCHW only (the net asks no blocked layouts of this backend).
 * Convolution algorithms are chosen by cuDNN's benchmark once per shape and
 * kept for the process (algo_cache below).
 * Convolution and pooling padding must be symmetric here. */
#include "engine/cuda/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define WS_LIMIT ((size_t)1 << 30)      /* the most cuDNN workspace an algorithm may take */

#define DNN_TRY(call, what) do { cudnnStatus_t s_ = (call); \
    if (s_ != CUDNN_STATUS_SUCCESS) { dnn_err(s_, (what), err, errlen); goto fail; } } while (0)

static cudnnDataType_t dnn_type(be_dtype dt)
{
    return dt == BE_BF16 ? CUDNN_DATA_BFLOAT16 : dt == BE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

static cudaDataType_t blas_type(be_dtype dt)
{
    return dt == BE_BF16 ? CUDA_R_16BF : dt == BE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static size_t esize(be_dtype dt)
{
    return dt == BE_F32 ? 4 : 2;
}

void cu_plan_release(be_plan *p)
{
    if (!p)
        return;
    cudaFree(p->row_loss);
    cudaFree(p->row_hit);
    free(p->host_loss);
    free(p->host_hit);
    if (p->xd)
        cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd)
        cudnnDestroyTensorDescriptor(p->yd);
    if (p->statd)
        cudnnDestroyTensorDescriptor(p->statd);
    if (p->wd)
        cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd)
        cudnnDestroyConvolutionDescriptor(p->cd);
    if (p->pd)
        cudnnDestroyPoolingDescriptor(p->pd);
    cudaFree(p->stage_x);
    cudaFree(p->stage_y);
    cudaFree(p->stage_w);
    cudaFree(p->save_mean);
    cudaFree(p->save_inv);
    cudaFree(p->run_mean);
    cudaFree(p->run_var);
    cudaFree(p->dx_unused);
    free(p);
}

static be_plan *new_plan(cu_kind kind, char *err, size_t errlen)
{
    be_plan *p = calloc(1, sizeof *p);
    if (!p)
        set_err(err, errlen, "cuda backend: out of memory");
    else
        p->kind = kind;
    return p;
}

static int dev_alloc(void **p, size_t bytes, char *err, size_t errlen)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    return e == cudaSuccess ? 0 : cu_err(e, "allocating a plan's buffer", err, errlen);
}

static int grow_ws(be_ctx *ctx, size_t bytes, char *err, size_t errlen)
{
    if (bytes <= ctx->ws_bytes)
        return 0;
    cudaStreamSynchronize(ctx->stream);
    cudaFree(ctx->ws);
    ctx->ws = NULL;
    ctx->ws_bytes = 0;
    if (dev_alloc(&ctx->ws, bytes, err, errlen) < 0)
        return -1;
    ctx->ws_bytes = bytes;
    return 0;
}

static int tensor4(cudnnTensorDescriptor_t *d, int n, int c, int h, int w, be_dtype dt,
                   char *err, size_t errlen)
{
    cudnnStatus_t s = cudnnCreateTensorDescriptor(d);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NCHW, dnn_type(dt), n, c, h, w);
    return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_err(s, "tensor descriptor", err, errlen);
}

static int plain_only(be_layout a, be_layout b, char *err, size_t errlen)
{
    if (a != BE_PLAIN || b != BE_PLAIN)
        return set_err(err, errlen, "cuda backend: only NCHW (plain) layouts");
    return 0;
}

/* ---- convolution ------------------------------------------------------------ */

/* Algorithms chosen for a shape, kept for the process: cuDNN's benchmark
 * times its candidates, so choosing again could pick another algorithm (with
 * other rounding) for the same layer; with the cache every plan of a shape
 * in a process computes alike, and the benchmark runs once per shape.
 * (Another process may choose otherwise: GPU runs repeat within a process.) */
#define ALGO_CACHE 256
static struct algo_entry {
    char key[160];
    int fwd, bwd_data, bwd_filter;      /* -1: not chosen yet */
} algo_cache[ALGO_CACHE];
static int algo_count;
static pthread_mutex_t algo_lock = PTHREAD_MUTEX_INITIALIZER;

static void conv_key(const be_conv_desc *d, int device, char *key, size_t len)
{
    snprintf(key, len, "%d:%d,%d,%d,%d>%d,%d,%d:%dx%d/%d,%d:%d,%d,%d,%d:%d,%d:g%d:%d%d%d", device,
             d->n, d->c, d->h, d->w, d->k, d->oh, d->ow, d->kh, d->kw, d->stride_h, d->stride_w,
             d->pad_t, d->pad_l, d->pad_b, d->pad_r, d->dil_h, d->dil_w, d->groups,
             (int)d->src_dtype, (int)d->dst_dtype, (int)d->wdtype);
}

/* The cached entry for key, made (all -1) if new; NULL when the cache is full. */
static struct algo_entry *algo_find(const char *key)
{
    for (int i = 0; i < algo_count; i++)
        if (!strcmp(algo_cache[i].key, key))
            return &algo_cache[i];
    if (algo_count == ALGO_CACHE)
        return NULL;
    struct algo_entry *e = &algo_cache[algo_count++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->fwd = e->bwd_data = e->bwd_filter = -1;
    return e;
}

int cu_conv_plan(be_ctx *ctx, const be_conv_desc *d, unsigned passes, be_plan **out, char *err,
                 size_t errlen)
{
    *out = NULL;
    if (plain_only(d->src_layout, d->dst_layout, err, errlen) < 0)
        return -1;
    if (d->relu)                        /* backend.conv_relu is false: the net runs it apart */
        return set_err(err, errlen, "cuda backend: a convolution with its ReLU in the same "
                       "pass is not supported");
    if (d->pad_t != d->pad_b || d->pad_l != d->pad_r)
        return set_err(err, errlen, "cuda backend: asymmetric convolution padding (%d/%d, %d/%d) "
                       "is not supported yet", d->pad_t, d->pad_b, d->pad_l, d->pad_r);
    be_plan *p = new_plan(CU_CONV, err, errlen);
    if (!p)
        return -1;
    p->conv = *d;
    const be_dtype ct = d->wdtype;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    size_t nw = (size_t)d->k * (d->c / d->groups) * d->kh * d->kw, ws = 0, sz;
    if (tensor4(&p->xd, d->n, d->c, d->h, d->w, ct, err, errlen) < 0 ||
        tensor4(&p->yd, d->n, d->k, d->oh, d->ow, ct, err, errlen) < 0)
        goto fail;
    DNN_TRY(cudnnCreateFilterDescriptor(&p->wd), "filter descriptor");
    DNN_TRY(cudnnSetFilter4dDescriptor(p->wd, dnn_type(ct), CUDNN_TENSOR_NCHW, d->k,
                                       d->c / d->groups, d->kh, d->kw), "filter descriptor");
    DNN_TRY(cudnnCreateConvolutionDescriptor(&p->cd), "convolution descriptor");
    DNN_TRY(cudnnSetConvolution2dDescriptor(p->cd, d->pad_t, d->pad_l, d->stride_h, d->stride_w,
                                            d->dil_h, d->dil_w, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT), "convolution descriptor");
    DNN_TRY(cudnnSetConvolutionGroupCount(p->cd, d->groups), "convolution groups");
    DNN_TRY(cudnnSetConvolutionMathType(p->cd, ct == BE_F32 ? CUDNN_FMA_MATH
                                                            : CUDNN_TENSOR_OP_MATH),
            "convolution math");
    if ((d->src_dtype != ct && dev_alloc(&p->stage_x, nx * esize(ct), err, errlen) < 0) ||
        (d->dst_dtype != ct && dev_alloc(&p->stage_y, ny * esize(ct), err, errlen) < 0) ||
        (ct != BE_F32 && (passes & BE_BWD_WEIGHTS) &&
         dev_alloc(&p->stage_w, nw * esize(ct), err, errlen) < 0))
        goto fail;
    /* The fastest algorithm of each pass within the workspace limit, found by
     * running them once (cuDNN's benchmark) and cached for the shape;
     * deterministic ones only for the backward passes. */
    int got = 0;
    char key[160];
    conv_key(d, ctx->device, key, sizeof key);
    pthread_mutex_lock(&algo_lock);
    struct algo_entry *cached = algo_find(key), none = { .fwd = -1, .bwd_data = -1,
                                                         .bwd_filter = -1 };
    struct algo_entry known = cached ? *cached : none;
    pthread_mutex_unlock(&algo_lock);
    if (known.fwd >= 0) {
        p->fwd_algo = (cudnnConvolutionFwdAlgo_t)known.fwd;
        DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, p->xd, p->wd, p->cd, p->yd,
                                                        p->fwd_algo, &sz), "workspace");
        ws = sz > ws ? sz : ws;
    } else {
        cudnnConvolutionFwdAlgoPerf_t r[8];
        DNN_TRY(cudnnFindConvolutionForwardAlgorithm(ctx->dnn, p->xd, p->wd, p->cd, p->yd, 8, &got,
                                                     r), "finding a forward algorithm");
        int i = 0;
        while (i < got && (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > WS_LIMIT))
            i++;
        if (i == got) {
            set_err(err, errlen, "cuda backend: no forward convolution algorithm fits");
            goto fail;
        }
        p->fwd_algo = r[i].algo;
        DNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(ctx->dnn, p->xd, p->wd, p->cd, p->yd,
                                                        p->fwd_algo, &sz), "workspace");
        ws = sz > ws ? sz : ws;
    }
    if ((passes & BE_BWD_DATA) && known.bwd_data >= 0) {
        p->bwd_data_algo = (cudnnConvolutionBwdDataAlgo_t)known.bwd_data;
        DNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->dnn, p->wd, p->yd, p->cd, p->xd,
                                                             p->bwd_data_algo, &sz), "workspace");
        ws = sz > ws ? sz : ws;
    } else if (passes & BE_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[8];
        DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(ctx->dnn, p->wd, p->yd, p->cd, p->xd, 8,
                                                          &got, r), "finding a backward algorithm");
        int i = 0;
        while (i < got && (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > WS_LIMIT ||
                           r[i].determinism != CUDNN_DETERMINISTIC))
            i++;
        if (i == got) {
            set_err(err, errlen, "cuda backend: no deterministic backward-data algorithm fits");
            goto fail;
        }
        p->bwd_data_algo = r[i].algo;
        DNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->dnn, p->wd, p->yd, p->cd, p->xd,
                                                             p->bwd_data_algo, &sz), "workspace");
        ws = sz > ws ? sz : ws;
    }
    if ((passes & BE_BWD_WEIGHTS) && known.bwd_filter >= 0) {
        p->bwd_filter_algo = (cudnnConvolutionBwdFilterAlgo_t)known.bwd_filter;
        DNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->dnn, p->xd, p->yd, p->cd,
                                                               p->wd, p->bwd_filter_algo, &sz),
                "workspace");
        ws = sz > ws ? sz : ws;
    } else if (passes & BE_BWD_WEIGHTS) {
        cudnnConvolutionBwdFilterAlgoPerf_t r[8];
        DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(ctx->dnn, p->xd, p->yd, p->cd, p->wd,
                                                            8, &got, r),
                "finding a weight-gradient algorithm");
        int i = 0;
        while (i < got && (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > WS_LIMIT ||
                           r[i].determinism != CUDNN_DETERMINISTIC))
            i++;
        if (i == got) {
            set_err(err, errlen, "cuda backend: no deterministic weight-gradient algorithm fits");
            goto fail;
        }
        p->bwd_filter_algo = r[i].algo;
        DNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->dnn, p->xd, p->yd, p->cd,
                                                               p->wd, p->bwd_filter_algo, &sz),
                "workspace");
        ws = sz > ws ? sz : ws;
    }
    pthread_mutex_lock(&algo_lock);
    if ((cached = algo_find(key))) {
        cached->fwd = (int)p->fwd_algo;
        if (passes & BE_BWD_DATA)
            cached->bwd_data = (int)p->bwd_data_algo;
        if (passes & BE_BWD_WEIGHTS)
            cached->bwd_filter = (int)p->bwd_filter_algo;
    }
    pthread_mutex_unlock(&algo_lock);
    if (grow_ws(ctx, ws, err, errlen) < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    cu_plan_release(p);
    return -1;
}

/* x in the plan's type: the tensor itself, or its cast into stage_x. */
static const void *x_in(be_ctx *ctx, be_plan *p, const be_buf *x, be_dtype xdt, be_dtype ct,
                        size_t n, int *fail, char *err, size_t errlen)
{
    if (xdt == ct)
        return x->p;
    if (cuda_k_cast(ctx->stream, x->p, xdt, p->stage_x, ct, n, err, errlen) < 0)
        *fail = 1;
    return p->stage_x;
}

int cu_conv_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, const be_buf *b,
                be_buf *y, char *err, size_t errlen)
{
    const be_conv_desc *d = &p->conv;
    const be_dtype ct = d->wdtype;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    int fail = 0;
    const float one = 1.0f, zero = 0.0f;
    const void *xp = x_in(ctx, p, x, d->src_dtype, ct, nx, &fail, err, errlen);
    void *yp = d->dst_dtype == ct ? y->p : p->stage_y;
    if (fail)
        return -1;
    cudnnStatus_t s = cudnnConvolutionForward(ctx->dnn, &one, p->xd, xp, p->wd, w->p, p->cd,
                                              p->fwd_algo, ctx->ws, ctx->ws_bytes, &zero, p->yd,
                                              yp);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_err(s, "convolution forward", err, errlen);
    if (yp != y->p && cuda_k_cast(ctx->stream, yp, ct, y->p, d->dst_dtype, ny, err, errlen) < 0)
        return -1;
    if (b && cuda_k_bias_add(ctx->stream, y->p, b->p, d->n, d->k, (size_t)d->oh * d->ow,
                             d->dst_dtype, err, errlen) < 0)
        return -1;
    return 0;
}

/* dy in the plan's type: the tensor, or its cast into stage_y. */
static const void *dy_in(be_ctx *ctx, be_plan *p, const void *dy, be_dtype dt, be_dtype ct,
                         size_t n, int *fail, char *err, size_t errlen)
{
    if (dt == ct)
        return dy;
    if (cuda_k_cast(ctx->stream, dy, dt, p->stage_y, ct, n, err, errlen) < 0)
        *fail = 1;
    return p->stage_y;
}

int cu_conv_bwd_data(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w, be_buf *dx,
                     char *err, size_t errlen)
{
    const be_conv_desc *d = &p->conv;
    const be_dtype ct = d->wdtype;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    int fail = 0;
    const float one = 1.0f, zero = 0.0f;
    const void *dyp = dy_in(ctx, p, dy->p, d->dst_dtype, ct, ny, &fail, err, errlen);
    void *dxp = d->src_dtype == ct ? dx->p : p->stage_x;
    if (fail)
        return -1;
    cudnnStatus_t s = cudnnConvolutionBackwardData(ctx->dnn, &one, p->wd, w->p, p->yd, dyp, p->cd,
                                                   p->bwd_data_algo, ctx->ws, ctx->ws_bytes, &zero,
                                                   p->xd, dxp);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_err(s, "convolution backward data", err, errlen);
    if (dxp != dx->p)
        return cuda_k_cast(ctx->stream, dxp, ct, dx->p, d->src_dtype, nx, err, errlen);
    return 0;
}

int cu_conv_bwd_weights(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy, be_buf *dw,
                        be_buf *db, char *err, size_t errlen)
{
    const be_conv_desc *d = &p->conv;
    const be_dtype ct = d->wdtype;
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->oh * d->ow;
    size_t nw = (size_t)d->k * (d->c / d->groups) * d->kh * d->kw;
    int fail = 0;
    const float one = 1.0f, zero = 0.0f;
    const void *xp = x_in(ctx, p, x, d->src_dtype, ct, nx, &fail, err, errlen);
    const void *dyp = fail ? NULL : dy_in(ctx, p, dy->p, d->dst_dtype, ct, ny, &fail, err, errlen);
    void *dwp = ct == BE_F32 ? dw->p : p->stage_w;
    if (fail)
        return -1;
    cudnnStatus_t s = cudnnConvolutionBackwardFilter(ctx->dnn, &one, p->xd, xp, p->yd, dyp, p->cd,
                                                     p->bwd_filter_algo, ctx->ws, ctx->ws_bytes,
                                                     &zero, p->wd, dwp);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_err(s, "convolution backward filter", err, errlen);
    if (dwp != dw->p && cuda_k_cast(ctx->stream, dwp, ct, dw->p, BE_F32, nw, err, errlen) < 0)
        return -1;
    if (db && cuda_k_bias_grad(ctx->stream, dy->p, db->p, d->n, d->k, (size_t)d->oh * d->ow,
                               d->dst_dtype, err, errlen) < 0)
        return -1;
    return 0;
}

/* ---- pooling ---------------------------------------------------------------- */

int cu_pool_plan(be_ctx *ctx, const be_pool_desc *d, unsigned passes, be_plan **out, char *err,
                 size_t errlen)
{
    *out = NULL;
    if (plain_only(d->src_layout, d->dst_layout, err, errlen) < 0)
        return -1;
    if (d->pad_t != d->pad_b || d->pad_l != d->pad_r)
        return set_err(err, errlen, "cuda backend: asymmetric pooling padding");
    be_plan *p = new_plan(CU_POOL, err, errlen);
    if (!p)
        return -1;
    p->pool = *d;
    cudnnPoolingMode_t mode = d->alg == BE_POOL_MAX ? CUDNN_POOLING_MAX_DETERMINISTIC :
                              d->alg == BE_POOL_AVG_INCLUDE_PAD ?
                              CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING :
                              CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if (tensor4(&p->xd, d->n, d->c, d->h, d->w, d->dtype, err, errlen) < 0 ||
        tensor4(&p->yd, d->n, d->c, d->oh, d->ow, d->dtype, err, errlen) < 0)
        goto fail;
    DNN_TRY(cudnnCreatePoolingDescriptor(&p->pd), "pooling descriptor");
    DNN_TRY(cudnnSetPooling2dDescriptor(p->pd, mode, CUDNN_PROPAGATE_NAN, d->kh, d->kw, d->pad_t,
                                        d->pad_l, d->stride_h, d->stride_w), "pooling descriptor");
    *out = p;
    return 0;
fail:
    cu_plan_release(p);
    return -1;
}

int cu_pool_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, be_buf *y, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t s = cudnnPoolingForward(ctx->dnn, p->pd, &one, p->xd, x->p, &zero, p->yd, y->p);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_err(s, "pooling forward", err, errlen);
    p->last_x = x->p;                 /* the backward pass reads them (engine/backend.h) */
    p->last_y = y->p;
    return 0;
}

int cu_pool_bwd(be_ctx *ctx, be_plan *p, const be_buf *dy, be_buf *dx, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    if (!p->last_x)
        return set_err(err, errlen, "cuda backend: pooling backward before its forward pass");
    cudnnStatus_t s = cudnnPoolingBackward(ctx->dnn, p->pd, &one, p->yd, p->last_y, p->yd, dy->p,
                                           p->xd, p->last_x, &zero, p->xd, dx->p);
    return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_err(s, "pooling backward", err, errlen);
}

/* ---- dense ------------------------------------------------------------------- */

/* Row-major y[n][out] = x[n][in] W[out][in]^T is, column-major, y^T = W^T(op) x^T. */
int cu_dense_plan(be_ctx *ctx, const be_dense_desc *d, unsigned passes, be_plan **out,
                  char *err, size_t errlen)
{
    *out = NULL;
    be_plan *p = new_plan(CU_DENSE, err, errlen);
    if (!p)
        return -1;
    p->dense = *d;
    if ((d->src_dtype != d->wdtype &&
         dev_alloc(&p->stage_x, (size_t)d->n * d->in * esize(d->wdtype), err, errlen) < 0) ||
        (d->dst_dtype != d->wdtype &&
         dev_alloc(&p->stage_y, (size_t)d->n * d->out * esize(d->wdtype), err, errlen) < 0)) {
        cu_plan_release(p);
        return -1;
    }
    *out = p;
    return 0;
}

static int gemm(be_ctx *ctx, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const void *a, be_dtype at, int lda, const void *b, be_dtype bt, int ldb, void *c,
                be_dtype cdt, int ldc, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t s = cublasGemmEx(ctx->blas, ta, tb, m, n, k, &one, a, blas_type(at), lda, b,
                                    blas_type(bt), ldb, &zero, c, blas_type(cdt), ldc,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? 0 : blas_err(s, "GemmEx", err, errlen);
}

int cu_dense_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w, const be_buf *b,
                 be_buf *y, char *err, size_t errlen)
{
    const be_dense_desc *d = &p->dense;
    int fail = 0;
    const void *xp = x_in(ctx, p, x, d->src_dtype, d->wdtype, (size_t)d->n * d->in, &fail, err,
                          errlen);
    if (fail || gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, d->out, d->n, d->in, w->p, d->wdtype, d->in,
                     xp, d->wdtype, d->in, y->p, d->dst_dtype, d->out, err, errlen) < 0)
        return -1;
    if (b && cuda_k_bias_add(ctx->stream, y->p, b->p, d->n, d->out, 1, d->dst_dtype, err,
                             errlen) < 0)
        return -1;
    return 0;
}

int cu_dense_bwd_data(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w, be_buf *dx,
                      char *err, size_t errlen)
{
    const be_dense_desc *d = &p->dense;
    int fail = 0;
    const void *dyp = dy_in(ctx, p, dy->p, d->dst_dtype, d->wdtype, (size_t)d->n * d->out, &fail,
                            err, errlen);
    /* dx^T (in x n) = Wc (in x out) dy^T (out x n) */
    if (fail)
        return -1;
    return gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, d->in, d->n, d->out, w->p, d->wdtype, d->in, dyp,
                d->wdtype, d->out, dx->p, d->src_dtype, d->in, err, errlen);
}

int cu_dense_bwd_weights(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy, be_buf *dw,
                         be_buf *db, char *err, size_t errlen)
{
    const be_dense_desc *d = &p->dense;
    int fail = 0;
    const void *xp = x_in(ctx, p, x, d->src_dtype, d->wdtype, (size_t)d->n * d->in, &fail, err,
                          errlen);
    const void *dyp = fail ? NULL : dy_in(ctx, p, dy->p, d->dst_dtype, d->wdtype,
                                          (size_t)d->n * d->out, &fail, err, errlen);
    /* dWc (in x out) = Xc (in x n) dY^T: FP32 out of 16-bit operands */
    if (fail || gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, d->in, d->out, d->n, xp, d->wdtype, d->in,
                     dyp, d->wdtype, d->out, dw->p, BE_F32, d->in, err, errlen) < 0)
        return -1;
    if (db && cuda_k_bias_grad(ctx->stream, dy->p, db->p, d->n, d->out, 1, d->dst_dtype, err,
                               errlen) < 0)
        return -1;
    return 0;
}

/* ---- activations, add, concat ------------------------------------------------ */

int cu_act_plan(be_ctx *ctx, const be_act_desc *d, unsigned passes, be_plan **out, char *err,
                size_t errlen)
{
    *out = NULL;
    if (plain_only(d->layout, BE_PLAIN, err, errlen) < 0)
        return -1;
    if (d->alg == BE_ACT_RELU && !(d->alpha >= 0.0f))
        return set_err(err, errlen, "cuda backend: leaky relu slope %g must be >= 0", d->alpha);
    be_plan *p = new_plan(CU_ACT, err, errlen);
    if (!p)
        return -1;
    p->act = *d;
    *out = p;
    return 0;
}

int cu_act_fwd(be_ctx *ctx, be_plan *p, const be_buf *x, be_buf *y, char *err, size_t errlen)
{
    return cuda_k_act(ctx->stream, (int)p->act.alg, p->act.alpha, false, x->p, NULL, y->p,
                      (size_t)p->act.n * p->act.size, p->act.dtype, err, errlen);
}

int cu_act_bwd(be_ctx *ctx, be_plan *p, const be_buf *y, const be_buf *dy, be_buf *dx, char *err,
               size_t errlen)
{
    return cuda_k_act(ctx->stream, (int)p->act.alg, p->act.alpha, true, y->p, dy->p, dx->p,
                      (size_t)p->act.n * p->act.size, p->act.dtype, err, errlen);
}

int cu_add_plan(be_ctx *ctx, const be_add_desc *d, be_plan **out, char *err, size_t errlen)
{
    *out = NULL;
    if (plain_only(d->layout, BE_PLAIN, err, errlen) < 0)
        return -1;
    if (d->k < 2 || d->k > BE_MAX_INPUTS)
        return set_err(err, errlen, "cuda backend: add of %d inputs (2 to %d)", d->k,
                       BE_MAX_INPUTS);
    if (d->relu)                        /* backend.add_relu is false: the net runs it apart */
        return set_err(err, errlen, "cuda backend: an add with a ReLU in one pass is not "
                       "supported");
    be_plan *p = new_plan(CU_ADD, err, errlen);
    if (!p)
        return -1;
    p->add = *d;
    *out = p;
    return 0;
}

int cu_add_fwd(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y, char *err,
               size_t errlen)
{
    const void *in[BE_MAX_INPUTS];
    for (int i = 0; i < p->add.k; i++)
        in[i] = xs[i]->p;
    return cuda_k_add(ctx->stream, in, p->add.k, y->p, (size_t)p->add.n * p->add.size,
                      p->add.dtype, err, errlen);
}

int cu_concat_plan(be_ctx *ctx, const be_concat_desc *d, be_plan **out, char *err, size_t errlen)
{
    *out = NULL;
    if (d->k < 2 || d->k > BE_MAX_INPUTS)
        return set_err(err, errlen, "cuda backend: concat of %d inputs (2 to %d)", d->k,
                       BE_MAX_INPUTS);
    be_plan *p = new_plan(CU_CONCAT, err, errlen);
    if (!p)
        return -1;
    p->cat = *d;
    *out = p;
    return 0;
}

/* Input i's channels inside one image of the output: offset and size in bytes. */
static void slice(const be_concat_desc *d, int i, size_t *off, size_t *len, size_t *row)
{
    size_t hw = (size_t)d->h * d->w, es = esize(d->dtype), before = 0, total = 0;
    for (int j = 0; j < d->k; j++) {
        if (j < i)
            before += (size_t)d->c[j];
        total += (size_t)d->c[j];
    }
    *off = before * hw * es;
    *len = (size_t)d->c[i] * hw * es;
    *row = total * hw * es;
}

int cu_concat_fwd(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y, char *err,
                  size_t errlen)
{
    const be_concat_desc *d = &p->cat;
    for (int i = 0; i < d->k; i++) {
        size_t off, len, row;
        slice(d, i, &off, &len, &row);
        CU_TRY(cudaMemcpy2DAsync((char *)y->p + off, row, xs[i]->p, len, len, (size_t)d->n,
                                 cudaMemcpyDeviceToDevice, ctx->stream), "concat");
    }
    return 0;
}

int cu_concat_bwd(be_ctx *ctx, be_plan *p, const be_buf *dy, int i, be_buf *dx, float beta,
                  char *err, size_t errlen)
{
    const be_concat_desc *d = &p->cat;
    size_t off, len, row, es = esize(d->dtype);
    if (i < 0 || i >= d->k)
        return set_err(err, errlen, "cuda backend: concat has no input %d", i);
    slice(d, i, &off, &len, &row);
    if (beta == 0.0f) {
        CU_TRY(cudaMemcpy2DAsync(dx->p, len, (const char *)dy->p + off, row, len, (size_t)d->n,
                                 cudaMemcpyDeviceToDevice, ctx->stream), "concat backward");
        return 0;
    }
    for (int img = 0; img < d->n; img++)
        if (cuda_k_acc(ctx->stream, (char *)dx->p + (size_t)img * len,
                       (const char *)dy->p + (size_t)img * row + off, len / es, d->dtype, beta,
                       err, errlen) < 0)
            return -1;
    return 0;
}

/* ---- batch norm --------------------------------------------------------------- */

int cu_bn_plan(be_ctx *ctx, const be_bn_desc *d, unsigned passes, be_plan **out, char *err,
               size_t errlen)
{
    *out = NULL;
    if (plain_only(d->layout, BE_PLAIN, err, errlen) < 0)
        return -1;
    if (d->relu)                        /* backend.bn_relu is false: the net runs it apart */
        return set_err(err, errlen, "cuda backend: batch norm with a ReLU in one pass is not "
                       "supported");
    if (!(d->eps >= CUDNN_BN_MIN_EPSILON))
        return set_err(err, errlen, "cuda backend: batch norm eps %g is below cuDNN's %g", d->eps,
                       CUDNN_BN_MIN_EPSILON);
    be_plan *p = new_plan(CU_BN, err, errlen);
    if (!p)
        return -1;
    p->bn = *d;
    size_t c = (size_t)d->c * sizeof(float);
    if (tensor4(&p->xd, d->n, d->c, d->h, d->w, d->dtype, err, errlen) < 0 ||
        tensor4(&p->statd, 1, d->c, 1, 1, BE_F32, err, errlen) < 0 ||
        dev_alloc((void **)&p->save_mean, c, err, errlen) < 0 ||
        dev_alloc((void **)&p->save_inv, c, err, errlen) < 0 ||
        dev_alloc((void **)&p->run_mean, c, err, errlen) < 0 ||
        dev_alloc((void **)&p->run_var, c, err, errlen) < 0 ||
        dev_alloc(&p->dx_unused, (size_t)d->n * d->c * d->h * d->w * esize(d->dtype), err,
                  errlen) < 0) {
        cu_plan_release(p);
        return -1;
    }
    *out = p;
    return 0;
}

int cu_bn_fwd(be_ctx *ctx, be_plan *p, bool training, const be_buf *x, const be_buf *scale,
              const be_buf *shift, be_buf *mean, be_buf *var, be_buf *y, char *err, size_t errlen)
{
    const be_bn_desc *d = &p->bn;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t s;
    if (!training) {
        s = cudnnBatchNormalizationForwardInference(ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one,
                                                    &zero, p->xd, x->p, p->xd, y->p, p->statd,
                                                    scale->p, shift->p, mean->p, var->p, d->eps);
        return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_err(s, "batch norm inference", err, errlen);
    }
    /* factor 0: cuDNN's running averages (unused) stay; kiln keeps its own */
    s = cudnnBatchNormalizationForwardTraining(ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero,
                                               p->xd, x->p, p->xd, y->p, p->statd, scale->p,
                                               shift->p, 0.0, p->run_mean, p->run_var, d->eps,
                                               p->save_mean, p->save_inv);
    if (s != CUDNN_STATUS_SUCCESS)
        return dnn_err(s, "batch norm forward", err, errlen);
    CU_TRY(cudaMemcpyAsync(mean->p, p->save_mean, (size_t)d->c * sizeof(float),
                           cudaMemcpyDeviceToDevice, ctx->stream), "batch norm mean");
    return cuda_k_inv_to_var(ctx->stream, p->save_inv, var->p, d->c, d->eps, err, errlen);
}

int cu_bn_bwd(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy, const be_buf *scale,
              const be_buf *shift, const be_buf *mean, const be_buf *var, be_buf *dx,
              be_buf *dscale, be_buf *dshift, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t s = cudnnBatchNormalizationBackward(
        ctx->dnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, p->xd, x->p, p->xd, dy->p,
        p->xd, dx ? dx->p : p->dx_unused, p->statd, scale->p, dscale->p, dshift->p, p->bn.eps,
        p->save_mean, p->save_inv);
    return s == CUDNN_STATUS_SUCCESS ? 0 : dnn_err(s, "batch norm backward", err, errlen);
}
