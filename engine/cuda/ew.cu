// engine/cuda/ew.cu: the CUDA backend's element-wise kernels. Each element
// runs the same function of engine/elementwise.h that the CPU backend runs,
// and this file is compiled without contracting a * b + c into fused
// multiply-adds (CMake: --fmad=false), so that a kernel's result is the CPU's
// bit for bit wherever the formula has no transcendental function.
#include "engine/cuda/cuda.h"

#include <cuda_runtime.h>
#include <stdio.h>

#include "engine/elementwise.h"

namespace {

const int THREADS = 256;

int launch_err(const char *what, char *err, size_t errlen)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "cuda backend: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

int sync_err(cudaStream_t s, const char *what, char *err, size_t errlen)
{
    cudaError_t e = cudaStreamSynchronize(s);
    if (e == cudaSuccess)
        return launch_err(what, err, errlen);
    if (err && errlen)
        snprintf(err, errlen, "cuda backend: %s: %s", what, cudaGetErrorString(e));
    return -1;
}

unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535u * 16 ? 65535u * 16 : b);
}

__device__ inline float load(const void *p, size_t i, be_dtype dt)
{
    if (dt == BE_BF16)
        return ew_bf16_to_f32(((const unsigned short *)p)[i]);
    if (dt == BE_F16)
        return ew_f16_to_f32(((const unsigned short *)p)[i]);
    return ((const float *)p)[i];
}

__device__ inline void store(void *p, size_t i, be_dtype dt, float v)
{
    if (dt == BE_BF16)
        ((unsigned short *)p)[i] = ew_f32_to_bf16(v);
    else if (dt == BE_F16)
        ((unsigned short *)p)[i] = ew_f32_to_f16(v);
    else
        ((float *)p)[i] = v;
}

#define GRID_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)blockDim.x * gridDim.x)

__global__ void k_acc(void *d, const void *s, size_t n, be_dtype dt, float beta)
{
    // beta 0 copies (as the CPU does): adding 0 would turn -0 into +0
    GRID_LOOP(i, n)
        store(d, i, dt, beta == 0.0f ? load(s, i, dt) : load(s, i, dt) + beta * load(d, i, dt));
}

__global__ void k_cast(const void *s, be_dtype sdt, void *d, be_dtype ddt, size_t n)
{
    GRID_LOOP(i, n)
        store(d, i, ddt, load(s, i, sdt));
}

// The plain (NCHW) index of element i of an nChw16c tensor (engine/cpu/ew.c).
__device__ inline size_t blocked_to_plain(size_t i, size_t c, size_t c16, size_t hw)
{
    size_t img = i / (c16 * hw), r = i % (c16 * hw);
    size_t cb = r / (hw * 16), r2 = r % (hw * 16), ch = cb * 16 + r2 % 16;
    return ch < c ? img * c * hw + ch * hw + r2 / 16 : (size_t)-1;
}

__global__ void k_dropout_fwd(const void *x, float *mask, void *y, size_t n, be_dtype dt,
                              bool blocked, size_t c, size_t c16, size_t hw, uint64_t seed,
                              float rate, float keep)
{
    GRID_LOOP(i, n) {
        size_t li = blocked ? blocked_to_plain(i, c, c16, hw) : i;
        float m = li != (size_t)-1 && ew_dropout_keep(seed, li, rate) ? keep : 0.0f;
        mask[i] = m;
        store(y, i, dt, load(x, i, dt) * m);
    }
}

__global__ void k_dropout_bwd(const float *mask, const void *dy, void *dx, size_t n, be_dtype dt,
                              float beta)
{
    GRID_LOOP(i, n) {
        float g = load(dy, i, dt) * mask[i];
        store(dx, i, dt, beta == 0.0f ? g : g + beta * load(dx, i, dt));
    }
}

__global__ void k_xent(int n, int classes, const float *z, const int32_t *labels, float eps,
                       float scale, float *dz, float *p, float *row_loss, int *row_hit)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    size_t off = (size_t)i * classes;
    int label = labels ? labels[i] : -1, top = 0;
    row_loss[i] = ew_softmax_xent_row(z + off, classes, label, eps, scale, p ? p + off : NULL,
                                      dz ? dz + off : NULL, &top);
    row_hit[i] = label >= 0 && top == label;
}

__global__ void k_sgd(float *w, float *v, const float *g, size_t n, float lr, float mu, float wd)
{
    GRID_LOOP(i, n)
        ew_sgd_momentum(&w[i], &v[i], g[i], lr, mu, wd);
}

__global__ void k_optim_sgd(float *w, float *v, const float *g, size_t n, float gs, float lr,
                            float mu, float wd, int nesterov)
{
    GRID_LOOP(i, n)
        ew_sgd(&w[i], &v[i], g[i], gs, lr, mu, wd, nesterov);
}

__global__ void k_optim_adam(float *w, float *m, float *v, const float *g, size_t n, float gs,
                             float lr, float b1, float b2, float eps, float wd, float dwd,
                             float bc1, float sbc2)
{
    GRID_LOOP(i, n)
        ew_adam(&w[i], &m[i], &v[i], g[i], gs, lr, b1, b2, eps, wd, dwd, bc1, sbc2);
}

__global__ void k_bn_running(float *rm, float *rv, const float *mean, const float *var, int c,
                             float momentum, long long m)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c)
        ew_bn_running(&rm[i], &rv[i], mean[i], var[i], momentum, m);
}

// Block b of CUDA_RED_BLOCKS covers the fixed chunk [b per, (b + 1) per);
// threads stride through it and a fixed tree adds their partial sums, so the
// result depends on neither timing nor the GPU.
__device__ void block_sum(double v, double *out)
{
    __shared__ double part[THREADS];
    part[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s /= 2) {
        if ((int)threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = part[0];
}

__global__ void k_sumsq(const float *p, size_t n, size_t per, double *out)
{
    size_t lo = (size_t)blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    double s = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        s += (double)p[i] * (double)p[i];
    block_sum(s, out);
}

__global__ void k_check(float *g, size_t n, size_t per, bool unscale, float factor, double *out)
{
    size_t lo = (size_t)blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    double bad = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        if (unscale)
            bad += ew_unscale(&g[i], factor);
        else
            bad += !isfinite(g[i]);
    }
    block_sum(bad, out);
}

__global__ void k_bias_add(void *y, const float *b, size_t count, int c, size_t hw, be_dtype dt)
{
    GRID_LOOP(i, count)
        store(y, i, dt, load(y, i, dt) + b[(i / hw) % (size_t)c]);
}

// One block per channel: threads stride over (image, position), then a fixed tree.
__global__ void k_bias_grad(const void *dy, float *db, int n, int c, size_t hw, be_dtype dt)
{
    int ch = blockIdx.x;
    size_t total = (size_t)n * hw;
    double s = 0;
    for (size_t j = threadIdx.x; j < total; j += blockDim.x) {
        size_t img = j / hw, pos = j % hw;
        s += load(dy, (img * (size_t)c + ch) * hw + pos, dt);
    }
    __shared__ double part[THREADS];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        db[ch] = (float)part[0];
}

// be_act_alg: 0 relu (slope alpha below 0), 1 sigmoid, 2 tanh; the backward
// pass from the output y, as the CPU backend's "use dst" kernels do.
__global__ void k_act(int alg, float alpha, bool backward, const void *a, const void *dy,
                      void *out, size_t count, be_dtype dt)
{
    GRID_LOOP(i, count) {
        float v = load(a, i, dt), r;
        if (!backward)
            r = alg == 0 ? (v > 0.0f ? v : alpha * v) : alg == 1 ? 1.0f / (1.0f + expf(-v))
                                                              : tanhf(v);
        else {
            float g = load(dy, i, dt);
            r = alg == 0 ? (v > 0.0f ? g : alpha * g) : alg == 1 ? g * v * (1.0f - v)
                                                              : g * (1.0f - v * v);
        }
        store(out, i, dt, r);
    }
}

struct add_inputs {
    const void *p[BE_MAX_INPUTS];
};

__global__ void k_add(add_inputs in, int k, void *y, size_t count, be_dtype dt)
{
    GRID_LOOP(i, count) {
        float s = load(in.p[0], i, dt);
        for (int j = 1; j < k; j++)
            s += load(in.p[j], i, dt);
        store(y, i, dt, s);
    }
}

__global__ void k_inv_to_var(const float *inv, float *var, int c, float eps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c)
        var[i] = 1.0f / (inv[i] * inv[i]) - eps;
}

int reduce(cudaStream_t s, double *scratch, double *host, double *out, const char *what,
           char *err, size_t errlen)
{
    if (cudaMemcpyAsync(host, scratch, CUDA_RED_BLOCKS * sizeof(double), cudaMemcpyDeviceToHost,
                        s) != cudaSuccess ||
        sync_err(s, what, err, errlen) < 0)
        return launch_err(what, err, errlen) < 0 ? -1 : -1;
    double t = 0;
    for (int b = 0; b < CUDA_RED_BLOCKS; b++)
        t += host[b];
    *out = t;
    return 0;
}

}  // namespace

extern "C" {

int cuda_k_acc(void *stream, void *dst, const void *src, size_t count, be_dtype dt, float beta,
               char *err, size_t errlen)
{
    if (count)
        k_acc<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(dst, src, count, dt, beta);
    return launch_err("accumulate", err, errlen);
}

int cuda_k_cast(void *stream, const void *src, be_dtype sdt, void *dst, be_dtype ddt,
                size_t count, char *err, size_t errlen)
{
    if (count)
        k_cast<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(src, sdt, dst, ddt, count);
    return launch_err("cast", err, errlen);
}

int cuda_k_dropout_fwd(void *stream, const be_dropout_desc *d, bool training, const void *x,
                       float *mask, void *y, uint64_t seed, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    size_t es = d->dtype == BE_F32 ? 4 : 2;
    if (!training) {
        if (x != y && cudaMemcpyAsync(y, x, d->count * es, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
            return launch_err("dropout copy", err, errlen) < 0 ? -1 : -1;
        return launch_err("dropout copy", err, errlen);
    }
    size_t c = (size_t)d->c, c16 = (c + 15) / 16 * 16;
    if (d->count)
        k_dropout_fwd<<<blocks_for(d->count), THREADS, 0, s>>>(
            x, mask, y, d->count, d->dtype, d->layout == BE_BLOCKED16, c, c16, d->hw, seed,
            d->rate, 1.0f / (1.0f - d->rate));
    return launch_err("dropout", err, errlen);
}

int cuda_k_dropout_bwd(void *stream, const be_dropout_desc *d, const float *mask,
                       const void *dy, void *dx, float beta, char *err, size_t errlen)
{
    if (d->count)
        k_dropout_bwd<<<blocks_for(d->count), THREADS, 0, (cudaStream_t)stream>>>(
            mask, dy, dx, d->count, d->dtype, beta);
    return launch_err("dropout backward", err, errlen);
}

int cuda_k_xent(void *stream, int n, int classes, const float *logits, const int32_t *labels,
                float eps, float grad_scale, float *dlogits, float *probs, float *row_loss,
                int *row_hit, char *err, size_t errlen)
{
    if (n > 0)
        k_xent<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            n, classes, logits, labels, eps, grad_scale, dlogits, probs, row_loss, row_hit);
    return launch_err("softmax cross-entropy", err, errlen);
}

int cuda_k_sgd(void *stream, float *w, float *v, const float *g, size_t count, const be_sgd *hp,
               char *err, size_t errlen)
{
    if (count)
        k_sgd<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(w, v, g, count, hp->lr,
                                                                       hp->momentum,
                                                                       hp->weight_decay);
    return launch_err("sgd update", err, errlen);
}

int cuda_k_optim(void *stream, const be_optim *hp, float *w, float *s1, float *s2, const float *g,
                 size_t count, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (!count)
        return 0;
    if (hp->kind == BE_OPT_ADAM)
        k_optim_adam<<<blocks_for(count), THREADS, 0, s>>>(
            w, s1, s2, g, count, hp->grad_scale, hp->lr, hp->beta1, hp->beta2, hp->eps,
            hp->weight_decay, hp->decoupled_wd, hp->bc1, hp->sbc2);
    else
        k_optim_sgd<<<blocks_for(count), THREADS, 0, s>>>(w, s1, g, count, hp->grad_scale, hp->lr,
                                                          hp->momentum, hp->weight_decay,
                                                          hp->nesterov ? 1 : 0);
    return launch_err("optimizer update", err, errlen);
}

int cuda_k_bn_running(void *stream, float *rm, float *rv, const float *mean, const float *var,
                      int c, float momentum, int64_t m, char *err, size_t errlen)
{
    if (c > 0)
        k_bn_running<<<(unsigned)((c + THREADS - 1) / THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            rm, rv, mean, var, c, momentum, (long long)m);
    return launch_err("batch-norm running statistics", err, errlen);
}

int cuda_k_check(void *stream, float *g, size_t count, bool unscale, float factor,
                 double *scratch, double *host, bool *found, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    size_t per = (count + CUDA_RED_BLOCKS - 1) / CUDA_RED_BLOCKS;
    k_check<<<CUDA_RED_BLOCKS, THREADS, 0, s>>>(g, count, per ? per : 1, unscale, factor, scratch);
    double bad = 0;
    if (launch_err("gradient check", err, errlen) < 0 ||
        reduce(s, scratch, host, &bad, "gradient check", err, errlen) < 0)
        return -1;
    if (bad > 0)
        *found = true;
    return 0;
}

int cuda_k_sumsq(void *stream, const float *p, size_t count, double *scratch, double *host,
                 double *out, char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    size_t per = (count + CUDA_RED_BLOCKS - 1) / CUDA_RED_BLOCKS;
    k_sumsq<<<CUDA_RED_BLOCKS, THREADS, 0, s>>>(p, count, per ? per : 1, scratch);
    if (launch_err("sum of squares", err, errlen) < 0)
        return -1;
    return reduce(s, scratch, host, out, "sum of squares", err, errlen);
}

int cuda_k_bias_add(void *stream, void *y, const float *b, int n, int c, size_t hw, be_dtype dt,
                    char *err, size_t errlen)
{
    size_t count = (size_t)n * c * hw;
    if (count)
        k_bias_add<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(y, b, count, c, hw, dt);
    return launch_err("bias", err, errlen);
}

int cuda_k_bias_grad(void *stream, const void *dy, float *db, int n, int c, size_t hw,
                     be_dtype dt, char *err, size_t errlen)
{
    if (c > 0)
        k_bias_grad<<<(unsigned)c, THREADS, 0, (cudaStream_t)stream>>>(dy, db, n, c, hw, dt);
    return launch_err("bias gradient", err, errlen);
}

int cuda_k_act(void *stream, int alg, float alpha, bool backward, const void *y_or_x,
               const void *dy, void *out, size_t count, be_dtype dt, char *err, size_t errlen)
{
    if (count)
        k_act<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(alg, alpha, backward,
                                                                       y_or_x, dy, out, count, dt);
    return launch_err("activation", err, errlen);
}

int cuda_k_add(void *stream, const void *const *xs, int k, void *y, size_t count, be_dtype dt,
               char *err, size_t errlen)
{
    add_inputs in;
    for (int j = 0; j < k && j < BE_MAX_INPUTS; j++)
        in.p[j] = xs[j];
    if (count)
        k_add<<<blocks_for(count), THREADS, 0, (cudaStream_t)stream>>>(in, k, y, count, dt);
    return launch_err("add", err, errlen);
}

int cuda_k_inv_to_var(void *stream, const float *inv, float *var, int c, float eps,
                      char *err, size_t errlen)
{
    if (c > 0)
        k_inv_to_var<<<(unsigned)((c + THREADS - 1) / THREADS), THREADS, 0, (cudaStream_t)stream>>>(
            inv, var, c, eps);
    return launch_err("batch-norm variance", err, errlen);
}

}  // extern "C"
