/* Model summary (engine/summary.h): parameters, multiply-adds, FLOPs,
 * activation bytes and the training-memory estimate, against figures worked
 * out by hand (and seeds/002's VGG-16 arithmetic). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fileio.h"
#include "engine/net.h"
#include "engine/summary.h"

static const net_shape NONE = { 0, 0, 0 };

/* Summarises JSON text; fails the test when it does not summarise. */
static void build(const char *json, net_shape in, int classes, int batch, const char *solver,
                  bool momentum, summary *s)
{
    char err[512] = "";
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    int rc = summary_build(j, in, classes, batch, solver, momentum, NULL, s, err, sizeof err);
    cJSON_Delete(j);
    if (rc != 0) {
        print_error("summary_build: %s\n", err);
        fail();
    }
}

static const summary_layer *layer_named(const summary *s, const char *name)
{
    for (int i = 0; i < s->nlayers; i++)
        if (!strcmp(s->layers[i].name, name))
            return &s->layers[i];
    print_error("no layer %s\n", name);
    fail();
    return NULL;
}

static bool has_warning(const summary *s, const char *part)
{
    for (int i = 0; i < s->nwarnings; i++)
        if (strstr(s->warnings[i], part))
            return true;
    return false;
}

/* LeNet, 1x28x28, 10 classes.
 * Shapes: conv1 20x24x24, pool1 20x12x12, conv2 50x8x8, pool2 50x4x4,
 * flatten 800, fc1 500, relu1 500, fc2 10.
 * Parameters: conv1 20*1*5*5 + 20 = 520; conv2 50*20*5*5 + 50 = 25,050;
 *   fc1 800*500 + 500 = 400,500; fc2 500*10 + 10 = 5,010; total 431,080.
 * Multiply-adds: conv1 24*24*20*1*25 = 288,000; conv2 8*8*50*20*25 = 1,600,000;
 *   fc1 800*500 = 400,000; fc2 500*10 = 5,000; total 2,293,000.
 * FLOPs: 2 * 2,293,000 = 4,586,000, plus bias adds 11,520 + 3,200 + 500 + 10
 *   = 15,230, plus pools 2880*4 + 800*4 = 14,720, plus relu1 500:
 *   4,616,450.
 * Kept for backward (elements): input 784 + conv1 11,520 + pool1 2,880 +
 *   conv2 3,200 + pool2 800 + fc1 500 + relu1 500 + fc2 10 = 20,194
 *   (flatten is a view), 80,776 bytes.
 * Training memory per image (seeds/002: outputs x 2 for their gradients):
 *   input 784 * 4 = 3,136 + 19,410 outputs * 4 * 2 = 155,280: 158,416 bytes. */
static void test_lenet(void **state)
{
    (void)state;
    summary s;
    build(net_builtin("lenet"), (net_shape){ 1, 28, 28 }, 10, 64, "sgd", true, &s);
    assert_int_equal(s.nlayers, 8);
    assert_int_equal(s.params, 431080);
    assert_int_equal(s.macs, 2293000);
    assert_int_equal(s.flops, 4616450);
    assert_int_equal(s.kept_bytes, 80776);
    const summary_layer *c2 = layer_named(&s, "conv2");
    assert_int_equal(c2->out.c, 50);
    assert_int_equal(c2->out.h, 8);
    assert_int_equal(c2->params, 25050);
    assert_int_equal(c2->macs, 1600000);
    assert_int_equal(c2->flops, 3203200);
    assert_int_equal(c2->act_bytes, 12800);
    assert_int_equal(layer_named(&s, "pool1")->flops, 11520);
    /* sgd with momentum: one state; 431,080 * 4 * 3 + 64 * 158,416 */
    assert_int_equal(s.opt_states, 1);
    assert_int_equal(s.image_bytes, 158416);
    assert_int_equal(s.train_bytes, 431080LL * 12 + 64LL * 158416);
    /* 20 and 50 filters, 500 and 10 units; batch 64 is fine */
    assert_int_equal(s.nwarnings, 4);
    assert_true(has_warning(&s, "layer 1 (conv2d \"conv1\"): 20 filters"));
    assert_true(has_warning(&s, "layer 3 (conv2d \"conv2\"): 50 filters"));
    assert_true(has_warning(&s, "\"fc1\"): 500 units"));
    assert_true(has_warning(&s, "\"fc2\"): 10 units"));
    assert_false(has_warning(&s, "batch"));
    summary_free(&s);
}

/* VGG-16 (tests/unit/data/vgg16.json), 3x224x224, 1000 classes, seeds/002.
 * Multiply-adds (Ho*Wo*Cout*Cin*9 for the convolutions):
 *   conv1_1 224*224*64*3*9    =    86,704,128
 *   1_2, 2_2, 3_2, 3_3, 4_2, 4_3: 6 * 1,849,688,064 = 11,098,128,384
 *     (224*224*64*64*9 = 112*112*128*128*9 = 56*56*256*256*9 = 28*28*512*512*9)
 *   2_1, 3_1, 4_1: 3 * 924,844,032 = 2,774,532,096
 *   5_1, 5_2, 5_3: 3 * 14*14*512*512*9 = 3 * 462,422,016 = 1,387,266,048
 *   fc6 25088*4096 = 102,760,448; fc7 4096*4096 = 16,777,216; fc8 4096*1000 = 4,096,000
 *   total 15,470,264,320 (15.47 G), so 30.94 G FLOPs before bias adds.
 * Bias adds: conv outputs 2*(224*224*64) + 2*(112*112*128) + 3*(56*56*256)
 *   + 3*(28*28*512) + 3*(14*14*512) = 13,547,520, dense 4096 + 4096 + 1000:
 *   13,556,712 in all.
 * Parameters: 138,344,128 weights + 13,416 biases = 138,357,544. */
static void test_vgg16(void **state)
{
    (void)state;
    char err[256];
    char *text = fio_read_file(KILN_SOURCE_DIR "/tests/unit/data/vgg16.json", 1 << 20, NULL,
                               err, sizeof err);
    if (!text) {
        print_error("%s\n", err);
        fail();
    }
    summary s;
    build(text, NONE, 1000, 128, "sgd", true, &s);
    free(text);
    assert_int_equal(s.in.c, 3);
    assert_int_equal(s.in.h, 224);
    assert_int_equal(s.params, 138357544LL);
    assert_int_equal(s.macs, 15470264320LL);
    int64_t conv_dense_flops = 0;
    int convs = 0, denses = 0;
    for (int i = 0; i < s.nlayers; i++) {
        if (!strcmp(s.layers[i].type, "conv2d") || !strcmp(s.layers[i].type, "dense")) {
            conv_dense_flops += s.layers[i].flops;
            convs += !strcmp(s.layers[i].type, "conv2d");
            denses += !strcmp(s.layers[i].type, "dense");
        }
    }
    assert_int_equal(convs, 13);
    assert_int_equal(denses, 3);
    assert_int_equal(conv_dense_flops, 2 * 15470264320LL + 13556712LL);
    assert_int_equal(layer_named(&s, "conv1_2")->macs, 1849688064LL);
    assert_int_equal(layer_named(&s, "fc6")->params, 25088LL * 4096 + 4096);
    assert_int_equal(layer_named(&s, "pool5")->out.h, 7);
    /* every width of VGG-16 is a multiple of 8 (1000 too), and so is batch 128 */
    assert_int_equal(s.nwarnings, 0);
    summary_free(&s);
}

static void test_resnet18(void **state)
{
    (void)state;
    summary s;
    build(net_builtin("resnet18"), NONE, 1000, 32, "adam", false, &s);
    assert_int_equal(s.params, 11689512LL);
    assert_int_equal(s.in.h, 224);
    assert_int_equal(s.opt_states, 2);
    assert_int_equal(s.opt_bytes, 2LL * 4 * 11689512);
    summary_free(&s);
}

/* A tiny net worked by hand: input 1x4x4; conv 8 filters 3x3 -> 8x2x2
 * (8*9 + 8 = 80 parameters); flatten (a view, 32); dense 2 classes
 * (32*2 + 2 = 66). 146 parameters, 584 bytes. Kept for backward per image:
 * input 16 + conv 32 + dense 2 = 50 numbers, 200 bytes. Training memory per
 * image: the input 64 bytes + (32 + 2) outputs * 4 bytes * 2 = 336 bytes. */
static const char *TINY =
    "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c\", \"filters\": 8, \"kernel\": 3},"
    " {\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\": \"d\", \"units\": \"classes\"}]}";

static void test_memory_by_hand(void **state)
{
    (void)state;
    const net_shape in = { 1, 4, 4 };
    summary s;
    build(TINY, in, 2, 16, "adam", false, &s);
    assert_int_equal(s.params, 146);
    assert_int_equal(s.kept_bytes, 200);
    assert_int_equal(s.act_bytes, 4 * (32 + 32 + 2));
    assert_int_equal(s.weight_bytes, 584);
    assert_int_equal(s.grad_bytes, 584);
    assert_int_equal(s.opt_bytes, 1168);            /* adam: m and v */
    assert_int_equal(s.image_bytes, 336);
    assert_int_equal(s.batch_act_bytes, 5376);      /* 16 * 336 */
    assert_int_equal(s.train_bytes, 584 + 584 + 1168 + 5376);
    assert_int_equal(s.copy_bytes, 0);
    assert_int_equal(s.nwarnings, 1);               /* dense of 2 units; not the conv of 8 */
    assert_true(has_warning(&s, "layer 3 (dense \"d\"): 2 units"));
    summary_free(&s);

    build(TINY, in, 2, 16, "adamw", false, &s);
    assert_int_equal(s.train_bytes, 7712);
    summary_free(&s);
    build(TINY, in, 2, 16, "sgd", true, &s);        /* one momentum buffer */
    assert_int_equal(s.train_bytes, 584 * 3 + 5376);
    summary_free(&s);
    build(TINY, in, 2, 12, "sgd", false, &s);       /* no state; batch 12 warns */
    assert_int_equal(s.opt_bytes, 0);
    assert_int_equal(s.train_bytes, 584 * 2 + 12 * 336);
    assert_int_equal(s.nwarnings, 2);
    assert_true(has_warning(&s, "batch size 12 is not a multiple of 8"));
    summary_free(&s);
}

/* Mixed precision, by hand on TINY: the conv's output is 16-bit (2 bytes),
 * the dense layer writes the logits in FP32; the 16-bit copies are of the
 * conv's 72 and the dense layer's 64 weights (not the biases): 272 bytes.
 * Per image: input 64 + conv 32 * 2 * 2 + dense 2 * 4 * 2 = 208 bytes. */
static void test_memory_amp(void **state)
{
    (void)state;
    char err[256];
    summary s;
    cJSON *j = cJSON_Parse(TINY);
    assert_int_equal(summary_build(j, (net_shape){ 1, 4, 4 }, 2, 16, "adam", false, "amp-bf16",
                                   &s, err, sizeof err), 0);
    assert_string_equal(s.precision, "amp-bf16");
    assert_int_equal(s.copy_bytes, 272);
    assert_int_equal(s.image_bytes, 208);
    assert_int_equal(s.layers[0].act_bytes, 32 * 2);
    assert_int_equal(s.layers[2].act_bytes, 2 * 4);
    assert_int_equal(s.train_bytes, 584 + 584 + 1168 + 272 + 16 * 208);
    summary_free(&s);
    assert_int_equal(summary_build(j, (net_shape){ 1, 4, 4 }, 2, 16, "adam", false, "fp64",
                                   &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "precision"));
    cJSON_Delete(j);
}

/* Each device: whether the estimate fits and the largest batch that does,
 * (memory - fixed) / per image, which must itself fit while one more must
 * not. */
static void test_devices(void **state)
{
    (void)state;
    summary s;
    build(net_builtin("resnet50"), NONE, 1000, 256, "sgd", true, &s);
    assert_true(s.ndevices >= 1);
    assert_string_equal(s.devices[0].kind, "cpu");
    for (int i = 0; i < s.ndevices; i++) {
        const summary_device *d = &s.devices[i];
        assert_true(d->memory_bytes > 0);
        assert_int_equal(d->fits, s.train_bytes <= d->memory_bytes);
        assert_true(s.fixed_bytes + d->max_batch * s.image_bytes <= d->memory_bytes);
        assert_true(s.fixed_bytes + (d->max_batch + 1) * s.image_bytes > d->memory_bytes);
    }
    summary_free(&s);
}

/* net_create refuses a net beyond the machine before allocating it, naming
 * the layer whose outputs take the most (a dense layer of 2^20 units on a
 * batch of 2^20 images needs terabytes). */
static void test_net_refuses_too_big(void **state)
{
    (void)state;
    char err[512] = "";
    cJSON *j = cJSON_Parse("{\"layers\": [{\"type\": \"dense\", \"name\": \"huge\", "
                           "\"units\": 1048576}, {\"type\": \"dense\", \"name\": \"out\", "
                           "\"units\": \"classes\"}]}");
    net_solver sv = { .type = "sgd", .lr = 0.01f, .momentum = 0.9f };
    net *n = net_create(j, (net_shape){ 1, 2, 2 }, 2, 1 << 20, "cpu", &sv, 1, err, sizeof err);
    assert_null(n);
    assert_non_null(strstr(err, "more than this machine's"));
    assert_non_null(strstr(err, "layer 1 (dense \"huge\")"));
    assert_non_null(strstr(err, "use a smaller batch"));
    cJSON_Delete(j);
}

static void test_refusals(void **state)
{
    (void)state;
    char err[512];
    summary s;
    cJSON *j = cJSON_Parse(TINY);
    const net_shape in = { 1, 4, 4 };
    assert_int_equal(summary_build(j, in, 2, 0, "sgd", false, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "batch size"));
    assert_int_equal(summary_build(j, in, 2, 8, "rmsprop", false, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown solver \"rmsprop\""));
    /* a 3x3 kernel on a 2x2 input: the parser's message names the layer */
    const net_shape small = { 1, 2, 2 };
    assert_int_equal(summary_build(j, small, 2, 8, "sgd", false, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "layer 1 (conv2d \"c\")"));
    assert_null(s.layers);
    cJSON_Delete(j);
}

/* Every built-in network summarises with its default input and classes. */
static void test_builtin_defaults(void **state)
{
    (void)state;
    net_shape in = { 0, 0, 0 };
    int classes = 0;
    assert_true(summary_builtin_defaults("lenet", &in, &classes));
    assert_int_equal(in.c, 1);
    assert_int_equal(in.w, 28);
    assert_int_equal(classes, 10);
    assert_true(summary_builtin_defaults("resnet50", &in, &classes));
    assert_int_equal(in.h, 224);
    assert_int_equal(classes, 1000);
    assert_false(summary_builtin_defaults("vgg16", &in, &classes));
    assert_int_equal(classes, 1000);                /* left alone */
    int n = 0;
    for (const char *const *name = net_builtin_names(); *name; name++, n++) {
        assert_true(summary_builtin_defaults(*name, &in, &classes));
        summary s;
        build(net_builtin(*name), in, classes, 8, "sgd", false, &s);
        assert_true(s.params > 0);
        assert_true(s.flops > 2 * s.macs - 1);
        summary_free(&s);
    }
    assert_int_equal(n, 6);
}

static void test_json(void **state)
{
    (void)state;
    summary s;
    build(TINY, (net_shape){ 1, 4, 4 }, 2, 16, "adam", false, &s);
    cJSON *o = summary_to_json(&s);
    assert_non_null(o);
    assert_int_equal(cJSON_GetObjectItem(o, "params")->valuedouble, 146);
    cJSON *layers = cJSON_GetObjectItem(o, "layers");
    assert_int_equal(cJSON_GetArraySize(layers), 3);
    cJSON *c = cJSON_GetArrayItem(layers, 0);
    assert_string_equal(cJSON_GetObjectItem(c, "name")->valuestring, "c");
    assert_int_equal(cJSON_GetObjectItem(c, "flops")->valuedouble, 2 * 32 * 9 + 32);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "output_shape"), 0)->valueint, 8);
    cJSON *m = cJSON_GetObjectItem(o, "training_memory");
    assert_int_equal(cJSON_GetObjectItem(m, "total_bytes")->valuedouble, 7712);
    assert_string_equal(cJSON_GetObjectItem(m, "precision")->valuestring, "fp32");
    cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "devices"), 0);
    assert_non_null(d0);
    assert_string_equal(cJSON_GetObjectItem(d0, "kind")->valuestring, "cpu");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(d0, "fits")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "warnings")), 1);
    cJSON_Delete(o);
    summary_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lenet),
        cmocka_unit_test(test_vgg16),
        cmocka_unit_test(test_resnet18),
        cmocka_unit_test(test_memory_by_hand),
        cmocka_unit_test(test_memory_amp),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_net_refuses_too_big),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_builtin_defaults),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
