/* Whole networks (engine/net.h): a small net learns a synthetic problem, runs
 * repeat bit for bit, short batches and chunked inference agree with full
 * ones, weights survive save and load, initialisation follows the layer, and
 * bad input is refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/net.h"
#include "engine/rng.h"
#include "engine/safetensors.h"

static const net_solver SGD = { .type = "sgd", .lr = 0.05f, .momentum = 0.9f };

/* Four classes of 1x8x8 images: a bright quadrant (class = which one) under
 * Gaussian noise. Learnable by the small net below, not by chance. */
#define SYN_C 1
#define SYN_H 8
#define SYN_W 8
#define SYN_SIZE (SYN_C * SYN_H * SYN_W)
#define SYN_CLASSES 4

static void synth(rng *r, float *x, int32_t *labels, int count)
{
    for (int i = 0; i < count; i++) {
        int c = (int)(rng_next(r) % SYN_CLASSES);
        labels[i] = c;
        for (int h = 0; h < SYN_H; h++)
            for (int w = 0; w < SYN_W; w++) {
                int q = (h >= SYN_H / 2) * 2 + (w >= SYN_W / 2);
                x[(size_t)i * SYN_SIZE + h * SYN_W + w] =
                    (float)((q == c ? 1.0 : 0.0) + 0.5 * rng_normal(r));
            }
    }
}

static const char *SMALL =
    "{\"name\": \"small\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"conv\", \"filters\": 4, \"kernel\": 3, \"padding\": \"same\"},"
    " {\"type\": \"relu\"},"
    " {\"type\": \"maxpool\", \"kernel\": 2},"
    " {\"type\": \"flatten\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static net *make(const char *spec_txt, net_shape in, int classes, int max_batch,
                 const net_solver *sv, uint64_t seed)
{
    char err[512] = "";
    cJSON *spec = cJSON_Parse(spec_txt);
    assert_non_null(spec);
    net *n = net_create(spec, in, classes, max_batch, "cpu", sv, seed, err, sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        print_error("net_create: %s\n", err);
        fail();
    }
    return n;
}

static net *make_small(uint64_t seed, int max_batch)
{
    return make(SMALL, (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, max_batch, &SGD, seed);
}

/* Trains `steps` steps of batch 16 on synthetic data from data_seed,
 * recording each loss. */
static void train(net *n, int steps, uint64_t data_seed, double *losses)
{
    char err[512] = "";
    rng r;
    float x[16 * SYN_SIZE];
    int32_t y[16];
    rng_seed(&r, data_seed);
    for (int s = 0; s < steps; s++) {
        net_stats st;
        synth(&r, x, y, 16);
        if (net_train_step(n, x, y, 16, 0.05f, &st, err, sizeof err) != 0) {
            print_error("step %d: %s\n", s, err);
            fail();
        }
        assert_int_equal(st.count, 16);
        assert_true(st.correct >= 0 && st.correct <= 16);
        losses[s] = st.loss;
    }
}

static void test_learns(void **state)
{
    enum { STEPS = 80 };
    char err[512] = "";
    double losses[STEPS];
    net *n = make_small(1, 16);
    assert_int_equal(net_param_count(n), (4 * 9 + 4) + (4 * 4 * 4 * 4 + 4));
    train(n, STEPS, 100, losses);
    double first = 0, last = 0;
    for (int i = 0; i < 5; i++)
        first += losses[i] / 5;
    for (int i = STEPS - 10; i < STEPS; i++)
        last += losses[i] / 10;
    /* starts untrained (chance is ln 4 = 1.39; random weights do worse) and
     * ends at a small fraction of chance, on data it has never seen before */
    if (!(first > 1.0 && last < 0.1 * log(4.0))) {
        print_error("loss went from %.4f to %.4f\n", first, last);
        fail();
    }
    /* held-out data, in one call larger than the batch (chunked) */
    enum { NV = 200 };
    static float vx[NV * SYN_SIZE];
    int32_t vy[NV];
    rng r;
    rng_seed(&r, 999);
    synth(&r, vx, vy, NV);
    net_stats st;
    assert_int_equal(net_eval(n, vx, vy, NV, &st, err, sizeof err), 0);
    assert_int_equal(st.count, NV);
    assert_true(st.correct >= 0.9 * NV);
    assert_true(st.loss < 0.5);
    /* predict agrees with eval: the same top-1 hits, rows summing to 1 */
    static float probs[NV * SYN_CLASSES];
    assert_int_equal(net_predict(n, vx, NV, probs, err, sizeof err), 0);
    int hits = 0;
    double loss = 0;
    for (int i = 0; i < NV; i++) {
        const float *p = probs + i * SYN_CLASSES;
        double sum = 0;
        int top = 0;
        for (int c = 0; c < SYN_CLASSES; c++) {
            sum += p[c];
            if (p[c] > p[top])
                top = c;
        }
        assert_true(fabs(sum - 1.0) < 1e-5);
        hits += top == vy[i];
        loss -= log(p[vy[i]]);
    }
    assert_int_equal(hits, st.correct);
    assert_true(fabs(loss / NV - st.loss) < 1e-4 * (1 + st.loss));
    net_free(n);
}

static void test_deterministic(void **state)
{
    enum { STEPS = 20 };
    double a[STEPS], b[STEPS], c[STEPS];
    net *n1 = make_small(7, 16), *n2 = make_small(7, 16), *n3 = make_small(8, 16);
    train(n1, STEPS, 5, a);
    train(n2, STEPS, 5, b);
    train(n3, STEPS, 5, c);
    assert_memory_equal(a, b, sizeof a);          /* bit for bit */
    assert_true(a[0] != c[0]);                     /* the seed matters */
    net_free(n1);
    net_free(n2);
    net_free(n3);
}

/* Batches shorter than max_batch (fresh plans, cached and evicted) give the
 * same per-image results as full ones. Different batch sizes may run
 * different kernels, so results may differ by rounding: through this net's
 * three small layers (at most 36 + 64 terms per sum, values of order 1) that
 * is far below 1e-5 on a probability. */
static void test_batch_sizes(void **state)
{
    char err[512] = "";
    net *n = make_small(3, 8);
    rng r;
    float x[8 * SYN_SIZE], full[8 * SYN_CLASSES], part[8 * SYN_CLASSES];
    int32_t y[8];
    rng_seed(&r, 11);
    synth(&r, x, y, 8);
    assert_int_equal(net_predict(n, x, 8, full, err, sizeof err), 0);
    for (int round = 0; round < 2; round++)
        for (int bn = 1; bn <= 7; bn++) {           /* more sizes than the plan cache holds */
            assert_int_equal(net_predict(n, x, bn, part, err, sizeof err), 0);
            for (int i = 0; i < bn * SYN_CLASSES; i++)
                assert_true(fabs(part[i] - full[i]) <= 1e-5);
        }
    /* a short training batch works and reports its own count */
    net_stats st;
    assert_int_equal(net_train_step(n, x, y, 5, 0.01f, &st, err, sizeof err), 0);
    assert_int_equal(st.count, 5);
    net_free(n);
}

static void test_save_load(void **state)
{
    char err[512] = "", path[64];
    double losses[10];
    snprintf(path, sizeof path, "/tmp/kiln-net-%d.safetensors", (int)getpid());
    net *a = make_small(21, 16), *b = make_small(22, 16);
    train(a, 10, 3, losses);
    assert_int_equal(net_save(a, path, err, sizeof err), 0);

    st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    assert_int_equal(st_count(f), 4);
    const st_tensor *w = st_find(f, "conv.weight");
    assert_non_null(w);
    assert_int_equal(w->dtype, ST_F32);
    assert_int_equal(w->ndim, 4);
    assert_true(w->shape[0] == 4 && w->shape[1] == 1 && w->shape[2] == 3 && w->shape[3] == 3);
    const st_tensor *d = st_find(f, "out.weight");
    assert_non_null(d);
    assert_true(d->ndim == 2 && d->shape[0] == 4 && d->shape[1] == 64);
    assert_non_null(st_find(f, "conv.bias"));
    assert_non_null(st_find(f, "out.bias"));
    assert_string_equal(st_meta(f, "network"), "small");
    st_close(f);

    rng r;
    float x[16 * SYN_SIZE], pa[16 * SYN_CLASSES], pb[16 * SYN_CLASSES];
    int32_t y[16];
    rng_seed(&r, 4);
    synth(&r, x, y, 16);
    assert_int_equal(net_predict(a, x, 16, pa, err, sizeof err), 0);
    assert_int_equal(net_predict(b, x, 16, pb, err, sizeof err), 0);
    assert_memory_not_equal(pa, pb, sizeof pa);
    assert_int_equal(net_load(b, path, err, sizeof err), 0);
    assert_int_equal(net_predict(b, x, 16, pb, err, sizeof err), 0);
    assert_memory_equal(pa, pb, sizeof pa);       /* same weights, same kernels: identical */

    /* a file from another network is refused, naming the tensor, and changes nothing */
    net *c = make("{\"layers\": [{\"type\": \"conv2d\", \"name\": \"conv\", \"filters\": 2,"
                  " \"kernel\": 3}, {\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\":"
                  " \"out\", \"units\": \"classes\"}]}",
                  (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, 4, &SGD, 1);
    assert_int_equal(net_load(c, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor \"conv.weight\" has shape [4, 1, 3, 3], this network "
                                "needs [2, 1, 3, 3]"));
    net *e = make("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"name\": \"fc\","
                  " \"units\": \"classes\"}]}",
                  (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, 4, &SGD, 1);
    assert_int_equal(net_load(e, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "has no tensor \"fc.weight\""));
    assert_int_equal(net_load(e, "/tmp/kiln-no-such-file.safetensors", err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
    unlink(path);
    net_free(a);
    net_free(b);
    net_free(c);
    net_free(e);
}

/* LeNet: its parameter count, and He (fc1, feeding the ReLU) versus Glorot
 * initialisation read back from its saved weights. */
static void test_lenet_init(void **state)
{
    char err[512] = "", path[64];
    snprintf(path, sizeof path, "/tmp/kiln-lenet-%d.safetensors", (int)getpid());
    net *n = make(net_builtin("lenet"), (net_shape){ 1, 28, 28 }, 10, 4, &SGD, 1);
    assert_int_equal(net_param_count(n), 431080);
    assert_int_equal(net_save(n, path, err, sizeof err), 0);
    st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    static const struct {
        const char *name;
        double bound;                 /* the uniform's half-width */
    } want[] = {
        { "conv1.weight", 0.10690449676496976 },   /* Glorot: sqrt(6 / (25 + 500)) */
        { "conv2.weight", 0.05855400437691199 },   /* Glorot: sqrt(6 / (500 + 1250)) */
        { "fc1.weight", 0.08660254037844387 },     /* He: sqrt(6 / 800) */
        { "fc2.weight", 0.10846522890932808 },     /* Glorot: sqrt(6 / (500 + 10)) */
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        const st_tensor *t = st_find(f, want[k].name);
        assert_non_null(t);
        const float *v = t->data;
        size_t cnt = t->bytes / 4;
        double mx = 0;
        for (size_t i = 0; i < cnt; i++)
            mx = fmax(mx, fabs(v[i]));
        /* all inside, and the largest of >= 500 uniform draws within 5% of the
         * edge (a correct draw fails that with probability 0.95^500 < 1e-11);
         * 5% also tells He from Glorot for fc1 (0.0866 against 0.0679) */
        if (!(mx <= want[k].bound && mx > 0.95 * want[k].bound)) {
            print_error("%s: max |w| %.6f, bound %.6f\n", want[k].name, mx, want[k].bound);
            fail();
        }
    }
    const char *biases[] = { "conv1.bias", "conv2.bias", "fc1.bias", "fc2.bias" };
    for (size_t k = 0; k < 4; k++) {
        const st_tensor *t = st_find(f, biases[k]);
        assert_non_null(t);
        for (size_t i = 0; i < t->bytes / 4; i++)
            assert_true(((const float *)t->data)[i] == 0.0f);
    }
    st_close(f);
    unlink(path);

    /* a few steps on MNIST-shaped noise: runs, finite */
    float *x = calloc(4 * 784, sizeof *x);
    int32_t y[4] = { 0, 3, 9, 1 };
    rng r;
    rng_seed(&r, 2);
    for (int i = 0; i < 4 * 784; i++)
        x[i] = (float)rng_normal(&r);
    net_stats st;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(net_train_step(n, x, y, 4, 0.01f, &st, err, sizeof err), 0);
        assert_true(isfinite(st.loss));
    }
    free(x);
    net_free(n);
}

/* The spec's geometry reaches the backend intact: a net of an asymmetric
 * "same" convolution (even kernel, dilation) and a padded overlapping max
 * pool, checked end to end against a naive computation with the net's own
 * weights. Probabilities of order 1/18 computed through sums of 24 terms:
 * float rounding stays below 1e-6, so 1e-5 only fails on a geometry error. */
static void test_spec_geometry(void **state)
{
    char err[512] = "", path[64];
    const char *spec =
        "{\"layers\": [{\"type\": \"conv2d\", \"name\": \"c\", \"filters\": 2, \"kernel\": [4, 3],"
        " \"padding\": \"same\", \"dilation\": [1, 2]},"
        " {\"type\": \"maxpool\", \"kernel\": 3, \"stride\": 2, \"padding\": 1},"
        " {\"type\": \"flatten\"}]}";
    enum { C = 2, H = 5, W = 6, K = 2, KH = 4, KW = 3, OUT = 2 * 3 * 3 };
    net *n = make(spec, (net_shape){ C, H, W }, OUT, 2, &SGD, 5);
    snprintf(path, sizeof path, "/tmp/kiln-geom-%d.safetensors", (int)getpid());
    assert_int_equal(net_save(n, path, err, sizeof err), 0);
    st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    const float *wt = st_find(f, "c.weight")->data;
    rng r;
    float x[2 * C * H * W], probs[2 * OUT];
    rng_seed(&r, 6);
    for (int i = 0; i < 2 * C * H * W; i++)
        x[i] = (float)rng_range(&r, -1, 1);
    assert_int_equal(net_predict(n, x, 2, probs, err, sizeof err), 0);
    /* "same": rows 1 before and 2 after (extent 4), columns 2 and 2 (extent 5) */
    const int pt = 1, pl = 2;
    for (int b = 0; b < 2; b++) {
        double conv[K][H][W], pool[OUT], mx = -1e300, sum = 0;
        for (int k = 0; k < K; k++)
            for (int oh = 0; oh < H; oh++)
                for (int ow = 0; ow < W; ow++) {
                    double acc = 0;                  /* bias is initialised to 0 */
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < KH; i++)
                            for (int j = 0; j < KW; j++) {
                                int ih = oh - pt + i, iw = ow - pl + 2 * j;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                    acc += (double)x[((b * C + c) * H + ih) * W + iw] *
                                           wt[((k * C + c) * KH + i) * KW + j];
                            }
                    conv[k][oh][ow] = acc;
                }
        for (int k = 0; k < K; k++)
            for (int ph = 0; ph < 3; ph++)
                for (int pw = 0; pw < 3; pw++) {
                    double m = -1e300;
                    for (int i = 0; i < 3; i++)
                        for (int j = 0; j < 3; j++) {
                            int ih = ph * 2 - 1 + i, iw = pw * 2 - 1 + j;
                            if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                m = fmax(m, conv[k][ih][iw]);
                        }
                    pool[(k * 3 + ph) * 3 + pw] = m;
                }
        for (int i = 0; i < OUT; i++)
            mx = fmax(mx, pool[i]);
        for (int i = 0; i < OUT; i++)
            sum += exp(pool[i] - mx);
        for (int i = 0; i < OUT; i++) {
            double p = exp(pool[i] - mx) / sum;
            if (!(fabs(p - probs[b * OUT + i]) < 1e-5)) {
                print_error("image %d class %d: %.7f, reference %.7f\n", b, i,
                            (double)probs[b * OUT + i], p);
                fail();
            }
        }
    }
    st_close(f);
    unlink(path);
    net_free(n);
}

/* Layers before the first parameters compute no input gradient (ReLU and
 * flatten first here); the net still trains. */
static void test_leading_paramless_layers(void **state)
{
    double losses[30];
    net *n = make("{\"layers\": [{\"type\": \"relu\"}, {\"type\": \"flatten\"},"
                  " {\"type\": \"dense\", \"units\": \"classes\"}]}",
                  (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, 16, &SGD, 1);
    train(n, 30, 8, losses);
    assert_true(losses[29] < 0.5 * losses[0]);
    net_free(n);
}

/* ---- the solver and the gradient, seen through saved weights ----------------- */

/* Saves n's weights and opens them; st_close the result. */
static st_file *snapshot(const net *n, const char *tag)
{
    char err[512] = "", path[96];
    snprintf(path, sizeof path, "/tmp/kiln-snap-%d-%s.safetensors", (int)getpid(), tag);
    assert_int_equal(net_save(n, path, err, sizeof err), 0);
    st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    unlink(path);
    return f;
}

static const float *tensor(const st_file *f, const char *name, size_t *count)
{
    const st_tensor *t = st_find(f, name);
    assert_non_null(t);
    *count = t->bytes / sizeof(float);
    return t->data;
}

/* Momentum and weight decay reach the update as the formula says:
 *  - the first momentum step equals a plain one (v starts at 0);
 *  - the second differs from a plain one by exactly -lr mu g0 = -mu (W0 - W1);
 *  - decay adds -lr wd W0 to weights and leaves biases alone.
 * Each weight is a float result of a handful of roundings on values of the
 * sizes summed in tol, so 4 u times that sum bounds the disagreement. */
static void test_solver(void **state)
{
    char err[512] = "";
    const float lr = 0.1f, mu = 0.9f, wd = 0.1f;
    const net_solver smom = { .type = "sgd", .lr = lr, .momentum = mu };
    const net_solver splain = { .type = "sgd", .lr = lr };
    const net_solver sdecay = { .type = "sgd", .lr = lr, .weight_decay = wd };
    net_shape in = { SYN_C, SYN_H, SYN_W };
    net *a = make(SMALL, in, SYN_CLASSES, 8, &smom, 4);
    net *b = make(SMALL, in, SYN_CLASSES, 8, &splain, 4);
    net *c = make(SMALL, in, SYN_CLASSES, 8, &sdecay, 4);
    float x[16 * SYN_SIZE];
    int32_t y[16];
    rng r;
    rng_seed(&r, 12);
    synth(&r, x, y, 16);
    /* start all three from the same random weights, biases included (they
     * are initialised to 0, where decay would be invisible) */
    char path[96];
    st_file *init = snapshot(a, "init");
    st_tensor t[4];
    float vals[4][256];
    assert_int_equal(st_count(init), 4);
    for (int k = 0; k < 4; k++) {
        t[k] = *st_get(init, k);
        assert_true(t[k].bytes <= sizeof vals[k]);
        for (size_t i = 0; i < t[k].bytes / 4; i++)
            vals[k][i] = (float)rng_range(&r, -0.5, 0.5);
        t[k].data = vals[k];
    }
    snprintf(path, sizeof path, "/tmp/kiln-solver-%d.safetensors", (int)getpid());
    assert_int_equal(st_write(path, t, 4, NULL, err, sizeof err), 0);
    net *all[] = { a, b, c };
    for (int i = 0; i < 3; i++)
        assert_int_equal(net_load(all[i], path, err, sizeof err), 0);
    unlink(path);
    st_close(init);
    st_file *w0 = snapshot(a, "w0");
    net_stats st;
    for (int i = 0; i < 3; i++)
        assert_int_equal(net_train_step(all[i], x, y, 8, lr, &st, err, sizeof err), 0);
    st_file *a1 = snapshot(a, "a1"), *b1 = snapshot(b, "b1"), *c1 = snapshot(c, "c1");
    assert_int_equal(net_train_step(a, x + 8 * SYN_SIZE, y + 8, 8, lr, &st, err, sizeof err), 0);
    assert_int_equal(net_train_step(b, x + 8 * SYN_SIZE, y + 8, 8, lr, &st, err, sizeof err), 0);
    st_file *a2 = snapshot(a, "a2"), *b2 = snapshot(b, "b2");
    const char *names[] = { "conv.weight", "conv.bias", "out.weight", "out.bias" };
    const double u = 0x1.0p-24;
    for (int k = 0; k < 4; k++) {
        size_t cnt;
        const float *W0 = tensor(w0, names[k], &cnt), *A1 = tensor(a1, names[k], &cnt),
                    *B1 = tensor(b1, names[k], &cnt), *C1 = tensor(c1, names[k], &cnt),
                    *A2 = tensor(a2, names[k], &cnt), *B2 = tensor(b2, names[k], &cnt);
        bool is_bias = strstr(names[k], "bias") != NULL;
        double moved = 0;
        assert_memory_equal(A1, B1, cnt * sizeof *A1);
        for (size_t i = 0; i < cnt; i++) {
            double want = -(double)mu * ((double)W0[i] - A1[i]), got = (double)A2[i] - B2[i];
            double tol = 4 * u * (fabs(W0[i]) + fabs(A1[i]) + fabs(A2[i]) + fabs(B2[i]));
            if (!(fabs(got - want) <= tol)) {
                print_error("%s[%zu]: momentum adds %.9g, expected %.9g\n", names[k], i, got, want);
                fail();
            }
            moved += fabs(W0[i] - A1[i]);
            want = is_bias ? 0.0 : -(double)lr * wd * W0[i];
            got = (double)C1[i] - B1[i];
            tol = is_bias ? 0.0 : 4 * u * (fabs(W0[i]) + fabs(B1[i]) + fabs(C1[i]));
            if (!(fabs(got - want) <= tol)) {
                print_error("%s[%zu]: decay adds %.9g, expected %.9g\n", names[k], i, got, want);
                fail();
            }
        }
        assert_true(moved > 0);                  /* every parameter got a gradient */
    }
    st_file *files[] = { w0, a1, b1, c1, a2, b2 };
    for (int i = 0; i < 6; i++)
        st_close(files[i]);
    for (int i = 0; i < 3; i++)
        net_free(all[i]);
}

/* The whole backward pass, end to end: one plain SGD step at lr = 1 gives
 * the gradient (W0 - W1), compared with central differences of net_eval's
 * loss. The per-op tests bound rounding tightly; this one is about wiring
 * (a layer left out of backward, a gradient not reaching a parameter), which
 * shows as errors of order 100%. With h = 1e-3 the float loss (relative
 * rounding ~1e-6) leaves ~1e-3 of noise on each difference, so the tensors'
 * gradients must agree to 2% in norm. */
static void test_net_gradient(void **state)
{
    char err[512] = "", path[96];
    const net_solver plain = { .type = "sgd", .lr = 1.0f };
    net *n = make(SMALL, (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, 8, &plain, 9);
    float x[8 * SYN_SIZE];
    int32_t y[8];
    rng r;
    rng_seed(&r, 13);
    synth(&r, x, y, 8);
    st_file *w0 = snapshot(n, "g0");
    net_stats st;
    assert_int_equal(net_train_step(n, x, y, 8, 1.0f, &st, err, sizeof err), 0);
    st_file *w1 = snapshot(n, "g1");
    snprintf(path, sizeof path, "/tmp/kiln-probe-%d.safetensors", (int)getpid());
    /* a writable copy of W0 to perturb and load */
    int nt = st_count(w0);
    st_tensor t[4];
    float *buf[4];
    for (int k = 0; k < nt; k++) {
        t[k] = *st_get(w0, k);
        buf[k] = malloc(t[k].bytes);
        memcpy(buf[k], t[k].data, t[k].bytes);
        t[k].data = buf[k];
    }
    const double h = 1e-3;
    for (int k = 0; k < nt; k++) {
        size_t cnt = t[k].bytes / 4, c1;
        const float *W1 = tensor(w1, t[k].name, &c1);
        double num = 0, den = 0;
        for (size_t i = 0; i < cnt; i += cnt > 64 ? 5 : 1) {
            float keep = buf[k][i];
            double loss[2], step;
            float v[2] = { (float)(keep + h), (float)(keep - h) };
            for (int s = 0; s < 2; s++) {
                net_stats e;
                buf[k][i] = v[s];
                assert_int_equal(st_write(path, t, nt, NULL, err, sizeof err), 0);
                assert_int_equal(net_load(n, path, err, sizeof err), 0);
                assert_int_equal(net_eval(n, x, y, 8, &e, err, sizeof err), 0);
                loss[s] = e.loss;
            }
            buf[k][i] = keep;
            step = (double)v[0] - v[1];
            double fd = (loss[0] - loss[1]) / step, g = (double)keep - W1[i];
            num += (fd - g) * (fd - g);
            den += g * g;
        }
        if (!(den > 0 && sqrt(num / den) < 0.02)) {
            print_error("%s: relative error of the gradient %.4f (|g| %.3g)\n", t[k].name,
                        sqrt(num / (den > 0 ? den : 1)), sqrt(den));
            fail();
        }
    }
    for (int k = 0; k < nt; k++)
        free(buf[k]);
    unlink(path);
    st_close(w0);
    st_close(w1);
    net_free(n);
}

static void test_errors(void **state)
{
    char err[512] = "";
    float x[4 * SYN_SIZE] = { 0 };
    int32_t y[4] = { 0, 1, 4, 2 };
    net_stats st;
    net *n = make_small(1, 4);
    assert_int_equal(net_train_step(n, x, y, 4, 0.1f, &st, err, sizeof err), -1);
    assert_string_equal(err, "label 4 of image 2 is outside [0, 4)");
    y[2] = 3;
    assert_int_equal(net_train_step(n, x, y, 5, 0.1f, &st, err, sizeof err), -1);
    assert_string_equal(err, "batch of 5 images: must be 1 to 4");
    assert_int_equal(net_train_step(n, x, y, 0, 0.1f, &st, err, sizeof err), -1);
    assert_int_equal(net_eval(n, x, y, 0, &st, err, sizeof err), -1);
    assert_int_equal(net_train_step(n, x, y, 4, NAN, &st, err, sizeof err), -1);
    /* A NaN pixel: the ReLU hides it from the loss, not from conv's gradient;
     * the step is refused before any weight changes. */
    float p0[4 * SYN_CLASSES], p1[4 * SYN_CLASSES];
    assert_int_equal(net_predict(n, x, 4, p0, err, sizeof err), 0);
    x[3] = NAN;
    assert_int_equal(net_train_step(n, x, y, 4, 0.1f, &st, err, sizeof err), -1);
    assert_string_equal(err, "training diverged: the gradient of conv.weight is not finite "
                        "(check the data, or try a smaller learning rate)");
    x[3] = 0;
    assert_int_equal(net_predict(n, x, 4, p1, err, sizeof err), 0);
    assert_memory_equal(p0, p1, sizeof p0);
    /* A loss that is not finite: an infinite pixel through the dense layer. */
    net *m = make("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": "
                  "\"classes\"}]}", (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, 4, &SGD, 1);
    x[5] = INFINITY;
    assert_int_equal(net_train_step(m, x, y, 4, 0.1f, &st, err, sizeof err), -1);
    assert_string_equal(err, "training diverged: the loss is NaN (try a smaller learning rate)");
    x[5] = 0;
    net_free(m);
    net_free(n);
    net_free(NULL);

    cJSON *spec = cJSON_Parse(SMALL);
    net_shape in = { SYN_C, SYN_H, SYN_W };
    net_solver adam = { .type = "adam", .lr = 0.001f };
    assert_null(net_create(spec, in, SYN_CLASSES, 4, "tpu", &SGD, 1, err, sizeof err));
    assert_string_equal(err, "backend \"tpu\" is not compiled into this kiln");
    assert_null(net_create(spec, in, SYN_CLASSES, 4, "cpu", &adam, 1, err, sizeof err));
    assert_string_equal(err, "solver \"adam\" is not supported yet (only \"sgd\")");
    assert_null(net_create(spec, in, SYN_CLASSES, 0, "cpu", &SGD, 1, err, sizeof err));
    assert_string_equal(err, "batch size must be positive (got 0)");
    assert_null(net_create(spec, (net_shape){ 1, 1, 1 }, SYN_CLASSES, 4, "cpu", &SGD, 1, err,
                           sizeof err));
    assert_string_equal(err, "layer 3 (maxpool \"maxpool3\"): kernel 2 is larger than its 1x1 "
                        "input");
    /* far more memory than any machine has */
    assert_null(net_create(spec, (net_shape){ 1, 2048, 2048 }, SYN_CLASSES, 4096, "cpu", &SGD,
                           1, err, sizeof err));
    assert_non_null(strstr(err, "use a smaller batch"));
    cJSON_Delete(spec);
}

static void test_devices(void **state)
{
    engine_device d[8];
    int n = engine_devices(d, 8);
    assert_true(n >= 1);
    assert_string_equal(d[0].kind, "cpu");
    assert_int_equal(d[0].index, 0);
    assert_true(strlen(d[0].name) > 0);
    assert_true(d[0].memory_bytes > (64ull << 20));
    for (int i = 1; i < n && i < 8; i++)
        assert_string_equal(d[i].kind, "cuda");
    assert_int_equal(engine_devices(NULL, 0), n);   /* counts without filling */
    const char *const *b = engine_backends();
    assert_string_equal(b[0], "cpu");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_learns),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_batch_sizes),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_lenet_init),
        cmocka_unit_test(test_spec_geometry),
        cmocka_unit_test(test_leading_paramless_layers),
        cmocka_unit_test(test_solver),
        cmocka_unit_test(test_net_gradient),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
