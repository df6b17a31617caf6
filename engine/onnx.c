/* engine/onnx.c: a network and its weights as an ONNX model (engine/onnx.h).
 *
 * The model is built as protobuf-c messages (engine/proto/onnx.proto) whose
 * every allocation goes through one builder that frees them all at the end;
 * the weights' raw_data points into the open safetensors file, so nothing
 * of the size of the weights is copied before the one pack into the output.
 *
 * Kiln's activations have no rank: every one is C x H x W per image, and a
 * flatten or dense output is C x 1 x 1. In the graph an activation is a
 * [N, C, H, W] tensor (rank 4) or, after Flatten or Gemm, [N, C] (rank 2).
 * Where a node needs the other rank (Conv and the pools need 4; Gemm and the
 * final Softmax 2; Add and Concat one rank for all their inputs) it gets a
 * Flatten or an Unsqueeze of [2, 3] in front, which changes no value.
 *
 * Value names: an activation is "<layer name>:out", the network's input
 * "pixels", weights their net_save names ("<layer>.weight"): no spec can make
 * two of them equal, since the endings differ (and layer names are unique).
 */
#include "engine/onnx.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/safetensors.h"   /* st_open, st_find: the weights */
#include "engine/spec.h"          /* spec_parse, net_spec, layer_spec */
#include "onnx.pb-c.h"            /* Onnx__ModelProto ..., from engine/proto/onnx.proto */

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ONNX raw_data is little-endian; the weights are passed through in host order"
#endif

#define ONNX_MAX_BYTES ((size_t)INT32_MAX)   /* protobuf's limit on one message */
#define NODE_MAX_ATTRS 8

/* ---- the builder -------------------------------------------------------------- */

typedef struct builder {
    void **allocs;                 /* everything below, freed by builder_free */
    size_t nallocs, capallocs;
    Onnx__NodeProto **nodes;
    size_t nnodes, capnodes;
    Onnx__TensorProto **inits;
    size_t ninits, capinits;
    bool have_axes23;              /* the shared Unsqueeze axes initializer exists */
    const net_spec *spec;
    char **act;                    /* value name of activation a (0: the input) */
    int *rank;                     /* its rank: 4, or 2 after Flatten/Gemm */
    st_file *st;
    const char *wpath;
    char *err;
    size_t errlen;
} builder;

static int oom(builder *b)
{
    return set_err(b->err, b->errlen, "out of memory building the ONNX model");
}

/* Grows *arr (of *cap elements of size esz) to hold n + 1. 0 or -1. */
static int grow(void **arr, size_t *cap, size_t n, size_t esz)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * esz);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* A zeroed block owned by the builder, or NULL with err set. */
static void *b_alloc(builder *b, size_t size)
{
    if (grow((void **)&b->allocs, &b->capallocs, b->nallocs, sizeof *b->allocs) < 0) {
        oom(b);
        return NULL;
    }
    void *p = calloc(1, size ? size : 1);
    if (!p) {
        oom(b);
        return NULL;
    }
    b->allocs[b->nallocs++] = p;
    return p;
}

__attribute__((format(printf, 2, 3)))
static char *b_printf(builder *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n < 0 ? NULL : b_alloc(b, (size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static void builder_free(builder *b)
{
    for (size_t i = 0; i < b->nallocs; i++)
        free(b->allocs[i]);
    free(b->allocs);
    free(b->nodes);
    free(b->inits);
    free(b->act);
    free(b->rank);
    st_close(b->st);
}

/* ---- nodes and attributes ---------------------------------------------------- */

/* A node op(inputs) -> output named name; NULL with err set. The node has
 * room for NODE_MAX_ATTRS attributes (attr_* below). */
static Onnx__NodeProto *add_node(builder *b, const char *op, const char *name,
                                 char *const *inputs, size_t nin, char *output)
{
    Onnx__NodeProto *n = b_alloc(b, sizeof *n);
    char **in = b_alloc(b, nin * sizeof *in);
    char **out = b_alloc(b, sizeof *out);
    Onnx__AttributeProto **attrs = b_alloc(b, NODE_MAX_ATTRS * sizeof *attrs);
    char *opname = b_printf(b, "%s", op), *nm = b_printf(b, "%s", name);
    if (!n || !in || !out || !attrs || !opname || !nm || !output)
        return NULL;
    for (size_t i = 0; i < nin; i++) {
        if (!inputs[i])
            return NULL;
        in[i] = inputs[i];
    }
    if (grow((void **)&b->nodes, &b->capnodes, b->nnodes, sizeof *b->nodes) < 0) {
        oom(b);
        return NULL;
    }
    onnx__node_proto__init(n);
    n->op_type = opname;
    n->name = nm;
    n->n_input = nin;
    n->input = in;
    n->n_output = 1;
    out[0] = output;
    n->output = out;
    n->attribute = attrs;
    b->nodes[b->nnodes++] = n;
    return n;
}

static Onnx__AttributeProto *new_attr(builder *b, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type)
{
    Onnx__AttributeProto *a = b_alloc(b, sizeof *a);
    char *nm = b_printf(b, "%s", name);
    if (!a || !nm)
        return NULL;
    if (n->n_attribute >= NODE_MAX_ATTRS) {
        set_err(b->err, b->errlen, "internal error: node %s has too many attributes", n->name);
        return NULL;
    }
    onnx__attribute_proto__init(a);
    a->name = nm;
    a->has_type = true;
    a->type = type;
    n->attribute[n->n_attribute++] = a;
    return a;
}

static int attr_int(builder *b, Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = new_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    if (!a)
        return -1;
    a->has_i = true;
    a->i = v;
    return 0;
}

static int attr_float(builder *b, Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *a = new_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    if (!a)
        return -1;
    a->has_f = true;
    a->f = v;
    return 0;
}

/* An INTS attribute of k values (k <= 4). */
static int attr_ints(builder *b, Onnx__NodeProto *n, const char *name, int k, ...)
{
    Onnx__AttributeProto *a = new_attr(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    int64_t *v = b_alloc(b, (size_t)k * sizeof *v);
    if (!a || !v)
        return -1;
    va_list ap;
    va_start(ap, k);
    for (int i = 0; i < k; i++)
        v[i] = va_arg(ap, int);
    va_end(ap);
    a->n_ints = (size_t)k;
    a->ints = v;
    return 0;
}

/* ---- initializers ------------------------------------------------------------ */

/* An initializer named name of dims (ndim of them) whose raw_data is `bytes`
 * bytes at data (not copied: it must outlive the pack). */
static int add_init(builder *b, char *name, int32_t dtype, const int64_t *dims, int ndim,
                    const void *data, size_t bytes)
{
    Onnx__TensorProto *t = b_alloc(b, sizeof *t);
    int64_t *d = b_alloc(b, (size_t)ndim * sizeof *d);
    if (!t || !d || !name)
        return -1;
    if (grow((void **)&b->inits, &b->capinits, b->ninits, sizeof *b->inits) < 0)
        return oom(b);
    onnx__tensor_proto__init(t);
    memcpy(d, dims, (size_t)ndim * sizeof *d);
    t->n_dims = (size_t)ndim;
    t->dims = d;
    t->has_data_type = true;
    t->data_type = dtype;
    t->name = name;
    t->has_raw_data = true;
    t->raw_data.len = bytes;
    t->raw_data.data = (uint8_t *)(uintptr_t)data;
    b->inits[b->ninits++] = t;
    return 0;
}

/* A constant the builder owns a copy of (count elements of esz bytes). */
static int add_const(builder *b, char *name, int32_t dtype, const int64_t *dims, int ndim,
                     const void *data, size_t bytes)
{
    void *copy = b_alloc(b, bytes);
    if (!copy)
        return -1;
    memcpy(copy, data, bytes);
    return add_init(b, name, dtype, dims, ndim, copy, bytes);
}

static void shape_str(char *buf, size_t len, const int64_t *shape, int ndim)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

/* The weight "<layer>.<suffix>" of shape (ndim dims) from the weights file,
 * as an initializer; its name, or NULL with err set (missing, not F32,
 * another shape: the messages net_load gives). */
static char *add_weight(builder *b, const layer_spec *l, const char *suffix, const int64_t *shape,
                        int ndim)
{
    char *name = b_printf(b, "%s.%s", l->name, suffix);
    if (!name)
        return NULL;
    const st_tensor *t = st_find(b->st, name);
    char want[96], got[96];
    if (!t) {
        set_err(b->err, b->errlen, "%s has no tensor \"%s\" (was it saved from this network?)",
                b->wpath, name);
        return NULL;
    }
    if (t->dtype != ST_F32) {
        set_err(b->err, b->errlen, "%s: tensor \"%s\" is %s, expected F32", b->wpath, name,
                st_dtype_name(t->dtype));
        return NULL;
    }
    if (t->ndim != ndim || memcmp(t->shape, shape, (size_t)ndim * sizeof *shape)) {
        shape_str(want, sizeof want, shape, ndim);
        shape_str(got, sizeof got, t->shape, t->ndim);
        set_err(b->err, b->errlen, "%s: tensor \"%s\" has shape %s, this network needs %s",
                b->wpath, name, got, want);
        return NULL;
    }
    if (add_init(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, shape, ndim, t->data,
                 t->bytes) < 0)
        return NULL;
    return name;
}

/* ---- ranks ------------------------------------------------------------------- */

/* The value of activation a at rank want (2 or 4) as input k of layer l:
 * itself, or a Flatten / Unsqueeze of it. NULL with err set. */
static char *at_rank(builder *b, const layer_spec *l, int k, int a, int want)
{
    if (b->rank[a] == want)
        return b->act[a];
    char *out = b_printf(b, "%s:in%d:rank%d", l->name, k, want);
    char *name = b_printf(b, "%s:rank%d_%d", l->name, want, k);
    if (!out || !name)
        return NULL;
    if (want == 2) {
        Onnx__NodeProto *n = add_node(b, "Flatten", name, &b->act[a], 1, out);
        if (!n || attr_int(b, n, "axis", 1) < 0)
            return NULL;
        return out;
    }
    static const int64_t axes[2] = { 2, 3 }, dims[1] = { 2 };
    if (!b->have_axes23) {
        if (add_const(b, b_printf(b, "kiln:axes23"), ONNX__TENSOR_PROTO__DATA_TYPE__INT64, dims,
                      1, axes, sizeof axes) < 0)
            return NULL;
        b->have_axes23 = true;
    }
    char *in[2] = { b->act[a], b_printf(b, "kiln:axes23") };
    return add_node(b, "Unsqueeze", name, in, 2, out) ? out : NULL;
}

/* The value name of layer l's output. */
static char *out_name(builder *b, const layer_spec *l)
{
    return b_printf(b, "%s:out", l->name);
}

/* ---- layers ------------------------------------------------------------------ */

/* One node op on the layer's single input at rank `rank` (0: as it is),
 * output rank out_rank (0: the input's). The node, or NULL. */
static Onnx__NodeProto *unary(builder *b, const layer_spec *l, const char *op, int rank,
                              int out_rank, char **extra, size_t nextra)
{
    int a = l->inputs[0];
    char *in[6];
    in[0] = rank ? at_rank(b, l, 0, a, rank) : b->act[a];
    for (size_t i = 0; i < nextra; i++)
        in[i + 1] = extra[i];
    char *out = out_name(b, l);
    Onnx__NodeProto *n = add_node(b, op, l->name, in, 1 + nextra, out);
    if (!n)
        return NULL;
    b->act[l->number] = out;
    b->rank[l->number] = out_rank ? out_rank : (rank ? rank : b->rank[a]);
    return n;
}

static int emit_conv(builder *b, const layer_spec *l)
{
    const conv_spec *c = &l->u.conv;
    int64_t wshape[4] = { c->filters, l->in.c / c->groups, c->kh, c->kw }, bshape[1] = { c->filters };
    char *w[2] = { add_weight(b, l, "weight", wshape, 4), NULL };
    if (!w[0] || (c->bias && !(w[1] = add_weight(b, l, "bias", bshape, 1))))
        return -1;
    Onnx__NodeProto *n = unary(b, l, "Conv", 4, 4, w, c->bias ? 2 : 1);
    if (!n || attr_ints(b, n, "kernel_shape", 2, c->kh, c->kw) < 0 ||
        attr_ints(b, n, "strides", 2, c->stride_h, c->stride_w) < 0 ||
        attr_ints(b, n, "dilations", 2, c->dil_h, c->dil_w) < 0 ||
        attr_ints(b, n, "pads", 4, c->pad_t, c->pad_l, c->pad_b, c->pad_r) < 0 ||
        attr_int(b, n, "group", c->groups) < 0)
        return -1;
    return 0;
}

/* MaxPool and AveragePool: kiln's window sweep is floor((in + 2p - k) / s) + 1
 * (ceil_mode 0) with the padding the same on both sides. */
static int emit_pool(builder *b, const layer_spec *l)
{
    const pool_spec *p = &l->u.pool;
    bool avg = l->kind == LAYER_AVGPOOL;
    Onnx__NodeProto *n = unary(b, l, avg ? "AveragePool" : "MaxPool", 4, 4, NULL, 0);
    if (!n || attr_ints(b, n, "kernel_shape", 2, p->kh, p->kw) < 0 ||
        attr_ints(b, n, "strides", 2, p->stride_h, p->stride_w) < 0 ||
        attr_ints(b, n, "pads", 4, p->pad_h, p->pad_w, p->pad_h, p->pad_w) < 0 ||
        attr_int(b, n, "ceil_mode", 0) < 0 ||
        (avg && attr_int(b, n, "count_include_pad", 0) < 0))
        return -1;
    return 0;
}

static int emit_global_avgpool(builder *b, const layer_spec *l)
{
    return unary(b, l, "GlobalAveragePool", 4, 4, NULL, 0) ? 0 : -1;
}

/* A view in kiln: Flatten of a rank-4 value, the value itself at rank 2. */
static int emit_flatten(builder *b, const layer_spec *l)
{
    int a = l->inputs[0];
    if (b->rank[a] == 2) {
        b->act[l->number] = b->act[a];
        b->rank[l->number] = 2;
        return 0;
    }
    Onnx__NodeProto *n = unary(b, l, "Flatten", 0, 2, NULL, 0);
    return n && attr_int(b, n, "axis", 1) == 0 ? 0 : -1;
}

/* y = x W^T + b with W [units, C*H*W] (net_build's layout) and x the NCHW
 * input flattened in place, as engine/cpu/dense.c reads it. */
static int emit_dense(builder *b, const layer_spec *l)
{
    const dense_spec *d = &l->u.dense;
    int64_t wshape[2] = { d->units, spec_shape_size(l->in) }, bshape[1] = { d->units };
    char *w[2] = { add_weight(b, l, "weight", wshape, 2), NULL };
    if (!w[0] || (d->bias && !(w[1] = add_weight(b, l, "bias", bshape, 1))))
        return -1;
    Onnx__NodeProto *n = unary(b, l, "Gemm", 2, 2, w, d->bias ? 2 : 1);
    return n && attr_int(b, n, "transB", 1) == 0 ? 0 : -1;
}

static int emit_activation(builder *b, const layer_spec *l)
{
    static const struct { layer_kind kind; const char *op; } ops[] = {
        { LAYER_RELU, "Relu" }, { LAYER_SIGMOID, "Sigmoid" }, { LAYER_TANH, "Tanh" },
        { LAYER_LEAKY_RELU, "LeakyRelu" },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (ops[i].kind != l->kind)
            continue;
        Onnx__NodeProto *n = unary(b, l, ops[i].op, 0, 0, NULL, 0);
        if (!n || (l->kind == LAYER_LEAKY_RELU && attr_float(b, n, "alpha", l->u.slope) < 0))
            return -1;
        return 0;
    }
    return set_err(b->err, b->errlen, "internal error: no ONNX op for %s", l->type);
}

/* Inference: dropout passes its input on unchanged. */
static int emit_dropout(builder *b, const layer_spec *l)
{
    b->act[l->number] = b->act[l->inputs[0]];
    b->rank[l->number] = b->rank[l->inputs[0]];
    return 0;
}

/* y = (x - running_mean) / sqrt(running_var + eps) * weight + bias. */
static int emit_batchnorm(builder *b, const layer_spec *l)
{
    int64_t shape[1] = { l->in.c };
    char *p[4] = { add_weight(b, l, "weight", shape, 1), add_weight(b, l, "bias", shape, 1),
                   add_weight(b, l, "running_mean", shape, 1),
                   add_weight(b, l, "running_var", shape, 1) };
    if (!p[0] || !p[1] || !p[2] || !p[3])
        return -1;
    Onnx__NodeProto *n = unary(b, l, "BatchNormalization", 0, 0, p, 4);
    return n && attr_float(b, n, "epsilon", l->u.bn.eps) == 0 ? 0 : -1;
}

/* Add (Sum for three or more) and Concat on the channels: every input at
 * the highest rank among them. */
static int emit_merge(builder *b, const layer_spec *l)
{
    int rank = 2;
    char *in[SPEC_MAX_INPUTS];
    for (int k = 0; k < l->ninputs; k++)
        if (b->rank[l->inputs[k]] == 4)
            rank = 4;
    for (int k = 0; k < l->ninputs; k++)
        if (!(in[k] = at_rank(b, l, k, l->inputs[k], rank)))
            return -1;
    bool concat = l->kind == LAYER_CONCAT;
    const char *op = concat ? "Concat" : l->ninputs == 2 ? "Add" : "Sum";
    char *out = out_name(b, l);
    Onnx__NodeProto *n = add_node(b, op, l->name, in, (size_t)l->ninputs, out);
    if (!n || (concat && attr_int(b, n, "axis", 1) < 0))
        return -1;
    b->act[l->number] = out;
    b->rank[l->number] = rank;
    return 0;
}

typedef int (*emit_fn)(builder *b, const layer_spec *l);

static const emit_fn emitters[] = {
    [LAYER_CONV2D] = emit_conv,
    [LAYER_MAXPOOL] = emit_pool,
    [LAYER_FLATTEN] = emit_flatten,
    [LAYER_DENSE] = emit_dense,
    [LAYER_RELU] = emit_activation,
    [LAYER_AVGPOOL] = emit_pool,
    [LAYER_GLOBAL_AVGPOOL] = emit_global_avgpool,
    [LAYER_LEAKY_RELU] = emit_activation,
    [LAYER_SIGMOID] = emit_activation,
    [LAYER_TANH] = emit_activation,
    [LAYER_DROPOUT] = emit_dropout,
    [LAYER_BATCHNORM] = emit_batchnorm,
    [LAYER_ADD] = emit_merge,
    [LAYER_CONCAT] = emit_merge,
};

/* ---- the graph --------------------------------------------------------------- */

/* pixels -> Sub(mean) -> Mul(scale): activation 0. */
static int emit_normalise(builder *b, const onnx_meta *meta)
{
    int c = b->spec->in.c;
    float mean[4];
    int64_t mdims[4] = { 1, c, 1, 1 };
    if (c > 4)
        return set_err(b->err, b->errlen, "the input has %d channels: ONNX export takes up to 4",
                       c);
    memcpy(mean, meta->mean, sizeof mean);
    char *sub_in[2] = { b_printf(b, ONNX_INPUT_NAME), b_printf(b, "kiln:mean") };
    char *mul_in[2] = { b_printf(b, "kiln:centered"), b_printf(b, "kiln:scale") };
    char *x = b_printf(b, "kiln:normalized");
    if (add_const(b, sub_in[1], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, mdims, 4, mean,
                  (size_t)c * sizeof *mean) < 0 ||
        add_const(b, mul_in[1], ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, NULL, 0, &meta->scale,
                  sizeof meta->scale) < 0 ||
        !add_node(b, "Sub", "kiln:subtract_mean", sub_in, 2, mul_in[0]) ||
        !add_node(b, "Mul", "kiln:scale", mul_in, 2, x))
        return -1;
    b->act[0] = x;
    b->rank[0] = 4;
    return 0;
}

/* Flatten (when the last layer's value is rank 4) and Softmax. */
static int emit_softmax(builder *b)
{
    int a = b->spec->nlayers;
    char *logits = b->act[a], *out = b_printf(b, ONNX_OUTPUT_NAME);
    if (b->rank[a] == 4) {
        logits = b_printf(b, "kiln:logits");
        Onnx__NodeProto *f = add_node(b, "Flatten", "kiln:flatten_logits", &b->act[a], 1, logits);
        if (!f || attr_int(b, f, "axis", 1) < 0)
            return -1;
    }
    Onnx__NodeProto *n = add_node(b, "Softmax", "kiln:softmax", &logits, 1, out);
    return n && attr_int(b, n, "axis", 1) == 0 ? 0 : -1;
}

/* A float tensor value [batch, dims...] named name. */
static Onnx__ValueInfoProto *value_info(builder *b, const char *name, const int *dims, int ndim)
{
    Onnx__ValueInfoProto *v = b_alloc(b, sizeof *v);
    Onnx__TypeProto *t = b_alloc(b, sizeof *t);
    Onnx__TypeProto__Tensor *tt = b_alloc(b, sizeof *tt);
    Onnx__TensorShapeProto *sh = b_alloc(b, sizeof *sh);
    Onnx__TensorShapeProto__Dimension **d = b_alloc(b, (size_t)(ndim + 1) * sizeof *d);
    if (!v || !t || !tt || !sh || !d)
        return NULL;
    for (int i = 0; i <= ndim; i++) {
        if (!(d[i] = b_alloc(b, sizeof *d[i])))
            return NULL;
        onnx__tensor_shape_proto__dimension__init(d[i]);
        if (i == 0) {
            d[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            if (!(d[i]->dim_param = b_printf(b, "batch")))
                return NULL;
        } else {
            d[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d[i]->dim_value = dims[i - 1];
        }
    }
    onnx__tensor_shape_proto__init(sh);
    sh->n_dim = (size_t)ndim + 1;
    sh->dim = d;
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = true;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tt->shape = sh;
    onnx__type_proto__init(t);
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    onnx__value_info_proto__init(v);
    if (!(v->name = b_printf(b, "%s", name)))
        return NULL;
    v->type = t;
    return v;
}

/* ---- the model --------------------------------------------------------------- */

static Onnx__StringStringEntryProto *entry(builder *b, const char *key, const char *value)
{
    Onnx__StringStringEntryProto *e = b_alloc(b, sizeof *e);
    if (!e)
        return NULL;
    onnx__string_string_entry_proto__init(e);
    e->key = b_printf(b, "%s", key);
    e->value = b_printf(b, "%s", value);
    return e->key && e->value ? e : NULL;
}

/* "labels" as a JSON array of the names, then the caller's pairs. */
static int metadata(builder *b, const onnx_meta *meta, Onnx__ModelProto *m)
{
    size_t n = meta->labels ? 1 : 0;
    for (const char *const *p = meta->props; p && p[0] && p[1]; p += 2)
        n++;
    Onnx__StringStringEntryProto **es = b_alloc(b, n * sizeof *es);
    if (!es)
        return -1;
    m->metadata_props = es;
    if (meta->labels) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && i < b->spec->classes; i++)
            if (!cJSON_AddItemToArray(arr, cJSON_CreateString(meta->labels[i] ? meta->labels[i]
                                                                                : ""))) {
                cJSON_Delete(arr);
                arr = NULL;
            }
        char *text = arr ? cJSON_PrintUnformatted(arr) : NULL;
        cJSON_Delete(arr);
        if (!text)
            return oom(b);
        es[m->n_metadata_props] = entry(b, "labels", text);
        free(text);
        if (!es[m->n_metadata_props++])
            return -1;
    }
    for (const char *const *p = meta->props; p && p[0] && p[1]; p += 2) {
        if (strcmp(p[0], "labels") == 0)
            return set_err(b->err, b->errlen, "internal error: \"labels\" passed as a property");
        if (!(es[m->n_metadata_props++] = entry(b, p[0], p[1])))
            return -1;
    }
    return 0;
}

static int build_graph(builder *b, const onnx_meta *meta, Onnx__GraphProto *g)
{
    const net_spec *s = b->spec;
    if (emit_normalise(b, meta) < 0)
        return -1;
    for (int i = 0; i < s->nlayers; i++) {
        const layer_spec *l = &s->layers[i];
        emit_fn fn = (size_t)l->kind < sizeof emitters / sizeof emitters[0] ? emitters[l->kind]
                                                                            : NULL;
        if (!fn)
            return set_err(b->err, b->errlen, "layer %d (%s \"%s\"): no ONNX form for this "
                           "layer type", l->number, l->type, l->name);
        if (fn(b, l) < 0)
            return -1;
    }
    if (emit_softmax(b) < 0)
        return -1;
    int in_dims[3] = { s->in.c, s->in.h, s->in.w }, out_dims[1] = { s->classes };
    Onnx__ValueInfoProto **ins = b_alloc(b, sizeof *ins), **outs = b_alloc(b, sizeof *outs);
    if (!ins || !outs || !(ins[0] = value_info(b, ONNX_INPUT_NAME, in_dims, 3)) ||
        !(outs[0] = value_info(b, ONNX_OUTPUT_NAME, out_dims, 1)) ||
        !(g->name = b_printf(b, "%s", s->name[0] ? s->name : "kiln")))
        return -1;
    g->n_node = b->nnodes;
    g->node = b->nodes;
    g->n_initializer = b->ninits;
    g->initializer = b->inits;
    g->n_input = 1;
    g->input = ins;
    g->n_output = 1;
    g->output = outs;
    return 0;
}

static int pack(const Onnx__ModelProto *m, uint8_t **out, size_t *outlen, char *err,
                size_t errlen)
{
    size_t size = onnx__model_proto__get_packed_size(m);
    if (size > ONNX_MAX_BYTES)
        return set_err(err, errlen, "the ONNX model would take %zu bytes, past protobuf's 2 GB "
                       "limit on one file", size);
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return set_err(err, errlen, "out of memory for a %zu-byte ONNX model", size);
    size_t done = onnx__model_proto__pack(m, buf);
    if (done != size) {
        free(buf);
        return set_err(err, errlen, "internal error: packed %zu of %zu ONNX bytes", done, size);
    }
    *out = buf;
    *outlen = size;
    return 0;
}

int onnx_export(const cJSON *spec, net_shape in, int classes, const char *weights_path,
                const onnx_meta *meta, uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    net_spec s;
    builder b = { .wpath = weights_path, .err = err, .errlen = errlen };
    int rc = -1;
    *out = NULL;
    *outlen = 0;
    if (spec_parse(spec, in, classes, &s, err, errlen) < 0)
        return -1;
    b.spec = &s;
    if (!(b.act = calloc((size_t)s.nlayers + 1, sizeof *b.act)) ||
        !(b.rank = calloc((size_t)s.nlayers + 1, sizeof *b.rank))) {
        oom(&b);
        goto out;
    }
    if (!(b.st = st_open(weights_path, err, errlen)))
        goto out;

    Onnx__ModelProto m;
    Onnx__GraphProto *g = b_alloc(&b, sizeof *g);
    Onnx__OperatorSetIdProto *ops = b_alloc(&b, sizeof *ops);
    Onnx__OperatorSetIdProto **opsv = b_alloc(&b, sizeof *opsv);
    if (!g || !ops || !opsv)
        goto out;
    onnx__model_proto__init(&m);
    onnx__graph_proto__init(g);
    onnx__operator_set_id_proto__init(ops);
    ops->domain = b_printf(&b, "%s", "");
    ops->has_version = true;
    ops->version = ONNX_OPSET;
    opsv[0] = ops;
    m.has_ir_version = true;
    m.ir_version = ONNX_IR_VERSION;
    m.n_opset_import = 1;
    m.opset_import = opsv;
    m.producer_name = b_printf(&b, "kiln");
    if (meta->producer_version)
        m.producer_version = b_printf(&b, "%s", meta->producer_version);
    m.graph = g;
    if (!ops->domain || !m.producer_name || (meta->producer_version && !m.producer_version) ||
        build_graph(&b, meta, g) < 0 || metadata(&b, meta, &m) < 0)
        goto out;
    rc = pack(&m, out, outlen, err, errlen);
out:
    builder_free(&b);
    spec_free(&s);
    return rc;
}
