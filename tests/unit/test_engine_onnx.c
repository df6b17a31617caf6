/* ONNX export (engine/onnx.h): models are decoded back with the protobuf-c
 * code generated from engine/proto/onnx.proto and checked for their
 * structure: IR version and opset, the input and output, the nodes in order
 * with their attributes, every initializer's shape and bytes against the
 * weights file, the metadata. Bad weight files (a tensor missing, another
 * shape, another dtype) and bad specs give errors that name the problem.
 * That the graph computes what kiln computes is tested with ONNX Runtime in
 * tests/integration/onnx.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/fileio.h"
#include "engine/net.h"
#include "engine/onnx.h"
#include "engine/safetensors.h"
#include "onnx.pb-c.h"

static char dir[64];
static char path_buf[128];

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/kiln-onnx-test-%d", (int)getpid());
    return fio_mkdir_p(dir);
}

static int teardown(void **state)
{
    return fio_rm_rf(dir);
}

static const char *tmp(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

/* A spec by built-in name or from tests/unit/data. */
static cJSON *load_spec(const char *name)
{
    if (net_builtin(name))
        return cJSON_Parse(net_builtin(name));
    char p[512], err[256];
    snprintf(p, sizeof p, "%s/tests/unit/data/%s", KILN_SOURCE_DIR, name);
    char *text = fio_read_file(p, 1 << 20, NULL, err, sizeof err);
    assert_non_null(text);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

/* Saves a freshly initialised net of spec as weights (net_save) at path. */
static void save_weights(const cJSON *spec, net_shape in, int classes, const char *path)
{
    char err[512] = "";
    net *n = net_create(spec, in, classes, 2, NULL, NULL, 7, err, sizeof err);
    if (!n)
        print_error("net_create: %s\n", err);
    assert_non_null(n);
    assert_int_equal(net_save(n, path, err, sizeof err), 0);
    net_free(n);
}

static const char *const LABELS[10] = { "zero", "one", "two", "three", "four",
                                        "five", "six", "seven", "eight", "nine \"9\"" };

static Onnx__ModelProto *export_ok(const cJSON *spec, net_shape in, int classes, const char *w,
                                   const onnx_meta *meta)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    char err[512] = "";
    int rc = onnx_export(spec, in, classes, w, meta, &bytes, &len, err, sizeof err);
    if (rc != 0)
        print_error("onnx_export: %s\n", err);
    assert_int_equal(rc, 0);
    assert_true(len > 0);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, bytes);
    free(bytes);
    assert_non_null(m);
    return m;
}

static const Onnx__TensorProto *find_init(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_initializer; i++)
        if (strcmp(g->initializer[i]->name, name) == 0)
            return g->initializer[i];
    return NULL;
}

static const Onnx__AttributeProto *find_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

static const char *find_prop(const Onnx__ModelProto *m, const char *key)
{
    for (size_t i = 0; i < m->n_metadata_props; i++)
        if (strcmp(m->metadata_props[i]->key, key) == 0)
            return m->metadata_props[i]->value;
    return NULL;
}

static const Onnx__NodeProto *find_node(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_node; i++)
        if (strcmp(g->node[i]->name, name) == 0)
            return g->node[i];
    return NULL;
}

static void assert_ints(const Onnx__NodeProto *n, const char *name, int k, const int64_t *want)
{
    const Onnx__AttributeProto *a = find_attr(n, name);
    if (!a)
        print_error("node %s has no attribute %s\n", n->name, name);
    assert_non_null(a);
    assert_int_equal(a->type, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    assert_int_equal(a->n_ints, k);
    for (int i = 0; i < k; i++)
        assert_int_equal(a->ints[i], want[i]);
}

static void assert_int_attr(const Onnx__NodeProto *n, const char *name, int64_t want)
{
    const Onnx__AttributeProto *a = find_attr(n, name);
    assert_non_null(a);
    assert_int_equal(a->type, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    assert_int_equal(a->i, want);
}

/* The value's type: float, [batch, dims...]. */
static void assert_value(const Onnx__ValueInfoProto *v, const char *name, const int64_t *dims,
                         int ndim)
{
    assert_string_equal(v->name, name);
    assert_int_equal(v->type->value_case, ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE);
    const Onnx__TypeProto__Tensor *t = v->type->tensor_type;
    assert_int_equal(t->elem_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
    assert_int_equal(t->shape->n_dim, ndim + 1);
    assert_int_equal(t->shape->dim[0]->value_case,
                     ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
    assert_string_equal(t->shape->dim[0]->dim_param, "batch");
    for (int i = 0; i < ndim; i++) {
        assert_int_equal(t->shape->dim[i + 1]->value_case,
                         ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE);
        assert_int_equal(t->shape->dim[i + 1]->dim_value, dims[i]);
    }
}

/* Every tensor of the weights file that is not optimizer state is an
 * initializer with its shape and exactly its bytes, and there are no others
 * but the normalisation's constants (and Unsqueeze's axes). */
static void assert_weights(const Onnx__GraphProto *g, const char *w)
{
    char err[256];
    st_file *f = st_open(w, err, sizeof err);
    assert_non_null(f);
    size_t matched = 0;
    for (int i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_get(f, i);
        if (strncmp(t->name, "optim/", 6) == 0)
            continue;
        const Onnx__TensorProto *x = find_init(g, t->name);
        if (!x)
            print_error("no initializer %s\n", t->name);
        assert_non_null(x);
        assert_int_equal(x->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
        assert_int_equal(x->n_dims, t->ndim);
        for (int d = 0; d < t->ndim; d++)
            assert_int_equal(x->dims[d], t->shape[d]);
        assert_true(x->has_raw_data);
        assert_int_equal(x->raw_data.len, t->bytes);
        assert_memory_equal(x->raw_data.data, t->data, t->bytes);
        matched++;
    }
    size_t consts = 0;
    for (size_t i = 0; i < g->n_initializer; i++)
        consts += strncmp(g->initializer[i]->name, "kiln:", 5) == 0;
    assert_int_equal(g->n_initializer, matched + consts);
    st_close(f);
}

/* LeNet: the whole model, node by node. */
static void test_lenet(void **state)
{
    cJSON *spec = load_spec("lenet");
    net_shape in = { 1, 28, 28 };
    const char *w = tmp("lenet.safetensors");
    save_weights(spec, in, 10, w);
    const char *props[] = { "preprocess", "{\"channels\":1}", "kiln_version", "9.8.7",
                            "network", "lenet", NULL };
    onnx_meta meta = { .mean = { 33.3f }, .scale = 1.0f / 255.0f, .labels = LABELS,
                       .producer_version = "9.8.7", .props = props };
    Onnx__ModelProto *m = export_ok(spec, in, 10, w, &meta);

    assert_int_equal(m->ir_version, 8);
    assert_int_equal(m->n_opset_import, 1);
    assert_true(!m->opset_import[0]->domain || !m->opset_import[0]->domain[0]);
    assert_int_equal(m->opset_import[0]->version, 13);
    assert_string_equal(m->producer_name, "kiln");
    assert_string_equal(m->producer_version, "9.8.7");

    const Onnx__GraphProto *g = m->graph;
    assert_int_equal(g->n_input, 1);
    assert_int_equal(g->n_output, 1);
    assert_value(g->input[0], "pixels", (const int64_t[]){ 1, 28, 28 }, 3);
    assert_value(g->output[0], "probabilities", (const int64_t[]){ 10 }, 1);

    static const char *const ops[] = { "Sub", "Mul", "Conv", "MaxPool", "Conv", "MaxPool",
                                       "Flatten", "Gemm", "Relu", "Gemm", "Softmax" };
    assert_int_equal(g->n_node, sizeof ops / sizeof ops[0]);
    for (size_t i = 0; i < g->n_node; i++)
        assert_string_equal(g->node[i]->op_type, ops[i]);
    /* a chain from pixels to probabilities */
    assert_string_equal(g->node[0]->input[0], "pixels");
    for (size_t i = 1; i < g->n_node; i++)
        assert_string_equal(g->node[i]->input[0], g->node[i - 1]->output[0]);
    assert_string_equal(g->node[g->n_node - 1]->output[0], "probabilities");

    const Onnx__TensorProto *mean = find_init(g, g->node[0]->input[1]);
    assert_non_null(mean);
    assert_int_equal(mean->n_dims, 4);
    assert_int_equal(mean->dims[1], 1);
    float mv;
    memcpy(&mv, mean->raw_data.data, sizeof mv);
    assert_true(mv == 33.3f);
    const Onnx__TensorProto *scale = find_init(g, g->node[1]->input[1]);
    assert_non_null(scale);
    assert_int_equal(scale->n_dims, 0);
    memcpy(&mv, scale->raw_data.data, sizeof mv);
    assert_true(mv == 1.0f / 255.0f);

    const Onnx__NodeProto *conv1 = find_node(g, "conv1");
    assert_non_null(conv1);
    assert_string_equal(conv1->input[1], "conv1.weight");
    assert_string_equal(conv1->input[2], "conv1.bias");
    assert_ints(conv1, "kernel_shape", 2, (const int64_t[]){ 5, 5 });
    assert_ints(conv1, "pads", 4, (const int64_t[]){ 0, 0, 0, 0 });
    assert_ints(conv1, "strides", 2, (const int64_t[]){ 1, 1 });
    assert_int_attr(conv1, "group", 1);
    const Onnx__NodeProto *pool = find_node(g, "pool1");
    assert_ints(pool, "kernel_shape", 2, (const int64_t[]){ 2, 2 });
    assert_ints(pool, "strides", 2, (const int64_t[]){ 2, 2 });
    assert_int_attr(pool, "ceil_mode", 0);
    const Onnx__NodeProto *fc1 = find_node(g, "fc1");
    assert_int_attr(fc1, "transB", 1);
    assert_string_equal(fc1->input[1], "fc1.weight");
    assert_int_attr(g->node[g->n_node - 1], "axis", 1);
    assert_weights(g, w);

    cJSON *labels = cJSON_Parse(find_prop(m, "labels"));
    assert_int_equal(cJSON_GetArraySize(labels), 10);
    assert_string_equal(cJSON_GetArrayItem(labels, 9)->valuestring, "nine \"9\"");
    cJSON_Delete(labels);
    assert_string_equal(find_prop(m, "preprocess"), "{\"channels\":1}");
    assert_string_equal(find_prop(m, "kiln_version"), "9.8.7");
    assert_string_equal(find_prop(m, "network"), "lenet");
    assert_int_equal(m->n_metadata_props, 4);

    onnx__model_proto__free_unpacked(m, NULL);
    cJSON_Delete(spec);
}

/* The spec with every layer type: the op of each layer, the attributes
 * that carry kiln's semantics, and the rank changes between them. */
static void test_every_layer(void **state)
{
    cJSON *spec = load_spec("every_layer.json");
    net_shape in = { 3, 16, 16 };
    const char *w = tmp("every.safetensors");
    save_weights(spec, in, 5, w);
    onnx_meta meta = { .mean = { 1, 2, 3 }, .scale = 0.5f };
    Onnx__ModelProto *m = export_ok(spec, in, 5, w, &meta);
    const Onnx__GraphProto *g = m->graph;
    assert_null(find_prop(m, "labels"));
    assert_value(g->input[0], "pixels", (const int64_t[]){ 3, 16, 16 }, 3);
    assert_value(g->output[0], "probabilities", (const int64_t[]){ 5 }, 1);

    static const struct { const char *name, *op; } want[] = {
        { "stem", "Conv" }, { "stem_bn", "BatchNormalization" }, { "stem_act", "LeakyRelu" },
        { "grouped", "Conv" }, { "gate", "Sigmoid" }, { "wide", "Conv" }, { "wide_act", "Tanh" },
        { "sum2", "Add" }, { "sum3", "Sum" }, { "mp", "MaxPool" }, { "ap", "AveragePool" },
        { "cat", "Concat" }, { "cat_act", "Relu" }, { "gap", "GlobalAveragePool" },
        { "flat", "Flatten" }, { "fc1", "Gemm" }, { "fc1_bn", "BatchNormalization" },
        { "mix", "Concat" }, { "head", "Conv" }, { "side", "Gemm" }, { "logits", "Add" },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const Onnx__NodeProto *n = find_node(g, want[i].name);
        if (!n)
            print_error("no node %s\n", want[i].name);
        assert_non_null(n);
        assert_string_equal(n->op_type, want[i].op);
        char out[96];
        snprintf(out, sizeof out, "%s:out", want[i].name);
        assert_string_equal(n->output[0], out);
    }
    assert_null(find_node(g, "drop"));       /* inference: no node */
    for (size_t i = 0; i < g->n_node; i++)
        assert_string_not_equal(g->node[i]->op_type, "Dropout");

    /* "same" with stride 2 on 16: 8 outputs, 1 padding row, on the far side */
    const Onnx__NodeProto *n = find_node(g, "stem");
    assert_ints(n, "pads", 4, (const int64_t[]){ 0, 0, 1, 1 });
    assert_ints(n, "strides", 2, (const int64_t[]){ 2, 2 });
    n = find_node(g, "grouped");
    assert_ints(n, "dilations", 2, (const int64_t[]){ 2, 2 });
    assert_ints(n, "pads", 4, (const int64_t[]){ 2, 2, 2, 2 });
    assert_int_attr(n, "group", 2);
    assert_int_equal(n->n_input, 2);                       /* no bias */
    const Onnx__TensorProto *gw = find_init(g, "grouped.weight");
    assert_int_equal(gw->dims[1], 4);                      /* 8 channels / 2 groups */
    n = find_node(g, "wide");
    assert_ints(n, "kernel_shape", 2, (const int64_t[]){ 1, 3 });
    assert_ints(n, "pads", 4, (const int64_t[]){ 0, 1, 0, 1 });
    n = find_node(g, "stem_act");
    assert_true(find_attr(n, "alpha")->f == 0.1f);
    n = find_node(g, "stem_bn");
    assert_true(find_attr(n, "epsilon")->f == 0.001f);
    assert_string_equal(n->input[3], "stem_bn.running_mean");
    assert_string_equal(n->input[4], "stem_bn.running_var");
    assert_true(find_attr(find_node(g, "fc1_bn"), "epsilon")->f == 1e-5f);
    n = find_node(g, "ap");
    assert_int_attr(n, "count_include_pad", 0);
    assert_ints(n, "pads", 4, (const int64_t[]){ 1, 1, 1, 1 });
    n = find_node(g, "mp");
    assert_ints(n, "pads", 4, (const int64_t[]){ 1, 1, 1, 1 });
    assert_null(find_attr(n, "count_include_pad"));
    assert_int_equal(find_node(g, "sum3")->n_input, 3);
    assert_int_attr(find_node(g, "cat"), "axis", 1);
    n = find_node(g, "side");                              /* dense on an image: flattened */
    assert_int_equal(n->n_input, 2);
    assert_int_equal(find_init(g, "side.weight")->dims[1], 8 * 4 * 4);
    /* mix joins a vector (dropout's input, fc1_bn) and an image (gap): the
     * vector is unsqueezed, the image taken as it is */
    n = find_node(g, "mix");
    assert_string_equal(n->input[1], "gap:out");
    assert_string_not_equal(n->input[0], "fc1_bn:out");
    const Onnx__NodeProto *u = NULL;
    for (size_t i = 0; i < g->n_node; i++)
        if (strcmp(g->node[i]->output[0], n->input[0]) == 0)
            u = g->node[i];
    assert_non_null(u);
    assert_string_equal(u->op_type, "Unsqueeze");
    assert_string_equal(u->input[0], "fc1_bn:out");
    /* the logits are an image: flattened before the softmax */
    const Onnx__NodeProto *last = g->node[g->n_node - 1], *prev = g->node[g->n_node - 2];
    assert_string_equal(last->op_type, "Softmax");
    assert_string_equal(prev->op_type, "Flatten");
    assert_string_equal(prev->input[0], "logits:out");
    assert_weights(g, w);
    onnx__model_proto__free_unpacked(m, NULL);
    cJSON_Delete(spec);
}

/* A checkpoint exports as its weights: the optimizer's state is left out. */
static void test_checkpoint(void **state)
{
    cJSON *spec = load_spec("lenet");
    net_shape in = { 1, 16, 16 };
    char err[512] = "";
    net_solver sv = { .type = SOLVER_ADAM, .lr = 0.001f };
    net *n = net_create(spec, in, 3, 2, NULL, &sv, 3, err, sizeof err);
    assert_non_null(n);
    ckpt_info info = { .step = 1, .epoch = 1, .seed = 3 };
    const char *w = tmp("ckpt.safetensors");
    assert_int_equal(ckpt_save(n, w, &info, err, sizeof err), 0);
    net_free(n);
    onnx_meta meta = { .scale = 1.0f };
    Onnx__ModelProto *m = export_ok(spec, in, 3, w, &meta);
    assert_weights(m->graph, w);
    assert_null(find_init(m->graph, "optim/conv1.weight/exp_avg"));
    assert_value(m->graph->input[0], "pixels", (const int64_t[]){ 1, 16, 16 }, 3);
    onnx__model_proto__free_unpacked(m, NULL);
    cJSON_Delete(spec);
}

static void export_fails(const cJSON *spec, net_shape in, int classes, const char *w,
                         const char *want1, const char *want2)
{
    uint8_t *bytes = (uint8_t *)"x";
    size_t len = 1;
    char err[512] = "";
    onnx_meta meta = { .scale = 1.0f };
    assert_int_equal(onnx_export(spec, in, classes, w, &meta, &bytes, &len, err, sizeof err), -1);
    assert_null(bytes);
    assert_int_equal(len, 0);
    if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
        print_error("error \"%s\" does not name \"%s\" / \"%s\"\n", err, want1,
                    want2 ? want2 : "");
    assert_non_null(strstr(err, want1));
    if (want2)
        assert_non_null(strstr(err, want2));
}

/* A weights file written by hand from a saved one, with one tensor left out
 * (skip) or replaced by one of another shape or dtype. */
static void rewrite(const char *from, const char *to, const char *name, int mode)
{
    char err[256];
    st_file *f = st_open(from, err, sizeof err);
    assert_non_null(f);
    st_tensor ts[64];
    int k = 0;
    static float junk[1 << 16];
    for (int i = 0; i < st_count(f); i++) {
        st_tensor t = *st_get(f, i);
        if (strcmp(t.name, name) == 0) {
            if (mode == 0)
                continue;
            if (mode == 1) {                 /* one more element in dim 0 */
                t.shape[0] += 1;
                t.bytes += t.bytes / (size_t)(t.shape[0] - 1);
            } else {                         /* the same bytes as F16, twice the elements */
                t.dtype = ST_F16;
                t.shape[t.ndim - 1] *= 2;
            }
            assert_true(t.bytes <= sizeof junk);
            t.data = junk;
        }
        ts[k++] = t;
    }
    assert_int_equal(st_write(to, ts, k, NULL, err, sizeof err), 0);
    st_close(f);
}

static void test_bad_weights(void **state)
{
    cJSON *spec = load_spec("lenet");
    net_shape in = { 1, 28, 28 };
    const char *w = tmp("good.safetensors");
    char good[128], missing[128], shape[128], dtype[128];
    save_weights(spec, in, 10, w);
    snprintf(good, sizeof good, "%s", w);
    snprintf(missing, sizeof missing, "%s", tmp("missing.safetensors"));
    snprintf(shape, sizeof shape, "%s", tmp("shape.safetensors"));
    snprintf(dtype, sizeof dtype, "%s", tmp("dtype.safetensors"));
    rewrite(good, missing, "fc2.bias", 0);
    rewrite(good, shape, "conv2.weight", 1);
    rewrite(good, dtype, "fc1.bias", 2);
    export_fails(spec, in, 10, missing, "no tensor \"fc2.bias\"", NULL);
    export_fails(spec, in, 10, shape, "\"conv2.weight\" has shape [51, 20, 5, 5]", "[50, 20, 5, 5]");
    export_fails(spec, in, 10, dtype, "\"fc1.bias\" is F16", NULL);
    /* weights of another class count */
    export_fails(spec, in, 7, good, "\"fc2.weight\" has shape [10, 500]", "[7, 500]");
    export_fails(spec, in, 10, tmp("nothing.safetensors"), "nothing.safetensors", NULL);
    cJSON_Delete(spec);

    /* the spec's own errors, as spec_parse gives them */
    cJSON *bad = cJSON_Parse("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c\", \"filters\": 4,"
                             " \"kernel\": 40}, {\"type\": \"dense\", \"units\": \"classes\"}]}");
    export_fails(bad, in, 10, good, "layer 1 (conv2d \"c\"): kernel 40 is larger", NULL);
    cJSON_Delete(bad);
    cJSON *five = load_spec("every_layer.json");
    export_fails(five, (net_shape){ 5, 16, 16 }, 5, good, "does not match", NULL);
    cJSON_Delete(five);
}

/* Every built-in network exports (at its own input, or 1x28x28 for LeNet). */
static void test_builtins(void **state)
{
    for (const char *const *nm = net_builtin_names(); *nm; nm++) {
        cJSON *spec = load_spec(*nm);
        net_shape in = cJSON_GetObjectItem(spec, "input") ? (net_shape){ 0, 0, 0 }
                                                           : (net_shape){ 1, 28, 28 };
        const char *w = tmp("builtin.safetensors");
        save_weights(spec, in, 10, w);
        onnx_meta meta = { .mean = { 120, 115, 100 }, .scale = 1.0f / 255.0f };
        Onnx__ModelProto *m = export_ok(spec, in, 10, w, &meta);
        assert_weights(m->graph, w);
        assert_string_equal(m->graph->name, *nm);
        onnx__model_proto__free_unpacked(m, NULL);
        cJSON_Delete(spec);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet),
        cmocka_unit_test(test_every_layer),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_bad_weights),
        cmocka_unit_test(test_builtins),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
