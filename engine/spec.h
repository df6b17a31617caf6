/* engine/spec.h: network specs (JSON, DESIGN.md "Network specs") parsed and
 * checked into a list of layers with every shape resolved.
 *
 * spec_parse is the one place that reads a spec: net_validate and net_create
 * both go through it, so what validates is exactly what builds. Errors name
 * the layer: "layer 2 (conv2d \"conv2\"): kernel 7 is larger than its 5x5 input".
 * Layers are numbered from 1; a layer without "name" is called
 * "<type><number>" ("conv2d1").
 */
#ifndef KILN_ENGINE_SPEC_H
#define KILN_ENGINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "engine/net.h"

#define SPEC_NAME_MAX 64            /* layer names: at most 63 bytes */
/* Layers in one spec: ResNet-152 written out layer by layer is about 520.
 * Names are resolved by a scan of the layers before, so a spec's check is
 * quadratic in this (about 0.2 s at the limit). */
#define SPEC_LAYERS_MAX 10000
#define SPEC_MAX_INPUTS 15          /* inputs of one add or concat */

typedef enum layer_kind {
    LAYER_CONV2D,
    LAYER_MAXPOOL,
    LAYER_FLATTEN,
    LAYER_DENSE,
    LAYER_RELU,
    LAYER_AVGPOOL,                  /* averages exclude padded positions */
    LAYER_GLOBAL_AVGPOOL,           /* C x H x W -> C x 1 x 1 */
    LAYER_LEAKY_RELU,
    LAYER_SIGMOID,
    LAYER_TANH,
    LAYER_DROPOUT,
    LAYER_BATCHNORM,
    LAYER_ADD,
    LAYER_CONCAT,
} layer_kind;

typedef struct conv_spec {
    int filters;
    int kh, kw;
    int stride_h, stride_w;
    int pad_t, pad_l, pad_b, pad_r;
    int dil_h, dil_w;
    int groups;
    bool bias;
} conv_spec;

typedef struct pool_spec {
    int kh, kw;
    int stride_h, stride_w;
    int pad_h, pad_w;               /* the same on both sides */
} pool_spec;

typedef struct dense_spec {
    int units;
    bool bias;
} dense_spec;

typedef struct bn_spec {
    float momentum;                 /* weight of the old running value (0.9) */
    float eps;
} bn_spec;

typedef struct layer_spec {
    layer_kind kind;
    const char *type;               /* static: "conv2d", ... */
    int number;                     /* 1-based position in "layers" */
    char name[SPEC_NAME_MAX];
    net_shape in, out;              /* in: the (first) input's shape */
    /* Where the inputs come from, as activation indices: 0 is the network's
     * input, j + 1 the output of layer j (always an earlier layer, so a spec
     * is a DAG by construction). One input except for add and concat. */
    int ninputs;
    int inputs[SPEC_MAX_INPUTS];
    union {
        conv_spec conv;
        pool_spec pool;             /* maxpool, avgpool, global_avgpool (the whole input) */
        dense_spec dense;
        float slope;                /* leaky_relu */
        float rate;                 /* dropout */
        bn_spec bn;
    } u;
} layer_spec;

typedef struct net_spec {
    char name[SPEC_NAME_MAX];       /* the spec's "name", or "" */
    net_shape in;
    int classes;
    int nlayers;
    layer_spec *layers;             /* nlayers, owned */
} net_spec;

/* Parses and checks `json` for input shape `in` ({0,0,0}: take the spec's
 * "input") and `classes` classes. On success fills *out (free it with
 * spec_free) and returns 0; otherwise returns -1 with err set and *out empty. */
int spec_parse(const cJSON *json, net_shape in, int classes, net_spec *out,
               char *err, size_t errlen);
void spec_free(net_spec *s);        /* frees the layers; s itself is the caller's */

/* Sums and products of sizes, which are never negative, saturated at
 * INT64_MAX: a spec may ask for sizes whose product has no int64, and a
 * saturated result still fails every bound check it should. */
static inline int64_t spec_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}
static inline int64_t spec_add(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* Elements of one image of a shape, and the parameters a layer holds. */
static inline int64_t spec_shape_size(net_shape s)
{
    return spec_mul(spec_mul(s.c, s.h), s.w);
}
int64_t spec_layer_params(const layer_spec *l);
/* The shape of activation a (0: the input, j + 1: layer j's output). */
net_shape spec_act_shape(const net_spec *s, int a);

/* True when every path from the layer's output goes, through layers that
 * pass it on (pooling, flatten, dropout, batchnorm, add, concat), into a ReLU
 * or leaky ReLU: such layers get He initialisation. */
bool spec_feeds_relu(const net_spec *s, int index);

#endif
