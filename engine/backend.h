/* engine/backend.h: the operations table that every compute backend fills.
 *
 * A backend is a `const backend` table of functions (the CPU one on oneDNN in
 * engine/cpu/, the CUDA one on cuDNN/cuBLAS later). The network code in
 * engine/net.c only ever calls through this table, so a second backend is a
 * second table, not a second engine.
 *
 * Ownership and memory
 *   - be_ctx: one per net and device (oneDNN engine and stream; later a CUDA
 *     stream, cuDNN/cuBLAS handles). Created by ctx_create, freed by ctx_free
 *     after every buffer and plan made with it.
 *   - be_buf: memory the backend allocates (host memory on the CPU, device
 *     memory on a GPU). Callers never dereference it; data moves in and out
 *     through buf_upload / buf_download. A buffer is untyped bytes; each
 *     operation says what element type it reads (FP32 unless noted).
 *   - be_plan: one operation prepared for one set of shapes, batch size
 *     included (oneDNN primitives, cuDNN descriptors and algorithm choices,
 *     the max-pooling workspace). Plans are made once and run many times;
 *     running never allocates. A plan may keep state between its forward and
 *     backward passes (max pooling's argmax), so a forward and the backward
 *     that follows must use the same plan.
 *
 * Layouts: activations are dense NCHW (a dense layer reads its input as
 * N x (C*H*W), which is why flatten is only a view); conv weights are
 * (K, C/groups, KH, KW) and dense weights (OUT, IN), row-major: the layout of
 * the saved safetensors files and of ONNX.
 *
 * Errors: every operation that can fail returns 0, or -1 with err filled
 * (a backend failure or an allocation that did not fit). Operations run in
 * order; buf_download returns after everything before it has finished.
 */
#ifndef KILN_ENGINE_BACKEND_H
#define KILN_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

typedef struct be_ctx be_ctx;
typedef struct be_buf be_buf;
typedef struct be_plan be_plan;

/* Which passes a plan must be able to run (bit flags for the *_plan calls). */
enum {
    BE_FWD = 1,            /* forward */
    BE_BWD_DATA = 2,       /* gradient with respect to the input */
    BE_BWD_WEIGHTS = 4,    /* gradient with respect to weights and bias */
};

/* 2-D convolution (cross-correlation, as every framework computes it). */
typedef struct be_conv_desc {
    int n;                          /* batch */
    int c, h, w;                    /* input channels and size */
    int k, oh, ow;                  /* output channels (filters) and size */
    int kh, kw;                     /* kernel */
    int stride_h, stride_w;
    int pad_t, pad_l, pad_b, pad_r; /* may be asymmetric ("same" with an even kernel) */
    int dil_h, dil_w;               /* 1 = ordinary kernel */
    int groups;                     /* divides c and k */
    bool bias;
} be_conv_desc;

typedef enum be_pool_alg { BE_POOL_MAX } be_pool_alg;

typedef struct be_pool_desc {
    be_pool_alg alg;
    int n, c, h, w;                 /* input */
    int oh, ow;                     /* output */
    int kh, kw;
    int stride_h, stride_w;
    int pad_t, pad_l, pad_b, pad_r; /* padded positions never win a max */
} be_pool_desc;

/* Dense (fully connected): y[n][out] = x[n][in] . W[out][in] + b[out]. */
typedef struct be_dense_desc {
    int n, in, out;
    bool bias;
} be_dense_desc;

typedef enum be_act_alg { BE_ACT_RELU } be_act_alg;

/* Element-wise activation over n images of `size` elements each. */
typedef struct be_act_desc {
    be_act_alg alg;
    int n;
    size_t size;
} be_act_desc;

/* Softmax cross-entropy over n rows of `classes` FP32 logits. */
typedef struct be_xent_desc {
    int n, classes;
} be_xent_desc;

/* Hyper-parameters of one SGD update (formula in engine/elementwise.h). */
typedef struct be_sgd {
    float lr, momentum, weight_decay;
} be_sgd;

typedef struct backend {
    const char *name;                       /* "cpu", later "cuda" */

    /* ---- context ---- */
    /* A context on device `device` (0 for the CPU). Returns 0 or -1. */
    int (*ctx_create)(int device, be_ctx **out, char *err, size_t errlen);
    void (*ctx_free)(be_ctx *ctx);          /* NULL is a no-op */

    /* ---- memory ---- */
    /* `bytes` of zeroed memory, or NULL with err set. */
    be_buf *(*buf_alloc)(be_ctx *ctx, size_t bytes, char *err, size_t errlen);
    void (*buf_free)(be_ctx *ctx, be_buf *b);          /* NULL is a no-op */
    /* Copies between host memory and a buffer, at a byte offset into it. */
    int (*buf_upload)(be_ctx *ctx, be_buf *dst, size_t offset, const void *src,
                      size_t bytes, char *err, size_t errlen);
    int (*buf_download)(be_ctx *ctx, const be_buf *src, size_t offset, void *dst,
                        size_t bytes, char *err, size_t errlen);

    /* ---- plans ---- */
    void (*plan_free)(be_ctx *ctx, be_plan *p);        /* NULL is a no-op */

    /* ---- convolution ---- */
    int (*conv_plan)(be_ctx *ctx, const be_conv_desc *d, unsigned passes,
                     be_plan **out, char *err, size_t errlen);
    /* y = conv(x, w) + b; b is NULL exactly when the desc has no bias. */
    int (*conv_fwd)(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w,
                    const be_buf *b, be_buf *y, char *err, size_t errlen);
    /* dx = dL/dx given dy = dL/dy (overwrites dx). */
    int (*conv_bwd_data)(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w,
                         be_buf *dx, char *err, size_t errlen);
    /* dw, db = dL/dw, dL/db (overwritten, not accumulated); db NULL without bias. */
    int (*conv_bwd_weights)(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                            be_buf *dw, be_buf *db, char *err, size_t errlen);

    /* ---- pooling ---- */
    int (*pool_plan)(be_ctx *ctx, const be_pool_desc *d, unsigned passes,
                     be_plan **out, char *err, size_t errlen);
    int (*pool_fwd)(be_ctx *ctx, be_plan *p, const be_buf *x, be_buf *y,
                    char *err, size_t errlen);
    /* Gradient of the latest pool_fwd run with this plan. */
    int (*pool_bwd)(be_ctx *ctx, be_plan *p, const be_buf *dy, be_buf *dx,
                    char *err, size_t errlen);

    /* ---- dense ---- */
    int (*dense_plan)(be_ctx *ctx, const be_dense_desc *d, unsigned passes,
                      be_plan **out, char *err, size_t errlen);
    int (*dense_fwd)(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w,
                     const be_buf *b, be_buf *y, char *err, size_t errlen);
    int (*dense_bwd_data)(be_ctx *ctx, be_plan *p, const be_buf *dy, const be_buf *w,
                          be_buf *dx, char *err, size_t errlen);
    int (*dense_bwd_weights)(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                             be_buf *dw, be_buf *db, char *err, size_t errlen);

    /* ---- activations ---- */
    int (*act_plan)(be_ctx *ctx, const be_act_desc *d, unsigned passes,
                    be_plan **out, char *err, size_t errlen);
    /* y = f(x); y may be x (in place). */
    int (*act_fwd)(be_ctx *ctx, be_plan *p, const be_buf *x, be_buf *y,
                   char *err, size_t errlen);
    /* dx = f'(.) * dy, computed from the forward output y; dx may be dy. */
    int (*act_bwd)(be_ctx *ctx, be_plan *p, const be_buf *y, const be_buf *dy,
                   be_buf *dx, char *err, size_t errlen);

    /* ---- loss ---- */
    int (*xent_plan)(be_ctx *ctx, const be_xent_desc *d, be_plan **out,
                     char *err, size_t errlen);
    /* Softmax cross-entropy (engine/elementwise.h, ew_softmax_xent_row) of
     * logits against int32 labels. labels may be NULL (no loss: *loss_sum and
     * *correct are 0). Writes, where not NULL: dlogits = (p - onehot) *
     * grad_scale, probs = softmax(logits), *loss_sum = the sum of the row
     * losses added in row order (double), *correct = top-1 hits. */
    int (*xent)(be_ctx *ctx, be_plan *p, const be_buf *logits, const be_buf *labels,
                float grad_scale, be_buf *dlogits, be_buf *probs,
                double *loss_sum, int *correct, char *err, size_t errlen);

    /* ---- optimizer ---- */
    /* *found = whether any of count FP32 elements is NaN or infinite (the
     * check before an update; under AMP, the loss scaler's overflow test). */
    int (*nonfinite)(be_ctx *ctx, const be_buf *b, size_t count, bool *found,
                     char *err, size_t errlen);
    /* count FP32 elements: w, v updated in place from g (ew_sgd_momentum). */
    int (*sgd_update)(be_ctx *ctx, be_buf *w, be_buf *v, const be_buf *g, size_t count,
                      const be_sgd *hp, char *err, size_t errlen);
} backend;

/* The CPU backend (engine/cpu/). */
extern const backend cpu_backend;

/* The backend compiled in under that name, or NULL. */
const backend *backend_find(const char *name);

#endif
