/* Network spec parsing and validation (engine/spec.h, net_validate): shapes
 * resolved per layer, defaults, and bad specs refused with the layer named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "engine/net.h"
#include "engine/spec.h"

static const net_shape MNIST = { 1, 28, 28 };
static const net_shape NONE = { 0, 0, 0 };

/* Parses JSON text (must be valid JSON) into *s; returns spec_parse's result. */
static int parse(const char *json, net_shape in, int classes, net_spec *s, char *err,
                 size_t errlen)
{
    cJSON *j = cJSON_Parse(json);
    if (!j) {
        print_error("test JSON does not parse: %s\n", json);
        fail();
    }
    err[0] = '\0';
    int rc = spec_parse(j, in, classes, s, err, errlen);
    cJSON_Delete(j);
    return rc;
}

/* The spec is refused with exactly this message. */
static void refuse_exact(const char *json, net_shape in, int classes, const char *msg)
{
    char err[512];
    net_spec s;
    if (parse(json, in, classes, &s, err, sizeof err) != -1) {
        print_error("accepted: %s\n", json);
        fail();
    }
    if (strcmp(err, msg) != 0) {
        print_error("message:  %s\nexpected: %s\n", err, msg);
        fail();
    }
    assert_null(s.layers);
}

/* The spec is refused with a message that starts with prefix and contains part. */
static void refuse(const char *json, net_shape in, int classes, const char *prefix,
                   const char *part)
{
    char err[512];
    net_spec s;
    if (parse(json, in, classes, &s, err, sizeof err) != -1) {
        print_error("accepted: %s\n", json);
        fail();
    }
    if (strncmp(err, prefix, strlen(prefix)) != 0 || (part && !strstr(err, part))) {
        print_error("message: %s\nexpected to start with: %s\nand contain: %s\n", err, prefix,
                    part ? part : "");
        fail();
    }
}

static void assert_shape(net_shape s, int c, int h, int w)
{
    if (s.c != c || s.h != h || s.w != w) {
        print_error("shape [%d, %d, %d], expected [%d, %d, %d]\n", s.c, s.h, s.w, c, h, w);
        fail();
    }
}

static void test_lenet_builtin(void **state)
{
    char err[512];
    net_spec s;
    const char *txt = net_builtin("lenet");
    assert_non_null(txt);
    assert_int_equal(parse(txt, MNIST, 10, &s, err, sizeof err), 0);
    assert_string_equal(s.name, "lenet");
    assert_int_equal(s.nlayers, 8);
    assert_shape(s.layers[0].out, 20, 24, 24);
    assert_shape(s.layers[1].out, 20, 12, 12);
    assert_shape(s.layers[2].out, 50, 8, 8);
    assert_shape(s.layers[3].out, 50, 4, 4);
    assert_shape(s.layers[4].out, 800, 1, 1);
    assert_shape(s.layers[5].out, 500, 1, 1);
    assert_shape(s.layers[7].out, 10, 1, 1);
    assert_string_equal(s.layers[5].name, "fc1");
    int64_t params = 0;
    for (int i = 0; i < s.nlayers; i++)
        params += spec_layer_params(&s.layers[i]);
    assert_int_equal(params, 431080);      /* Caffe's LeNet */
    /* He initialisation for what feeds a ReLU (fc1), Glorot for the rest. */
    assert_false(spec_feeds_relu(&s, 0));
    assert_true(spec_feeds_relu(&s, 5));
    assert_false(spec_feeds_relu(&s, 7));
    spec_free(&s);

    bool found = false;
    for (const char *const *n = net_builtin_names(); *n; n++)
        found = found || strcmp(*n, "lenet") == 0;
    assert_true(found);
    assert_null(net_builtin("no-such-net"));
    assert_null(net_builtin(NULL));
}

/* DESIGN.md's example (no names, no input): default names and the input given. */
static void test_defaults(void **state)
{
    char err[512];
    net_spec s;
    const char *txt =
        "{\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3},"
        " {\"type\": \"maxpool\", \"kernel\": 2}, {\"type\": \"flatten\"},"
        " {\"type\": \"dense\", \"units\": \"classes\", \"bias\": false}]}";
    assert_int_equal(parse(txt, (net_shape){ 3, 9, 9 }, 5, &s, err, sizeof err), 0);
    assert_string_equal(s.layers[0].name, "conv2d1");
    assert_string_equal(s.layers[1].name, "maxpool2");
    assert_string_equal(s.layers[3].name, "dense4");
    const conv_spec *c = &s.layers[0].u.conv;
    assert_true(c->bias);
    assert_int_equal(c->stride_h, 1);
    assert_int_equal(c->dil_w, 1);
    assert_int_equal(c->groups, 1);
    assert_int_equal(c->pad_t + c->pad_b + c->pad_l + c->pad_r, 0);
    assert_shape(s.layers[0].out, 4, 7, 7);
    assert_int_equal(s.layers[1].u.pool.stride_h, 2);  /* stride defaults to the kernel */
    assert_shape(s.layers[1].out, 4, 3, 3);             /* floor */
    assert_false(s.layers[3].u.dense.bias);
    assert_int_equal(s.layers[3].u.dense.units, 5);
    assert_int_equal(spec_layer_params(&s.layers[3]), 36 * 5);
    spec_free(&s);
}

static void test_conv_options(void **state)
{
    char err[512];
    net_spec s;
    /* "same" at stride 1 with an even kernel: 3 rows of padding, 1 before and 2 after. */
    assert_int_equal(parse("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 4,"
                           " \"padding\": \"same\"}, {\"type\": \"flatten\"}]}",
                           (net_shape){ 1, 6, 5 }, 60, &s, err, sizeof err), 0);
    const conv_spec *c = &s.layers[0].u.conv;
    assert_int_equal(c->pad_t, 1);
    assert_int_equal(c->pad_b, 2);
    assert_int_equal(c->pad_l, 1);
    assert_int_equal(c->pad_r, 2);
    assert_shape(s.layers[0].out, 2, 6, 5);
    spec_free(&s);
    /* "same" at stride 2: ceil(7 / 2) = 4. */
    assert_int_equal(parse("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 1, \"kernel\": 3,"
                           " \"stride\": 2, \"padding\": \"same\"}]}",
                           (net_shape){ 1, 7, 8 }, 16, &s, err, sizeof err), 0);
    assert_shape(s.layers[0].out, 1, 4, 4);
    assert_int_equal(s.layers[0].u.conv.pad_t, 1);
    assert_int_equal(s.layers[0].u.conv.pad_b, 1);
    assert_int_equal(s.layers[0].u.conv.pad_l, 0);   /* 8 wide: 3 + 2*3 = 9 -> 1 of padding */
    assert_int_equal(s.layers[0].u.conv.pad_r, 1);
    spec_free(&s);
    /* [h, w] forms, dilation and groups. */
    assert_int_equal(parse("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 6,"
                           " \"kernel\": [3, 1], \"stride\": [1, 2], \"padding\": [2, 0],"
                           " \"dilation\": 2, \"groups\": 3, \"bias\": false},"
                           " {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 2}]}",
                           (net_shape){ 3, 9, 9 }, 2, &s, err, sizeof err), 0);
    c = &s.layers[0].u.conv;
    assert_int_equal(c->kh, 3);
    assert_int_equal(c->kw, 1);
    assert_int_equal(c->stride_w, 2);
    assert_int_equal(c->pad_t, 2);
    assert_int_equal(c->pad_l, 0);
    assert_int_equal(c->dil_h, 2);
    assert_int_equal(c->groups, 3);
    /* h: 9 + 4 - 5 + 1 = 9; w: (9 - 1) / 2 + 1 = 5 */
    assert_shape(s.layers[0].out, 6, 9, 5);
    assert_int_equal(spec_layer_params(&s.layers[0]), 6 * 1 * 3 * 1);
    spec_free(&s);
}

static void test_input_shape(void **state)
{
    char err[512];
    net_spec s;
    const char *txt = "{\"input\": [1, 4, 4], \"layers\": [{\"type\": \"flatten\"}]}";
    assert_int_equal(parse(txt, NONE, 16, &s, err, sizeof err), 0);   /* from the spec */
    assert_shape(s.in, 1, 4, 4);
    spec_free(&s);
    assert_int_equal(parse(txt, (net_shape){ 1, 4, 4 }, 16, &s, err, sizeof err), 0);
    spec_free(&s);
    refuse_exact(txt, (net_shape){ 3, 4, 4 }, 16,
                 "the spec's input [1, 4, 4] does not match the data's [3, 4, 4]");
    refuse("{\"layers\": [{\"type\": \"flatten\"}]}", NONE, 16, "no input shape", NULL);
    refuse("{\"input\": [1, 0, 4], \"layers\": [{\"type\": \"flatten\"}]}", NONE, 16,
           "\"input\" [1, 0, 4] must be positive", NULL);
    refuse("{\"input\": \"1x4x4\", \"layers\": [{\"type\": \"flatten\"}]}", NONE, 16,
           "\"input\" must be [C, H, W]", NULL);
}

static void test_top_level(void **state)
{
    refuse_exact("{\"name\": \"x\", \"layer\": []}", MNIST, 10,
                 "unknown key \"layer\" in the network spec (it takes name, description, "
                 "input and layers)");
    refuse_exact("{\"layers\": []}", MNIST, 10,
                 "\"layers\" is empty: a network needs at least one layer");
    refuse_exact("[1, 2]", MNIST, 10, "the network spec must be a JSON object");
    refuse_exact("{\"name\": 3, \"layers\": []}", MNIST, 10,
                 "the spec's \"name\" must be a string");
    refuse("{\"layers\": [{\"type\": \"flatten\"}]}", MNIST, 0, "the class count must be positive",
           NULL);
}

/* The messages the brief and net.h quote, word for word. */
static void test_layer_type_errors(void **state)
{
    refuse("{\"layers\": [{\"type\": \"relu\"}, {\"type\": \"conv3d\"}]}", MNIST, 10,
           "layer 2: unknown type \"conv3d\" (known types: conv2d, maxpool,", NULL);
    refuse_exact("{\"layers\": [{\"name\": \"a\"}]}", MNIST, 10, "layer 1: \"type\" is required");
    refuse_exact("{\"layers\": [3]}", MNIST, 10, "layer 1: must be a JSON object");
}

static void test_unknown_key(void **state)
{
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 4, "
                 "\"kernel\": 3}, {\"type\": \"conv2d\", \"name\": \"c2\", \"filter\": 4, "
                 "\"kernel\": 3}]}", MNIST, 10,
                 "layer 2 (conv2d \"c2\"): unknown key \"filter\" (conv2d takes filters, "
                 "kernel, stride, padding, dilation, groups, bias, name and inputs)");
    refuse("{\"layers\": [{\"type\": \"relu\", \"slope\": 0.1}]}", MNIST, 10,
           "layer 1 (relu \"relu1\"): unknown key \"slope\"", NULL);
}

static void test_impossible_shapes(void **state)
{
    /* The example of engine/net.h: a 7x7 kernel on a 5x5 input. */
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"conv1\", \"filters\": 4, "
                 "\"kernel\": 5, \"stride\": 2}, {\"type\": \"maxpool\", \"kernel\": 2}, "
                 "{\"type\": \"conv2d\", \"name\": \"conv2\", \"filters\": 8, \"kernel\": 7}]}",
                 (net_shape){ 1, 24, 24 }, 10,
                 "layer 3 (conv2d \"conv2\"): kernel 7 is larger than its 5x5 input");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, "
                 "\"dilation\": 3}]}", (net_shape){ 1, 6, 6 }, 10,
                 "layer 1 (conv2d \"conv2d1\"): kernel 3 (7x7 dilated) is larger than its "
                 "6x6 input");
    refuse_exact("{\"layers\": [{\"type\": \"maxpool\", \"kernel\": [2, 9], \"padding\": [0, 1]}]}",
                 (net_shape){ 1, 6, 6 }, 10,
                 "layer 1 (maxpool \"maxpool1\"): kernel 2x9 is larger than its 6x6 input "
                 "(6x8 padded)");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 4, \"kernel\": 3, "
                 "\"groups\": 2}]}", MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): groups 2 does not divide its 1 input channels");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 5, \"kernel\": 3, "
                 "\"groups\": 2}]}", (net_shape){ 4, 8, 8 }, 10,
                 "layer 1 (conv2d \"conv2d1\"): groups 2 does not divide its 5 filters");
    refuse_exact("{\"layers\": [{\"type\": \"maxpool\", \"kernel\": 3, \"padding\": 2}]}",
                 MNIST, 10,
                 "layer 1 (maxpool \"maxpool1\"): padding 2 must be at most half the kernel 3");
    refuse("{\"layers\": [{\"type\": \"dense\", \"units\": 100000}, {\"type\": \"dense\", "
           "\"name\": \"huge\", \"units\": 100000}]}", MNIST, 10,
           "layer 2 (dense \"huge\"): too many parameters", NULL);
}

/* Sizes within the per-key limit whose products have no int64: refused with
 * the bound they break, never wrapped around into a small or negative size
 * (the short fuzz run found the first of these). */
static void test_sizes_past_int64(void **state)
{
    (void)state;
    const net_shape one = { 1, 1, 1 };
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 1000000000, "
                 "\"kernel\": 1, \"padding\": 1000000000}]}", one, 10,
                 "layer 1 (conv2d \"conv2d1\"): output of 1000000000 x 2000000001 x "
                 "2000000001 values per image is too large");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 1, \"kernel\": "
                 "1000000000, \"dilation\": 1000000000, \"padding\": \"same\"}]}", one, 10,
                 "layer 1 (conv2d \"conv2d1\"): kernel 1000000000 with dilation 1000000000 "
                 "spans 999999999000000001x999999999000000001, more than 1000000000");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 1000000000, "
                 "\"kernel\": [1, 1000000000], \"padding\": [0, 1000000000]}]}",
                 (net_shape){ 1000, 1, 1 }, 10,
                 "layer 1 (conv2d \"conv2d1\"): too many parameters (more than 2^63; at most "
                 "2147483647)");
    refuse_exact("{\"input\": [1000000000, 1000000000, 1000000000], \"layers\": "
                 "[{\"type\": \"relu\"}]}", NONE, 10,
                 "input [1000000000, 1000000000, 1000000000] is too large");
    /* More layers than SPEC_LAYERS_MAX: refused before any is parsed. */
    {
        cJSON *j = cJSON_CreateObject(), *ls = cJSON_AddArrayToObject(j, "layers");
        for (int i = 0; i <= SPEC_LAYERS_MAX; i++) {
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "type", "relu");
            cJSON_AddItemToArray(ls, l);
        }
        char e[256];
        net_spec t;
        assert_int_equal(spec_parse(j, MNIST, 10, &t, e, sizeof e), -1);
        assert_string_equal(e, "\"layers\" has 10001 layers, more than 10000");
        cJSON_Delete(j);
    }
    /* A pool on an input near INT32_MAX tall, padded past it. */
    char err[512];
    net_spec s;
    assert_int_equal(parse("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 1, "
                           "\"kernel\": 1, \"padding\": [1000000000, 0]}, {\"type\": "
                           "\"maxpool\", \"kernel\": [1000000000, 1], \"padding\": "
                           "[500000000, 0]}]}", one, 3, &s, err, sizeof err), 0);
    assert_int_equal(s.layers[0].out.h, 2000000001);
    assert_int_equal(s.layers[1].out.h, 3);
    spec_free(&s);
}

static void test_non_positive(void **state)
{
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 0, \"kernel\": 3}]}",
                 MNIST, 10, "layer 1 (conv2d \"conv2d1\"): \"filters\" must be positive (got 0)");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": [3, -1]}]}",
                 MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"kernel\" must be positive (got 3x-1)");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3, "
                 "\"stride\": 0}]}", MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"stride\" must be positive (got 0)");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3, "
                 "\"padding\": -1}]}", MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"padding\" must be 0 or more (got -1)");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\": \"d\","
                 " \"units\": -3}]}", MNIST, 10,
                 "layer 2 (dense \"d\"): \"units\" must be positive (got -3)");
    refuse_exact("{\"layers\": [{\"type\": \"maxpool\", \"kernel\": 2, \"stride\": 0}]}",
                 MNIST, 10, "layer 1 (maxpool \"maxpool1\"): \"stride\" must be positive (got 0)");
}

static void test_bad_values(void **state)
{
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": \"3\"}]}",
                 MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"kernel\" must be an integer or [h, w]");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2.5, \"kernel\": 3}]}",
                 MNIST, 10, "layer 1 (conv2d \"conv2d1\"): \"filters\" must be an integer");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3, "
                 "\"padding\": \"valid\"}]}", MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"padding\" must be an integer, [h, w] or "
                 "\"same\"");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 2, \"kernel\": 3, "
                 "\"bias\": 1}]}", MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"bias\" must be true or false");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"kernel\": 3}]}", MNIST, 10,
                 "layer 1 (conv2d \"conv2d1\"): \"filters\" is required");
    refuse_exact("{\"layers\": [{\"type\": \"dense\", \"units\": \"many\"}]}", MNIST, 10,
                 "layer 1 (dense \"dense1\"): \"units\" must be an integer or \"classes\"");
    refuse_exact("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 1e12, \"kernel\": 3}]}",
                 MNIST, 10, "layer 1 (conv2d \"conv2d1\"): \"filters\" must be an integer");
}

static void test_last_layer_width(void **state)
{
    refuse_exact("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\": \"fc1\","
                 " \"units\": 500}, {\"type\": \"relu\", \"name\": \"r\"}]}", MNIST, 10,
                 "layer 3 (relu \"r\"): the last layer gives 500 values per image but there are "
                 "10 classes; the loss needs one per class (end with a dense layer of \"units\": "
                 "\"classes\")");
    /* A conv whose output is classes x 1 x 1 is a fine last layer. */
    char err[512];
    net_spec s;
    assert_int_equal(parse("{\"layers\": [{\"type\": \"conv2d\", \"filters\": 10, "
                           "\"kernel\": 28}]}", MNIST, 10, &s, err, sizeof err), 0);
    spec_free(&s);
}

static void test_names_and_inputs(void **state)
{
    char err[512];
    net_spec s;
    /* Naming the previous layer (or "input" for the first) is a chain: fine. */
    assert_int_equal(parse("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\", \"inputs\": "
                           "\"input\"}, {\"type\": \"dense\", \"units\": 10, \"inputs\": [\"f\"]}]}",
                           MNIST, 10, &s, err, sizeof err), 0);
    spec_free(&s);
    /* A layer whose output nothing reads is refused, naming it. */
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\"}, {\"type\": \"relu\","
                 " \"name\": \"r\"}, {\"type\": \"dense\", \"name\": \"d\", \"units\": 10, "
                 "\"inputs\": \"f\"}]}", MNIST, 10,
                 "layer 2 (relu \"r\"): its output is not used by any later layer (only the last "
                 "layer's output reaches the loss)");
    /* One input for a one-input layer; two or more for add and concat. */
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\"}, {\"type\": \"relu\","
                 " \"name\": \"r\", \"inputs\": [\"f\", \"input\"]}]}", MNIST, 784,
                 "layer 2 (relu \"r\"): \"inputs\" lists 2 layers: it must be a layer name or a "
                 "list of one layer name");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\"}, {\"type\": \"add\","
                 " \"name\": \"a\"}]}", MNIST, 784,
                 "layer 2 (add \"a\"): \"inputs\" is required: a list of two or more layer names");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\"}, {\"type\": \"concat\","
                 " \"name\": \"a\", \"inputs\": [\"f\"]}]}", MNIST, 784,
                 "layer 2 (concat \"a\"): \"inputs\" lists 1 layer: it must be a list of two or "
                 "more layer names");
    /* Inputs are earlier layers only: a later one is not an input (no cycles). */
    refuse_exact("{\"layers\": [{\"type\": \"relu\", \"name\": \"a\", \"inputs\": \"b\"},"
                 " {\"type\": \"relu\", \"name\": \"b\", \"inputs\": \"a\"}]}", MNIST, 784,
                 "layer 1 (relu \"a\"): \"inputs\" names \"b\", which is not an earlier layer or "
                 "\"input\" (a layer takes only outputs of layers before it)");
    refuse_exact("{\"layers\": [{\"type\": \"relu\", \"name\": \"a\", \"inputs\": \"a\"}]}",
                 MNIST, 784,
                 "layer 1 (relu \"a\"): \"inputs\" names \"a\", which is not an earlier layer or "
                 "\"input\" (a layer takes only outputs of layers before it)");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\", \"inputs\": \"g\"}]}",
                 MNIST, 784,
                 "layer 1 (flatten \"f\"): \"inputs\" names \"g\", which is not an earlier layer "
                 "or \"input\" (a layer takes only outputs of layers before it)");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"f\"}, {\"type\": \"relu\","
                 " \"name\": \"f\"}]}", MNIST, 784,
                 "layer 2 (relu \"f\"): layer 1 has the same name");
    /* A default name collides with an explicit one just the same. */
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"relu2\"}, {\"type\": \"relu\"}]}",
                 MNIST, 784, "layer 2 (relu \"relu2\"): layer 1 has the same name");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"input\"}]}", MNIST, 784,
                 "layer 1 (flatten \"input\"): the name \"input\" is reserved for the network's "
                 "input");
    refuse_exact("{\"layers\": [{\"type\": \"flatten\", \"name\": \"\"}]}", MNIST, 784,
                 "layer 1 (flatten): \"name\" must be a non-empty string");
}

/* Branches: inputs resolve to activation indices, add keeps the shape,
 * concat adds channels, and mismatched shapes are refused naming the layer
 * and both inputs. */
static void test_graph(void **state)
{
    char err[512];
    net_spec s;
    const char *ok =
        "{\"layers\": ["
        "{\"type\": \"conv2d\", \"name\": \"a\", \"filters\": 4, \"kernel\": 3, \"padding\": 1},"
        "{\"type\": \"conv2d\", \"name\": \"b\", \"filters\": 4, \"kernel\": 3, \"padding\": 1,"
        " \"inputs\": \"input\"},"
        "{\"type\": \"add\", \"name\": \"s\", \"inputs\": [\"a\", \"b\", \"a\"]},"
        "{\"type\": \"concat\", \"name\": \"c\", \"inputs\": [\"s\", \"input\", \"b\"]},"
        "{\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"},"
        "{\"type\": \"dense\", \"units\": \"classes\"}]}";
    assert_int_equal(parse(ok, MNIST, 10, &s, err, sizeof err), 0);
    assert_int_equal(s.layers[0].ninputs, 1);
    assert_int_equal(s.layers[0].inputs[0], 0);
    assert_int_equal(s.layers[1].inputs[0], 0);
    assert_int_equal(s.layers[2].ninputs, 3);
    assert_int_equal(s.layers[2].inputs[0], 1);
    assert_int_equal(s.layers[2].inputs[1], 2);
    assert_int_equal(s.layers[2].inputs[2], 1);
    assert_int_equal(s.layers[2].out.c, 4);
    assert_int_equal(s.layers[3].out.c, 4 + 1 + 4);
    assert_int_equal(s.layers[3].out.h, 28);
    assert_int_equal(s.layers[4].out.c, 9);
    assert_int_equal(s.layers[4].out.h, 1);
    assert_int_equal(s.layers[4].out.w, 1);
    assert_int_equal(s.layers[5].inputs[0], 5);       /* the previous layer by default */
    spec_free(&s);
    refuse_exact("{\"layers\": ["
                 "{\"type\": \"conv2d\", \"name\": \"a\", \"filters\": 4, \"kernel\": 3},"
                 "{\"type\": \"add\", \"name\": \"s\", \"inputs\": [\"a\", \"input\"]},"
                 "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]}", MNIST, 10,
                 "layer 2 (add \"s\"): input \"input\" is 1x28x28 but input \"a\" is 4x26x26: add "
                 "needs inputs of one shape");
    refuse_exact("{\"layers\": ["
                 "{\"type\": \"maxpool\", \"name\": \"p\", \"kernel\": 2},"
                 "{\"type\": \"concat\", \"name\": \"c\", \"inputs\": [\"input\", \"p\"]},"
                 "{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]}", MNIST, 10,
                 "layer 2 (concat \"c\"): input \"p\" is 14x14 but input \"input\" is 28x28: "
                 "concat joins channels of inputs of one height and width");
}

/* The new layer types: defaults, ranges and shapes. */
static void test_layer_keys(void **state)
{
    char err[512];
    net_spec s;
    assert_int_equal(parse("{\"layers\": [{\"type\": \"leaky_relu\"}, {\"type\": \"dropout\"},"
                           " {\"type\": \"batchnorm\"}, {\"type\": \"sigmoid\"},"
                           " {\"type\": \"tanh\"},"
                           " {\"type\": \"avgpool\", \"kernel\": 3, \"stride\": 2, \"padding\": 1},"
                           " {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]}",
                           MNIST, 10, &s, err, sizeof err), 0);
    assert_true(s.layers[0].u.slope == 0.01f);
    assert_true(s.layers[1].u.rate == 0.5f);
    assert_true(s.layers[2].u.bn.momentum == 0.9f);
    assert_true(s.layers[2].u.bn.eps == 1e-5f);
    assert_int_equal(spec_layer_params(&s.layers[2]), 2);         /* scale and shift */
    assert_int_equal(s.layers[5].out.h, 14);                       /* (28 + 2 - 3) / 2 + 1 */
    assert_int_equal(s.layers[5].u.pool.stride_h, 2);
    spec_free(&s);
    assert_int_equal(parse("{\"layers\": [{\"type\": \"leaky_relu\", \"slope\": 0.2},"
                           " {\"type\": \"dropout\", \"rate\": 0},"
                           " {\"type\": \"batchnorm\", \"momentum\": 0.5, \"eps\": 0.001},"
                           " {\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": 10}]}",
                           MNIST, 10, &s, err, sizeof err), 0);
    assert_true(s.layers[0].u.slope == 0.2f);
    assert_true(s.layers[1].u.rate == 0.0f);
    assert_true(s.layers[2].u.bn.momentum == 0.5f);
    assert_true(s.layers[2].u.bn.eps == 0.001f);
    spec_free(&s);
    refuse_exact("{\"layers\": [{\"type\": \"dropout\", \"rate\": 1}]}", MNIST, 784,
                 "layer 1 (dropout \"dropout1\"): \"rate\" must be in [0, 1) (got 1)");
    refuse_exact("{\"layers\": [{\"type\": \"leaky_relu\", \"slope\": -0.1}]}", MNIST, 784,
                 "layer 1 (leaky_relu \"leaky_relu1\"): \"slope\" must be in [0, 1] (got -0.1)");
    refuse_exact("{\"layers\": [{\"type\": \"batchnorm\", \"eps\": \"x\"}]}", MNIST, 784,
                 "layer 1 (batchnorm \"batchnorm1\"): \"eps\" must be a number");
    refuse_exact("{\"layers\": [{\"type\": \"batchnorm\", \"momentum\": 1}]}", MNIST, 784,
                 "layer 1 (batchnorm \"batchnorm1\"): \"momentum\" must be in [0, 1) (got 1)");
    refuse("{\"layers\": [{\"type\": \"global_avgpool\", \"kernel\": 2}]}", MNIST, 784,
           "layer 1 (global_avgpool \"global_avgpool1\"): unknown key \"kernel\"", NULL);
    refuse_exact("{\"layers\": [{\"type\": \"avgpool\", \"kernel\": 2, \"padding\": 2}]}", MNIST,
                 784,
                 "layer 1 (avgpool \"avgpool1\"): padding 2 must be at most half the kernel 2");
}

/* Every built-in spec parses for its input and has the expected shape. */
static void test_builtins(void **state)
{
    static const struct { const char *name; net_shape in; int classes; long long params; } b[] = {
        { "lenet", { 1, 28, 28 }, 10, 431080 },
        { "cifar10-cnn", { 3, 32, 32 }, 10, 3441592 },
        { "resnet20", { 3, 32, 32 }, 10, 272474 },
        { "alexnet", { 3, 32, 32 }, 10, -1 },
        { "resnet18", { 3, 224, 224 }, 1000, 11689512 },
        { "resnet50", { 3, 224, 224 }, 1000, 25557032 },
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        char err[512] = "";
        net_spec s;
        const char *txt = net_builtin(b[i].name);
        if (!txt) {
            print_error("no built-in spec \"%s\"\n", b[i].name);
            fail();
        }
        cJSON *j = cJSON_Parse(txt);
        assert_non_null(j);
        if (spec_parse(j, b[i].in, b[i].classes, &s, err, sizeof err) != 0) {
            print_error("%s: %s\n", b[i].name, err);
            fail();
        }
        long long total = 0;
        for (int k = 0; k < s.nlayers; k++)
            total += spec_layer_params(&s.layers[k]);
        if (b[i].params >= 0 && total != b[i].params) {
            print_error("%s: %lld parameters, expected %lld\n", b[i].name, total, b[i].params);
            fail();
        }
        spec_free(&s);
        cJSON_Delete(j);
    }
}

/* net_validate is spec_parse without keeping anything. */
static void test_net_validate(void **state)
{
    char err[512] = "";
    cJSON *j = cJSON_Parse(net_builtin("lenet"));
    assert_int_equal(net_validate(j, MNIST, 10, err, sizeof err), 0);
    assert_int_equal(net_validate(j, (net_shape){ 1, 8, 8 }, 10, err, sizeof err), -1);
    assert_string_equal(err, "layer 3 (conv2d \"conv2\"): kernel 5 is larger than its 2x2 input");
    assert_int_equal(net_validate(j, MNIST, 7, err, sizeof err), 0);  /* "classes" adapts */
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet_builtin),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_conv_options),
        cmocka_unit_test(test_input_shape),
        cmocka_unit_test(test_top_level),
        cmocka_unit_test(test_layer_type_errors),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_impossible_shapes),
        cmocka_unit_test(test_non_positive),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_last_layer_width),
        cmocka_unit_test(test_names_and_inputs),
        cmocka_unit_test(test_net_validate),
        cmocka_unit_test(test_graph),
        cmocka_unit_test(test_layer_keys),
        cmocka_unit_test(test_builtins),
        cmocka_unit_test(test_sizes_past_int64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
