/* engine/backend.h: the operations table that every compute backend fills.
 *
 * A backend is a `const backend` table of functions (the CPU one on oneDNN in
 * engine/cpu/, the CUDA one on cuDNN/cuBLAS later). The network code in
 * engine/net*.c only ever calls through this table, so a second backend is a
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
 * N x (C*H*W), which is why flatten is only a view) unless an op's descriptor
 * says another (be_layout below: the net keeps runs of convolution, batch
 * norm, activation, add and pooling layers in the layout the CPU kernels
 * want, with no reorders between them); conv weights are
 * (K, C/groups, KH, KW) and dense weights (OUT, IN), row-major: the layout of
 * the saved safetensors files and of ONNX.
 *
 * Errors: every operation that can fail returns 0, or -1 with err filled
 * (a backend failure or an allocation that did not fit). Operations run in
 * order; buf_download returns after everything before it has finished.
 */
#ifndef KILN_ENGINE_BACKEND_H
#define KILN_ENGINE_BACKEND_H

#include "engine/settings.h"   /* backend_kind */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct be_ctx be_ctx;
typedef struct be_buf be_buf;
typedef struct be_plan be_plan;
typedef struct be_comm be_comm;

/* Which passes a plan must be able to run (bit flags for the *_plan calls). */
enum {
    BE_FWD = 1,            /* forward */
    BE_BWD_DATA = 2,       /* gradient with respect to the input */
    BE_BWD_WEIGHTS = 4,    /* gradient with respect to weights and bias */
};

/* How an activation (and its gradient) is laid out in its buffer. BE_PLAIN is
 * dense NCHW. BE_BLOCKED16 keeps channels in blocks of 16 innermost (oneDNN's
 * nChw16c: [n][ceil(c/16)][h][w][16]), the layout the CPU kernels run fastest
 * on. Where c is not a multiple of 16 the last block is padded with channels
 * that hold zeros: every op keeps them zero (oneDNN's primitives zero the
 * padding of what they write; relu, add, dropout and accumulation map zeros to
 * zeros), so a blocked buffer holds be_act_elems() floats per image and the
 * element-wise ops (acc, dropout_bwd) run over all of them. BE_NHWC is dense
 * channels-last ([n][h][w][c], no padding), which the CPU's bfloat16
 * convolutions run faster on than on padded blocks (backend.act_layout).
 * Ops that take a layout field read their inputs and write their outputs in
 * it; a zeroed descriptor means plain everywhere. */
typedef enum be_layout { BE_PLAIN = 0, BE_BLOCKED16, BE_NHWC } be_layout;

/* Floats one image of c channels of hw elements takes in a layout. */
static inline size_t be_act_elems(int c, size_t hw, be_layout layout)
{
    size_t cc = (size_t)c;
    return (layout == BE_BLOCKED16 ? (cc + 15) / 16 * 16 : cc) * hw;
}

/* Element types of activations and of their gradients (DESIGN.md, AMP).
 * BE_F32; BE_BF16 (bfloat16); BE_F16 (IEEE binary16). A backend stores an
 * element of each in dtype_bytes(dt) bytes: the CPU backend, which has no
 * FP16 arithmetic, keeps BE_F16 tensors as FP32 values rounded through FP16
 * (ew_round_f16) by every op that writes them, so that their numerics,
 * overflow to infinity included, are FP16's. Parameters, their gradients,
 * optimizer state, batch-norm statistics and the loss are FP32 always; a
 * zeroed descriptor means FP32 everywhere. */
typedef enum be_dtype { BE_F32 = 0, BE_BF16, BE_F16 } be_dtype;

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
    be_layout src_layout;           /* x and dx */
    be_layout dst_layout;           /* y and dy */
    be_dtype src_dtype;             /* x and dx */
    be_dtype dst_dtype;             /* y and dy */
    be_dtype wdtype;                /* w as passed to fwd and bwd_data, and the precision the
                                     * products are computed in (FP32 accumulation always);
                                     * b, dw and db are FP32 */
    /* Inference plans (engine/net_fuse.c): infer makes a plan for conv_infer
     * only (passes must be BE_FWD), which may apply, in the same pass and in
     * this order, the addition of a tensor of y's shape, layout and type
     * (post_add: a residual connection) and a ReLU (post_relu: max(v, 0), or
     * v < 0 -> post_alpha v, leaky). The post_* fields need infer. */
    bool infer;
    bool post_add;
    bool post_relu;
    float post_alpha;
    /* Training plans (backend.conv_relu): a ReLU after it in its forward pass,
     * y = max(conv(x, w) + b, 0). The backward passes take the gradient of
     * that convolution's own output: the net runs the ReLU's backward pass,
     * from y, before them. */
    bool relu;
} be_conv_desc;

typedef enum be_pool_alg {
    BE_POOL_MAX,
    BE_POOL_AVG_EXCLUDE_PAD,        /* mean over the window's positions inside the input */
    BE_POOL_AVG_INCLUDE_PAD,        /* sum over the window / its full kernel area */
} be_pool_alg;

typedef struct be_pool_desc {
    be_pool_alg alg;
    int n, c, h, w;                 /* input */
    int oh, ow;                     /* output */
    int kh, kw;
    int stride_h, stride_w;
    int pad_t, pad_l, pad_b, pad_r; /* padded positions never win a max */
    be_layout src_layout;           /* x and dx */
    be_layout dst_layout;           /* y and dy */
    be_dtype dtype;                 /* x, y, dx, dy */
} be_pool_desc;

/* Dense (fully connected): y[n][out] = x[n][in] . W[out][in] + b[out]. */
typedef struct be_dense_desc {
    int n, in, out;
    bool bias;
    be_dtype src_dtype, dst_dtype, wdtype;  /* as in be_conv_desc */
} be_dense_desc;

typedef enum be_act_alg {
    BE_ACT_RELU,                    /* max(x, 0); with alpha > 0 leaky: x < 0 -> alpha x */
    BE_ACT_SIGMOID,                 /* 1 / (1 + exp(-x)) */
    BE_ACT_TANH,
} be_act_alg;

/* Element-wise activation over n images of `size` elements each. Every
 * algorithm's backward pass is computed from the forward output y (relu with
 * alpha >= 0 only: the sign of y is the sign of x). */
typedef struct be_act_desc {
    be_act_alg alg;
    int n;
    size_t size;
    float alpha;                    /* BE_ACT_RELU: the negative slope (0 = plain ReLU) */
    be_layout layout;               /* x, y, dx, dy */
    int c;                          /* BE_BLOCKED16, BE_NHWC: the channels of size (= c x h x w) */
    be_dtype dtype;                 /* x, y, dx, dy */
} be_act_desc;

/* Batch normalization over (n, c, h, w) per channel c, with a scale and a
 * shift of c elements each:  y = scale (x - mean) / sqrt(var + eps) + shift.
 * Training uses the batch's mean and biased variance (written out for the
 * running statistics and the backward pass); inference reads given ones. */
typedef struct be_bn_desc {
    int n, c, h, w;
    float eps;
    /* A ReLU after it in the same pass (backend.bn_relu): y = max(bn(x), 0),
     * and bn_bwd takes the gradient of that y, applying the ReLU's own (dy
     * where the output was positive, else 0) before batch norm's. Training
     * and inference alike. */
    bool relu;
    be_layout layout;               /* x, y, dx, dy */
    be_dtype dtype;                 /* x, y, dx, dy; the statistics, scale and shift are FP32 */
} be_bn_desc;

/* Element-wise sum of k >= 2 tensors of n images x `size` elements (add). */
#define BE_MAX_INPUTS 15
typedef struct be_add_desc {
    int n, k;
    size_t size;
    be_layout layout;               /* every input and the output */
    int c;                          /* BE_BLOCKED16, BE_NHWC: the channels of size (= c x h x w) */
    be_dtype dtype;                 /* every input and the output */
    bool relu;                      /* k = 2 and a ReLU after it in the same pass
                                     * (backend.add_relu): y = max(x0 + x1, 0) */
} be_add_desc;

/* Concatenation of k >= 2 NCHW tensors along channels: input i has c[i]
 * channels of h x w; the output has the sum of them, in order. */
typedef struct be_concat_desc {
    int n, k, h, w;
    int c[BE_MAX_INPUTS];
    be_dtype dtype;                 /* every input and the output */
} be_concat_desc;

/* Dropout over the count floats of a buffer, in a layout (be_layout above:
 * blocked, count includes the padding channels, which stay zero). The same
 * elements drop in every layout (by their plain index). */
typedef struct be_dropout_desc {
    size_t count;
    float rate;                     /* in [0, 1) */
    be_layout layout;
    int c;                          /* BE_BLOCKED16, BE_NHWC: channels of one image ... */
    size_t hw;                      /* ... of hw elements each */
    be_dtype dtype;                 /* x, y, dx, dy; the mask is count FP32 values */
} be_dropout_desc;

/* Softmax cross-entropy over n rows of `classes` FP32 logits. */
typedef struct be_xent_desc {
    int n, classes;
} be_xent_desc;

/* Hyper-parameters of one SGD update (formula in engine/elementwise.h). */
typedef struct be_sgd {
    float lr, momentum, weight_decay;
} be_sgd;

/* Hyper-parameters of one update by optim_update (engine/optim.h; formulas
 * ew_sgd and ew_adam in engine/elementwise.h). */
typedef enum be_optim_kind { BE_OPT_SGD, BE_OPT_ADAM } be_optim_kind;
typedef struct be_optim {
    be_optim_kind kind;
    float lr;
    float grad_scale;               /* multiplies the gradient (clipping, LARC); 1 = none */
    float weight_decay;             /* L2, added to the gradient */
    float momentum;                 /* SGD */
    bool nesterov;                  /* SGD */
    float beta1, beta2, eps;        /* Adam */
    float decoupled_wd;             /* AdamW's decay, applied to the weights */
    float bc1, sbc2;                /* Adam: 1 - beta1^t and sqrt(1 - beta2^t) */
} be_optim;

typedef struct backend {
    const char *name;                       /* "cpu", "cuda" */
    /* The layout this backend wants for activations of c channels in type
     * dt that only convolution, pooling and layout-preserving layers touch
     * (engine/net_build.c, plan_layouts); NULL: plain only. */
    be_layout (*act_layout)(int c, be_dtype dt);

    /* ---- context ---- */
    /* A context on device `device` (0 for the CPU). Returns 0 or -1. */
    int (*ctx_create)(int device, be_ctx **out, char *err, size_t errlen);
    void (*ctx_free)(be_ctx *ctx);          /* NULL is a no-op */

    /* ---- memory ---- */
    /* Bytes one element of that type takes in this backend's buffers. */
    size_t (*dtype_bytes)(be_dtype dt);
    /* The device memory free and in all, in bytes (the CPU: NULL; the net
     * then checks against the machine's physical memory). */
    int (*mem_info)(be_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes, char *err,
                    size_t errlen);
    /* Whether this device computes in type dt: 0, or -1 with err saying why
     * not (before any plan is made, so that the error is about the machine,
     * not a layer). */
    int (*dtype_check)(be_ctx *ctx, be_dtype dt, char *err, size_t errlen);
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
    bool conv_relu;                 /* conv_plan takes be_conv_desc.relu */
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
    /* The forward pass of an infer plan: y = relu(conv(x, w) + b + addend)
     * with the plan's post-ops (addend NULL exactly without post_add; it may
     * not be y). w_stamp says which values w holds: a plan may keep w in its
     * own layout between calls and reuse it while the same w comes with the
     * same non-zero stamp, so the caller changes the stamp whenever w's
     * values change (engine/net_fuse.c passes the net's parameter
     * generation); 0 means "do not reuse". NULL in a backend without
     * inference plans: the net then runs its layers one by one. */
    int (*conv_infer)(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *w,
                      uint64_t w_stamp, const be_buf *b, const be_buf *addend, be_buf *y,
                      char *err, size_t errlen);

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

    /* ---- batch normalization ---- */
    bool bn_relu;                   /* bn_plan takes be_bn_desc.relu */
    int (*bn_plan)(be_ctx *ctx, const be_bn_desc *d, unsigned passes, be_plan **out,
                   char *err, size_t errlen);
    /* training: y from the batch statistics, which are written to mean and var
     * (c floats each; var biased, divided by n*h*w). Otherwise y from the given
     * mean and var (the running statistics). */
    int (*bn_fwd)(be_ctx *ctx, be_plan *p, bool training, const be_buf *x,
                  const be_buf *scale, const be_buf *shift, be_buf *mean, be_buf *var,
                  be_buf *y, char *err, size_t errlen);
    /* Gradient of the latest training bn_fwd (mean, var as it wrote them):
     * dx (overwritten; NULL: not wanted), dscale and dshift (overwritten).
     * shift is not used in the arithmetic, but oneDNN asks for it. */
    int (*bn_bwd)(be_ctx *ctx, be_plan *p, const be_buf *x, const be_buf *dy,
                  const be_buf *scale, const be_buf *shift, const be_buf *mean,
                  const be_buf *var, be_buf *dx,
                  be_buf *dscale, be_buf *dshift, char *err, size_t errlen);
    /* Running statistics after a training step, per element of c channels
     * (ew_bn_running): r = momentum r + (1 - momentum) batch, the variance
     * made unbiased with m = n*h*w values per channel. */
    int (*bn_running)(be_ctx *ctx, be_buf *run_mean, be_buf *run_var, const be_buf *mean,
                      const be_buf *var, int c, float momentum, int64_t m,
                      char *err, size_t errlen);
    /* Inference batch norm folded into the convolution or dense layer before
     * it (ew_bn_fold): for each of k output channels, with s = scale /
     * sqrt(var + eps), wout = w s over the channel's per_k FP32 weights and
     * bout = (b - mean) s + shift (b NULL: no bias, 0). All FP32, c = k
     * floats of scale, shift, mean, var and bout. NULL where conv_infer is. */
    int (*bn_fold)(be_ctx *ctx, const be_buf *w, const be_buf *b, const be_buf *scale,
                   const be_buf *shift, const be_buf *mean, const be_buf *var, float eps,
                   int k, size_t per_k, be_buf *wout, be_buf *bout, char *err, size_t errlen);

    /* ---- add and concat ---- */
    bool add_relu;                  /* add_plan takes be_add_desc.relu */
    int (*add_plan)(be_ctx *ctx, const be_add_desc *d, be_plan **out, char *err, size_t errlen);
    /* y = xs[0] + ... + xs[k-1] (the backward pass is the identity: acc). */
    int (*add_fwd)(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y,
                   char *err, size_t errlen);
    int (*concat_plan)(be_ctx *ctx, const be_concat_desc *d, be_plan **out,
                       char *err, size_t errlen);
    int (*concat_fwd)(be_ctx *ctx, be_plan *p, const be_buf *const *xs, be_buf *y,
                      char *err, size_t errlen);
    /* dx of input i from dy: dx = dy[input i's channels] + beta dx, beta 0 or 1. */
    int (*concat_bwd)(be_ctx *ctx, be_plan *p, const be_buf *dy, int i, be_buf *dx,
                      float beta, char *err, size_t errlen);

    /* ---- element-wise helpers ---- */
    /* dst = src + beta dst over count elements of type dt, computed in FP32
     * (beta 0: a copy; 1: gradient accumulation where an output feeds
     * several layers). */
    int (*acc)(be_ctx *ctx, be_buf *dst, const be_buf *src, size_t count, be_dtype dt,
               float beta, char *err, size_t errlen);
    /* dst = src converted from sdt to ddt over count elements, rounding to
     * nearest even (ew_f32_to_bf16, ew_f32_to_f16: FP16 overflows to
     * infinity): the 16-bit copies of the weights under AMP, and the logits'
     * crossing into FP32 for the loss. */
    int (*cast)(be_ctx *ctx, const be_buf *src, be_dtype sdt, be_buf *dst, be_dtype ddt,
                size_t count, char *err, size_t errlen);
    /* Inverted dropout over d->count elements (ew_dropout_keep): training,
     * each element is kept with probability 1 - rate from the stream `seed`,
     * drawn by its plain (NCHW) index whatever the layout, so that a layout
     * does not change which elements drop; mask = kept / (1 - rate), stored
     * in the data's layout, and y = x mask. Otherwise y = x. */
    int (*dropout_fwd)(be_ctx *ctx, const be_dropout_desc *d, bool training, const be_buf *x,
                       be_buf *mask, be_buf *y, uint64_t seed, char *err, size_t errlen);
    /* dx = dy mask + beta dx (beta 0 or 1) over d->count elements. */
    int (*dropout_bwd)(be_ctx *ctx, const be_dropout_desc *d, const be_buf *mask,
                       const be_buf *dy, be_buf *dx, float beta, char *err, size_t errlen);

    /* ---- loss ---- */
    int (*xent_plan)(be_ctx *ctx, const be_xent_desc *d, be_plan **out,
                     char *err, size_t errlen);
    /* Softmax cross-entropy (engine/elementwise.h, ew_softmax_xent_row) of
     * logits against int32 labels, with label smoothing eps in [0, 1) (0:
     * none). labels may be NULL (no loss: *loss_sum and *correct are 0).
     * Writes, where not NULL: dlogits = (p - q) * grad_scale with q the
     * smoothed one-hot target, probs = softmax(logits), *loss_sum = the sum
     * of the row losses added in row order (double), *correct = top-1 hits. */
    int (*xent)(be_ctx *ctx, be_plan *p, const be_buf *logits, const be_buf *labels,
                float eps, float grad_scale, be_buf *dlogits, be_buf *probs,
                double *loss_sum, int *correct, char *err, size_t errlen);

    /* ---- optimizer ---- */
    /* *found = whether any of count FP32 elements is NaN or infinite (the
     * check before an update; under AMP, the loss scaler's overflow test). */
    int (*nonfinite)(be_ctx *ctx, const be_buf *b, size_t count, bool *found,
                     char *err, size_t errlen);
    /* The loss scaler's unscale-and-check (engine/amp.h): count FP32
     * gradients multiplied in place by factor (1 / the loss scale,
     * ew_unscale), and *found set when any result is NaN or infinite
     * (left as it was otherwise, so calls can share one flag). */
    int (*unscale)(be_ctx *ctx, be_buf *g, size_t count, float factor, bool *found,
                   char *err, size_t errlen);
    /* count FP32 elements: w, v updated in place from g (ew_sgd_momentum). */
    int (*sgd_update)(be_ctx *ctx, be_buf *w, be_buf *v, const be_buf *g, size_t count,
                      const be_sgd *hp, char *err, size_t errlen);
    /* count FP32 elements of w and its state updated in place from g:
     * SGD (ew_sgd) with s1 the velocity, s2 unused (may be NULL); Adam
     * (ew_adam) with s1 the first moment, s2 the second. */
    int (*optim_update)(be_ctx *ctx, const be_optim *hp, be_buf *w, be_buf *s1, be_buf *s2,
                        const be_buf *g, size_t count, char *err, size_t errlen);
    /* *out = the sum of squares of count FP32 elements, in double, added in an
     * order that does not depend on the thread count (gradient norms). */
    int (*sumsq)(be_ctx *ctx, const be_buf *b, size_t count, double *out,
                 char *err, size_t errlen);

    /* ---- data parallelism (engine/net_dp.c: replicas) ---- */
    /* Makes the calling thread ready to queue operations on ctx (CUDA:
     * selects its GPU). A replica's thread calls it before anything else. */
    void (*ctx_bind)(be_ctx *ctx);
    /* A communicator over n contexts of this backend, rank i on ctxs[i]
     * (CUDA: NCCL over their GPUs). Called from one thread. */
    int (*comm_create)(be_ctx *const *ctxs, int n, be_comm **out, char *err, size_t errlen);
    void (*comm_free)(be_comm *c);                     /* NULL is a no-op */
    /* Sums k buffers of counts[i] FP32 elements over the ranks, in place:
     * every rank calls it from its own thread with the same counts in the
     * same order, and every rank gets the same bits. It starts after the
     * operations queued before it on ctx and may run beside later ones
     * (CUDA: on a stream of its own, so the backward pass goes on while a
     * bucket of gradients travels); allreduce_wait makes what is queued
     * after it wait for every allreduce started. */
    int (*allreduce)(be_ctx *ctx, be_comm *c, int rank, be_buf *const *bufs,
                     const size_t *counts, int k, char *err, size_t errlen);
    int (*allreduce_wait)(be_ctx *ctx, be_comm *c, int rank, char *err, size_t errlen);
    /* After a rank failed: the others' collectives return -1 instead of
     * waiting for it forever. The communicator is then of no further use. */
    void (*comm_abort)(be_comm *c);

    /* ---- data parallelism across processes (engine/net_world.c) ---- */
    /* A communicator with the other processes of w (engine/settings.h,
     * net_world): this process is rank w->rank, on ctx (its one device).
     * allreduce, allreduce_wait and comm_abort then work as above, rank
     * w->rank, every process calling them from one thread; comm_free frees
     * it. NULL where the backend cannot. */
    int (*comm_create_world)(be_ctx *ctx, const net_world *w, be_comm **out, char *err,
                             size_t errlen);
    /* A world communicator's: every rank's `bytes` host bytes of in, into
     * out (size * bytes) in rank order, when every rank has called it alike
     * (blocking). Returns 0, or -1 with err set. */
    int (*comm_gather)(be_ctx *ctx, be_comm *c, const void *in, size_t bytes, void *out,
                       char *err, size_t errlen);
} backend;

/* The CPU backend (engine/cpu/). */
extern const backend cpu_backend;

/* The backend of that kind, or NULL with err set (err may be NULL): not
 * compiled into this binary, or (cuda) no NVIDIA driver on this machine, or
 * the CUDA plugin could not be loaded (engine/cuda/plugin.h). The CUDA backend
 * is loaded by the first call that asks for it; thread-safe. */
const backend *backend_for(backend_kind kind, char *err, size_t errlen);

#endif
