/* The metrics endpoint's selection (server/metric_select.h): min/max
 * downsampling against hand-worked examples, the tag filter, bad tag lists. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/metric_select.h"

static void all_kept_when_few(void **state)
{
    (void)state;
    double v[] = { 3, 1, 2 };
    size_t keep[3];
    assert_int_equal(metric_downsample(v, 3, 3, keep), 3);
    assert_int_equal(keep[0], 0);
    assert_int_equal(keep[2], 2);
    assert_int_equal(metric_downsample(v, 0, 5, keep), 0);
}

/* 10 points to 6: first and last, then 2 buckets of the 8 between
 * (indices 1-4: values 1 9 3 7 -> min at 1, max at 2; indices 5-8: values
 * 2 8 4 6 -> min at 5, max at 6). */
static void min_max_per_bucket(void **state)
{
    (void)state;
    double v[] = { 5, 1, 9, 3, 7, 2, 8, 4, 6, 0 };
    size_t keep[6];
    size_t k = metric_downsample(v, 10, 6, keep);
    size_t want[] = { 0, 1, 2, 5, 6, 9 };
    assert_int_equal(k, 6);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(keep[i], want[i]);
}

/* A single spike among 1000 flat points survives a reduction to 10, and an
 * odd max_points keeps no more than it allows. */
static void a_spike_survives(void **state)
{
    (void)state;
    double v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = 1.0 - i * 1e-4;
    v[617] = 50.0;
    v[200] = -3.0;
    size_t keep[11];
    size_t k = metric_downsample(v, 1000, 11, keep);
    assert_true(k <= 11);
    int spike = 0, dip = 0;
    for (size_t i = 0; i < k; i++) {
        spike += keep[i] == 617;
        dip += keep[i] == 200;
        if (i)
            assert_true(keep[i] > keep[i - 1]);
    }
    assert_int_equal(spike, 1);
    assert_int_equal(dip, 1);
    assert_int_equal(keep[0], 0);
    assert_int_equal(keep[k - 1], 999);
}

/* max_points 2: the ends alone. A bucket of one point whose min and max are
 * that point keeps it once; NaN is never an extreme. */
static void edge_cases(void **state)
{
    (void)state;
    double v[] = { 4, 8, 1, 6 };
    size_t keep[4];
    size_t k = metric_downsample(v, 4, 2, keep);
    assert_int_equal(k, 2);
    assert_int_equal(keep[0], 0);
    assert_int_equal(keep[1], 3);
    /* 5 points to 4: one bucket of indices 1-3 (NaN 9 2): max 9 at 2, min 2 at 3 */
    double w[] = { 0, NAN, 9, 2, 5 };
    k = metric_downsample(w, 5, 4, keep);
    size_t want[] = { 0, 2, 3, 4 };
    assert_int_equal(k, 4);
    for (size_t i = 0; i < k; i++)
        assert_int_equal(keep[i], want[i]);
}

static store_metric metric(const char *tag, int64_t step, double value)
{
    store_metric m;
    memset(&m, 0, sizeof m);
    snprintf(m.tag, sizeof m.tag, "%s", tag);
    m.step = step;
    m.value = value;
    return m;
}

/* Interleaved tags: the filter keeps the order; each tag downsampled on its own. */
static void select_filters_and_samples_each_tag(void **state)
{
    (void)state;
    store_metric ms[60];
    size_t n = 0;
    for (int s = 1; s <= 20; s++) {
        ms[n++] = metric("train/loss", s, s == 9 ? 100.0 : 1.0 / s);
        ms[n++] = metric("lr", s, 0.1);
        ms[n++] = metric("val/loss", s, 2.0 / s);
    }
    api_error e;
    assert_int_equal(metric_select(ms, &n, "train/loss,val/loss", 0, &e), 0);
    assert_int_equal(n, 40);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(ms[i].tag, i % 2 ? "val/loss" : "train/loss");
    assert_int_equal(metric_select(ms, &n, NULL, 4, &e), 0);
    /* each tag: steps 1 and 20, and one bucket of steps 2..19 (train: max 100 at
     * 9, min 1/19 at 19; val: max at 2, min at 19) */
    assert_int_equal(n, 8);
    int64_t train[4], val[4];
    size_t nt = 0, nv = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(ms[i].tag, "train/loss"))
            train[nt++] = ms[i].step;
        else
            val[nv++] = ms[i].step;
    }
    assert_int_equal(nt, 4);
    assert_int_equal(nv, 4);
    int64_t want_t[] = { 1, 9, 19, 20 }, want_v[] = { 1, 2, 19, 20 };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(train[i], want_t[i]);
        assert_int_equal(val[i], want_v[i]);
    }
}

static void bad_tag_lists(void **state)
{
    (void)state;
    store_metric ms[1] = { metric("lr", 1, 0.1) };
    const char *bad[] = { "", ",", "lr,", "train/loss,,lr", "a b", "x;drop",
                          "a23456789012345678901234567890123456789012345678" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        size_t n = 1;
        api_error e;
        memset(&e, 0, sizeof e);
        assert_int_equal(metric_select(ms, &n, bad[i], 0, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.code, "invalid_field");
    }
    char many[40 * 4];
    many[0] = '\0';
    for (int i = 0; i < 33; i++)
        strcat(many, i ? ",t" : "t");
    size_t n = 1;
    api_error e;
    assert_int_equal(metric_select(ms, &n, many, 0, &e), -1);
    assert_int_equal(e.status, 400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_kept_when_few),
        cmocka_unit_test(min_max_per_bucket),
        cmocka_unit_test(a_spike_survives),
        cmocka_unit_test(edge_cases),
        cmocka_unit_test(select_filters_and_samples_each_tag),
        cmocka_unit_test(bad_tag_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
