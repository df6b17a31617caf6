/* engine/cuda/cuda.c: the CUDA backend's context, buffers and operations
 * table (engine/backend.h); the kernels are in ew.cu. See cuda.h for what is
 * implemented so far. */
#include "engine/cuda/cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#include "engine/cuda/internal.h"

int cu_err(cudaError_t e, const char *what, char *err, size_t errlen)
{
    (void)cudaGetLastError();
    return set_err(err, errlen, "cuda backend: %s: %s", what, cudaGetErrorString(e));
}

/* ---- context and buffers --------------------------------------------------- */

static void ctx_free(be_ctx *ctx)
{
    if (!ctx)
        return;
    cudaSetDevice(ctx->device);
    if (ctx->dnn)
        cudnnDestroy(ctx->dnn);
    if (ctx->blas)
        cublasDestroy(ctx->blas);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
    cudaFree(ctx->ws);
    cudaFree(ctx->scratch);
    cudaFreeHost(ctx->host);
    free(ctx);
}

static int ctx_create(int device, be_ctx **out, char *err, size_t errlen)
{
    int n = 0;
    *out = NULL;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return cu_err(e, "no usable CUDA device", err, errlen);
    if (device < 0 || device >= n)
        return set_err(err, errlen, "cuda backend: there is no GPU %d (this machine has %d)",
                       device, n);
    be_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return set_err(err, errlen, "cuda backend: out of memory");
    ctx->device = device;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&ctx->scratch, CUDA_RED_BLOCKS * sizeof(double))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&ctx->host, CUDA_RED_BLOCKS * sizeof(double))) != cudaSuccess) {
        ctx_free(ctx);
        return cu_err(e, "creating a context", err, errlen);
    }
    cudnnStatus_t ds;
    cublasStatus_t bs;
    if ((ds = cudnnCreate(&ctx->dnn)) != CUDNN_STATUS_SUCCESS ||
        (ds = cudnnSetStream(ctx->dnn, ctx->stream)) != CUDNN_STATUS_SUCCESS) {
        ctx_free(ctx);
        return dnn_err(ds, "creating the cuDNN handle", err, errlen);
    }
    if ((bs = cublasCreate(&ctx->blas)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetStream(ctx->blas, ctx->stream)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        ctx_free(ctx);
        return blas_err(bs, "creating the cuBLAS handle", err, errlen);
    }
    *out = ctx;
    return 0;
}

int dnn_err(cudnnStatus_t s, const char *what, char *err, size_t errlen)
{
    return set_err(err, errlen, "cuda backend: cuDNN %s: %s", what, cudnnGetErrorString(s));
}

int blas_err(cublasStatus_t s, const char *what, char *err, size_t errlen)
{
    return set_err(err, errlen, "cuda backend: cuBLAS %s: status %d", what, (int)s);
}

static int mem_info(be_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                    size_t errlen)
{
    size_t f = 0, t = 0;
    CU_TRY(cudaSetDevice(ctx->device), "selecting the GPU");
    CU_TRY(cudaMemGetInfo(&f, &t), "reading the GPU's free memory");
    *free_bytes = f;
    *total_bytes = t;
    return 0;
}

/* FP16 and bfloat16 are stored as themselves here (2 bytes). */
static size_t dtype_bytes(be_dtype dt)
{
    return dt == BE_F32 ? 4 : 2;
}

/* bfloat16 Tensor-Core math needs compute capability 8.0 (Ampere) or later. */
static int dtype_check(be_ctx *ctx, be_dtype dt, char *err, size_t errlen)
{
    struct cudaDeviceProp p;
    if (dt != BE_BF16)
        return 0;
    CU_TRY(cudaGetDeviceProperties(&p, ctx->device), "reading the device's properties");
    if (p.major < 8)
        return set_err(err, errlen, "amp-bf16 needs a GPU of compute capability 8.0 or later "
                       "(%s is %d.%d); use amp-fp16", p.name, p.major, p.minor);
    return 0;
}

static be_buf *buf_alloc(be_ctx *ctx, size_t bytes, char *err, size_t errlen)
{
    be_buf *b = calloc(1, sizeof *b);
    cudaError_t e = cudaSuccess;
    if (!b || (e = cudaMalloc(&b->p, bytes ? bytes : 16)) != cudaSuccess ||
        (e = cudaMemsetAsync(b->p, 0, bytes ? bytes : 16, ctx->stream)) != cudaSuccess) {
        if (b)
            cudaFree(b->p);
        free(b);
        if (e != cudaSuccess)
            cu_err(e, "allocating GPU memory", err, errlen);
        else
            set_err(err, errlen, "cuda backend: out of memory");
        return NULL;
    }
    b->bytes = bytes;
    return b;
}

static void buf_free(be_ctx *ctx, be_buf *b)
{
    if (!b)
        return;
    cudaStreamSynchronize(ctx->stream);     /* no kernel may still use it */
    cudaFree(b->p);
    free(b);
}

static int buf_upload(be_ctx *ctx, be_buf *dst, size_t offset, const void *src, size_t bytes,
                      char *err, size_t errlen)
{
    if (offset > dst->bytes || bytes > dst->bytes - offset)
        return set_err(err, errlen, "cuda backend: upload of %zu bytes at %zu overruns a "
                       "%zu-byte buffer", bytes, offset, dst->bytes);
    CU_TRY(cudaMemcpyAsync((char *)dst->p + offset, src, bytes, cudaMemcpyHostToDevice,
                           ctx->stream), "upload");
    CU_TRY(cudaStreamSynchronize(ctx->stream), "upload");   /* src may go away */
    return 0;
}

static int buf_download(be_ctx *ctx, const be_buf *src, size_t offset, void *dst, size_t bytes,
                        char *err, size_t errlen)
{
    if (offset > src->bytes || bytes > src->bytes - offset)
        return set_err(err, errlen, "cuda backend: download of %zu bytes at %zu overruns a "
                       "%zu-byte buffer", bytes, offset, src->bytes);
    CU_TRY(cudaMemcpyAsync(dst, (const char *)src->p + offset, bytes, cudaMemcpyDeviceToHost,
                           ctx->stream), "download");
    CU_TRY(cudaStreamSynchronize(ctx->stream), "download");
    return 0;
}

static void plan_free(be_ctx *ctx, be_plan *p)
{
    if (!p)
        return;
    cudaStreamSynchronize(ctx->stream);
    cu_plan_release(p);
}

static bool fits(const be_buf *b, size_t count, size_t size)
{
    return b && count <= b->bytes / size;
}

/* ---- element-wise operations --------------------------------------------------- */

static int acc(be_ctx *ctx, be_buf *dst, const be_buf *src, size_t count, be_dtype dt, float beta,
               char *err, size_t errlen)
{
    if (!fits(dst, count, dtype_bytes(dt)) || !fits(src, count, dtype_bytes(dt)))
        return set_err(err, errlen, "cuda backend: accumulate of %zu elements overruns its "
                       "buffers", count);
    return cuda_k_acc(ctx->stream, dst->p, src->p, count, dt, beta, err, errlen);
}

static int cast(be_ctx *ctx, const be_buf *src, be_dtype sdt, be_buf *dst, be_dtype ddt,
                size_t count, char *err, size_t errlen)
{
    if (!fits(src, count, dtype_bytes(sdt)) || !fits(dst, count, dtype_bytes(ddt)))
        return set_err(err, errlen, "cuda backend: cast of %zu elements overruns its buffers",
                       count);
    return cuda_k_cast(ctx->stream, src->p, sdt, dst->p, ddt, count, err, errlen);
}

static int dropout_fwd(be_ctx *ctx, const be_dropout_desc *d, bool training, const be_buf *x,
                       be_buf *mask, be_buf *y, uint64_t seed, char *err, size_t errlen)
{
    size_t es = dtype_bytes(d->dtype);
    if (!(d->rate >= 0.0f && d->rate < 1.0f))
        return set_err(err, errlen, "cuda backend: dropout rate %g must be in [0, 1)", d->rate);
    if (!fits(x, d->count, es) || !fits(y, d->count, es) ||
        (training && !fits(mask, d->count, sizeof(float))))
        return set_err(err, errlen, "cuda backend: dropout of %zu elements overruns its "
                       "buffers", d->count);
    if (d->layout == BE_BLOCKED16 &&
        (d->c < 1 || d->hw == 0 || d->count % (((size_t)d->c + 15) / 16 * 16 * d->hw)))
        return set_err(err, errlen, "cuda backend: blocked dropout of %zu elements in images "
                       "of %d x %zu", d->count, d->c, d->hw);
    return cuda_k_dropout_fwd(ctx->stream, d, training, x->p, mask ? mask->p : NULL, y->p, seed,
                              err, errlen);
}

static int dropout_bwd(be_ctx *ctx, const be_dropout_desc *d, const be_buf *mask,
                       const be_buf *dy, be_buf *dx, float beta, char *err, size_t errlen)
{
    size_t es = dtype_bytes(d->dtype);
    if (!fits(mask, d->count, sizeof(float)) || !fits(dy, d->count, es) || !fits(dx, d->count, es))
        return set_err(err, errlen, "cuda backend: dropout backward of %zu elements overruns "
                       "its buffers", d->count);
    return cuda_k_dropout_bwd(ctx->stream, d, mask->p, dy->p, dx->p, beta, err, errlen);
}

static int xent_plan(be_ctx *ctx, const be_xent_desc *d, be_plan **out, char *err, size_t errlen)
{
    *out = NULL;
    if (d->n < 1 || d->classes < 1)
        return set_err(err, errlen, "cuda backend: softmax cross-entropy needs n, classes > 0");
    be_plan *p = calloc(1, sizeof *p);
    if (!p)
        return set_err(err, errlen, "cuda backend: out of memory");
    p->kind = CU_XENT;
    p->n = d->n;
    p->classes = d->classes;
    cudaError_t e;
    if ((e = cudaMalloc((void **)&p->row_loss, (size_t)d->n * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&p->row_hit, (size_t)d->n * sizeof(int))) != cudaSuccess) {
        plan_free(ctx, p);
        return cu_err(e, "allocating the loss's rows", err, errlen);
    }
    if (!(p->host_loss = malloc((size_t)d->n * sizeof(float))) ||
        !(p->host_hit = malloc((size_t)d->n * sizeof(int)))) {
        plan_free(ctx, p);
        return set_err(err, errlen, "cuda backend: out of memory");
    }
    *out = p;
    return 0;
}

/* The rows run on the GPU; their losses are added here in row order, in
 * double, as the CPU backend adds them. */
static int xent(be_ctx *ctx, be_plan *p, const be_buf *logits, const be_buf *labels, float eps,
                float grad_scale, be_buf *dlogits, be_buf *probs, double *loss_sum, int *correct,
                char *err, size_t errlen)
{
    size_t nz = (size_t)p->n * (size_t)p->classes;
    if (!fits(logits, nz, sizeof(float)) || (labels && !fits(labels, (size_t)p->n, 4)) ||
        (dlogits && !fits(dlogits, nz, sizeof(float))) || (probs && !fits(probs, nz, sizeof(float))))
        return set_err(err, errlen, "cuda backend: softmax cross-entropy overruns its buffers");
    if (cuda_k_xent(ctx->stream, p->n, p->classes, logits->p, labels ? labels->p : NULL, eps,
                    grad_scale, dlogits ? dlogits->p : NULL, probs ? probs->p : NULL,
                    p->row_loss, p->row_hit, err, errlen) < 0)
        return -1;
    if (!loss_sum && !correct)
        return 0;
    CU_TRY(cudaMemcpyAsync(p->host_loss, p->row_loss, (size_t)p->n * sizeof(float),
                           cudaMemcpyDeviceToHost, ctx->stream), "the loss");
    CU_TRY(cudaMemcpyAsync(p->host_hit, p->row_hit, (size_t)p->n * sizeof(int),
                           cudaMemcpyDeviceToHost, ctx->stream), "the loss");
    CU_TRY(cudaStreamSynchronize(ctx->stream), "the loss");
    double sum = 0;
    int hits = 0;
    for (int i = 0; i < p->n; i++) {
        sum += p->host_loss[i];
        hits += p->host_hit[i];
    }
    if (loss_sum)
        *loss_sum = sum;
    if (correct)
        *correct = hits;
    return 0;
}

static int nonfinite(be_ctx *ctx, const be_buf *b, size_t count, bool *found, char *err,
                     size_t errlen)
{
    if (!fits(b, count, sizeof(float)))
        return set_err(err, errlen, "cuda backend: check of %zu elements overruns its buffer",
                       count);
    *found = false;
    return cuda_k_check(ctx->stream, b->p, count, false, 1.0f, ctx->scratch, ctx->host, found,
                        err, errlen);
}

static int unscale(be_ctx *ctx, be_buf *g, size_t count, float factor, bool *found, char *err,
                   size_t errlen)
{
    if (!fits(g, count, sizeof(float)))
        return set_err(err, errlen, "cuda backend: unscale of %zu elements overruns its buffer",
                       count);
    return cuda_k_check(ctx->stream, g->p, count, true, factor, ctx->scratch, ctx->host, found,
                        err, errlen);
}

static int sgd_update(be_ctx *ctx, be_buf *w, be_buf *v, const be_buf *g, size_t count,
                      const be_sgd *hp, char *err, size_t errlen)
{
    if (!fits(w, count, 4) || !fits(v, count, 4) || !fits(g, count, 4))
        return set_err(err, errlen, "cuda backend: sgd update of %zu elements overruns its "
                       "buffers", count);
    return cuda_k_sgd(ctx->stream, w->p, v->p, g->p, count, hp, err, errlen);
}

static int optim_update(be_ctx *ctx, const be_optim *hp, be_buf *w, be_buf *s1, be_buf *s2,
                        const be_buf *g, size_t count, char *err, size_t errlen)
{
    bool adam = hp->kind == BE_OPT_ADAM;
    if (hp->kind != BE_OPT_SGD && !adam)
        return set_err(err, errlen, "cuda backend: unknown optimizer kind %d", (int)hp->kind);
    if (!fits(w, count, 4) || !fits(s1, count, 4) || !fits(g, count, 4) ||
        (adam && !fits(s2, count, 4)))
        return set_err(err, errlen, "cuda backend: optimizer update of %zu elements overruns "
                       "its buffers", count);
    return cuda_k_optim(ctx->stream, hp, w->p, s1->p, adam ? s2->p : NULL, g->p, count, err,
                        errlen);
}

static int sumsq(be_ctx *ctx, const be_buf *b, size_t count, double *out, char *err,
                 size_t errlen)
{
    if (!fits(b, count, sizeof(float)))
        return set_err(err, errlen, "cuda backend: norm of %zu elements overruns its buffer",
                       count);
    return cuda_k_sumsq(ctx->stream, b->p, count, ctx->scratch, ctx->host, out, err, errlen);
}

static int bn_running(be_ctx *ctx, be_buf *run_mean, be_buf *run_var, const be_buf *mean,
                      const be_buf *var, int c, float momentum, int64_t m, char *err,
                      size_t errlen)
{
    size_t n = (size_t)(c < 0 ? 0 : c);
    if (c < 0 || !fits(run_mean, n, 4) || !fits(run_var, n, 4) || !fits(mean, n, 4) ||
        !fits(var, n, 4))
        return set_err(err, errlen, "cuda backend: batch norm statistics of %d channels "
                       "overrun their buffers", c);
    return cuda_k_bn_running(ctx->stream, run_mean->p, run_var->p, mean->p, var->p, c, momentum,
                             m, err, errlen);
}

const backend cuda_backend = {
    .name = "cuda",
    .ctx_create = ctx_create,
    .ctx_free = ctx_free,
    .dtype_bytes = dtype_bytes,
    .mem_info = mem_info,
    .dtype_check = dtype_check,
    .buf_alloc = buf_alloc,
    .buf_free = buf_free,
    .buf_upload = buf_upload,
    .buf_download = buf_download,
    .plan_free = plan_free,
    .conv_plan = cu_conv_plan,
    .conv_fwd = cu_conv_fwd,
    .conv_bwd_data = cu_conv_bwd_data,
    .conv_bwd_weights = cu_conv_bwd_weights,
    .pool_plan = cu_pool_plan,
    .pool_fwd = cu_pool_fwd,
    .pool_bwd = cu_pool_bwd,
    .dense_plan = cu_dense_plan,
    .dense_fwd = cu_dense_fwd,
    .dense_bwd_data = cu_dense_bwd_data,
    .dense_bwd_weights = cu_dense_bwd_weights,
    .act_plan = cu_act_plan,
    .act_fwd = cu_act_fwd,
    .act_bwd = cu_act_bwd,
    .bn_plan = cu_bn_plan,
    .bn_fwd = cu_bn_fwd,
    .bn_bwd = cu_bn_bwd,
    .bn_running = bn_running,
    .add_plan = cu_add_plan,
    .add_fwd = cu_add_fwd,
    .concat_plan = cu_concat_plan,
    .concat_fwd = cu_concat_fwd,
    .concat_bwd = cu_concat_bwd,
    .acc = acc,
    .cast = cast,
    .dropout_fwd = dropout_fwd,
    .dropout_bwd = dropout_bwd,
    .xent_plan = xent_plan,
    .xent = xent,
    .nonfinite = nonfinite,
    .unscale = unscale,
    .sgd_update = sgd_update,
    .optim_update = optim_update,
    .sumsq = sumsq,
    .ctx_bind = cuda_ctx_bind,
    .comm_create = cuda_comm_create,
    .comm_free = cuda_comm_free,
    .allreduce = cuda_allreduce,
    .allreduce_wait = cuda_allreduce_wait,
    .comm_abort = cuda_comm_abort,
    .comm_create_world = cuda_comm_create_world,
    .comm_gather = cuda_comm_gather,
};
