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

#include "tests/settings_util.h"
#include "engine/backend.h"   /* buffers behind net_param_tensors */
#include "engine/net.h"
#include "engine/rng.h"
#include "engine/safetensors.h"

static const net_solver SGD = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };

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
    net *n = net_create(spec, in, classes, max_batch, NULL, sv, seed, err, sizeof err);
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
    const net_solver smom = { .type = SOLVER_SGD, .lr = lr, .momentum = mu };
    const net_solver splain = { .type = SOLVER_SGD, .lr = lr };
    const net_solver sdecay = { .type = SOLVER_SGD, .lr = lr, .weight_decay = wd };
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
    const net_solver plain = { .type = SOLVER_SGD, .lr = 1.0f };
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

/* ---- graphs and the layers of issue 3 ------------------------------------------ */

/* A DAG using every layer type: an activation read by several layers (conv
 * "a" feeds the add twice and the concat; "f" feeds two dense layers), a
 * residual add, a concat, batch norm, dropout, and a flatten whose input has
 * another reader. */
static const char *GRAPH =
    "{\"name\": \"graph\", \"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"a\", \"filters\": 3, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"batchnorm\", \"name\": \"bn\"},"
    " {\"type\": \"leaky_relu\", \"name\": \"lr\", \"slope\": 0.2},"
    " {\"type\": \"conv2d\", \"name\": \"b\", \"filters\": 3, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"add\", \"name\": \"res\", \"inputs\": [\"b\", \"a\", \"a\"]},"
    " {\"type\": \"tanh\", \"name\": \"t\"},"
    " {\"type\": \"concat\", \"name\": \"cat\", \"inputs\": [\"t\", \"a\", \"input\"]},"
    " {\"type\": \"avgpool\", \"name\": \"ap\", \"kernel\": 3, \"stride\": 2, \"padding\": 1},"
    " {\"type\": \"maxpool\", \"name\": \"mp\", \"kernel\": 2},"
    " {\"type\": \"dropout\", \"name\": \"drop\", \"rate\": 0.25},"
    " {\"type\": \"flatten\", \"name\": \"f\"},"
    " {\"type\": \"dense\", \"name\": \"d1\", \"units\": 6},"
    " {\"type\": \"sigmoid\", \"name\": \"s\"},"
    " {\"type\": \"dense\", \"name\": \"d2\", \"units\": 6, \"inputs\": \"f\"},"
    " {\"type\": \"add\", \"name\": \"join\", \"inputs\": [\"s\", \"d2\"]},"
    " {\"type\": \"global_avgpool\", \"name\": \"g\", \"inputs\": \"ap\"},"
    " {\"type\": \"flatten\", \"name\": \"gf\"},"
    " {\"type\": \"concat\", \"name\": \"head\", \"inputs\": [\"join\", \"gf\"]},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

/* Reads or writes one parameter's values through the accessor. */
static void param_io(net *n, const net_param *p, float *host, bool up)
{
    char err[256] = "";
    be_ctx *c;
    const backend *be = net_backend(n, &c);
    size_t bytes = p->count * sizeof(float);
    if (up)
        assert_int_equal(be->buf_upload(c, p->value, 0, host, bytes, err, sizeof err), 0);
    else
        assert_int_equal(be->buf_download(c, p->value, 0, host, bytes, err, sizeof err), 0);
}

/* Training-mode loss of n at step 0 (the same dropout masks every time),
 * leaving the weights as they are (lr 0). */
static double train_loss(net *n, const float *x, const int32_t *y, int count)
{
    char err[512] = "";
    net_stats st;
    net_set_step(n, 0);
    if (net_train_step(n, x, y, count, 0.0f, &st, err, sizeof err) != 0) {
        print_error("step: %s\n", err);
        fail();
    }
    return st.loss;
}

/* The gradient of every parameter of the DAG, through net_param_tensors,
 * against central differences of the training loss. As in test_net_gradient
 * this is about wiring (a branch's contribution lost or counted twice shows
 * as errors of tens of percent), with h = 1e-3 and 2% in norm. */
static void check_net_gradient(net *n, net_shape in, int classes, int B, uint64_t seed)
{
    char err[512] = "";
    size_t sz = (size_t)B * in.c * in.h * in.w;
    float *x = malloc(sz * sizeof *x);
    int32_t y[16];
    rng r;
    rng_seed(&r, seed);
    assert_true(B <= 16);
    for (size_t i = 0; i < sz; i++)
        x[i] = (float)rng_range(&r, -1, 1);
    for (int i = 0; i < B; i++)
        y[i] = (int32_t)(rng_next(&r) % (uint64_t)classes);
    net_param ps[32];
    size_t np = net_param_tensors(n, ps, 32);
    assert_true(np <= 32);
    /* the gradient at the base point */
    train_loss(n, x, y, B);
    be_ctx *c;
    const backend *be = net_backend(n, &c);
    float *grads[32];
    for (size_t k = 0; k < np; k++) {
        grads[k] = malloc(ps[k].count * sizeof(float));
        assert_int_equal(be->buf_download(c, ps[k].grad, 0, grads[k], ps[k].count * sizeof(float),
                                          err, sizeof err), 0);
    }
    const double h = 1e-3;
    for (size_t k = 0; k < np; k++) {
        float *w = malloc(ps[k].count * sizeof *w);
        param_io(n, &ps[k], w, false);
        double num = 0, den = 0;
        for (size_t i = 0; i < ps[k].count; i += ps[k].count > 48 ? 7 : 1) {
            float keep = w[i];
            float v[2] = { (float)(keep + h), (float)(keep - h) };
            double loss[2];
            for (int s = 0; s < 2; s++) {
                w[i] = v[s];
                param_io(n, &ps[k], w, true);
                loss[s] = train_loss(n, x, y, B);
            }
            w[i] = keep;
            param_io(n, &ps[k], w, true);
            double fd = (loss[0] - loss[1]) / ((double)v[0] - v[1]), g = grads[k][i];
            num += (fd - g) * (fd - g);
            den += g * g;
        }
        if (!(den > 0 && sqrt(num / den) < 0.02)) {
            print_error("%s: relative error of the gradient %.4f (|g| %.3g)\n", ps[k].name,
                        sqrt(num / (den > 0 ? den : 1)), sqrt(den));
            fail();
        }
        free(w);
        free(grads[k]);
    }
    free(x);
}

static void test_graph_gradient(void **state)
{
    const net_solver plain = { .type = SOLVER_SGD, .lr = 0.0f };
    net *n = make(GRAPH, (net_shape){ 2, 7, 9 }, 5, 6, &plain, 21);
    net_param ps[32];
    size_t np = net_param_tensors(n, ps, 32);
    assert_int_equal(np, 12);                     /* a, b, bn, d1, d2, out: weight + bias each */
    assert_int_equal(net_param_tensors(n, NULL, 0), np);
    for (size_t k = 0; k < np; k++) {
        bool is_bias = strstr(ps[k].name, ".bias") != NULL;
        bool is_bn = strncmp(ps[k].name, "bn.", 3) == 0;
        assert_true(ps[k].decay == (!is_bias && !is_bn));
    }
    assert_string_equal(ps[2].name, "bn.weight");
    check_net_gradient(n, (net_shape){ 2, 7, 9 }, 5, 6, 22);
    net_free(n);
}

/* A residual net of 16 and 32 channels, whose activations the CPU backend
 * keeps in its blocked layout between layers: the gradient against finite
 * differences, and training with everything blocked gives the same losses
 * and weights, bit for bit, as with everything plain (KILN_CPU_PLAIN_LAYOUTS),
 * since the same kernels run on the same data in another order of memory. */
static const char *RES16 =
    "{\"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\", \"name\": \"r1\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn2\"},"
    " {\"type\": \"add\", \"name\": \"res\", \"inputs\": [\"bn2\", \"r1\"]},"
    " {\"type\": \"leaky_relu\", \"name\": \"r2\"},"
    " {\"type\": \"dropout\", \"name\": \"drop\", \"rate\": 0.2},"
    " {\"type\": \"avgpool\", \"name\": \"ap\", \"kernel\": 3, \"stride\": 2, \"padding\": 1},"
    " {\"type\": \"conv2d\", \"name\": \"c3\", \"filters\": 32, \"kernel\": 1},"
    " {\"type\": \"tanh\", \"name\": \"t\"},"
    " {\"type\": \"maxpool\", \"name\": \"mp\", \"kernel\": 2},"
    " {\"type\": \"global_avgpool\", \"name\": \"gap\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

/* The same without kinks (ReLU, max pooling) for the finite differences: a
 * probe of h moves hundreds of units of a conv layer at once, and with kinks
 * some of them cross one in most probes. */
static const char *RES16_SMOOTH =
    "{\"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"sigmoid\", \"name\": \"r1\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn2\"},"
    " {\"type\": \"add\", \"name\": \"res\", \"inputs\": [\"bn2\", \"r1\"]},"
    " {\"type\": \"tanh\", \"name\": \"r2\"},"
    " {\"type\": \"dropout\", \"name\": \"drop\", \"rate\": 0.2},"
    " {\"type\": \"avgpool\", \"name\": \"ap\", \"kernel\": 3, \"stride\": 2, \"padding\": 1},"
    " {\"type\": \"conv2d\", \"name\": \"c3\", \"filters\": 32, \"kernel\": 1},"
    " {\"type\": \"tanh\", \"name\": \"t\"},"
    " {\"type\": \"avgpool\", \"name\": \"mp\", \"kernel\": 2},"
    " {\"type\": \"global_avgpool\", \"name\": \"gap\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

/* spec's gradient for 4 classes and batches of 4 of in against finite
 * differences (check_net_gradient), its weights from seed. */
static void gradient_of(const char *spec, net_shape in, uint64_t seed)
{
    const net_solver plain = { .type = SOLVER_SGD, .lr = 0.0f };
    net *n = make(spec, in, 4, 4, &plain, seed);
    check_net_gradient(n, in, 4, 4, seed + 1);
    net_free(n);
}

/* The two snapshots hold the same tensors, bit for bit; closes them. */
static void assert_same_tensors(st_file *w[2])
{
    assert_int_equal(st_count(w[0]), st_count(w[1]));
    for (int k = 0; k < st_count(w[0]); k++) {
        const st_tensor *a = st_get(w[0], k), *b = st_find(w[1], a->name);
        assert_non_null(b);
        assert_int_equal(a->bytes, b->bytes);
        assert_memory_equal(a->data, b->data, a->bytes);
    }
    st_close(w[0]);
    st_close(w[1]);
}

/* A net of spec for 4 classes and batches of 8 (every activation plain when
 * plain: KILN_CPU_PLAIN_LAYOUTS), trained four steps on seeded random
 * batches of in; their losses in loss[4]. */
static net *train_four(const char *spec, net_shape in, bool plain, const net_solver *sv,
                       uint64_t seed, double loss[4])
{
    char err[512] = "";
    if (plain)
        assert_int_equal(setenv("KILN_CPU_PLAIN_LAYOUTS", "1", 1), 0);
    net *n = make(spec, in, 4, 8, sv, seed);
    unsetenv("KILN_CPU_PLAIN_LAYOUTS");
    size_t sz = (size_t)8 * in.c * in.h * in.w;
    float *x = malloc(sz * sizeof *x);
    assert_non_null(x);
    rng r;
    rng_seed(&r, seed + 1);
    for (int s = 0; s < 4; s++) {
        int32_t y[8];
        net_stats st;
        for (size_t i = 0; i < sz; i++)
            x[i] = (float)rng_range(&r, -1, 1);
        for (int i = 0; i < 8; i++)
            y[i] = (int32_t)(rng_next(&r) % 4);
        assert_int_equal(net_train_step(n, x, y, 8, 0.05f, &st, err, sizeof err), 0);
        loss[s] = st.loss;
    }
    free(x);
    return n;
}

static void test_blocked_net(void **state)
{
    const net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    const net_shape in = { 3, 9, 7 };
    gradient_of(RES16_SMOOTH, in, 41);

    double loss[2][4];
    st_file *w[2];
    for (int run = 0; run < 2; run++) {
        net *n = train_four(RES16, in, run, &sv, 43, loss[run]);
        w[run] = snapshot(n, run ? "plain" : "blocked");
        net_free(n);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    assert_same_tensors(w);
}

/* A convolution whose 20 input channels the blocked layout pads to 32 runs
 * on channels-last operands (engine/cpu/conv.c, conv_channels_last, as
 * LeNet's conv2): its gradient against finite differences, and four training
 * steps against the same net with every activation plain (direct kernels on
 * NCHW): the same sums in another order, so the losses agree to rounding
 * (each a few hundred terms of |x| < 1 in float: relative 1e-5 is ten times
 * gamma_500) and are not the same bits only by chance. */
static const char *PAD20 =
    "{\"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 20, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"tanh\", \"name\": \"t1\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 12, \"kernel\": 5},"
    " {\"type\": \"tanh\", \"name\": \"t2\"},"
    " {\"type\": \"global_avgpool\", \"name\": \"gap\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static void test_channels_last_conv(void **state)
{
    const net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    const net_shape in = { 3, 9, 9 };
    gradient_of(PAD20, in, 51);

    double loss[2][4];
    for (int run = 0; run < 2; run++)
        net_free(train_four(PAD20, in, run, &sv, 53, loss[run]));
    for (int s = 0; s < 4; s++)
        if (!(fabs(loss[0][s] - loss[1][s]) <= 1e-5 * fabs(loss[1][s]))) {
            print_error("step %d: loss %.9g channels-last, %.9g plain\n", s, loss[0][s], loss[1][s]);
            fail();
        }
}

/* A batch norm or an add of two that a ReLU alone reads runs the ReLU in its
 * own pass (engine/net_build.c, plan_relu_pairs): here bn1 with r1, res with
 * r2 (its first input r1 takes its gradient second: the ReLU's gradient goes
 * to bn2's and is added to r1's) and res2 with r3 (c3's first, then copied to
 * r1's), while bn2 feeds an add and stays apart; and a convolution, in its
 * forward pass: c4 with r4 (16 -> 16, kiln's own Winograd, FP32 and
 * bfloat16) and c5 with r5 (16 -> 24, oneDNN's kernel with its ReLU
 * post-op). Four training steps, the
 * weights after them and a prediction with batch norm as a layer of its own
 * (KILN_INFER_FUSE=0, not folded into the convolution) give the same bits as
 * with every ReLU apart (KILN_RELU_FUSE=0), in FP32 and under AMP. */
static const char *RELU_PAIRS =
    "{\"layers\": ["
    " {\"type\": \"conv2d\", \"name\": \"c1\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn1\"},"
    " {\"type\": \"relu\", \"name\": \"r1\"},"
    " {\"type\": \"conv2d\", \"name\": \"c2\", \"filters\": 16, \"kernel\": 3, \"padding\": 1,"
    "  \"bias\": false},"
    " {\"type\": \"batchnorm\", \"name\": \"bn2\"},"
    " {\"type\": \"add\", \"name\": \"res\", \"inputs\": [\"r1\", \"bn2\"]},"
    " {\"type\": \"relu\", \"name\": \"r2\"},"
    " {\"type\": \"conv2d\", \"name\": \"c3\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"add\", \"name\": \"res2\", \"inputs\": [\"c3\", \"r1\"]},"
    " {\"type\": \"relu\", \"name\": \"r3\"},"
    " {\"type\": \"conv2d\", \"name\": \"c4\", \"filters\": 16, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"relu\", \"name\": \"r4\"},"
    " {\"type\": \"conv2d\", \"name\": \"c5\", \"filters\": 24, \"kernel\": 3, \"padding\": 1},"
    " {\"type\": \"relu\", \"name\": \"r5\"},"
    " {\"type\": \"global_avgpool\", \"name\": \"gap\"},"
    " {\"type\": \"dense\", \"name\": \"out\", \"units\": \"classes\"}]}";

static void test_relu_pairs_net(void **state)
{
    char err[512] = "";
    const net_shape in = { 3, 9, 7 };
    enum { B = 8, SZ = B * 3 * 9 * 7 };
    for (int amp = 0; amp < 2; amp++) {
        const net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f,
                                .precision = amp ? PREC_AMP_BF16 : PREC_FP32 };
        double loss[2][4];
        float probs[2][B * 4];
        st_file *w[2];
        for (int run = 0; run < 2; run++) {
            if (run)
                assert_int_equal(setenv("KILN_RELU_FUSE", "0", 1), 0);
            assert_int_equal(setenv("KILN_INFER_FUSE", "0", 1), 0);
            net *n = train_four(RELU_PAIRS, in, false, &sv, 61, loss[run]);
            unsetenv("KILN_RELU_FUSE");
            unsetenv("KILN_INFER_FUSE");
            assert_int_equal(net_fused_relus(n), run ? 0 : 5);
            static float x[SZ];
            rng r;
            rng_seed(&r, 62);
            for (int i = 0; i < SZ; i++)
                x[i] = (float)rng_range(&r, -1, 1);
            assert_int_equal(net_predict(n, x, B, probs[run], err, sizeof err), 0);
            w[run] = snapshot(n, run ? "apart" : "fused");
            net_free(n);
        }
        assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
        assert_memory_equal(probs[0], probs[1], sizeof probs[0]);
        assert_same_tensors(w);
    }
}

/* The DAG with dropout and batch norm, trained twice from one seed: the
 * same losses bit for bit; another seed differs. */
static void test_graph_deterministic(void **state)
{
    char err[512] = "";
    const net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    double loss[3][6];
    for (int run = 0; run < 3; run++) {
        net *n = make(GRAPH, (net_shape){ 2, 7, 9 }, 5, 8, &sv, run < 2 ? 31 : 32);
        rng r;
        rng_seed(&r, 33);
        for (int s = 0; s < 6; s++) {
            float x[8 * 2 * 7 * 9];
            int32_t y[8];
            net_stats st;
            for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
                x[i] = (float)rng_range(&r, -1, 1);
            for (int i = 0; i < 8; i++)
                y[i] = (int32_t)(rng_next(&r) % 5);
            assert_int_equal(net_train_step(n, x, y, 8, 0.05f, &st, err, sizeof err), 0);
            loss[run][s] = st.loss;
        }
        net_free(n);
    }
    assert_memory_equal(loss[0], loss[1], sizeof loss[0]);
    assert_true(memcmp(loss[0], loss[2], sizeof loss[0]) != 0);
}

/* Dropout: only in training, the same masks for the same step (so a restored
 * step count repeats a run), different ones for the next step. */
static void test_dropout_modes(void **state)
{
    char err[512] = "";
    const net_solver plain = { .type = SOLVER_SGD, .lr = 0.0f };
    net *n = make("{\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dropout\", \"rate\": 0.5},"
                  " {\"type\": \"dense\", \"units\": \"classes\"}]}",
                  (net_shape){ SYN_C, SYN_H, SYN_W }, SYN_CLASSES, 16, &plain, 3);
    float x[16 * SYN_SIZE];
    int32_t y[16];
    rng r;
    rng_seed(&r, 4);
    synth(&r, x, y, 16);
    net_stats e1, e2, t0, t1, t0b;
    assert_int_equal(net_eval(n, x, y, 16, &e1, err, sizeof err), 0);
    assert_int_equal(net_get_step(n), 0);
    assert_int_equal(net_train_step(n, x, y, 16, 0.0f, &t0, err, sizeof err), 0);
    assert_int_equal(net_get_step(n), 1);
    assert_int_equal(net_train_step(n, x, y, 16, 0.0f, &t1, err, sizeof err), 0);
    assert_int_equal(net_eval(n, x, y, 16, &e2, err, sizeof err), 0);
    assert_true(e1.loss == e2.loss);              /* inference is deterministic: no mask */
    assert_true(t0.loss != t1.loss);              /* a new mask each step */
    assert_true(t0.loss != e1.loss);
    net_set_step(n, 0);
    assert_int_equal(net_train_step(n, x, y, 16, 0.0f, &t0b, err, sizeof err), 0);
    assert_true(t0.loss == t0b.loss);             /* the step's mask again */
    net_free(n);
}

/* Batch norm: training normalises with the batch's statistics and moves the
 * running ones by the momentum (saved with the weights); inference uses the
 * running ones. Input channels with known means and variances: after one
 * step from (0, 1) with momentum 0.5 the running mean is half the batch mean
 * and the variance 0.5 + 0.5 x the unbiased batch variance. */
static void test_batchnorm_running(void **state)
{
    char err[512] = "";
    const net_solver plain = { .type = SOLVER_SGD, .lr = 0.0f };
    const int B = 4, C = 2, HW = 9;
    net *n = make("{\"layers\": [{\"type\": \"batchnorm\", \"name\": \"bn\", \"momentum\": 0.5},"
                  " {\"type\": \"dense\", \"units\": \"classes\"}]}", (net_shape){ C, 3, 3 }, 3,
                  B, &plain, 5);
    float x[4 * 2 * 9];
    int32_t y[4] = { 0, 1, 2, 0 };
    rng r;
    rng_seed(&r, 6);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        x[i] = (float)(rng_range(&r, -1, 1) * (1 + (i / HW) % C) + 3.0 * ((i / HW) % C));
    net_stats t, e0, e1;
    assert_int_equal(net_eval(n, x, y, B, &e0, err, sizeof err), 0);
    assert_int_equal(net_train_step(n, x, y, B, 0.0f, &t, err, sizeof err), 0);
    assert_int_equal(net_eval(n, x, y, B, &e1, err, sizeof err), 0);
    assert_true(e0.loss != e1.loss);              /* the running statistics moved */
    st_file *f = snapshot(n, "bn");
    size_t cm, cv;
    const float *rm = tensor(f, "bn.running_mean", &cm), *rv = tensor(f, "bn.running_var", &cv);
    assert_int_equal(cm, C);
    assert_int_equal(cv, C);
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0, K = B * HW;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < HW; s++)
                m += x[(b * C + c) * HW + s];
        m /= K;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < HW; s++)
                v += (x[(b * C + c) * HW + s] - m) * (x[(b * C + c) * HW + s] - m);
        v /= K - 1;
        assert_true(fabs(rm[c] - 0.5 * m) <= 1e-5 * (1 + fabs(m)));
        assert_true(fabs(rv[c] - (0.5 + 0.5 * v)) <= 1e-5 * (1 + v));
    }
    /* and they come back with net_load */
    char path[96];
    snprintf(path, sizeof path, "/tmp/kiln-bn-%d.safetensors", (int)getpid());
    assert_int_equal(net_save(n, path, err, sizeof err), 0);
    net *m2 = make("{\"layers\": [{\"type\": \"batchnorm\", \"name\": \"bn\", \"momentum\": 0.5},"
                   " {\"type\": \"dense\", \"units\": \"classes\"}]}", (net_shape){ C, 3, 3 }, 3,
                   B, &plain, 5);
    assert_int_equal(net_load(m2, path, err, sizeof err), 0);
    net_stats e2;
    assert_int_equal(net_eval(m2, x, y, B, &e2, err, sizeof err), 0);
    assert_true(e2.loss == e1.loss);
    /* the same tensors through the state accessor, not among the parameters */
    net_param sp[4];
    assert_int_equal(net_state_tensors(n, sp, 4), 2);
    assert_string_equal(sp[0].name, "bn.running_mean");
    assert_string_equal(sp[1].name, "bn.running_var");
    assert_true(sp[0].grad == NULL && !sp[0].decay && sp[0].count == (size_t)C);
    float got[2];
    be_ctx *bc;
    const backend *bk = net_backend(n, &bc);
    assert_int_equal(bk->buf_download(bc, sp[0].value, 0, got, sizeof got, err, sizeof err), 0);
    assert_memory_equal(got, rm, sizeof got);
    net_param pp[8];
    size_t np = net_param_tensors(n, pp, 8);
    for (size_t k = 0; k < np; k++)
        assert_null(strstr(pp[k].name, "running"));
    unlink(path);
    net_free(m2);
    st_close(f);
    net_free(n);
}

/* Every built-in network builds for its input and takes training steps. */
static void test_builtins_step(void **state)
{
    static const struct { const char *name; net_shape in; int classes; int batch; } b[] = {
        { "lenet", { 1, 28, 28 }, 10, 2 },
        { "cifar10-cnn", { 3, 32, 32 }, 10, 2 },
        { "alexnet", { 3, 32, 32 }, 10, 2 },
        { "resnet20", { 3, 32, 32 }, 10, 2 },
        { "resnet18", { 3, 224, 224 }, 1000, 2 },
        { "resnet50", { 3, 224, 224 }, 1000, 2 },
    };
    const char *const *names = net_builtin_names();
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        char err[512] = "";
        bool listed = false;
        for (int k = 0; names[k]; k++)
            listed = listed || strcmp(names[k], b[i].name) == 0;
        assert_true(listed);
        net *n = make(net_builtin(b[i].name), b[i].in, b[i].classes, b[i].batch, &SGD, 1);
        size_t sz = (size_t)b[i].batch * b[i].in.c * b[i].in.h * b[i].in.w;
        float *x = malloc(sz * sizeof *x);
        int32_t y[2] = { 0, 1 };
        rng r;
        rng_seed(&r, 7);
        for (size_t k = 0; k < sz; k++)
            x[k] = (float)rng_range(&r, -1, 1);
        net_stats st;
        if (net_train_step(n, x, y, b[i].batch, 0.01f, &st, err, sizeof err) != 0) {
            print_error("%s: %s\n", b[i].name, err);
            fail();
        }
        /* a fresh net guesses: the loss is near log(classes) */
        /* a finite loss, and the step changed the weights: the same batch
         * again gives another loss */
        net_stats st2;
        assert_int_equal(net_train_step(n, x, y, b[i].batch, 0.01f, &st2, err, sizeof err), 0);
        if (!(isfinite(st.loss) && st.loss > 0 && isfinite(st2.loss) && st2.loss != st.loss)) {
            print_error("%s: losses %g, %g\n", b[i].name, st.loss, st2.loss);
            fail();
        }
        free(x);
        net_free(n);
    }
}

/* resnet20 learns: a few steps on a small synthetic CIFAR-shaped batch
 * (a class is a colour in a quadrant, under noise) bring the loss down. */
static void test_resnet20_learns(void **state)
{
    char err[512] = "";
    const net_solver sv = { .type = SOLVER_SGD, .lr = 0.05f, .momentum = 0.9f };
    const int B = 16, S = 3 * 32 * 32;
    net *n = make(net_builtin("resnet20"), (net_shape){ 3, 32, 32 }, 4, B, &sv, 11);
    float *x = malloc((size_t)B * S * sizeof *x);
    int32_t y[16];
    rng r;
    rng_seed(&r, 12);
    for (int i = 0; i < B; i++) {
        y[i] = (int32_t)(i % 4);
        for (int c = 0; c < 3; c++)
            for (int h = 0; h < 32; h++)
                for (int w = 0; w < 32; w++) {
                    int q = (h >= 16) * 2 + (w >= 16);
                    x[(size_t)i * S + (c * 32 + h) * 32 + w] =
                        (float)((q == y[i] && c == y[i] % 3 ? 1.0 : 0.0) + 0.3 * rng_normal(&r));
                }
    }
    double first = 0, last = 0;
    for (int s = 0; s < 8; s++) {
        net_stats st;
        if (net_train_step(n, x, y, B, 0.05f, &st, err, sizeof err) != 0) {
            print_error("step %d: %s\n", s, err);
            fail();
        }
        if (s == 0)
            first = st.loss;
        last = st.loss;
    }
    if (!(last < 0.5 * first)) {
        print_error("resnet20 loss %.4f -> %.4f\n", first, last);
        fail();
    }
    free(x);
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
    /* Names are read once, at the border (engine/settings.h); a value no name
     * gives is refused by net_create. */
    net_devices tpu;
    assert_int_equal(net_devices_parse("tpu", &tpu, err, sizeof err), -1);
    assert_string_equal(err, "backend \"tpu\" is unknown (cpu or cuda, optionally with devices: "
                        "cuda:0,1)");
#ifndef KILN_HAVE_CUDA
    net_devices gpu = { .kind = BACKEND_CUDA, .count = 1 };
    assert_null(net_create(spec, in, SYN_CLASSES, 4, &gpu, &SGD, 1, err, sizeof err));
    assert_string_equal(err, "backend \"cuda\" is not compiled into this kiln");
#endif
    net_solver rmsprop = { .type = SOLVER_COUNT, .lr = 0.001f };
    assert_int_equal(solver_type_parse("rmsprop", &rmsprop.type), -1);
    assert_null(net_create(spec, in, SYN_CLASSES, 4, NULL, &rmsprop, 1, err, sizeof err));
    assert_string_equal(err, "solver type 3 is unknown (use sgd, adam or adamw)");
    assert_null(net_create(spec, in, SYN_CLASSES, 0, NULL, &SGD, 1, err, sizeof err));
    assert_string_equal(err, "batch size must be positive (got 0)");
    assert_null(net_create(spec, (net_shape){ 1, 1, 1 }, SYN_CLASSES, 4, NULL, &SGD, 1, err,
                           sizeof err));
    assert_string_equal(err, "layer 3 (maxpool \"maxpool3\"): kernel 2 is larger than its 1x1 "
                        "input");
    /* far more memory than any machine has */
    assert_null(net_create(spec, (net_shape){ 1, 2048, 2048 }, SYN_CLASSES, 4096, NULL, &SGD,
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
        cmocka_unit_test(test_graph_gradient),
        cmocka_unit_test(test_graph_deterministic),
        cmocka_unit_test(test_blocked_net),
        cmocka_unit_test(test_channels_last_conv),
        cmocka_unit_test(test_relu_pairs_net),
        cmocka_unit_test(test_dropout_modes),
        cmocka_unit_test(test_batchnorm_running),
        cmocka_unit_test(test_builtins_step),
        cmocka_unit_test(test_resnet20_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
