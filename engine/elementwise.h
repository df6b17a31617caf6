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
 * (DESIGN.md, AMP: softmax and the loss stay FP32 under every policy).
 */
#ifndef KILN_ENGINE_ELEMENTWISE_H
#define KILN_ENGINE_ELEMENTWISE_H

#include <math.h>

#ifdef __CUDACC__
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

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

/* ---- loss ------------------------------------------------------------------ */

/* Softmax cross-entropy of one row of `classes` logits z, numerically stable
 * (shifted by the row maximum). Returns -log(softmax(z)[label]), or 0 when
 * label < 0 (inference: no label). Writes, where the pointer is not NULL:
 *   p[i]   softmax probabilities
 *   dz[i]  (p[i] - [i == label]) * scale   -- the gradient of scale * loss
 *   *top   the index of the largest logit (the first one on ties)
 * z may not alias p or dz. */
static inline KILN_HD float ew_softmax_xent_row(const float *z, int classes, int label,
                                                float scale, float *p, float *dz, int *top)
{
    float m = z[0];
    int am = 0;
    for (int i = 1; i < classes; i++) {
        if (z[i] > m) {
            m = z[i];
            am = i;
        }
    }
    float s = 0.0f;
    for (int i = 0; i < classes; i++)
        s += expf(z[i] - m);
    float lse = logf(s);                      /* log sum exp(z - m) */
    if (p || dz) {
        for (int i = 0; i < classes; i++) {
            float pi = expf(z[i] - m - lse);
            if (p)
                p[i] = pi;
            if (dz)
                dz[i] = (pi - (i == label ? 1.0f : 0.0f)) * scale;
        }
    }
    if (top)
        *top = am;
    return label >= 0 ? lse - (z[label] - m) : 0.0f;
}

#endif
