/* engine/spec.c: parsing and checking network specs (see engine/spec.h).
 *
 * Every layer type of DESIGN.md is in layer_types[]: those this engine builds
 * have a parser, the others are refused as "not supported yet". A layer is
 * parsed in this order, so that every message can name it: the type, the
 * name, the keys (unknown ones are errors), the values, the shapes. */
#include "engine/spec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/errors.h"

/* Largest value any size key takes, and most elements in one image's tensor. */
#define SPEC_INT_MAX 1000000000
#define SPEC_ELEMS_MAX ((int64_t)INT32_MAX)

/* What a layer parser needs: the layer, its JSON and where to report. */
typedef struct lctx {
    layer_spec *l;
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

static const char *const conv2d_keys[] = { "filters", "kernel", "stride", "padding", "dilation",
                                           "groups", "bias", NULL };
static const char *const pool_keys[] = { "kernel", "stride", "padding", NULL };
static const char *const dense_keys[] = { "units", "bias", NULL };
static const char *const no_keys[] = { NULL };

/* Every layer type of DESIGN.md; parse == NULL: not supported yet. */
static const struct layer_type {
    const char *type;
    layer_kind kind;
    const char *const *keys;        /* besides "type", "name" and "inputs" */
    layer_parse_fn parse;
} layer_types[] = {
    { .type = "conv2d", .kind = LAYER_CONV2D, .keys = conv2d_keys, .parse = parse_conv2d },
    { .type = "maxpool", .kind = LAYER_MAXPOOL, .keys = pool_keys, .parse = parse_maxpool },
    { .type = "avgpool" },
    { .type = "global_avgpool" },
    { .type = "flatten", .kind = LAYER_FLATTEN, .keys = no_keys, .parse = parse_flatten },
    { .type = "relu", .kind = LAYER_RELU, .keys = no_keys, .parse = parse_relu },
    { .type = "sigmoid" },
    { .type = "tanh" },
    { .type = "leaky_relu" },
    { .type = "dense", .kind = LAYER_DENSE, .keys = dense_keys, .parse = parse_dense },
    { .type = "dropout" },
    { .type = "batchnorm" },
    { .type = "add" },
    { .type = "concat" },
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
    return eng_err(c->err, c->errlen, "layer %d (%s \"%s\"): %s", c->l->number, c->l->type,
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
    if (ch * h * w > SPEC_ELEMS_MAX)
        return lerr(c, "output of %lld x %lld x %lld values per image is too large",
                    (long long)ch, (long long)h, (long long)w);
    c->l->out = (net_shape){ (int)ch, (int)h, (int)w };
    return 0;
}

/* "kernel 7 is larger than its 5x5 input" and variants. */
static int kernel_too_large(lctx *c, int kh, int kw, int64_t eh, int64_t ew, int pth, int ptw)
{
    char kb[32], pb[32];
    net_shape in = c->l->in;
    char dil[64] = "", pad[64] = "";
    if (eh != kh || ew != kw)
        snprintf(dil, sizeof dil, " (%lldx%lld dilated)", (long long)eh, (long long)ew);
    if (pth || ptw)
        snprintf(pad, sizeof pad, " (%s padded)",
                 pair_str(pb, sizeof pb, in.h + pth, in.w + ptw));
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
    if (spec_layer_params(c->l) > SPEC_ELEMS_MAX)
        return lerr(c, "too many parameters (%lld)", (long long)spec_layer_params(c->l));
    return check_out(c, s->filters, sweep(in.h, pth, eh, s->stride_h),
                     sweep(in.w, ptw, ew, s->stride_w));
}

static int parse_maxpool(lctx *c)
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
    if (s->kh > in.h + 2 * s->pad_h || s->kw > in.w + 2 * s->pad_w)
        return kernel_too_large(c, s->kh, s->kw, s->kh, s->kw, 2 * s->pad_h, 2 * s->pad_w);
    return check_out(c, in.c, sweep(in.h, 2 * s->pad_h, s->kh, s->stride_h),
                     sweep(in.w, 2 * s->pad_w, s->kw, s->stride_w));
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
        return (int64_t)s->filters * (l->in.c / s->groups) * s->kh * s->kw +
               (s->bias ? s->filters : 0);
    }
    case LAYER_DENSE:
        return spec_shape_size(l->in) * l->u.dense.units + (l->u.dense.bias ? l->u.dense.units : 0);
    default:
        return 0;
    }
}

bool spec_feeds_relu(const net_spec *s, int index)
{
    for (int i = index + 1; i < s->nlayers; i++) {
        switch (s->layers[i].kind) {
        case LAYER_RELU:
            return true;
        case LAYER_MAXPOOL:
        case LAYER_FLATTEN:
            continue;            /* commute with relu */
        default:
            return false;
        }
    }
    return false;
}

/* ---- one layer ------------------------------------------------------------- */

/* "inputs": only the previous layer for now (a chain). */
static int check_inputs(lctx *c, const net_spec *s, int index)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, "inputs");
    if (!v)
        return 0;
    const char *prev = index == 0 ? "input" : s->layers[index - 1].name;
    const cJSON *one = v;
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON *it;
        cJSON_ArrayForEach(it, v)
            if (!cJSON_IsString(it))
                return lerr(c, "\"inputs\" must be a layer name or a list of layer names");
        if (n != 1)
            return lerr(c, "\"inputs\" lists %d layers: branches not supported yet "
                        "(each layer takes the previous layer's output)", n);
        one = cJSON_GetArrayItem(v, 0);
    }
    if (!cJSON_IsString(one))
        return lerr(c, "\"inputs\" must be a layer name or a list of layer names");
    if (strcmp(one->valuestring, prev) == 0)
        return 0;
    bool earlier = strcmp(one->valuestring, "input") == 0;
    for (int i = 0; i < index && !earlier; i++)
        earlier = strcmp(s->layers[i].name, one->valuestring) == 0;
    if (!earlier)
        return lerr(c, "\"inputs\" names \"%s\", which is not an earlier layer",
                    one->valuestring);
    return lerr(c, "\"inputs\" names \"%s\", not the previous layer \"%s\": branches not "
                "supported yet", one->valuestring, prev);
}

static int parse_layer(net_spec *s, int index, const cJSON *obj, char *err, size_t errlen)
{
    layer_spec *l = &s->layers[index];
    int number = index + 1;
    lctx c = { .l = l, .obj = obj, .classes = s->classes, .err = err, .errlen = errlen };

    l->number = number;
    l->in = index == 0 ? s->in : s->layers[index - 1].out;
    if (!cJSON_IsObject(obj))
        return eng_err(err, errlen, "layer %d: must be a JSON object", number);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!t)
        return eng_err(err, errlen, "layer %d: \"type\" is required", number);
    if (!cJSON_IsString(t))
        return eng_err(err, errlen, "layer %d: \"type\" must be a string", number);
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
        return eng_err(err, errlen, "layer %d: unknown type \"%.64s\" (known types: %s)",
                       number, t->valuestring, known);
    }
    if (!lt->parse)
        return eng_err(err, errlen, "layer %d: type \"%s\" is not supported yet", number,
                       lt->type);
    l->kind = lt->kind;
    l->type = lt->type;

    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(obj, "name");
    if (nm) {
        if (!cJSON_IsString(nm) || !nm->valuestring[0])
            return eng_err(err, errlen, "layer %d (%s): \"name\" must be a non-empty string",
                           number, lt->type);
        if (strlen(nm->valuestring) >= SPEC_NAME_MAX)
            return eng_err(err, errlen, "layer %d (%s): name \"%.20s...\" is longer than %d "
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
    if (check_inputs(&c, s, index) < 0)
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
        return eng_err(err, errlen, "input shape [%d, %d, %d] must be positive", in.c, in.h,
                       in.w);
    if (v) {
        int d[3];
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 3 ||
            !json_int(cJSON_GetArrayItem(v, 0), &d[0]) ||
            !json_int(cJSON_GetArrayItem(v, 1), &d[1]) ||
            !json_int(cJSON_GetArrayItem(v, 2), &d[2]))
            return eng_err(err, errlen, "\"input\" must be [C, H, W] (three integers)");
        if (d[0] < 1 || d[1] < 1 || d[2] < 1)
            return eng_err(err, errlen, "\"input\" [%d, %d, %d] must be positive", d[0], d[1],
                           d[2]);
        si = (net_shape){ d[0], d[1], d[2] };
        if (!shape_zero(in) && (si.c != in.c || si.h != in.h || si.w != in.w))
            return eng_err(err, errlen, "the spec's input [%d, %d, %d] does not match the "
                           "data's [%d, %d, %d]", si.c, si.h, si.w, in.c, in.h, in.w);
    }
    if (shape_zero(in) && !v)
        return eng_err(err, errlen, "no input shape: the spec has no \"input\" and none was "
                       "given");
    *out = shape_zero(in) ? si : in;
    if (spec_shape_size(*out) > SPEC_ELEMS_MAX)
        return eng_err(err, errlen, "input [%d, %d, %d] is too large", out->c, out->h, out->w);
    return 0;
}

int spec_parse(const cJSON *json, net_shape in, int classes, net_spec *out,
               char *err, size_t errlen)
{
    net_spec s = { .classes = classes };
    int rc = -1;

    memset(out, 0, sizeof *out);
    if (!cJSON_IsObject(json))
        return eng_err(err, errlen, "the network spec must be a JSON object");
    const cJSON *it;
    cJSON_ArrayForEach(it, json) {
        if (!in_list(top_keys, it->string))
            return eng_err(err, errlen, "unknown key \"%.64s\" in the network spec (it takes "
                           "name, description, input and layers)", it->string);
    }
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(json, "name");
    if (nm && !cJSON_IsString(nm))
        return eng_err(err, errlen, "the spec's \"name\" must be a string");
    if (nm)
        snprintf(s.name, sizeof s.name, "%s", nm->valuestring);
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(json, "description");
    if (desc && !cJSON_IsString(desc))
        return eng_err(err, errlen, "the spec's \"description\" must be a string");
    if (classes < 1)
        return eng_err(err, errlen, "the class count must be positive (got %d)", classes);
    if (parse_input(json, in, &s.in, err, errlen) < 0)
        return -1;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(json, "layers");
    if (!layers)
        return eng_err(err, errlen, "the spec has no \"layers\"");
    if (!cJSON_IsArray(layers))
        return eng_err(err, errlen, "\"layers\" must be a list of layers");
    int n = cJSON_GetArraySize(layers);
    if (n < 1)
        return eng_err(err, errlen, "\"layers\" is empty: a network needs at least one layer");
    if (!(s.layers = calloc((size_t)n, sizeof *s.layers)))
        return eng_err(err, errlen, "out of memory for %d layers", n);
    s.nlayers = n;
    int i = 0;
    cJSON_ArrayForEach(it, layers) {
        if (parse_layer(&s, i, it, err, errlen) < 0)
            goto out;
        i++;
    }
    const layer_spec *last = &s.layers[n - 1];
    if (spec_shape_size(last->out) != classes) {
        eng_err(err, errlen, "layer %d (%s \"%s\"): the last layer gives %lld values per image "
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
