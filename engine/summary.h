/* engine/summary.h: a model summary computed from a spec, without building
 * the network (seeds/002's memory and FLOP arithmetic).
 *
 * Per layer: output shape, parameters, activation bytes per image (fp32) and
 * forward FLOPs per image; totals; an estimate of the memory that training
 * takes for a batch size and an optimizer; warnings where a dimension is not
 * a multiple of 8 (tensor-core and SIMD-friendly sizes).
 *
 * Conventions (what the figures count):
 *   MACs   conv2d: Ho*Wo*Cout*(Cin/groups)*Kh*Kw; dense: in*out; others 0.
 *   FLOPs  conv2d and dense: 2*MACs, plus one add per output element when the
 *          layer has a bias. maxpool, avgpool: Kh*Kw per output element;
 *          global_avgpool: one per input element; relu, leaky_relu, sigmoid,
 *          tanh, dropout: one per element; batchnorm: two per element (scale
 *          and shift); add: (inputs - 1) per element; flatten, concat: 0.
 *   Activation bytes: 4 bytes per element of the layer's output (fp32).
 *          flatten is a view of its input and keeps nothing for backward.
 *   Training memory for batch B, fp32, 4 bytes per number:
 *          weights + gradients + optimizer states (per parameter: sgd without
 *          momentum 0, sgd with momentum 1, adam and adamw 2)
 *          + B * (input + every layer's output except flatten's).
 *          It leaves out activation gradients, workspaces and the runtime's
 *          own memory: a lower bound, not a promise.
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
    int64_t act_bytes;              /* output, per image, fp32 */
    int64_t macs;                   /* multiply-adds per image */
    int64_t flops;                  /* forward FLOPs per image */
} summary_layer;

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
    int opt_states;                 /* state tensors per parameter */
    int64_t weight_bytes, grad_bytes, opt_bytes, batch_act_bytes, train_bytes;
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
 * "adamw"; momentum only matters for sgd). On success fills *out (free it
 * with summary_free) and returns 0; otherwise returns -1 with err set (the
 * parser's message, which names the layer) and *out empty. */
int summary_build(const cJSON *spec, net_shape in, int classes, int batch,
                  const char *solver, bool momentum, summary *out,
                  char *err, size_t errlen);
void summary_free(summary *s);      /* frees what s owns; s itself is the caller's */

/* A new JSON object describing s (owned by the caller), or NULL when out of
 * memory. */
cJSON *summary_to_json(const summary *s);

/* Writes a readable table of s to f. Returns 0, or -1 on a write error. */
int summary_print(FILE *f, const summary *s);

#endif
