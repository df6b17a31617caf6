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
 *   Activation bytes: per element of the layer's output, 4 bytes (FP32) or,
 *          under amp-bf16 and amp-fp16, 2 bytes for the outputs the op lists
 *          make 16-bit (engine/amp.h: convolutions and dense layers but the
 *          last, and the layers after them). flatten is a view of its input.
 *   Training memory for batch B (seeds/002: the model x (1 + 1 + optimizer
 *          states), the layer outputs x batch x 2):
 *          fixed:     4 bytes per parameter each for the weights, their
 *                     gradients and each optimizer state (sgd without
 *                     momentum 0, with momentum 1, adam and adamw 2), plus
 *                     under AMP 2 bytes per convolution and dense weight
 *                     for the 16-bit copies;
 *          per image: the FP32 input, every layer's output but flatten's
 *                     twice (the output and its gradient), and 4 bytes per
 *                     element of each dropout layer's mask.
 *          It leaves out workspaces, staging buffers and the runtime's own
 *          memory: a lower bound, not a promise.
 *   Devices: each device of engine_devices (the CPU's physical memory, each
 *          GPU's) with whether the total fits and the largest batch that
 *          would (memory - fixed) / per image.
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
    char solver[8];                 /* "sgd", "sgd-momentum" is "sgd" with momentum */
    bool momentum;
    char precision[12];             /* "fp32", "amp-bf16", "amp-fp16" */
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

/* Number of optimizer state tensors per parameter for solver "sgd" (0, or 1
 * with momentum), "adam" or "adamw" (2). Returns -1 for any other name. */
int summary_opt_states(const char *solver, bool momentum);

/* The input and class count a built-in network is summarised for when the
 * caller gives none: lenet 1x28x28 and 10; cifar10-cnn, resnet20, alexnet
 * 3x32x32 and 10; resnet18, resnet50 3x224x224 and 1000. Returns false (and
 * leaves *in and *classes alone) for any other name. */
bool summary_builtin_defaults(const char *name, net_shape *in, int *classes);

/* Summarises `spec` (a cJSON object, see engine/spec.h) for input `in`
 * ({0,0,0}: the spec's "input") and `classes` classes, and estimates the
 * training memory for `batch` images (>= 1) with `solver` ("sgd", "adam",
 * "adamw"; momentum only matters for sgd) in `precision` ("fp32", "amp-bf16",
 * "amp-fp16"; NULL: fp32). On success fills *out (free it with
 * summary_free) and returns 0; otherwise returns -1 with err set (the
 * parser's message, which names the layer) and *out empty. */
int summary_build(const cJSON *spec, net_shape in, int classes, int batch,
                  const char *solver, bool momentum, const char *precision, summary *out,
                  char *err, size_t errlen);

/* The training-memory arithmetic above for a parsed spec, used by net_create
 * to refuse a net the machine cannot hold: *fixed and *per_image bytes, and
 * the layer whose output takes the most (*largest, -1 for none, with
 * *largest_bytes per image). Returns 0, or -1 with err set (a mixed-type
 * join, engine/amp.h). */
int summary_memory(const net_spec *s, int opt_states, const char *precision, int64_t *fixed,
                   int64_t *per_image, int *largest, int64_t *largest_bytes,
                   char *err, size_t errlen);
void summary_free(summary *s);      /* frees what s owns; s itself is the caller's */

/* A new JSON object describing s (owned by the caller), or NULL when out of
 * memory. */
cJSON *summary_to_json(const summary *s);

/* Writes a readable table of s to f. Returns 0, or -1 on a write error. */
int summary_print(FILE *f, const summary *s);

#endif
