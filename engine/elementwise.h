/* engine/elementwise.h: element-wise arithmetic shared by every backend.
 *
 * These are the formulas the backends run per element or per row: the CPU
 * backend calls them from OpenMP loops, the CUDA backend (compiled by nvcc)
 * from its kernels, so the CPU tests check the same arithmetic the GPU runs.
 * Everything here is `static inline`, takes plain scalars and pointers, and
 * must stay compilable both as C11 and as CUDA C++ (no C-only constructs:
 * no designated initialisers, no compound literals, no `restrict`).
 *
 * Precision: FP32 in, FP32 out, FP32 arithmetic; the loss is FP32 too
 * (DESIGN.md, AMP: softmax and the loss stay FP32 under every policy). The
 * 16-bit types (bfloat16, IEEE half) are only storage: the casts below turn
 * them into FP32 and back, rounding to nearest even.
 */
#ifndef KILN_ENGINE_ELEMENTWISE_H
#define KILN_ENGINE_ELEMENTWISE_H

#include <math.h>
#include <string.h>         /* memcpy: bit casts, which nvcc also compiles for the device */

#ifdef __CUDACC__
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

/* ---- casts ----------------------------------------------------------------- */

static inline KILN_HD unsigned int ew_f32_bits(float f)
{
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline KILN_HD float ew_bits_f32(unsigned int u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* FP32 -> bfloat16 (the top 16 bits), rounding to nearest even; NaN stays a
 * (quiet) NaN, values beyond the largest bfloat16 become infinite. */
static inline KILN_HD unsigned short ew_f32_to_bf16(float f)
{
    unsigned int u = ew_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

static inline KILN_HD float ew_bf16_to_f32(unsigned short h)
{
    return ew_bits_f32((unsigned int)h << 16);
}

/* FP32 -> IEEE half, rounding to nearest even: magnitudes from 65520 up
 * become infinite (the largest half is 65504), those below 2^-14 subnormal,
 * and those up to 2^-25 zero; NaN stays a (quiet) NaN. */
static inline KILN_HD unsigned short ew_f32_to_f16(float f)
{
    unsigned int u = ew_f32_bits(f);
    unsigned int sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (unsigned short)(sign | 0x7e00u);
    if (a >= 0x477ff000u)                       /* 65520: halfway past 65504 */
        return (unsigned short)(sign | 0x7c00u);
    if (a >= 0x38800000u) {                     /* 2^-14: a normal half */
        unsigned int m = a - 0x38000000u;       /* exponent bias 127 -> 15 */
        m += 0x0fffu + ((m >> 13) & 1u);
        return (unsigned short)(sign | (m >> 13));
    }
    if (a <= 0x33000000u)                       /* 2^-25: half the smallest subnormal */
        return (unsigned short)sign;
    unsigned int mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
    unsigned int q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (unsigned short)(sign | q);
}

static inline KILN_HD float ew_f16_to_f32(unsigned short h)
{
    unsigned int sign = ((unsigned int)h & 0x8000u) << 16, e = ((unsigned int)h >> 10) & 0x1fu,
                 m = (unsigned int)h & 0x3ffu;
    if (e == 0x1fu)
        return ew_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e)
        return ew_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    float f = (float)m * 5.9604644775390625e-08f;       /* m * 2^-24, exact */
    return sign ? -f : f;
}

/* f rounded through FP16 and back: how the CPU backend stores FP16 tensors. */
static inline KILN_HD float ew_round_f16(float f)
{
    return ew_f16_to_f32(ew_f32_to_f16(f));
}

/* ---- loss scaling ---------------------------------------------------------- */

/* One gradient element unscaled (factor = 1 / the loss scale); returns
 * whether the result is NaN or infinite (an overflow: the step is skipped). */
static inline KILN_HD int ew_unscale(float *g, float factor)
{
    float v = *g * factor;
    *g = v;
    return !isfinite(v);
}

/* ---- optimizers ------------------------------------------------------------ */

/* One element of SGD with momentum and L2 weight decay, in PyTorch's form
 * (the learning rate applies to the velocity, so changing lr mid-run does not
 * rescale the accumulated momentum):
 *     d = g + wd * w;   v = mu * v + d;   w = w - lr * v
 * With mu = 0 this is plain SGD (v then just holds d). */
static inline KILN_HD void ew_sgd_momentum(float *w, float *v, float g,
                                           float lr, float mu, float wd)
{
    float d = g + wd * *w;
    float vn = mu * *v + d;
    *v = vn;
    *w = *w - lr * vn;
}

/* SGD with the options of engine/optim.h (PyTorch's torch.optim.SGD with
 * dampening 0): gs scales the gradient (global-norm clipping and LARC, 1 =
 * none), then
 *     d = gs * g + wd * w;   v = mu * v + d;
 *     w = w - lr * v               (classical momentum)
 *     w = w - lr * (d + mu * v)    (nesterov != 0)
 * With gs = 1 and nesterov = 0 this is ew_sgd_momentum exactly. */
static inline KILN_HD void ew_sgd(float *w, float *v, float g, float gs, float lr, float mu,
                                  float wd, int nesterov)
{
    float d = gs * g + wd * *w;
    float vn = mu * *v + d;
    *v = vn;
    *w = *w - lr * (nesterov ? d + mu * vn : vn);
}

/* Adam and AdamW, in PyTorch's form (torch.optim.Adam / AdamW). t is the
 * step count from 1; the host passes the bias corrections bc1 = 1 - b1^t and
 * sbc2 = sqrt(1 - b2^t), computed in double. gs scales the gradient (global
 * clipping), l2 is Adam's L2 weight decay (added to the gradient), dwd is
 * AdamW's decoupled decay (applied to w before the step):
 *     w = w * (1 - lr * dwd);   gg = gs * g + l2 * w
 *     m = b1 m + (1 - b1) gg;   v = b2 v + (1 - b2) gg^2
 *     w = w - (lr / bc1) * m / (sqrt(v) / sbc2 + eps) */
static inline KILN_HD void ew_adam(float *w, float *m, float *v, float g, float gs, float lr,
                                   float b1, float b2, float eps, float l2, float dwd,
                                   float bc1, float sbc2)
{
    float wv = dwd != 0.0f ? *w * (1.0f - lr * dwd) : *w;
    float gg = gs * g + l2 * wv;
    float mn = b1 * *m + (1.0f - b1) * gg;
    float vn = b2 * *v + (1.0f - b2) * gg * gg;
    *m = mn;
    *v = vn;
    *w = wv - (lr / bc1) * (mn / (sqrtf(vn) / sbc2 + eps));
}

/* LARC's gradient multiplier for one tensor (seeds/000; NVCaffe's larc_policy
 * and apex's LARC): from the tensor's weight norm wn and (clipped) gradient
 * norm gn, the local rate trust = eta wn / (gn + wd wn + 1e-8). Policy
 * "scale" multiplies the gradient by trust; "clip" by min(trust / lr, 1), so
 * that the local rate never exceeds the global one. A zero norm (or lr <= 0
 * for clip) leaves the gradient alone: 1. */
static inline KILN_HD double ew_larc_factor(double wn, double gn, double lr, double wd,
                                            double eta, int clip)
{
    if (!(wn > 0.0) || !(gn > 0.0))
        return 1.0;
    double trust = eta * wn / (gn + wd * wn + 1e-8);
    if (!clip)
        return trust;
    if (!(lr > 0.0))
        return 1.0;
    return trust / lr < 1.0 ? trust / lr : 1.0;
}

/* ---- dropout --------------------------------------------------------------- */

/* Whether element i survives dropout at `rate` in the stream `seed`: a
 * counter-based draw (the splitmix64 finaliser of seed and i), so the mask
 * depends neither on the thread count nor on the order elements are visited,
 * and a GPU kernel draws the same one. u is the top 24 bits as a float in
 * [0, 1); the element is kept when u >= rate. */
static inline KILN_HD int ew_dropout_keep(unsigned long long seed, unsigned long long i,
                                          float rate)
{
    unsigned long long z = seed + (i + 1ULL) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    float u = (float)(z >> 40) * (1.0f / 16777216.0f);
    return u >= rate;
}

/* ---- batch normalization ----------------------------------------------------- */

/* Running statistics after one training batch of m values per channel, in
 * PyTorch's form with the Keras-style momentum of DESIGN.md (the weight of the
 * old value): the running variance tracks the unbiased batch variance. */
static inline KILN_HD void ew_bn_running(float *run_mean, float *run_var, float mean,
                                         float var, float momentum, long long m)
{
    float unbiased = m > 1 ? var * ((float)m / (float)(m - 1)) : var;
    *run_mean = momentum * *run_mean + (1.0f - momentum) * mean;
    *run_var = momentum * *run_var + (1.0f - momentum) * unbiased;
}

/* Batch norm in inference, y = scale (x - mean) / sqrt(var + eps) + shift,
 * folded into the layer x = w . in + b before it: y = (w s) . in + bout with
 * s = scale / sqrt(var + eps) and bout = (b - mean) s + shift. The factor of
 * one output channel, then its bias; each weight of the channel is w * s. */
static inline KILN_HD float ew_bn_fold_factor(float scale, float var, float eps)
{
    return scale / sqrtf(var + eps);
}

static inline KILN_HD float ew_bn_fold_bias(float b, float mean, float shift, float s)
{
    return (b - mean) * s + shift;
}

/* ---- loss ------------------------------------------------------------------ */

/* Softmax cross-entropy of one row of `classes` logits z, numerically stable
 * (shifted by the row maximum), with label smoothing eps in [0, 1): the
 * target is q[i] = (1 - eps) [i == label] + eps / classes. Returns
 * -sum q[i] log softmax(z)[i] (with eps 0: -log softmax(z)[label]), or 0
 * when label < 0 (inference: no label). Writes, where the pointer is not NULL:
 *   p[i]   softmax probabilities
 *   dz[i]  (p[i] - q[i]) * scale   -- the gradient of scale * loss
 *   *top   the index of the largest logit (the first one on ties)
 * z may not alias p or dz. With eps 0 every figure is the plain
 * cross-entropy's, bit for bit. */
static inline KILN_HD float ew_softmax_xent_row(const float *z, int classes, int label,
                                                float eps, float scale, float *p, float *dz,
                                                int *top)
{
    float m = z[0];
    int am = 0;
    for (int i = 1; i < classes; i++) {
        if (z[i] > m) {
            m = z[i];
            am = i;
        }
    }
    float s = 0.0f, zsum = 0.0f;              /* zsum: sum of z - m, for smoothing */
    for (int i = 0; i < classes; i++) {
        s += expf(z[i] - m);
        zsum += z[i] - m;
    }
    float lse = logf(s);                      /* log sum exp(z - m) */
    const float on = eps > 0.0f ? 1.0f - eps : 1.0f, off = eps > 0.0f ? eps / (float)classes : 0.0f;
    if (p || dz) {
        for (int i = 0; i < classes; i++) {
            float pi = expf(z[i] - m - lse);
            if (p)
                p[i] = pi;
            if (dz) {
                float q = i == label ? on : 0.0f;
                dz[i] = (eps > 0.0f ? pi - q - off : pi - q) * scale;
            }
        }
    }
    if (top)
        *top = am;
    if (label < 0)
        return 0.0f;
    if (eps > 0.0f)                           /* sum_i q_i (lse - (z_i - m)) */
        return lse - on * (z[label] - m) - off * zsum;
    return lse - (z[label] - m);
}

#endif
