/* engine/summary.c: per-layer figures and the training-memory estimate of a
 * spec (conventions in summary.h). Everything comes from spec_parse's
 * resolved shapes, so a spec that summarises is a spec that builds.
 */
#include "engine/summary.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine/amp.h"             /* amp_plan: which outputs are 16-bit */
#include "base/err.h"          /* set_err */

#define BYTES_PER_NUMBER 4          /* fp32 */
#define BYTES_LOW 2                 /* bfloat16, fp16 */
#define MAX_DEVICES 16

int summary_opt_states(solver_type solver, bool momentum)
{
    return solver == SOLVER_SGD ? (momentum ? 1 : 0) : 2;
}

static const struct builtin_default {
    const char *name;
    net_shape in;
    int classes;
} builtin_defaults[] = {
    { "lenet", { 1, 28, 28 }, 10 },
    { "cifar10-cnn", { 3, 32, 32 }, 10 },
    { "resnet20", { 3, 32, 32 }, 10 },
    { "alexnet", { 3, 32, 32 }, 10 },
    { "resnet18", { 3, 224, 224 }, 1000 },
    { "resnet50", { 3, 224, 224 }, 1000 },
};

bool summary_builtin_defaults(const char *name, net_shape *in, int *classes)
{
    for (size_t i = 0; name && i < sizeof builtin_defaults / sizeof builtin_defaults[0]; i++) {
        if (!strcmp(builtin_defaults[i].name, name)) {
            *in = builtin_defaults[i].in;
            *classes = builtin_defaults[i].classes;
            return true;
        }
    }
    return false;
}

static int64_t layer_macs(const layer_spec *l)
{
    int64_t out = spec_shape_size(l->out);
    switch (l->kind) {
    case LAYER_CONV2D: {
        const conv_spec *c = &l->u.conv;
        return spec_mul(spec_mul(out, l->in.c / c->groups), spec_mul(c->kh, c->kw));
    }
    case LAYER_DENSE:
        return spec_mul(spec_shape_size(l->in), l->u.dense.units);
    default:
        return 0;
    }
}

static int64_t layer_flops(const layer_spec *l)
{
    int64_t out = spec_shape_size(l->out);
    switch (l->kind) {
    case LAYER_CONV2D:
        return spec_add(spec_mul(2, layer_macs(l)), l->u.conv.bias ? out : 0);
    case LAYER_DENSE:
        return spec_add(spec_mul(2, layer_macs(l)), l->u.dense.bias ? out : 0);
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL:
        return spec_mul(out, spec_mul(l->u.pool.kh, l->u.pool.kw));
    case LAYER_GLOBAL_AVGPOOL:
        return spec_shape_size(l->in);
    case LAYER_RELU:
    case LAYER_LEAKY_RELU:
    case LAYER_SIGMOID:
    case LAYER_TANH:
    case LAYER_DROPOUT:
        return out;
    case LAYER_BATCHNORM:
        return 2 * out;
    case LAYER_ADD:
        return (int64_t)(l->ninputs - 1) * out;
    case LAYER_FLATTEN:
    case LAYER_CONCAT:
        return 0;
    }
    return 0;
}

/* Appends a warning; returns -1 when out of memory. */
static int add_warning(summary *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int add_warning(summary *s, const char *fmt, ...)
{
    char(*w)[SUMMARY_WARN_MAX] = realloc(s->warnings, (size_t)(s->nwarnings + 1) * sizeof *w);
    if (!w)
        return -1;
    s->warnings = w;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w[s->nwarnings], SUMMARY_WARN_MAX, fmt, ap);
    va_end(ap);
    s->nwarnings++;
    return 0;
}

/* Tensor-Core shapes (summary.h, Warnings). */
static int layer_warnings(summary *s, const layer_spec *l)
{
    if (l->kind == LAYER_CONV2D && l->u.conv.filters % 8 &&
        add_warning(s, "layer %d (conv2d \"%s\"): %d filters is not a multiple of 8",
                    l->number, l->name, l->u.conv.filters) < 0)
        return -1;
    /* Not where the convolution reads the images: their 1 or 3 channels are
     * the data's, not the network's to choose, and the backends pad them. */
    if (l->kind == LAYER_CONV2D && l->inputs[0] != 0 && l->in.c % 8 &&
        add_warning(s, "layer %d (conv2d \"%s\"): %d input channels is not a multiple of 8",
                    l->number, l->name, l->in.c) < 0)
        return -1;
    if (l->kind == LAYER_DENSE && l->u.dense.units % 8 &&
        add_warning(s, "layer %d (dense \"%s\"): %d units is not a multiple of 8",
                    l->number, l->name, l->u.dense.units) < 0)
        return -1;
    return 0;
}

/* Weights of convolutions and dense layers: what AMP keeps 16-bit copies of. */
static int64_t copied_weights(const layer_spec *l)
{
    if (l->kind == LAYER_CONV2D)
        return spec_layer_params(l) - (l->u.conv.bias ? l->u.conv.filters : 0);
    if (l->kind == LAYER_DENSE)
        return spec_layer_params(l) - (l->u.dense.bias ? l->u.dense.units : 0);
    return 0;
}

int summary_memory(const net_spec *s, int opt_states, precision_mode prec, summary_mem *m,
                   char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->act_layer = m->param_layer = -1;
    if ((unsigned)prec >= PREC_COUNT)
        return set_err(err, errlen, "unknown precision %d", (int)prec);
    bool amp = prec != PREC_FP32;
    bool *low = calloc((size_t)s->nlayers + 1, sizeof *low);
    if (!low)
        return set_err(err, errlen, "out of memory");
    if (amp_plan(s, amp, low, err, errlen) < 0) {
        free(low);
        return -1;
    }
    int64_t image = BYTES_PER_NUMBER * spec_shape_size(s->in);
    for (int i = 0; i < s->nlayers; i++) {
        const layer_spec *l = &s->layers[i];
        int64_t params = spec_layer_params(l);
        int64_t fixed = BYTES_PER_NUMBER * params * (2 + opt_states) +
                        (amp ? BYTES_LOW * copied_weights(l) : 0);
        m->fixed = spec_add(m->fixed, fixed);
        if (fixed > m->param_layer_bytes) {
            m->param_layer_bytes = fixed;
            m->param_layer = i;
        }
        if (l->kind == LAYER_FLATTEN)
            continue;
        int64_t out = spec_shape_size(l->out);
        int64_t b = 2 * out * (low[i + 1] ? BYTES_LOW : BYTES_PER_NUMBER);
        if (l->kind == LAYER_DROPOUT)
            b += BYTES_PER_NUMBER * out;
        image = spec_add(image, b);
        if (b > m->act_layer_bytes) {
            m->act_layer_bytes = b;
            m->act_layer = i;
        }
    }
    free(low);
    m->per_image = image;
    return 0;
}

int64_t summary_max_batch(const summary_mem *m, int64_t memory)
{
    if (memory <= m->fixed || m->per_image <= 0)
        return 0;
    return (memory - m->fixed) / m->per_image;
}

/* "41,210" into buf. */
static const char *grouped(char *buf, size_t len, int64_t v);

/* Whole MiB rounded up: what is needed is never understated (what there is
 * is rounded down, memory >> 20). */
static int64_t mib_up(int64_t v)
{
    return (v >> 20) + ((v & ((1 << 20) - 1)) != 0);
}

int summary_check_memory(const net_spec *s, int opt_states, precision_mode prec, int batch,
                         int devices, int64_t memory, const char *where, char *err,
                         size_t errlen)
{
    summary_mem m;
    if (summary_memory(s, opt_states, prec, &m, err, errlen) < 0)
        return -1;
    int64_t need = summary_train_bytes(&m, batch);
    if (memory <= 0 || need <= memory)
        return 0;
    char need_s[32], have_s[32], part_s[32], count_s[32];
    grouped(have_s, sizeof have_s, memory >> 20);
    if (m.fixed >= memory && m.param_layer >= 0) {
        const layer_spec *p = &s->layers[m.param_layer];
        return set_err(err, errlen, "the network's weights, gradients and optimizer state alone "
                       "need at least %s MiB, more than %s %s MiB (the most parameters are in "
                       "layer %d (%s \"%s\"): %s of them, %s MiB with their gradients and "
                       "optimizer state); use fewer or smaller layers",
                       grouped(need_s, sizeof need_s, mib_up(m.fixed)), where, have_s, p->number,
                       p->type, p->name, grouped(count_s, sizeof count_s, spec_layer_params(p)),
                       grouped(part_s, sizeof part_s, mib_up(m.param_layer_bytes)));
    }
    char largest[SPEC_NAME_MAX + 128] = "";
    if (m.act_layer >= 0) {
        const layer_spec *a = &s->layers[m.act_layer];
        snprintf(largest, sizeof largest, " (the largest activation is layer %d (%s \"%s\"): "
                 "%s MiB for the batch)", a->number, a->type, a->name,
                 grouped(part_s, sizeof part_s, mib_up(spec_mul(m.act_layer_bytes, batch))));
    }
    int64_t most = summary_max_batch(&m, memory);
    grouped(need_s, sizeof need_s, mib_up(need));
    /* Data parallel: batch is each device's share; the advice is for the
     * whole batch the user gives. */
    char at[64];
    if (devices > 1)
        snprintf(at, sizeof at, "%d on each of %d devices", batch, devices);
    else
        snprintf(at, sizeof at, "%d", batch);
    if (most < 1)
        return set_err(err, errlen, "the network needs at least %s MiB at batch size %s, more "
                       "than %s %s MiB%s; not even one image fits: use smaller layers or a "
                       "smaller input", need_s, at, where, have_s, largest);
    return set_err(err, errlen, "the network needs at least %s MiB at batch size %s, more than "
                   "%s %s MiB%s; use a smaller batch (at most %s fits)", need_s, at, where,
                   have_s, largest,
                   grouped(count_s, sizeof count_s, most * (devices > 1 ? devices : 1)));
}

/* Each device's memory against the estimate. */
static int estimate_devices(summary *s, const summary_mem *m)
{
    engine_device d[MAX_DEVICES];
    int n = engine_devices(d, MAX_DEVICES);
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    if (!(s->devices = calloc((size_t)n, sizeof *s->devices)))
        return -1;
    s->ndevices = n;
    for (int i = 0; i < n; i++) {
        summary_device *sd = &s->devices[i];
        snprintf(sd->kind, sizeof sd->kind, "%.7s", d[i].kind);
        snprintf(sd->name, sizeof sd->name, "%.127s", d[i].name);
        sd->index = d[i].index;
        sd->memory_bytes = (int64_t)d[i].memory_bytes;
        sd->fits = s->train_bytes <= sd->memory_bytes;
        sd->max_batch = summary_max_batch(m, sd->memory_bytes);
    }
    return 0;
}

int summary_build(const cJSON *spec, net_shape in, int classes, int batch,
                  solver_type solver, bool momentum, precision_mode prec, summary *out,
                  char *err, size_t errlen)
{
    net_spec ns = { 0 };
    summary s = { 0 };
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (batch < 1)
        return set_err(err, errlen, "the batch size must be positive (got %d)", batch);
    if ((unsigned)solver >= SOLVER_COUNT)
        return set_err(err, errlen, "unknown solver %d", (int)solver);
    if ((unsigned)prec >= PREC_COUNT)
        return set_err(err, errlen, "unknown precision %d", (int)prec);
    s.opt_states = summary_opt_states(solver, momentum);
    if (spec_parse(spec, in, classes, &ns, err, errlen) < 0)
        return -1;
    snprintf(s.name, sizeof s.name, "%s", ns.name);
    s.precision = prec;
    bool *low = calloc((size_t)ns.nlayers + 1, sizeof *low);
    summary_mem mem;
    if (!low) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (amp_plan(&ns, prec != PREC_FP32, low, err, errlen) < 0 ||
        summary_memory(&ns, s.opt_states, prec, &mem, err, errlen) < 0)
        goto out;
    s.fixed_bytes = mem.fixed;
    s.image_bytes = mem.per_image;
    s.solver = solver;
    s.momentum = momentum && solver == SOLVER_SGD;
    s.in = ns.in;
    s.classes = ns.classes;
    s.batch = batch;
    s.layers = calloc((size_t)ns.nlayers, sizeof *s.layers);
    if (!s.layers) {
        set_err(err, errlen, "out of memory for a summary of %d layers", ns.nlayers);
        goto out;
    }
    s.nlayers = ns.nlayers;
    s.kept_bytes = BYTES_PER_NUMBER * spec_shape_size(ns.in);
    for (int i = 0; i < ns.nlayers; i++) {
        const layer_spec *l = &ns.layers[i];
        summary_layer *sl = &s.layers[i];
        snprintf(sl->name, sizeof sl->name, "%s", l->name);
        sl->type = l->type;
        sl->out = l->out;
        sl->params = spec_layer_params(l);
        sl->act_bytes = (low[i + 1] ? BYTES_LOW : BYTES_PER_NUMBER) * spec_shape_size(l->out);
        sl->macs = layer_macs(l);
        sl->flops = layer_flops(l);
        s.params = spec_add(s.params, sl->params);
        s.macs = spec_add(s.macs, sl->macs);
        s.flops = spec_add(s.flops, sl->flops);
        s.act_bytes = spec_add(s.act_bytes, sl->act_bytes);
        if (l->kind != LAYER_FLATTEN)
            s.kept_bytes += sl->act_bytes;
        if (layer_warnings(&s, l) < 0)
            goto oom;
    }
    if (batch % 8 && add_warning(&s, "batch size %d is not a multiple of 8", batch) < 0)
        goto oom;
    s.weight_bytes = BYTES_PER_NUMBER * s.params;
    s.grad_bytes = BYTES_PER_NUMBER * s.params;
    s.opt_bytes = (int64_t)s.opt_states * BYTES_PER_NUMBER * s.params;
    s.copy_bytes = s.fixed_bytes - s.weight_bytes - s.grad_bytes - s.opt_bytes;
    s.batch_act_bytes = spec_mul(s.batch, s.image_bytes);
    s.train_bytes = summary_train_bytes(&mem, s.batch);
    if (estimate_devices(&s, &mem) < 0)
        goto oom;
    *out = s;
    memset(&s, 0, sizeof s);
    rc = 0;
    goto out;
oom:
    set_err(err, errlen, "out of memory for a summary's warnings");
out:
    free(low);
    summary_free(&s);
    spec_free(&ns);
    return rc;
}

void summary_free(summary *s)
{
    if (!s)
        return;
    free(s->layers);
    free(s->warnings);
    free(s->devices);
    memset(s, 0, sizeof *s);
}

/* ---- output ---------------------------------------------------------------- */

static cJSON *shape_json(net_shape sh)
{
    const int v[3] = { sh.c, sh.h, sh.w };
    return cJSON_CreateIntArray(v, 3);
}

/* cJSON numbers are doubles: exact for every count below 2^53. */
static bool add_num(cJSON *o, const char *k, int64_t v)
{
    return cJSON_AddNumberToObject(o, k, (double)v) != NULL;
}

static cJSON *layer_json(const summary_layer *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *sh = shape_json(l->out);
    if (!o || !sh || !cJSON_AddStringToObject(o, "name", l->name) ||
        !cJSON_AddStringToObject(o, "type", l->type) ||
        !cJSON_AddItemToObject(o, "output_shape", sh)) {
        cJSON_Delete(sh);
        cJSON_Delete(o);
        return NULL;
    }
    if (!add_num(o, "params", l->params) || !add_num(o, "activation_bytes", l->act_bytes) ||
        !add_num(o, "macs", l->macs) || !add_num(o, "flops", l->flops)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *memory_json(const summary *s)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !add_num(m, "batch_size", s->batch) ||
        !cJSON_AddStringToObject(m, "solver", solver_type_name(s->solver)) ||
        !cJSON_AddBoolToObject(m, "momentum", s->momentum) ||
        !add_num(m, "optimizer_states_per_param", s->opt_states) ||
        !add_num(m, "weights_bytes", s->weight_bytes) ||
        !add_num(m, "gradients_bytes", s->grad_bytes) ||
        !add_num(m, "optimizer_bytes", s->opt_bytes) ||
        !add_num(m, "weight_copies_bytes", s->copy_bytes) ||
        !add_num(m, "per_image_bytes", s->image_bytes) ||
        !add_num(m, "activations_bytes", s->batch_act_bytes) ||
        !add_num(m, "total_bytes", s->train_bytes) ||
        !cJSON_AddStringToObject(m, "precision", precision_name(s->precision))) {
        cJSON_Delete(m);
        return NULL;
    }
    cJSON *devs = cJSON_AddArrayToObject(m, "devices");
    for (int i = 0; devs && i < s->ndevices; i++) {
        const summary_device *d = &s->devices[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(devs, o) || !cJSON_AddStringToObject(o, "kind", d->kind) ||
            !add_num(o, "index", d->index) || !cJSON_AddStringToObject(o, "name", d->name) ||
            !add_num(o, "memory_bytes", d->memory_bytes) ||
            !cJSON_AddBoolToObject(o, "fits", d->fits) || !add_num(o, "max_batch", d->max_batch))
            devs = NULL;
    }
    if (!devs) {
        cJSON_Delete(m);
        return NULL;
    }
    return m;
}

cJSON *summary_to_json(const summary *s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *in = shape_json(s->in);
    cJSON *layers = cJSON_CreateArray();
    cJSON *warnings = cJSON_CreateArray();
    cJSON *mem = memory_json(s);
    if (!o || !in || !layers || !warnings || !mem)
        goto fail;
    cJSON_AddItemToObject(o, "input", in);
    in = NULL;
    for (int i = 0; i < s->nlayers; i++) {
        cJSON *l = layer_json(&s->layers[i]);
        if (!l)
            goto fail;
        cJSON_AddItemToArray(layers, l);
    }
    for (int i = 0; i < s->nwarnings; i++) {
        cJSON *w = cJSON_CreateString(s->warnings[i]);
        if (!w)
            goto fail;
        cJSON_AddItemToArray(warnings, w);
    }
    if (!cJSON_AddStringToObject(o, "name", s->name) || !add_num(o, "classes", s->classes))
        goto fail;
    cJSON_AddItemToObject(o, "layers", layers);
    layers = NULL;
    if (!add_num(o, "params", s->params) || !add_num(o, "macs", s->macs) ||
        !add_num(o, "flops", s->flops) || !add_num(o, "activation_bytes", s->act_bytes) ||
        !add_num(o, "kept_activation_bytes", s->kept_bytes))
        goto fail;
    cJSON_AddItemToObject(o, "training_memory", mem);
    mem = NULL;
    cJSON_AddItemToObject(o, "warnings", warnings);
    return o;
fail:
    cJSON_Delete(o);
    cJSON_Delete(in);
    cJSON_Delete(layers);
    cJSON_Delete(warnings);
    cJSON_Delete(mem);
    return NULL;
}

/* "1,234,567" into buf. */
static const char *grouped(char *buf, size_t len, int64_t v)
{
    char raw[32];
    int n = snprintf(raw, sizeof raw, "%" PRId64, v < 0 ? -v : v);
    size_t o = 0;
    if (v < 0 && o + 1 < len)
        buf[o++] = '-';
    for (int i = 0; i < n && o + 1 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0 && o + 1 < len)
            buf[o++] = ',';
        if (o + 1 < len)
            buf[o++] = raw[i];
    }
    buf[o] = '\0';
    return buf;
}

/* "527.79 MiB" into buf. */
static const char *human_bytes(char *buf, size_t len, int64_t v)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double d = (double)v;
    int u = 0;
    while (d >= 1024.0 && u < 4) {
        d /= 1024.0;
        u++;
    }
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", d, unit[u]);
    return buf;
}

/* "15.47 G", "4.62 M" into buf. */
static const char *si(char *buf, size_t len, int64_t v)
{
    static const char *const unit[] = { "", "K", "M", "G", "T", "P" };
    double d = (double)v;
    int u = 0;
    while (d >= 1000.0 && u < 5) {
        d /= 1000.0;
        u++;
    }
    snprintf(buf, len, u ? "%.2f %s" : "%.0f%s", d, unit[u]);
    return buf;
}

int summary_print(FILE *f, const summary *s)
{
    char a[32], b[32], c[32], shape[40];
    fprintf(f, "network %s, input %dx%dx%d, %d classes\n\n", s->name[0] ? s->name : "(unnamed)",
            s->in.c, s->in.h, s->in.w, s->classes);
    fprintf(f, "%-4s %-20s %-14s %-14s %13s %14s %17s\n", "#", "name", "type", "output",
            "params", "act bytes/img", "FLOPs/img");
    for (int i = 0; i < s->nlayers; i++) {
        const summary_layer *l = &s->layers[i];
        snprintf(shape, sizeof shape, "%dx%dx%d", l->out.c, l->out.h, l->out.w);
        fprintf(f, "%-4d %-20s %-14s %-14s %13s %14s %17s\n", i + 1, l->name, l->type, shape,
                grouped(a, sizeof a, l->params), grouped(b, sizeof b, l->act_bytes),
                grouped(c, sizeof c, l->flops));
    }
    fprintf(f, "\nparameters      %s (%s in fp32)\n", grouped(a, sizeof a, s->params),
            human_bytes(b, sizeof b, s->weight_bytes));
    fprintf(f, "multiply-adds   %s per image (%s)\n", grouped(a, sizeof a, s->macs),
            si(b, sizeof b, s->macs));
    fprintf(f, "forward FLOPs   %s per image (%s)\n", grouped(a, sizeof a, s->flops),
            si(b, sizeof b, s->flops));
    fprintf(f, "activations     %s per image, %s kept for backward\n",
            human_bytes(a, sizeof a, s->act_bytes), human_bytes(b, sizeof b, s->kept_bytes));
    fprintf(f, "\ntraining memory, batch %d, %s%s (%d state%s per parameter), %s:\n",
            s->batch, solver_type_name(s->solver), s->momentum ? " with momentum" : "", s->opt_states,
            s->opt_states == 1 ? "" : "s", precision_name(s->precision));
    fprintf(f, "  weights       %s\n", human_bytes(a, sizeof a, s->weight_bytes));
    fprintf(f, "  gradients     %s\n", human_bytes(a, sizeof a, s->grad_bytes));
    fprintf(f, "  optimizer     %s\n", human_bytes(a, sizeof a, s->opt_bytes));
    if (s->copy_bytes)
        fprintf(f, "  16-bit copies %s\n", human_bytes(a, sizeof a, s->copy_bytes));
    fprintf(f, "  activations   %s (%s per image)\n", human_bytes(a, sizeof a, s->batch_act_bytes),
            human_bytes(b, sizeof b, s->image_bytes));
    fprintf(f, "  total         %s (%s bytes)\n", human_bytes(a, sizeof a, s->train_bytes),
            grouped(b, sizeof b, s->train_bytes));
    fprintf(f, "  (per image: the input, every layer's output and its gradient, dropout masks;\n"
            "   a lower bound: workspaces, staging buffers and the runtime's own memory\n"
            "   are left out)\n");
    if (s->ndevices)
        fprintf(f, "\n%-8s %-36s %12s %6s %14s\n", "device", "name", "memory", "fits",
                "largest batch");
    for (int i = 0; i < s->ndevices; i++) {
        const summary_device *d = &s->devices[i];
        char dev[16];
        snprintf(dev, sizeof dev, "%.7s %d", d->kind, d->index);
        fprintf(f, "%-8s %-36.36s %12s %6s %14s\n", dev, d->name,
                human_bytes(a, sizeof a, d->memory_bytes), d->fits ? "yes" : "NO",
                grouped(b, sizeof b, d->max_batch));
    }
    if (s->nwarnings)
        fprintf(f, "\nwarnings:\n");
    for (int i = 0; i < s->nwarnings; i++)
        fprintf(f, "  %s\n", s->warnings[i]);
    return ferror(f) ? -1 : 0;
}
