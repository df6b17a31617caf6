/* tests/unit/test_eval_metrics.c: an evaluation's counts (jobs/eval_metrics.h)
 * against values computed by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/eval_metrics.h"

#define NEAR(a, b) assert_true(fabs((double)(a) - (double)(b)) < 1e-9)

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

static const cJSON *class_row(const cJSON *r, int c)
{
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "per_class"), c);
    assert_non_null(row);
    assert_int_equal((int)num(row, "index"), c);
    return row;
}

static void check_prf(const cJSON *o, double p, double r, double f1)
{
    NEAR(num(o, "precision"), p);
    NEAR(num(o, "recall"), r);
    NEAR(num(o, "f1"), f1);
}

/* Three classes, six images, two of them wrong:
 *   true 0: predicted 0, 1, 0     true 1: predicted 1, 0     true 2: predicted 2 */
static void three_classes(void **state)
{
    (void)state;
    static const float probs[] = {
        0.7f, 0.2f, 0.1f,   /* true 0 -> 0 */
        0.2f, 0.5f, 0.3f,   /* true 0 -> 1 */
        0.1f, 0.8f, 0.1f,   /* true 1 -> 1 */
        0.6f, 0.3f, 0.1f,   /* true 1 -> 0 */
        0.3f, 0.3f, 0.4f,   /* true 2 -> 2 */
        0.5f, 0.1f, 0.4f,   /* true 0 -> 0 */
    };
    static const int32_t labels[] = { 0, 0, 1, 1, 2, 0 };
    const char *const names[] = { "cat", "dog", "eel" };
    eval_acc a;
    char err[256];
    assert_int_equal(eval_acc_init(&a, 3, err, sizeof err), 0);
    assert_int_equal(a.topk, 3);                     /* top-5 with three classes: all three */
    /* two batches, the second starting at image 4 of the split */
    assert_int_equal(eval_acc_add(&a, probs, labels, 4, 0, err, sizeof err), 0);
    assert_int_equal(eval_acc_add(&a, probs + 12, labels + 4, 2, 4, err, sizeof err), 0);
    static const int64_t want[9] = { 2, 1, 0, 1, 1, 0, 0, 0, 1 };
    for (int i = 0; i < 9; i++)
        assert_int_equal(a.matrix[i], want[i]);

    cJSON *r = eval_acc_to_json(&a, names, 7, "val");
    assert_non_null(r);
    assert_int_equal((int)num(r, "count"), 6);
    NEAR(num(r, "top1_accuracy"), 4.0 / 6);
    NEAR(num(r, "top5_accuracy"), 1.0);
    assert_int_equal((int)num(r, "top_k"), 3);
    double loss = -(log(0.7f) + log(0.2f) + log(0.8f) + log(0.3f) + log(0.4f) + log(0.5f)) / 6;
    assert_true(fabs(num(r, "loss") - loss) < 1e-6);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "confusion_matrix");
    assert_int_equal(cJSON_GetArraySize(m), 3);
    for (int t = 0; t < 3; t++)
        for (int p = 0; p < 3; p++)
            assert_int_equal((int)cJSON_GetArrayItem(cJSON_GetArrayItem(m, t), p)->valuedouble, want[t * 3 + p]);

    check_prf(class_row(r, 0), 2.0 / 3, 2.0 / 3, 2.0 / 3);
    check_prf(class_row(r, 1), 0.5, 0.5, 0.5);
    check_prf(class_row(r, 2), 1, 1, 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(class_row(r, 1), "class")->valuestring, "dog");
    assert_int_equal((int)num(class_row(r, 0), "support"), 3);
    assert_int_equal((int)num(class_row(r, 0), "predicted"), 3);
    double macro = (2.0 / 3 + 0.5 + 1) / 3;
    check_prf(cJSON_GetObjectItemCaseSensitive(r, "macro_avg"), macro, macro, macro);
    double weighted = (2.0 / 3 * 3 + 0.5 * 2 + 1) / 6;
    check_prf(cJSON_GetObjectItemCaseSensitive(r, "weighted_avg"), weighted, weighted, weighted);

    const cJSON *miss = cJSON_GetObjectItemCaseSensitive(r, "misclassified");
    assert_int_equal(cJSON_GetArraySize(miss), 2);
    assert_int_equal((int)num(r, "misclassified_total"), 2);
    const cJSON *m0 = cJSON_GetArrayItem(miss, 0), *m1 = cJSON_GetArrayItem(miss, 1);
    assert_int_equal((int)num(m0, "index"), 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "url")->valuestring,
                        "/api/v1/datasets/7/image.png?split=val&index=1");
    assert_int_equal((int)num(m0, "true_index"), 0);
    assert_int_equal((int)num(m0, "predicted_index"), 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "true_label")->valuestring, "cat");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m0, "predicted_label")->valuestring, "dog");
    assert_true(fabs(num(m0, "probability") - 0.5) < 1e-6);
    assert_true(fabs(num(m0, "true_probability") - 0.2) < 1e-6);
    assert_int_equal((int)num(m1, "index"), 3);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(m1, "predicted_label")->valuestring, "cat");
    cJSON_Delete(r);
    eval_acc_free(&a);
}

/* Classes never predicted or never present: precision, recall and F1 are 0
 * where their denominators are, and the weighted average leaves out what
 * has no support. */
static void zero_division(void **state)
{
    (void)state;
    static const float probs[] = {
        0.1f, 0.9f, 0.0f,   /* true 0 -> 1 */
        0.8f, 0.1f, 0.1f,   /* true 0 -> 0 */
    };
    static const int32_t labels[] = { 0, 0 };
    const char *const names[] = { "a", "b", "c" };
    eval_acc a;
    char err[256];
    assert_int_equal(eval_acc_init(&a, 3, err, sizeof err), 0);
    assert_int_equal(eval_acc_add(&a, probs, labels, 2, 0, err, sizeof err), 0);
    cJSON *r = eval_acc_to_json(&a, names, 1, "test");
    check_prf(class_row(r, 0), 1, 0.5, 2.0 / 3);    /* predicted once, right */
    check_prf(class_row(r, 1), 0, 0, 0);            /* predicted once, never true */
    check_prf(class_row(r, 2), 0, 0, 0);            /* neither */
    check_prf(cJSON_GetObjectItemCaseSensitive(r, "macro_avg"), 1.0 / 3, 0.5 / 3, 2.0 / 9);
    check_prf(cJSON_GetObjectItemCaseSensitive(r, "weighted_avg"), 1, 0.5, 2.0 / 3);
    cJSON_Delete(r);
    eval_acc_free(&a);

    /* Two classes, everything predicted as the first: the second, with
     * support, is never predicted. */
    static const float p2[] = { 0.6f, 0.4f, 0.7f, 0.3f };
    static const int32_t l2[] = { 1, 1 };
    assert_int_equal(eval_acc_init(&a, 2, err, sizeof err), 0);
    assert_int_equal(eval_acc_add(&a, p2, l2, 2, 0, err, sizeof err), 0);
    r = eval_acc_to_json(&a, names, 1, "test");
    check_prf(class_row(r, 0), 0, 0, 0);
    check_prf(class_row(r, 1), 0, 0, 0);
    NEAR(num(r, "top1_accuracy"), 0);
    NEAR(num(r, "top5_accuracy"), 1);               /* top-2 of two classes */
    assert_int_equal((int)num(r, "top_k"), 2);
    cJSON_Delete(r);
    eval_acc_free(&a);

    /* No images at all: null loss and accuracies, an all-zero matrix. */
    assert_int_equal(eval_acc_init(&a, 2, err, sizeof err), 0);
    r = eval_acc_to_json(&a, names, 1, "test");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "loss")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(r, "top1_accuracy")));
    check_prf(class_row(r, 1), 0, 0, 0);
    cJSON_Delete(r);
    eval_acc_free(&a);
}

/* Top-5 among six classes: a hit while fewer than five classes are above
 * the true one; ties count for the true class. */
static void top5_of_six(void **state)
{
    (void)state;
    static const float probs[] = {
        0.3f, 0.2f, 0.2f, 0.15f, 0.1f, 0.05f,   /* true 5: five above it, a miss */
        0.3f, 0.2f, 0.2f, 0.15f, 0.1f, 0.05f,   /* true 4: four above, a hit */
        1 / 6.f, 1 / 6.f, 1 / 6.f, 1 / 6.f, 1 / 6.f, 1 / 6.f,   /* true 5: all tied, a hit; top-1 says 0 */
    };
    static const int32_t labels[] = { 5, 4, 5 };
    eval_acc a;
    char err[256];
    assert_int_equal(eval_acc_init(&a, 6, err, sizeof err), 0);
    assert_int_equal(a.topk, 5);
    assert_int_equal(eval_acc_add(&a, probs, labels, 3, 0, err, sizeof err), 0);
    assert_int_equal(a.topk_hits, 2);
    assert_int_equal(a.top1, 0);
    assert_int_equal(a.matrix[5 * 6 + 0], 2);       /* both 5s predicted as 0 (the first of the ties) */
    assert_int_equal(a.matrix[4 * 6 + 0], 1);
    eval_acc_free(&a);
}

/* Misclassified images kept: EVAL_MISS_PER_PAIR per pair, EVAL_MISS_MAX in all;
 * the total counts every one. */
static void miss_limits(void **state)
{
    (void)state;
    enum { N = 40 };
    eval_acc a;
    char err[256];
    assert_int_equal(eval_acc_init(&a, N, err, sizeof err), 0);
    float *p = calloc(N, sizeof *p);
    int32_t label = 0;
    /* 25 images of class 0 taken for class 1 */
    p[1] = 1;
    for (int i = 0; i < 25; i++)
        assert_int_equal(eval_acc_add(&a, p, &label, 1, i, err, sizeof err), 0);
    assert_int_equal(a.nmisses, EVAL_MISS_PER_PAIR);
    assert_int_equal(a.misses[EVAL_MISS_PER_PAIR - 1].index, EVAL_MISS_PER_PAIR - 1);
    /* then every other pair, twice over */
    int64_t index = 25, misses = 25;
    for (int round = 0; round < 20; round++)
        for (int t = 0; t < N; t++)
            for (int q = 0; q < N; q++) {
                if (q == t)
                    continue;
                memset(p, 0, N * sizeof *p);
                p[q] = 1;
                label = t;
                assert_int_equal(eval_acc_add(&a, p, &label, 1, index++, err, sizeof err), 0);
                misses++;
            }
    assert_int_equal(a.nmisses, EVAL_MISS_MAX);
    for (size_t i = 0; i < a.nmisses; i++)
        assert_true(a.pair_kept[(size_t)a.misses[i].true_class * N + a.misses[i].predicted] <=
                    EVAL_MISS_PER_PAIR);
    const char **names = calloc(N, sizeof *names);
    for (int i = 0; i < N; i++)
        names[i] = "x";
    cJSON *r = eval_acc_to_json(&a, names, 1, "train");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "misclassified")), EVAL_MISS_MAX);
    assert_int_equal((int64_t)num(r, "misclassified_total"), misses);
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(r, "misclassified_limits");
    assert_int_equal((int)num(lim, "per_pair"), EVAL_MISS_PER_PAIR);
    assert_int_equal((int)num(lim, "total"), EVAL_MISS_MAX);
    cJSON_Delete(r);
    free(names);
    free(p);
    eval_acc_free(&a);
}

static void bad_input(void **state)
{
    (void)state;
    eval_acc a;
    char err[256] = "";
    assert_int_equal(eval_acc_init(&a, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "classes"));
    assert_int_equal(eval_acc_init(&a, EVAL_CLASSES_MAX + 1, err, sizeof err), -1);
    assert_int_equal(eval_acc_init(&a, 2, err, sizeof err), 0);
    static const float p[] = { 0.5f, 0.5f, 0.5f, 0.5f };
    static const int32_t labels[] = { 1, 2 };
    assert_int_equal(eval_acc_add(&a, p, labels, 2, 10, err, sizeof err), -1);
    assert_non_null(strstr(err, "image 11 has label 2"));
    assert_int_equal(a.count, 0);                    /* nothing of the batch counted */
    assert_int_equal(a.matrix[1 * 2 + 0], 0);
    eval_acc_free(&a);
    eval_acc_free(&a);                               /* twice is fine */
    eval_acc_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(three_classes),
        cmocka_unit_test(zero_division),
        cmocka_unit_test(top5_of_six),
        cmocka_unit_test(miss_limits),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
