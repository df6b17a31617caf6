/* engine/summary.h: a model summary computed from a spec, without building
 * the network (seeds/002's memory and FLOP arithmetic).
 *
 * Per layer: output shape, parameters, activation bytes per image (in the
 * layer's type under the precision) and forward FLOPs per image; totals; an
 * estimate of the memory that training takes for a batch size, precision
 * and optimizer, against the memory of each device; warnings where a
 * dimension is not a multiple of 8 (Tensor-Core and SIMD-friendly sizes,
 * seeds/004).
 *
 * Conventions (what the figures count):
 *   MACs   conv2d: Ho*Wo*Cout*(Cin/groups)*Kh*Kw; dense: in*out; others 0.
 *   FLOPs  conv2d and dense: 2*MACs, plus one add per output element when the
 *          layer has a bias. maxpool, avgpool: Kh*Kw per output element;
 *          global_avgpool: one per input element; relu, leaky_relu, sigmoid,
 *          tanh, dropout: one per element; batchnorm: two per element (scale
 *          and shift); add: (inputs - 1) per element; flatten, concat: 0.
 *   Precision: "fp32" (the default), "amp-bf16" or "amp-fp16" (DESIGN.md,
 *          seeds/004). Under mixed precision the parameters stay FP32 (the
 *          master weights), so do their gradients and every optimizer state;
 *          each convolution and dense weight (not the biases, not batch
 *          norm's scale and shift) has a 16-bit copy besides, 2 bytes per
 *          weight; and activations are stored in 16 bits (2 bytes per
 *          element) where the op lists make them so (engine/amp.h): the
 *          outputs of convolutions and dense layers, except the dense layer
 *          that writes the logits (FP32 for softmax and the loss), and of the
 *          layers after them, which compute in their input's type. The images
 *          stay FP32. Batch norm's statistics are FP32 but per channel, a few
 *          bytes, and not counted.
 *   Activation bytes: per element of the layer's output, 4 bytes (FP32) or 2
 *          where the output is 16-bit (above). flatten is a view of its input
 *          and holds no memory of its own in training.
 *   Training memory for batch B (seeds/002: the model x (1 + 1 + optimizer
 *          states), the layer outputs x batch x 2):
 *          fixed:     4 bytes per parameter each for the weights, their
 *                     gradients and each optimizer state (sgd without
 *                     momentum 0, with momentum 1, adam and adamw 2), plus
 *                     under AMP 2 bytes per convolution and dense weight
 *                     for the 16-bit copies;
 *          per image: the FP32 input, and every layer's output but flatten's
 *                     twice (the forward output and its gradient, in the
 *                     output's type), plus 4 bytes per element of each dropout
 *                     layer's mask;
 *          total:     fixed + B x per image.
 *          It leaves out the convolution and matmul workspaces (cuDNN,
 *          oneDNN), staging buffers, the loss's few per-image numbers and the
 *          runtime's own memory (the CUDA context, the allocator's slack): a
 *          lower bound, not a promise. net_create refuses what even this
 *          bound does not fit (summary_check_memory).
 *   Devices: each device of engine_devices (the CPU with its physical memory,
 *          each GPU the CUDA probe finds with its total memory), whether the
 *          total fits, and the largest batch that would: memory is linear in
 *          the batch, so it is floor((memory - fixed) / per image), 0 when
 *          not even one image fits.
 *   Warnings (Tensor-Core shapes, seeds/004): conv2d filters and input
 *          channels, dense units and the batch size that are not multiples
 *          of 8. The input channels of a convolution that reads the images
 *          are exempt: they are the data's (1 grey, 3 colour), the backends
 *          pad them themselves, and a warning there is one nobody can act
 *          on.
 */
#ifndef KILN_ENGINE_SUMMARY_H
#define KILN_ENGINE_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>

#include "engine/net.h"
#include "engine/spec.h"            /* SPEC_NAME_MAX */

#define SUMMARY_WARN_MAX 200        /* one warning's text, with its NUL */

typedef struct summary_layer {
    char name[SPEC_NAME_MAX];
    const char *type;               /* static: "conv2d", ... */
    net_shape out;
    int64_t params;
    int64_t act_bytes;              /* output, per image, in its type */
    int64_t macs;                   /* multiply-adds per image */
    int64_t flops;                  /* forward FLOPs per image */
} summary_layer;

typedef struct summary_device {
    char kind[8];                   /* "cpu", "cuda" */
    int index;
    char name[128];
    int64_t memory_bytes;
    bool fits;                      /* train_bytes <= memory_bytes */
    int64_t max_batch;              /* the largest batch whose estimate fits (0: none) */
} summary_device;

typedef struct summary {
    char name[SPEC_NAME_MAX];       /* the spec's "name", or "" */
    net_shape in;
    int classes;
    int nlayers;
    summary_layer *layers;          /* nlayers, owned */
    /* totals per image */
    int64_t params;
    int64_t macs;
    int64_t flops;
    int64_t act_bytes;              /* sum of the layers' outputs */
    int64_t kept_bytes;             /* input + outputs kept for backward */
    /* training memory estimate */
    int batch;
    solver_type solver;
    bool momentum;
    precision_mode precision;
    int opt_states;                 /* state tensors per parameter */
    int64_t weight_bytes, grad_bytes, opt_bytes, copy_bytes;   /* copy: AMP's 16-bit weights */
    int64_t image_bytes;            /* per image: input, outputs and gradients, masks */
    int64_t fixed_bytes;            /* weights + gradients + optimizer + copies */
    int64_t batch_act_bytes, train_bytes;
    int ndevices;
    summary_device *devices;        /* ndevices, owned */
    int nwarnings;
    char (*warnings)[SUMMARY_WARN_MAX];   /* nwarnings, owned */
} summary;

/* Number of optimizer state tensors per parameter: sgd 0, or 1 with
 * momentum; adam and adamw 2. */
int summary_opt_states(solver_type solver, bool momentum);

/* The input and class count a built-in network is summarised for when the
 * caller gives none: lenet 1x28x28 and 10; cifar10-cnn, resnet20, alexnet
 * 3x32x32 and 10; resnet18, resnet50 3x224x224 and 1000. Returns false (and
 * leaves *in and *classes alone) for any other name. */
bool summary_builtin_defaults(const char *name, net_shape *in, int *classes);

/* Summarises `spec` (a cJSON object, see engine/spec.h) for input `in`
 * ({0,0,0}: the spec's "input") and `classes` classes, and estimates the
 * training memory for `batch` images (>= 1) with `solver` (momentum only
 * matters for sgd) in precision `prec`. On success fills *out (free it with
 * summary_free) and returns 0; otherwise returns -1 with err set (the
 * parser's message, which names the layer) and *out empty. */
int summary_build(const cJSON *spec, net_shape in, int classes, int batch,
                  solver_type solver, bool momentum, precision_mode prec, summary *out,
                  char *err, size_t errlen);

/* The training-memory arithmetic of the conventions above, for a parsed spec:
 * the one estimator that the summary prints and net_create checks. */
typedef struct summary_mem {
    int64_t fixed;                  /* weights + gradients + optimizer + 16-bit copies */
    int64_t per_image;              /* the input, outputs and their gradients, masks */
    int act_layer;                  /* the layer (index) whose output takes the most; -1 none */
    int64_t act_layer_bytes;        /* per image: its output, gradient and mask */
    int param_layer;                /* the layer (index) with the most parameters; -1 none */
    int64_t param_layer_bytes;      /* its share of fixed */
} summary_mem;

/* Fills *m for s trained with opt_states state tensors per parameter
 * (summary_opt_states) in precision `prec`. Returns 0, or -1
 * with err set (out of memory; a join of a 16-bit and
 * an FP32 input, which mixed precision does not run, engine/amp.h). */
int summary_memory(const net_spec *s, int opt_states, precision_mode prec, summary_mem *m,
                   char *err, size_t errlen);

/* The estimate for `batch` images: fixed + batch x per image. */
static inline int64_t summary_train_bytes(const summary_mem *m, int64_t batch)
{
    return spec_add(m->fixed, spec_mul(batch, m->per_image));
}

/* The largest batch whose estimate fits in `memory` bytes:
 * floor((memory - fixed) / per image), and 0 when the fixed part alone does
 * not fit or not even one image does. */
int64_t summary_max_batch(const summary_mem *m, int64_t memory);

/* net_create's check before it allocates: whether s trained at `batch` fits
 * in `memory` bytes, which `where` names for the message ("this machine's",
 * "the GPU's free"). With devices > 1 (data parallel), batch is one
 * device's share and the largest batch the message advises is for all of
 * them. Returns 0 when it fits or memory is 0 (unknown); else -1 with err
 * saying how much is needed and naming the layer responsible (the one with
 * the largest activations, or with the most parameters when they alone do
 * not fit) and the largest batch that does fit. */
int summary_check_memory(const net_spec *s, int opt_states, precision_mode prec, int batch,
                         int devices, int64_t memory, const char *where, char *err,
                         size_t errlen);

void summary_free(summary *s);      /* frees what s owns; s itself is the caller's */

/* A new JSON object describing s (owned by the caller), or NULL when out of
 * memory. */
cJSON *summary_to_json(const summary *s);

/* Writes a readable table of s to f. Returns 0, or -1 on a write error. */
int summary_print(FILE *f, const summary *s);

#endif
