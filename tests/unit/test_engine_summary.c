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

#include "tests/settings_util.h"
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
    int rc = summary_build(j, in, classes, batch, solver_of(solver), momentum, PREC_FP32, s, err,
                           sizeof err);
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
    /* 20 and 50 filters, conv2's 20 input channels, 500 and 10 units; not
     * conv1's one input channel (the images'); batch 64 is fine */
    assert_int_equal(s.nwarnings, 5);
    assert_true(has_warning(&s, "layer 1 (conv2d \"conv1\"): 20 filters"));
    assert_true(has_warning(&s, "layer 3 (conv2d \"conv2\"): 50 filters"));
    assert_true(has_warning(&s, "layer 3 (conv2d \"conv2\"): 20 input channels is not a "
                                "multiple of 8"));
    assert_false(has_warning(&s, "1 input channels"));
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
    /* every width of VGG-16 is a multiple of 8 (1000 too), and so is batch 128;
     * conv1_1's 3 input channels are the images' and do not warn */
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
    assert_int_equal(summary_build(j, (net_shape){ 1, 4, 4 }, 2, 16, SOLVER_ADAM, false,
                                   PREC_AMP_BF16, &s, err, sizeof err), 0);
    assert_int_equal(s.precision, PREC_AMP_BF16);
    assert_string_equal(precision_name(s.precision), "amp-bf16");
    assert_int_equal(s.copy_bytes, 272);
    assert_int_equal(s.image_bytes, 208);
    assert_int_equal(s.layers[0].act_bytes, 32 * 2);
    assert_int_equal(s.layers[2].act_bytes, 2 * 4);
    assert_int_equal(s.train_bytes, 584 + 584 + 1168 + 272 + 16 * 208);
    summary_free(&s);
    /* a precision no name gives: the parser refuses the name, summary_build the value */
    precision_mode fp64 = PREC_COUNT;
    assert_int_equal(precision_parse("fp64", &fp64), -1);
    assert_int_equal(summary_build(j, (net_shape){ 1, 4, 4 }, 2, 16, SOLVER_ADAM, false, fp64,
                                   &s, err, sizeof err), -1);
    assert_string_equal(err, "unknown precision 3");
    cJSON_Delete(j);
}

/* The x2 rule and dropout masks, by hand: input 2x4x4 (32 numbers); conv
 * "c" 8 filters 1x1 -> 8x4x4 (128; 2*8 + 8 = 24 parameters); relu (128);
 * dropout (128, and a 4-byte mask per element); flatten (a view); dense "d"
 * 8 classes (128*8 + 8 = 1,032 parameters). 1,056 parameters.
 *   fp32, per image: input 32*4 = 128 + (128 + 128 + 128 + 8) outputs * 4
 *     bytes * 2 (the output and its gradient) = 3,136 + mask 128*4 = 512:
 *     3,776 bytes.
 *   amp-bf16, per image: input 128 (FP32) + conv, relu and dropout outputs
 *     384 * 2 bytes * 2 = 1,536 + the logits 8 * 4 * 2 = 64 (FP32) + mask 512:
 *     2,240 bytes. 16-bit copies of the conv's 16 and the dense layer's 1,024
 *     weights: 2,080 bytes.
 * Every width is 8, and the conv's 2 input channels are the images'. */
static const char *DROP =
    "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c\", \"filters\": 8, \"kernel\": 1},"
    " {\"type\": \"relu\"}, {\"type\": \"dropout\", \"rate\": 0.5}, {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"d\", \"units\": \"classes\"}]}";

static void build_p(const char *json, net_shape in, int classes, int batch, const char *solver,
                    bool momentum, const char *precision, summary *s)
{
    char err[512] = "";
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    int rc = summary_build(j, in, classes, batch, solver_of(solver), momentum, prec_of(precision),
                           s, err, sizeof err);
    cJSON_Delete(j);
    if (rc != 0) {
        print_error("summary_build: %s\n", err);
        fail();
    }
}

static void test_memory_x2_and_masks(void **state)
{
    (void)state;
    const net_shape in = { 2, 4, 4 };
    summary s;
    build_p(DROP, in, 8, 8, "sgd", false, "fp32", &s);
    assert_int_equal(s.params, 1056);
    assert_int_equal(s.nwarnings, 0);
    assert_int_equal(s.image_bytes, 3776);
    /* the x2 rule: the input once, every output but flatten's twice, masks */
    int64_t twice = 0;
    for (int i = 0; i < s.nlayers; i++)
        if (strcmp(s.layers[i].type, "flatten"))
            twice += 2 * s.layers[i].act_bytes;
    assert_int_equal(s.image_bytes, 4 * 32 + twice + 4 * 128);
    assert_int_equal(s.fixed_bytes, 1056 * 4 * 2);     /* weights and gradients */
    assert_int_equal(s.train_bytes, 8448 + 8 * 3776);  /* 38,656 */
    summary_free(&s);

    build_p(DROP, in, 8, 8, "adam", false, "amp-bf16", &s);
    assert_int_equal(s.layers[0].act_bytes, 128 * 2);  /* conv: 16-bit */
    assert_int_equal(s.layers[2].act_bytes, 128 * 2);  /* dropout: its input's type */
    assert_int_equal(s.layers[4].act_bytes, 8 * 4);    /* the logits: FP32 */
    assert_int_equal(s.weight_bytes, 4224);
    assert_int_equal(s.grad_bytes, 4224);              /* FP32 gradients */
    assert_int_equal(s.opt_bytes, 8448);               /* FP32 m and v */
    assert_int_equal(s.copy_bytes, 2080);
    assert_int_equal(s.image_bytes, 2240);
    assert_int_equal(s.train_bytes, 4224 + 4224 + 8448 + 2080 + 8 * 2240);   /* 36,896 */
    summary_free(&s);

    build_p(DROP, in, 8, 8, "adam", false, "amp-fp16", &s);   /* the same sizes */
    assert_int_equal(s.train_bytes, 36896);
    summary_free(&s);
}

/* The largest batch that fits is floor((memory - fixed) / per image): on DROP
 * in fp32 with plain sgd, fixed 8,448 and 3,776 per image. */
static void test_max_batch(void **state)
{
    (void)state;
    char err[256];
    net_spec ns;
    cJSON *j = cJSON_Parse(DROP);
    assert_int_equal(spec_parse(j, (net_shape){ 2, 4, 4 }, 8, &ns, err, sizeof err), 0);
    summary_mem m;
    assert_int_equal(summary_memory(&ns, 0, PREC_FP32, &m, err, sizeof err), 0);
    assert_int_equal(m.fixed, 8448);
    assert_int_equal(m.per_image, 3776);
    assert_int_equal(summary_train_bytes(&m, 100), 8448 + 377600);
    assert_int_equal(summary_max_batch(&m, 8448 + 3776 * 100), 100);
    assert_int_equal(summary_max_batch(&m, 8448 + 3776 * 100 + 3775), 100);
    assert_int_equal(summary_max_batch(&m, 8448 + 3776 * 100 - 1), 99);
    assert_int_equal(summary_max_batch(&m, 8448 + 3776), 1);
    assert_int_equal(summary_max_batch(&m, 8448 + 3775), 0);   /* not one image */
    assert_int_equal(summary_max_batch(&m, 8448), 0);
    assert_int_equal(summary_max_batch(&m, 4096), 0);          /* not even the weights */
    /* the largest activation: dropout's 128 * 4 * 2 + its 512-byte mask;
     * the most parameters: d's 1,032 * 8 bytes */
    assert_int_equal(m.act_layer, 2);
    assert_int_equal(m.act_layer_bytes, 1536);
    assert_int_equal(m.param_layer, 4);
    assert_int_equal(m.param_layer_bytes, 8256);
    precision_mode fp8 = PREC_COUNT;
    assert_int_equal(precision_parse("fp8", &fp8), -1);
    assert_int_equal(summary_memory(&ns, 0, fp8, &m, err, sizeof err), -1);
    assert_string_equal(err, "unknown precision 3");
    spec_free(&ns);
    cJSON_Delete(j);
}

/* The batch size is a Tensor-Core dimension too. */
static void test_batch_warning(void **state)
{
    (void)state;
    summary s;
    const int sizes[] = { 1, 7, 8, 12, 64, 100, 128 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "batch size %d is not a multiple of 8", sizes[i]);
        build_p(DROP, (net_shape){ 2, 4, 4 }, 8, sizes[i], "sgd", true, NULL, &s);
        assert_int_equal(s.nwarnings, sizes[i] % 8 ? 1 : 0);
        assert_int_equal(has_warning(&s, want), sizes[i] % 8 != 0);
        summary_free(&s);
    }
}

/* A convolution's input channels warn, unless they are the images'. */
static void test_channel_warnings(void **state)
{
    (void)state;
    summary s;
    build_p("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"a\", \"filters\": 12, \"kernel\": 1},"
            " {\"type\": \"conv2d\", \"name\": \"b\", \"filters\": 16, \"kernel\": 1},"
            " {\"type\": \"conv2d\", \"name\": \"c\", \"filters\": 16, \"kernel\": 1},"
            " {\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"},"
            " {\"type\": \"dense\", \"units\": \"classes\"}]}",
            (net_shape){ 3, 8, 8 }, 16, 32, "sgd", true, NULL, &s);
    assert_int_equal(s.nwarnings, 2);
    assert_true(has_warning(&s, "layer 1 (conv2d \"a\"): 12 filters is not a multiple of 8"));
    assert_true(has_warning(&s, "layer 2 (conv2d \"b\"): 12 input channels is not a multiple "
                                "of 8"));
    assert_false(has_warning(&s, "3 input channels"));
    summary_free(&s);
}

/* summary_check_memory's refusals, against a given memory size.
 * BIG: input 8x128x128 (131,072 numbers, 512 KiB); conv "c1" 8 filters 1x1
 * (72 parameters, 8x128x128: 1 MiB per image with its gradient); conv "c2" 32
 * filters 1x1 (288 parameters, 32x128x128: 4 MiB); global_avgpool (32: 256
 * bytes); flatten; dense 8 classes (264 parameters, 64 bytes). Plain sgd:
 * fixed 624 * 8 = 4,992 bytes; per image 524,288 + 1,048,576 + 4,194,304 +
 * 256 + 64 = 5,767,488. Batch 64: 369,124,224 bytes, 352.02 MiB (353 rounded
 * up); c2 takes 4 MiB * 64 = 256 MiB. In 256 MiB: (268,435,456 - 4,992) /
 * 5,767,488 = 46.5, so 46 fit.
 * WIDE: input 1x32x32, flatten, dense "wide" 4,096 units (4,198,400
 * parameters), dense 8 classes (32,776). Adam: 16 bytes a parameter,
 * 67,682,816 bytes (64.5 MiB, 65 rounded up), "wide" 67,174,400 (65). */
static const char *BIG =
    "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 8, \"kernel\": 1},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 32, \"kernel\": 1},"
    " {\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"units\": \"classes\"}]}";
static const char *WIDE =
    "{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\": \"wide\", "
    "\"units\": 4096}, {\"type\": \"dense\", \"units\": \"classes\"}]}";

static void test_check_memory(void **state)
{
    (void)state;
    char err[512];
    net_spec ns;
    cJSON *j = cJSON_Parse(BIG);
    const int64_t MiB = 1 << 20;
    assert_int_equal(spec_parse(j, (net_shape){ 8, 128, 128 }, 8, &ns, err, sizeof err), 0);
    cJSON_Delete(j);
    assert_int_equal(summary_check_memory(&ns, 0, PREC_FP32, 64, 1, 369124224, "this machine's",
                                          err, sizeof err), 0);     /* exactly enough */
    assert_int_equal(summary_check_memory(&ns, 0, PREC_FP32, 64, 1, 0, "this machine's", err,
                                          sizeof err), 0);     /* unknown: no refusal */
    assert_int_equal(summary_check_memory(&ns, 0, PREC_FP32, 64, 1, 256 * MiB, "this machine's",
                                          err, sizeof err), -1);
    assert_string_equal(err, "the network needs at least 353 MiB at batch size 64, more than "
                             "this machine's 256 MiB (the largest activation is layer 2 (conv2d "
                             "\"c2\"): 256 MiB for the batch); use a smaller batch (at most 46 "
                             "fits)");
    /* Two devices, 32 images each: the advice is the whole batch, 2 x 46. */
    assert_int_equal(summary_check_memory(&ns, 0, PREC_FP32, 64, 2, 256 * MiB, "GPU 1's free", err,
                                          sizeof err), -1);
    assert_non_null(strstr(err, "at batch size 64 on each of 2 devices, more than GPU 1's free "
                                "256 MiB"));
    assert_non_null(strstr(err, "use a smaller batch (at most 92 fits)"));
    assert_int_equal(summary_check_memory(&ns, 0, PREC_FP32, 64, 1, 4992 + 5767487,
                                          "the GPU's free", err, sizeof err), -1);
    assert_non_null(strstr(err, "more than the GPU's free 5 MiB (the largest activation is "
                                "layer 2 (conv2d \"c2\")"));
    assert_non_null(strstr(err, "not even one image fits"));
    spec_free(&ns);

    j = cJSON_Parse(WIDE);
    assert_int_equal(spec_parse(j, (net_shape){ 1, 32, 32 }, 8, &ns, err, sizeof err), 0);
    cJSON_Delete(j);
    assert_int_equal(summary_check_memory(&ns, 2, PREC_FP32, 1, 1, 32 * MiB, "this machine's", err,
                                          sizeof err), -1);
    assert_string_equal(err, "the network's weights, gradients and optimizer state alone need "
                             "at least 65 MiB, more than this machine's 32 MiB (the most "
                             "parameters are in layer 2 (dense \"wide\"): 4,198,400 of them, 65 "
                             "MiB with their gradients and optimizer state); use fewer or "
                             "smaller layers");
    spec_free(&ns);
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
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.01f, .momentum = 0.9f };
    net *n = net_create(j, (net_shape){ 1, 2, 2 }, 2, 1 << 20, NULL, &sv, 1, err, sizeof err);
    assert_null(n);
    assert_non_null(strstr(err, "more than this machine's"));
    assert_non_null(strstr(err, "the largest activation is layer 1 (dense \"huge\")"));
    assert_non_null(strstr(err, "use a smaller batch"));
    cJSON_Delete(j);
}

/* And one whose parameters alone are beyond any machine: 64 dense layers of
 * about 2^31 parameters each (the parser's limit for one layer), with adam
 * 16 bytes a parameter, over 2 TB; layer 2, "w2", has the most. Refused at
 * batch 1 before anything is allocated (so at once). */
static void test_net_refuses_too_many_params(void **state)
{
    (void)state;
    enum { LAYERS = 64 };
    char *text = malloc(LAYERS * 80 + 128);
    assert_non_null(text);
    int o = sprintf(text, "{\"layers\": [");
    for (int i = 1; i <= LAYERS; i++)
        o += sprintf(text + o, "{\"type\": \"dense\", \"name\": \"w%d\", \"units\": %d}, ", i,
                     i % 2 ? 32768 : 65000);
    sprintf(text + o, "{\"type\": \"dense\", \"units\": \"classes\"}]}");
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    char err[512] = "";
    net_solver sv = { .type = SOLVER_ADAM, .lr = 0.001f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f };
    net *n = net_create(j, (net_shape){ 1, 1, 32768 }, 2, 1, NULL, &sv, 1, err, sizeof err);
    cJSON_Delete(j);
    assert_null(n);
    assert_non_null(strstr(err, "weights, gradients and optimizer state alone need at least"));
    assert_non_null(strstr(err, "more than this machine's"));
    assert_non_null(strstr(err, "layer 2 (dense \"w2\"): 2,129,985,000 of them"));
}

static void test_refusals(void **state)
{
    (void)state;
    char err[512];
    summary s;
    cJSON *j = cJSON_Parse(TINY);
    const net_shape in = { 1, 4, 4 };
    assert_int_equal(summary_build(j, in, 2, 0, SOLVER_SGD, false, PREC_FP32, &s, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "batch size"));
    solver_type rmsprop = SOLVER_COUNT;
    assert_int_equal(solver_type_parse("rmsprop", &rmsprop), -1);
    assert_int_equal(summary_build(j, in, 2, 8, rmsprop, false, PREC_FP32, &s, err, sizeof err),
                     -1);
    assert_string_equal(err, "unknown solver 3");
    /* a 3x3 kernel on a 2x2 input: the parser's message names the layer */
    const net_shape small = { 1, 2, 2 };
    assert_int_equal(summary_build(j, small, 2, 8, SOLVER_SGD, false, PREC_FP32, &s, err,
                                   sizeof err), -1);
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
        cmocka_unit_test(test_memory_x2_and_masks),
        cmocka_unit_test(test_max_batch),
        cmocka_unit_test(test_batch_warning),
        cmocka_unit_test(test_channel_warnings),
        cmocka_unit_test(test_check_memory),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_net_refuses_too_big),
        cmocka_unit_test(test_net_refuses_too_many_params),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_builtin_defaults),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
