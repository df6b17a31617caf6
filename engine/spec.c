/* engine/spec.c: parsing and checking network specs (see engine/spec.h).
 *
 * Every layer type of DESIGN.md is in layer_types[] with its parser. A layer
 * is parsed in this order, so that every message can name it: the type, the
 * name, the keys (unknown ones are errors), its inputs, the values, the
 * shapes. A layer's "inputs" may only name earlier layers (or "input"), so a
 * spec is acyclic by construction; every layer but the last must feed some
 * later layer. */
#include "engine/spec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Largest value any size key takes, and most elements in one image's tensor. */
#define SPEC_INT_MAX 1000000000
#define SPEC_ELEMS_MAX ((int64_t)INT32_MAX)

/* What a layer parser needs: the layer, its JSON and where to report. */
typedef struct lctx {
    layer_spec *l;
    const net_spec *s;              /* the layers before l, for shapes of inputs */
    const cJSON *obj;
    int classes;
    char *err;
    size_t errlen;
} lctx;

typedef int (*layer_parse_fn)(lctx *c);

static int parse_conv2d(lctx *c);
static int parse_maxpool(lctx *c);
static int parse_flatten(lctx *c);
static int parse_dense(lctx *c);
static int parse_relu(lctx *c);
static int parse_avgpool(lctx *c);
static int parse_global_avgpool(lctx *c);
static int parse_leaky_relu(lctx *c);
static int parse_dropout(lctx *c);
static int parse_batchnorm(lctx *c);
static int parse_add(lctx *c);
static int parse_concat(lctx *c);

static const char *const conv2d_keys[] = { "filters", "kernel", "stride", "padding", "dilation",
                                           "groups", "bias", NULL };
static const char *const pool_keys[] = { "kernel", "stride", "padding", NULL };
static const char *const dense_keys[] = { "units", "bias", NULL };
static const char *const no_keys[] = { NULL };
static const char *const leaky_keys[] = { "slope", NULL };
static const char *const dropout_keys[] = { "rate", NULL };
static const char *const bn_keys[] = { "momentum", "eps", NULL };

/* Every layer type of DESIGN.md; parse == NULL: not supported yet.
 * multi: takes two or more inputs (add, concat) instead of one. */
static const struct layer_type {
    const char *type;
    layer_kind kind;
    const char *const *keys;        /* besides "type", "name" and "inputs" */
    layer_parse_fn parse;
    bool multi;
} layer_types[] = {
    { .type = "conv2d", .kind = LAYER_CONV2D, .keys = conv2d_keys, .parse = parse_conv2d },
    { .type = "maxpool", .kind = LAYER_MAXPOOL, .keys = pool_keys, .parse = parse_maxpool },
    { .type = "avgpool", .kind = LAYER_AVGPOOL, .keys = pool_keys, .parse = parse_avgpool },
    { .type = "global_avgpool", .kind = LAYER_GLOBAL_AVGPOOL, .keys = no_keys,
      .parse = parse_global_avgpool },
    { .type = "flatten", .kind = LAYER_FLATTEN, .keys = no_keys, .parse = parse_flatten },
    { .type = "relu", .kind = LAYER_RELU, .keys = no_keys, .parse = parse_relu },
    { .type = "sigmoid", .kind = LAYER_SIGMOID, .keys = no_keys, .parse = parse_relu },
    { .type = "tanh", .kind = LAYER_TANH, .keys = no_keys, .parse = parse_relu },
    { .type = "leaky_relu", .kind = LAYER_LEAKY_RELU, .keys = leaky_keys,
      .parse = parse_leaky_relu },
    { .type = "dense", .kind = LAYER_DENSE, .keys = dense_keys, .parse = parse_dense },
    { .type = "dropout", .kind = LAYER_DROPOUT, .keys = dropout_keys, .parse = parse_dropout },
    { .type = "batchnorm", .kind = LAYER_BATCHNORM, .keys = bn_keys, .parse = parse_batchnorm },
    { .type = "add", .kind = LAYER_ADD, .keys = no_keys, .parse = parse_add, .multi = true },
    { .type = "concat", .kind = LAYER_CONCAT, .keys = no_keys, .parse = parse_concat,
      .multi = true },
};

static const char *const top_keys[] = { "name", "description", "input", "layers", NULL };

/* ---- messages -------------------------------------------------------------- */

/* "layer 2 (conv2d \"conv2\"): " + message. */
__attribute__((format(printf, 2, 3)))
static int lerr(lctx *c, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return set_err(c->err, c->errlen, "layer %d (%s \"%s\"): %s", c->l->number, c->l->type,
                   c->l->name, msg);
}

/* "5" or "5x3" */
static const char *pair_str(char *buf, size_t len, int h, int w)
{
    if (h == w)
        snprintf(buf, len, "%d", h);
    else
        snprintf(buf, len, "%dx%d", h, w);
    return buf;
}

static bool in_list(const char *const *list, const char *s)
{
    for (; *list; list++)
        if (strcmp(*list, s) == 0)
            return true;
    return false;
}

/* ---- values ---------------------------------------------------------------- */

static bool json_int(const cJSON *v, int *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > SPEC_INT_MAX)
        return false;
    *out = (int)d;
    return true;
}

/* An integer key: absent -> def (or an error when required). */
static int get_int(lctx *c, const char *key, bool required, int def, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    if (!v) {
        if (required)
            return lerr(c, "\"%s\" is required", key);
        *out = def;
        return 0;
    }
    if (!json_int(v, out))
        return lerr(c, "\"%s\" must be an integer", key);
    return 0;
}

/* An int or [h, w] key. */
static int get_pair(lctx *c, const char *key, bool required, int def, int *h, int *w)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    if (!v) {
        if (required)
            return lerr(c, "\"%s\" is required", key);
        *h = *w = def;
        return 0;
    }
    if (json_int(v, h)) {
        *w = *h;
        return 0;
    }
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 &&
        json_int(cJSON_GetArrayItem(v, 0), h) && json_int(cJSON_GetArrayItem(v, 1), w))
        return 0;
    return lerr(c, "\"%s\" must be an integer or [h, w]", key);
}

/* A finite number key within [lo, hi] (hi_open: below hi). */
static int get_float(lctx *c, const char *key, double def, double lo, double hi, bool hi_open,
                     float *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    double d = def;
    if (v) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return lerr(c, "\"%s\" must be a number", key);
        d = v->valuedouble;
    }
    if (d < lo || d > hi || (hi_open && d >= hi))
        return lerr(c, "\"%s\" must be in [%g, %g%s (got %g)", key, lo, hi, hi_open ? ")" : "]",
                    d);
    *out = (float)d;
    return 0;
}

static int check_min(lctx *c, const char *key, int h, int w, int min)
{
    if (h < min || w < min) {
        char b[32];
        return lerr(c, "\"%s\" must be %s (got %s)", key,
                    min == 1 ? "positive" : "0 or more", pair_str(b, sizeof b, h, w));
    }
    return 0;
}

static int get_bool(lctx *c, const char *key, bool def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return lerr(c, "\"%s\" must be true or false", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* An output of out_h x out_w x c elements per image must fit our sizes. */
static int check_out(lctx *c, int64_t ch, int64_t h, int64_t w)
{
    if (spec_mul(spec_mul(ch, h), w) > SPEC_ELEMS_MAX)
        return lerr(c, "output of %lld x %lld x %lld values per image is too large",
                    (long long)ch, (long long)h, (long long)w);
    c->l->out = (net_shape){ (int)ch, (int)h, (int)w };
    return 0;
}

/* "kernel 7 is larger than its 5x5 input" and variants. */
static int kernel_too_large(lctx *c, int kh, int kw, int64_t eh, int64_t ew, int pth, int ptw)
{
    char kb[32];
    net_shape in = c->l->in;
    char dil[64] = "", pad[64] = "";
    if (eh != kh || ew != kw)
        snprintf(dil, sizeof dil, " (%lldx%lld dilated)", (long long)eh, (long long)ew);
    if (pth || ptw)
        snprintf(pad, sizeof pad, " (%lldx%lld padded)", (long long)in.h + pth,
                 (long long)in.w + ptw);
    return lerr(c, "kernel %s%s is larger than its %dx%d input%s",
                pair_str(kb, sizeof kb, kh, kw), dil, in.h, in.w, pad);
}

/* ---- layers ---------------------------------------------------------------- */

/* Output size of a window sweep: floor((in + pads - extent) / stride) + 1. */
static int64_t sweep(int in, int pads, int64_t extent, int stride)
{
    return ((int64_t)in + pads - extent) / stride + 1;
}

/* "same": out = ceil(in / stride), padding split with the extra on the far side. */
static void same_pad(int in, int64_t extent, int stride, int *lo, int *hi)
{
    int64_t out = ((int64_t)in + stride - 1) / stride;
    int64_t total = (out - 1) * stride + extent - in;
    if (total < 0)
        total = 0;
    *lo = (int)(total / 2);
    *hi = (int)(total - total / 2);
}

static int parse_conv2d(lctx *c)
{
    conv_spec *s = &c->l->u.conv;
    net_shape in = c->l->in;
    if (get_int(c, "filters", true, 0, &s->filters) < 0 ||
        check_min(c, "filters", s->filters, s->filters, 1) < 0 ||
        get_pair(c, "kernel", true, 0, &s->kh, &s->kw) < 0 ||
        check_min(c, "kernel", s->kh, s->kw, 1) < 0 ||
        get_pair(c, "stride", false, 1, &s->stride_h, &s->stride_w) < 0 ||
        check_min(c, "stride", s->stride_h, s->stride_w, 1) < 0 ||
        get_pair(c, "dilation", false, 1, &s->dil_h, &s->dil_w) < 0 ||
        check_min(c, "dilation", s->dil_h, s->dil_w, 1) < 0 ||
        get_int(c, "groups", false, 1, &s->groups) < 0 ||
        check_min(c, "groups", s->groups, s->groups, 1) < 0 ||
        get_bool(c, "bias", true, &s->bias) < 0)
        return -1;
    int64_t eh = (int64_t)s->dil_h * (s->kh - 1) + 1, ew = (int64_t)s->dil_w * (s->kw - 1) + 1;
    if (eh > SPEC_INT_MAX || ew > SPEC_INT_MAX) {
        char kb[32], db[32];
        return lerr(c, "kernel %s with dilation %s spans %lldx%lld, more than %d",
                    pair_str(kb, sizeof kb, s->kh, s->kw), pair_str(db, sizeof db, s->dil_h,
                    s->dil_w), (long long)eh, (long long)ew, SPEC_INT_MAX);
    }
    const cJSON *pad = cJSON_GetObjectItemCaseSensitive(c->obj, "padding");
    if (cJSON_IsString(pad)) {
        if (strcmp(pad->valuestring, "same") != 0)
            return lerr(c, "\"padding\" must be an integer, [h, w] or \"same\"");
        same_pad(in.h, eh, s->stride_h, &s->pad_t, &s->pad_b);
        same_pad(in.w, ew, s->stride_w, &s->pad_l, &s->pad_r);
    } else {
        int ph, pw;
        if (get_pair(c, "padding", false, 0, &ph, &pw) < 0 ||
            check_min(c, "padding", ph, pw, 0) < 0)
            return -1;
        s->pad_t = s->pad_b = ph;
        s->pad_l = s->pad_r = pw;
    }
    if (in.c % s->groups)
        return lerr(c, "groups %d does not divide its %d input channels", s->groups, in.c);
    if (s->filters % s->groups)
        return lerr(c, "groups %d does not divide its %d filters", s->groups, s->filters);
    int pth = s->pad_t + s->pad_b, ptw = s->pad_l + s->pad_r;
    if (eh > (int64_t)in.h + pth || ew > (int64_t)in.w + ptw)
        return kernel_too_large(c, s->kh, s->kw, eh, ew, pth, ptw);
    int64_t params = spec_layer_params(c->l);
    if (params == INT64_MAX)
        return lerr(c, "too many parameters (more than 2^63; at most %lld)",
                    (long long)SPEC_ELEMS_MAX);
    if (params > SPEC_ELEMS_MAX)
        return lerr(c, "too many parameters (%lld; at most %lld)", (long long)params,
                    (long long)SPEC_ELEMS_MAX);
    return check_out(c, s->filters, sweep(in.h, pth, eh, s->stride_h),
                     sweep(in.w, ptw, ew, s->stride_w));
}

static int parse_window(lctx *c)
{
    pool_spec *s = &c->l->u.pool;
    net_shape in = c->l->in;
    char kb[32], pb[32];
    if (get_pair(c, "kernel", true, 0, &s->kh, &s->kw) < 0 ||
        check_min(c, "kernel", s->kh, s->kw, 1) < 0 ||
        get_pair(c, "stride", false, 0, &s->stride_h, &s->stride_w) < 0 ||
        get_pair(c, "padding", false, 0, &s->pad_h, &s->pad_w) < 0 ||
        check_min(c, "padding", s->pad_h, s->pad_w, 0) < 0)
        return -1;
    if (!cJSON_GetObjectItemCaseSensitive(c->obj, "stride")) {
        s->stride_h = s->kh;
        s->stride_w = s->kw;
    } else if (check_min(c, "stride", s->stride_h, s->stride_w, 1) < 0) {
        return -1;
    }
    if (2 * s->pad_h > s->kh || 2 * s->pad_w > s->kw)
        return lerr(c, "padding %s must be at most half the kernel %s",
                    pair_str(pb, sizeof pb, s->pad_h, s->pad_w),
                    pair_str(kb, sizeof kb, s->kh, s->kw));
    if (s->kh > (int64_t)in.h + 2 * s->pad_h || s->kw > (int64_t)in.w + 2 * s->pad_w)
        return kernel_too_large(c, s->kh, s->kw, s->kh, s->kw, 2 * s->pad_h, 2 * s->pad_w);
    return check_out(c, in.c, sweep(in.h, 2 * s->pad_h, s->kh, s->stride_h),
                     sweep(in.w, 2 * s->pad_w, s->kw, s->stride_w));
}

static int parse_maxpool(lctx *c)
{
    return parse_window(c);
}

static int parse_avgpool(lctx *c)
{
    return parse_window(c);
}

static int parse_global_avgpool(lctx *c)
{
    pool_spec *s = &c->l->u.pool;
    net_shape in = c->l->in;
    *s = (pool_spec){ .kh = in.h, .kw = in.w, .stride_h = 1, .stride_w = 1 };
    return check_out(c, in.c, 1, 1);
}

static int parse_leaky_relu(lctx *c)
{
    if (get_float(c, "slope", 0.01, 0.0, 1.0, false, &c->l->u.slope) < 0)
        return -1;
    return parse_relu(c);
}

static int parse_dropout(lctx *c)
{
    if (get_float(c, "rate", 0.5, 0.0, 1.0, true, &c->l->u.rate) < 0)
        return -1;
    return parse_relu(c);
}

static int parse_batchnorm(lctx *c)
{
    bn_spec *s = &c->l->u.bn;
    if (get_float(c, "momentum", 0.9, 0.0, 1.0, true, &s->momentum) < 0 ||
        get_float(c, "eps", 1e-5, 1e-12, 1.0, false, &s->eps) < 0)
        return -1;
    return parse_relu(c);
}

/* "input" or the name of the layer producing activation a. */
static const char *act_name(const net_spec *s, int a)
{
    return a == 0 ? "input" : s->layers[a - 1].name;
}

static int parse_add(lctx *c)
{
    const layer_spec *l = c->l;
    net_shape a = l->in;
    for (int k = 1; k < l->ninputs; k++) {
        net_shape b = spec_act_shape(c->s, l->inputs[k]);
        if (b.c != a.c || b.h != a.h || b.w != a.w)
            return lerr(c, "input \"%s\" is %dx%dx%d but input \"%s\" is %dx%dx%d: add "
                        "needs inputs of one shape", act_name(c->s, l->inputs[k]), b.c, b.h, b.w,
                        act_name(c->s, l->inputs[0]), a.c, a.h, a.w);
    }
    return check_out(c, a.c, a.h, a.w);
}

static int parse_concat(lctx *c)
{
    const layer_spec *l = c->l;
    net_shape a = l->in;
    int64_t ch = a.c;
    for (int k = 1; k < l->ninputs; k++) {
        net_shape b = spec_act_shape(c->s, l->inputs[k]);
        if (b.h != a.h || b.w != a.w)
            return lerr(c, "input \"%s\" is %dx%d but input \"%s\" is %dx%d: concat joins "
                        "channels of inputs of one height and width",
                        act_name(c->s, l->inputs[k]), b.h, b.w, act_name(c->s, l->inputs[0]),
                        a.h, a.w);
        ch += b.c;
    }
    if (ch > SPEC_INT_MAX)
        return lerr(c, "too many channels (%lld)", (long long)ch);
    return check_out(c, ch, a.h, a.w);
}

static int parse_flatten(lctx *c)
{
    return check_out(c, spec_shape_size(c->l->in), 1, 1);
}

static int parse_relu(lctx *c)
{
    net_shape in = c->l->in;
    return check_out(c, in.c, in.h, in.w);
}

static int parse_dense(lctx *c)
{
    dense_spec *s = &c->l->u.dense;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(c->obj, "units");
    if (!u)
        return lerr(c, "\"units\" is required");
    if (cJSON_IsString(u) && strcmp(u->valuestring, "classes") == 0)
        s->units = c->classes;
    else if (!json_int(u, &s->units))
        return lerr(c, "\"units\" must be an integer or \"classes\"");
    if (check_min(c, "units", s->units, s->units, 1) < 0 ||
        get_bool(c, "bias", true, &s->bias) < 0)
        return -1;
    if (spec_layer_params(c->l) > SPEC_ELEMS_MAX)
        return lerr(c, "too many parameters (%lld: %lld inputs x %d units)",
                    (long long)spec_layer_params(c->l), (long long)spec_shape_size(c->l->in),
                    s->units);
    return check_out(c, s->units, 1, 1);
}

int64_t spec_layer_params(const layer_spec *l)
{
    switch (l->kind) {
    case LAYER_CONV2D: {
        const conv_spec *s = &l->u.conv;
        return spec_add(spec_mul(spec_mul(s->filters, l->in.c / s->groups),
                                 spec_mul(s->kh, s->kw)),
                        s->bias ? s->filters : 0);
    }
    case LAYER_DENSE:
        return spec_add(spec_mul(spec_shape_size(l->in), l->u.dense.units),
                        l->u.dense.bias ? l->u.dense.units : 0);
    case LAYER_BATCHNORM:
        return 2 * (int64_t)l->in.c;               /* scale and shift */
    default:
        return 0;
    }
}

net_shape spec_act_shape(const net_spec *s, int a)
{
    return a == 0 ? s->in : s->layers[a - 1].out;
}

bool spec_feeds_relu(const net_spec *s, int index)
{
    int consumers = 0;
    for (int i = index + 1; i < s->nlayers; i++) {
        const layer_spec *l = &s->layers[i];
        bool uses = false;
        for (int k = 0; k < l->ninputs; k++)
            uses = uses || l->inputs[k] == index + 1;
        if (!uses)
            continue;
        consumers++;
        switch (l->kind) {
        case LAYER_RELU:
        case LAYER_LEAKY_RELU:
            break;
        case LAYER_MAXPOOL:
        case LAYER_AVGPOOL:
        case LAYER_GLOBAL_AVGPOOL:
        case LAYER_FLATTEN:
        case LAYER_DROPOUT:
        case LAYER_BATCHNORM:
        case LAYER_ADD:
        case LAYER_CONCAT:
            if (!spec_feeds_relu(s, i))  /* pass it on */
                return false;
            break;
        default:
            return false;
        }
    }
    return consumers > 0;
}

/* ---- one layer ------------------------------------------------------------- */

/* Activation index of the layer or "input" called name among the first
 * `index` layers, or -1. */
static int find_act(const net_spec *s, int index, const char *name)
{
    if (strcmp(name, "input") == 0)
        return 0;
    for (int i = 0; i < index; i++)
        if (strcmp(s->layers[i].name, name) == 0)
            return i + 1;
    return -1;
}

/* Resolves "inputs" (a name or a list of names of earlier layers; absent: the
 * previous layer's output) into l->inputs and sets l->in. */
static int resolve_inputs(lctx *c, const net_spec *s, int index, bool multi)
{
    layer_spec *l = c->l;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, "inputs");
    const char *want = multi ? "a list of two or more layer names" :
                       "a layer name or a list of one layer name";
    if (!v) {
        if (multi)
            return lerr(c, "\"inputs\" is required: %s", want);
        l->ninputs = 1;
        l->inputs[0] = index;               /* the previous layer, or the input */
    } else {
        int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
        if (!cJSON_IsArray(v) && !cJSON_IsString(v))
            return lerr(c, "\"inputs\" must be %s", want);
        if (multi ? n < 2 : n != 1)
            return lerr(c, "\"inputs\" lists %d layer%s: it must be %s", n, n == 1 ? "" : "s",
                        want);
        if (n > SPEC_MAX_INPUTS)
            return lerr(c, "\"inputs\" lists %d layers: more than %d is not supported yet", n,
                        SPEC_MAX_INPUTS);
        for (int k = 0; k < n; k++) {
            const cJSON *it = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, k) : v;
            if (!cJSON_IsString(it))
                return lerr(c, "\"inputs\" must be %s", want);
            int a = find_act(s, index, it->valuestring);
            if (a < 0)
                return lerr(c, "\"inputs\" names \"%.64s\", which is not an earlier layer "
                            "or \"input\" (a layer takes only outputs of layers before it)",
                            it->valuestring);
            l->inputs[k] = a;
        }
        l->ninputs = n;
    }
    l->in = spec_act_shape(s, l->inputs[0]);
    return 0;
}

static int parse_layer(net_spec *s, int index, const cJSON *obj, char *err, size_t errlen)
{
    layer_spec *l = &s->layers[index];
    int number = index + 1;
    lctx c = { .l = l, .obj = obj, .classes = s->classes, .err = err, .errlen = errlen };

    l->number = number;
    c.s = s;
    if (!cJSON_IsObject(obj))
        return set_err(err, errlen, "layer %d: must be a JSON object", number);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!t)
        return set_err(err, errlen, "layer %d: \"type\" is required", number);
    if (!cJSON_IsString(t))
        return set_err(err, errlen, "layer %d: \"type\" must be a string", number);
    const struct layer_type *lt = NULL;
    for (size_t i = 0; i < sizeof layer_types / sizeof layer_types[0]; i++)
        if (strcmp(layer_types[i].type, t->valuestring) == 0)
            lt = &layer_types[i];
    if (!lt) {
        char known[256] = "";
        for (size_t i = 0; i < sizeof layer_types / sizeof layer_types[0]; i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, layer_types[i].type, sizeof known - strlen(known) - 1);
        }
        return set_err(err, errlen, "layer %d: unknown type \"%.64s\" (known types: %s)",
                       number, t->valuestring, known);
    }
    if (!lt->parse)
        return set_err(err, errlen, "layer %d: type \"%s\" is not supported yet", number,
                       lt->type);
    l->kind = lt->kind;
    l->type = lt->type;

    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (nm) {
        if (!cJSON_IsString(nm) || !nm->valuestring[0])
            return set_err(err, errlen, "layer %d (%s): \"name\" must be a non-empty string",
                           number, lt->type);
        if (strlen(nm->valuestring) >= SPEC_NAME_MAX)
            return set_err(err, errlen, "layer %d (%s): name \"%.20s...\" is longer than %d "
                           "bytes", number, lt->type, nm->valuestring, SPEC_NAME_MAX - 1);
        snprintf(l->name, sizeof l->name, "%s", nm->valuestring);
    } else {
        snprintf(l->name, sizeof l->name, "%s%d", lt->type, number);
    }
    if (strcmp(l->name, "input") == 0)
        return lerr(&c, "the name \"input\" is reserved for the network's input");
    for (int i = 0; i < index; i++)
        if (strcmp(s->layers[i].name, l->name) == 0)
            return lerr(&c, "layer %d has the same name", i + 1);

    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        const char *k = it->string;
        if (strcmp(k, "type") && strcmp(k, "name") && strcmp(k, "inputs") &&
            !in_list(lt->keys, k)) {
            char allowed[256] = "";
            for (const char *const *p = lt->keys; *p; p++) {
                strncat(allowed, *p, sizeof allowed - strlen(allowed) - 1);
                strncat(allowed, ", ", sizeof allowed - strlen(allowed) - 1);
            }
            return lerr(&c, "unknown key \"%.64s\" (%s takes %sname and inputs)", k,
                        lt->type, allowed);
        }
    }
    if (resolve_inputs(&c, s, index, lt->multi) < 0)
        return -1;
    return lt->parse(&c);
}

/* ---- the spec -------------------------------------------------------------- */

static bool shape_zero(net_shape s)
{
    return s.c == 0 && s.h == 0 && s.w == 0;
}

static int parse_input(const cJSON *json, net_shape in, net_shape *out, char *err, size_t errlen)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, "input");
    net_shape si = { 0, 0, 0 };
    if (!shape_zero(in) && (in.c < 1 || in.h < 1 || in.w < 1))
        return set_err(err, errlen, "input shape [%d, %d, %d] must be positive", in.c, in.h,
                       in.w);
    if (v) {
        int d[3];
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3 ||
            !json_int(cJSON_GetArrayItem(v, 0), &d[0]) ||
            !json_int(cJSON_GetArrayItem(v, 1), &d[1]) ||
            !json_int(cJSON_GetArrayItem(v, 2), &d[2]))
            return set_err(err, errlen, "\"input\" must be [C, H, W] (three integers)");
        if (d[0] < 1 || d[1] < 1 || d[2] < 1)
            return set_err(err, errlen, "\"input\" [%d, %d, %d] must be positive", d[0], d[1],
                           d[2]);
        si = (net_shape){ d[0], d[1], d[2] };
        if (!shape_zero(in) && (si.c != in.c || si.h != in.h || si.w != in.w))
            return set_err(err, errlen, "the spec's input [%d, %d, %d] does not match the "
                           "data's [%d, %d, %d]", si.c, si.h, si.w, in.c, in.h, in.w);
    }
    if (shape_zero(in) && !v)
        return set_err(err, errlen, "no input shape: the spec has no \"input\" and none was "
                       "given");
    *out = shape_zero(in) ? si : in;
    if (spec_shape_size(*out) > SPEC_ELEMS_MAX)
        return set_err(err, errlen, "input [%d, %d, %d] is too large", out->c, out->h, out->w);
    return 0;
}

int spec_parse(const cJSON *json, net_shape in, int classes, net_spec *out,
               char *err, size_t errlen)
{
    net_spec s = { .classes = classes };
    int rc = -1;

    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(json))
        return set_err(err, errlen, "the network spec must be a JSON object");
    const cJSON *it;
    cJSON_ArrayForEach(it, json) {
        if (!in_list(top_keys, it->string))
            return set_err(err, errlen, "unknown key \"%.64s\" in the network spec (it takes "
                           "name, description, input and layers)", it->string);
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(json, "name");
    if (nm && !cJSON_IsString(nm))
        return set_err(err, errlen, "the spec's \"name\" must be a string");
    if (nm)
        snprintf(s.name, sizeof s.name, "%s", nm->valuestring);
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(json, "description");
    if (desc && !cJSON_IsString(desc))
        return set_err(err, errlen, "the spec's \"description\" must be a string");
    if (classes < 1)
        return set_err(err, errlen, "the class count must be positive (got %d)", classes);
    if (parse_input(json, in, &s.in, err, errlen) < 0)
        return -1;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(json, "layers");
    if (!layers)
        return set_err(err, errlen, "the spec has no \"layers\"");
    if (!cJSON_IsArray(layers))
        return set_err(err, errlen, "\"layers\" must be a list of layers");
    int n = cJSON_GetArraySize(layers);
    if (n < 1)
        return set_err(err, errlen, "\"layers\" is empty: a network needs at least one layer");
    if (n > SPEC_LAYERS_MAX)
        return set_err(err, errlen, "\"layers\" has %d layers, more than %d", n, SPEC_LAYERS_MAX);
    if (!(s.layers = calloc((size_t)n, sizeof *s.layers)))
        return set_err(err, errlen, "out of memory for %d layers", n);
    s.nlayers = n;
    int i = 0;
    cJSON_ArrayForEach(it, layers) {
        if (parse_layer(&s, i, it, err, errlen) < 0)
            goto out;
        i++;
    }
    for (int j = 0; j + 1 < n; j++) {
        bool used = false;
        for (int k = j + 1; k < n && !used; k++)
            for (int q = 0; q < s.layers[k].ninputs; q++)
                used = used || s.layers[k].inputs[q] == j + 1;
        if (!used) {
            set_err(err, errlen, "layer %d (%s \"%s\"): its output is not used by any later "
                    "layer (only the last layer's output reaches the loss)", j + 1,
                    s.layers[j].type, s.layers[j].name);
            goto out;
        }
    }
    const layer_spec *last = &s.layers[n - 1];
    if (spec_shape_size(last->out) != classes) {
        set_err(err, errlen, "layer %d (%s \"%s\"): the last layer gives %lld values per image "
                "but there are %d classes; the loss needs one per class (end with a dense "
                "layer of \"units\": \"classes\")", last->number, last->type, last->name,
                (long long)spec_shape_size(last->out), classes);
        goto out;
    }
    *out = s;
    s.layers = NULL;
    rc = 0;
out:
    free(s.layers);
    return rc;
}

void spec_free(net_spec *s)
{
    if (!s)
        return;
    free(s->layers);
    s->layers = NULL;
    s->nlayers = 0;
}
