/* tests/unit/test_sweep.c: sweeps' pure part (jobs/sweep.h): the request's
 * space and fields, grid enumeration, seeded sampling, the trials' requests,
 * and asha's promotion and stopping decisions against a hand-worked example. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "jobs/sweep.h"

#define BASE "\"base\": {\"dataset_id\": 1, \"network\": \"lenet\", \"epochs\": 2}"

static cJSON *parse_or_die(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    return j;
}

/* Parses text: 0 with *s, or -1 with e. */
static int parse(const char *text, sweep_spec *s, api_error *e)
{
    cJSON *j = parse_or_die(text);
    memset(e, 0, sizeof *e);
    int rc = sweep_spec_parse(j, s, e);
    cJSON_Delete(j);
    return rc;
}

/* text is refused with a 400 whose message holds want. */
static void refused(const char *text, const char *code, const char *want)
{
    sweep_spec s;
    api_error e;
    int rc = parse(text, &s, &e);
    if (rc == 0)
        sweep_spec_free(&s);
    assert_int_equal(rc, -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, code);
    if (!strstr(e.message, want))
        fail_msg("message \"%s\" does not name \"%s\"", e.message, want);
}

static void test_bad_spaces(void **state)
{
    (void)state;
    refused("{" BASE ", \"method\": \"grid\", \"space\": {\"solver.lr\": {\"uniform\": [0.1, 1]}}}",
            "invalid_field", "space.solver.lr: a grid takes only value lists");
    refused("{" BASE ", \"method\": \"random\", \"trials\": 3, \"space\": {\"solver.lr\": {\"normal\": [0, 1]}}}",
            "unknown_field", "space.solver.lr.normal");
    refused("{" BASE ", \"method\": \"random\", \"trials\": 3, \"space\": {\"solver.lr\": {\"log_uniform\": [0, 1]}}}",
            "invalid_field", "space.solver.lr.log_uniform: lo must be above 0");
    refused("{" BASE ", \"method\": \"random\", \"trials\": 3, \"space\": {\"batch_size\": {\"int_uniform\": [8, 64.5]}}}",
            "invalid_field", "space.batch_size.int_uniform");
    refused("{" BASE ", \"method\": \"random\", \"trials\": 3, \"space\": {\"solver.momentum\": {\"uniform\": [0.9, 0.1]}}}",
            "invalid_field", "space.solver.momentum.uniform must be [lo, hi]");
    refused("{" BASE ", \"method\": \"grid\", \"space\": {\"solver.momentum\": {\"values\": []}}}",
            "invalid_field", "space.solver.momentum.values");
    refused("{" BASE ", \"method\": \"grid\", \"space\": {\"solver..lr\": {\"values\": [1]}}}",
            "invalid_field", "space.solver..lr");
    refused("{" BASE ", \"method\": \"grid\", \"space\": {\"solver.lr\": {\"values\": [1], \"uniform\": [0, 1]}}}",
            "invalid_field", "space.solver.lr must be one of");
    refused("{" BASE ", \"method\": \"grid\", \"space\": {}}", "invalid_field", "space must be an object");
    refused("{" BASE ", \"method\": \"random\", \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "missing_field", "trials is required");
    refused("{" BASE ", \"method\": \"grid\", \"trials\": 4, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "invalid_field", "trials: a grid runs every point");
    refused("{" BASE ", \"method\": \"asha\", \"trials\": 4, \"max_epochs\": 9, "
            "\"space\": {\"epochs\": {\"values\": [1, 2]}}}", "invalid_field", "space.epochs");
    refused("{" BASE ", \"method\": \"asha\", \"trials\": 4, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "missing_field", "max_epochs");
    refused("{" BASE ", \"method\": \"random\", \"trials\": 4, \"eta\": 3, "
            "\"space\": {\"solver.lr\": {\"values\": [0.1]}}}", "invalid_field", "eta goes with method asha");
    refused("{" BASE ", \"method\": \"grid\", \"metric\": \"val/auc\", \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "invalid_field", "metric must be one of");
    refused("{" BASE ", \"method\": \"grid\", \"mode\": \"up\", \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "invalid_field", "mode must be");
    refused("{" BASE ", \"method\": \"grid\", \"trails\": 2, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "unknown_field", "trails");
    refused("{\"method\": \"grid\", \"space\": {\"solver.lr\": {\"values\": [0.1]}}}", "missing_field", "base");
    refused("{" BASE ", \"method\": \"bayes\", \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
            "invalid_field", "method must be grid, random or asha");
}

static void test_defaults_and_round_trip(void **state)
{
    (void)state;
    sweep_spec s, s2;
    api_error e;
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 9, \"max_epochs\": 9, "
                           "\"metric\": \"val/loss\", \"space\": {\"solver.lr\": {\"log_uniform\": [0.001, 0.1]}}}",
                           &s, &e), 0);
    assert_false(s.maximize);                 /* a loss: lower is better unless mode says */
    assert_int_equal(s.eta, 3);
    assert_int_equal(s.parallel, SWEEP_DEFAULT_PARALLEL);
    assert_int_equal(s.nrungs, 3);
    assert_int_equal(s.rungs[0], 1);
    assert_int_equal(s.rungs[1], 3);
    assert_int_equal(s.rungs[2], 9);
    cJSON *j = sweep_spec_to_json(&s);
    assert_non_null(j);
    assert_int_equal(sweep_spec_parse(j, &s2, &e), 0);
    cJSON_Delete(j);
    assert_int_equal(s2.trials, 9);
    assert_int_equal(s2.nrungs, 3);
    assert_false(s2.maximize);
    assert_true(s2.params[0].dist == DIST_LOG_UNIFORM && s2.params[0].lo == 0.001 && s2.params[0].hi == 0.1);
    sweep_spec_free(&s);
    sweep_spec_free(&s2);

    /* rungs from the top down as Determined makes them: 10, 10/3, 10/9 */
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 9, \"max_epochs\": 10, "
                           "\"space\": {\"solver.lr\": {\"values\": [0.1]}}}", &s, &e), 0);
    assert_int_equal(s.nrungs, 3);
    assert_int_equal(s.rungs[0], 1);
    assert_int_equal(s.rungs[1], 3);
    assert_int_equal(s.rungs[2], 10);
    assert_true(s.maximize);
    sweep_spec_free(&s);
    /* min_epochs cuts the bottom: 16, 4 (1 < 2 is not a rung) */
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 9, \"min_epochs\": 2, \"max_epochs\": 16, "
                           "\"eta\": 4, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}", &s, &e), 0);
    assert_int_equal(s.nrungs, 2);
    assert_int_equal(s.rungs[0], 4);
    assert_int_equal(s.rungs[1], 16);
    sweep_spec_free(&s);
}

/* random over lists alone: the points in a seeded order, none twice */
static void test_lists_without_replacement(void **state)
{
    (void)state;
    sweep_spec s;
    api_error e;
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 9, \"max_epochs\": 9, \"seed\": 5, "
                           "\"space\": {\"solver.lr\": {\"values\": [0.1, 0.01, 0.001]}, "
                           "\"solver.momentum\": {\"values\": [0.8, 0.9, 0.95]}}}", &s, &e), 0);
    int seen[3][3] = { { 0 } }, in_grid_order = 0;
    for (int i = 0; i < 9; i++) {
        cJSON *v = sweep_trial_values(&s, i);
        double lr = cJSON_GetObjectItem(v, "solver.lr")->valuedouble;
        double m = cJSON_GetObjectItem(v, "solver.momentum")->valuedouble;
        int a = lr == 0.1 ? 0 : lr == 0.01 ? 1 : 2, b = m == 0.8 ? 0 : m == 0.9 ? 1 : 2;
        seen[a][b]++;
        in_grid_order += a * 3 + b == i;
        cJSON_Delete(v);
    }
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            assert_int_equal(seen[a][b], 1);
    assert_true(in_grid_order < 9);                   /* shuffled */
    sweep_spec_free(&s);
}

static void test_grid_enumeration(void **state)
{
    (void)state;
    sweep_spec s;
    api_error e;
    assert_int_equal(parse("{" BASE ", \"method\": \"grid\", \"space\": {\"solver.lr\": {\"values\": [0.1, 0.01, 0.001]}, "
                           "\"batch_size\": {\"values\": [32, 64]}}}", &s, &e), 0);
    assert_int_equal(s.trials, 6);
    static const double lr[6] = { 0.1, 0.1, 0.01, 0.01, 0.001, 0.001 };
    static const int bs[6] = { 32, 64, 32, 64, 32, 64 };
    for (int i = 0; i < 6; i++) {
        cJSON *v = sweep_trial_values(&s, i);
        assert_non_null(v);
        assert_int_equal(cJSON_GetArraySize(v), 2);
        assert_string_equal(v->child->string, "solver.lr");     /* the space's order */
        assert_true(cJSON_GetObjectItem(v, "solver.lr")->valuedouble == lr[i]);
        assert_int_equal(cJSON_GetObjectItem(v, "batch_size")->valueint, bs[i]);
        cJSON_Delete(v);
    }
    assert_null(sweep_trial_values(&s, 6));
    sweep_spec_free(&s);

    refused("{" BASE ", \"method\": \"grid\", \"space\": {\"a\": {\"values\": [1,2,3,4,5,6,7,8,9,10]}, "
            "\"b\": {\"values\": [1,2,3,4,5,6,7,8,9,10]}, \"c\": {\"values\": [1,2,3,4,5,6,7,8,9,10]}, "
            "\"d\": {\"values\": [1, 2]}}}", "invalid_field", "the grid has 2000 points");
}

static void test_random_sampling(void **state)
{
    (void)state;
    const char *text = "{" BASE ", \"method\": \"random\", \"trials\": 1000, \"seed\": %d, \"space\": {"
                       "\"solver.lr\": {\"log_uniform\": [0.0001, 0.1]}, \"solver.momentum\": {\"uniform\": [0.5, 0.99]}, "
                       "\"batch_size\": {\"int_uniform\": [8, 12]}, \"solver.type\": {\"values\": [\"sgd\", \"adam\"]}}}";
    char buf[600];
    sweep_spec s, t;
    api_error e;
    snprintf(buf, sizeof buf, text, 7);
    assert_int_equal(parse(buf, &s, &e), 0);
    snprintf(buf, sizeof buf, text, 8);
    assert_int_equal(parse(buf, &t, &e), 0);
    int below_mid = 0, below_lin_mid = 0, ints[5] = { 0 }, sgd = 0, same_other_seed = 0;
    for (int i = 0; i < 1000; i++) {
        cJSON *v = sweep_trial_values(&s, i), *again = sweep_trial_values(&s, i), *other = sweep_trial_values(&t, i);
        assert_true(cJSON_Compare(v, again, true));              /* the same trial again: same values */
        double lr = cJSON_GetObjectItem(v, "solver.lr")->valuedouble;
        double m = cJSON_GetObjectItem(v, "solver.momentum")->valuedouble;
        const cJSON *b = cJSON_GetObjectItem(v, "batch_size");
        assert_true(lr >= 0.0001 && lr <= 0.1);
        assert_true(m >= 0.5 && m <= 0.99);
        assert_true(b->valuedouble == floor(b->valuedouble) && b->valueint >= 8 && b->valueint <= 12);
        ints[b->valueint - 8]++;
        below_mid += lr < sqrt(0.0001 * 0.1);                     /* the middle in log space */
        below_lin_mid += lr < (0.0001 + 0.1) / 2;
        sgd += !strcmp(cJSON_GetObjectItem(v, "solver.type")->valuestring, "sgd");
        same_other_seed += cJSON_GetObjectItem(other, "solver.lr")->valuedouble == lr;
        cJSON_Delete(v);
        cJSON_Delete(again);
        cJSON_Delete(other);
    }
    /* log-uniform: half below the geometric middle (binomial sd ~16), nearly
     * 90% below the linear middle (where a uniform draw would put half) */
    assert_in_range(below_mid, 450, 550);
    assert_in_range(below_lin_mid, 860, 940);                   /* log(500) / log(1000) = 0.90 of them */
    for (int k = 0; k < 5; k++)
        assert_in_range(ints[k], 150, 250);                      /* each of 8..12, both ends included */
    assert_in_range(sgd, 450, 550);
    assert_true(same_other_seed < 5);                            /* another seed, other values */
    sweep_spec_free(&s);
    sweep_spec_free(&t);
}

static void test_trial_request(void **state)
{
    (void)state;
    sweep_spec s;
    api_error e;
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 3, \"max_epochs\": 9, \"min_epochs\": 1, "
                           "\"space\": {\"solver.lr\": {\"values\": [0.05]}, \"batch_size\": {\"values\": [16]}}}",
                           &s, &e), 0);
    cJSON *v = sweep_trial_values(&s, 0);
    cJSON *req = sweep_trial_request(&s, v, 3, &e);
    assert_non_null(req);
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(req, "solver"), "lr")->valuedouble == 0.05);
    assert_int_equal(cJSON_GetObjectItem(req, "batch_size")->valueint, 16);
    assert_int_equal(cJSON_GetObjectItem(req, "epochs")->valueint, 3);            /* the rung's */
    assert_int_equal(cJSON_GetObjectItem(req, "snapshot_interval")->valueint, 1);  /* gcd of 1, 3, 9 */
    assert_int_equal(cJSON_GetObjectItem(req, "dataset_id")->valueint, 1);
    /* the base itself is untouched */
    assert_null(cJSON_GetObjectItem(s.base, "solver"));
    cJSON_Delete(req);
    cJSON_Delete(v);
    sweep_spec_free(&s);
}

static void test_check_requests(void **state)
{
    (void)state;
    sweep_spec s;
    api_error e;
    /* a grid point out of the job's range, named with its values */
    assert_int_equal(parse("{" BASE ", \"method\": \"grid\", \"space\": {\"solver.lr\": {\"values\": [0.1, 50]}}}",
                           &s, &e), 0);
    assert_int_equal(sweep_check_requests(&s, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "{\"solver.lr\":50}"));
    assert_non_null(strstr(e.message, "solver.lr"));
    sweep_spec_free(&s);
    /* a path that is no job field */
    assert_int_equal(parse("{" BASE ", \"method\": \"random\", \"trials\": 2, \"space\": {\"solver.lrx\": {\"uniform\": [0.1, 0.2]}}}",
                           &s, &e), 0);
    assert_int_equal(sweep_check_requests(&s, &e), -1);
    assert_string_equal(e.code, "unknown_field");
    assert_non_null(strstr(e.message, "solver.lrx"));
    sweep_spec_free(&s);
    /* a range whose high end is out of the job's range (a sample alone might miss it) */
    assert_int_equal(parse("{" BASE ", \"method\": \"random\", \"trials\": 1, \"space\": {\"solver.momentum\": {\"uniform\": [0.5, 1.5]}}}",
                           &s, &e), 0);
    assert_int_equal(sweep_check_requests(&s, &e), -1);
    assert_non_null(strstr(e.message, "solver.momentum"));
    sweep_spec_free(&s);
    /* asha with a cosine schedule: its rate depends on the run's length */
    assert_int_equal(parse("{\"base\": {\"dataset_id\": 1, \"network\": \"lenet\", \"lr_policy\": {\"type\": \"cosine\"}}, "
                           "\"method\": \"asha\", \"trials\": 2, \"max_epochs\": 3, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
                           &s, &e), 0);
    assert_int_equal(sweep_check_requests(&s, &e), -1);
    assert_non_null(strstr(e.message, "lr_policy.type"));
    sweep_spec_free(&s);
    /* asha with early stopping: the sweep decides when its trials stop */
    assert_int_equal(parse("{\"base\": {\"dataset_id\": 1, \"network\": \"lenet\", \"early_stopping\": {}}, "
                           "\"method\": \"asha\", \"trials\": 2, \"max_epochs\": 3, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}",
                           &s, &e), 0);
    assert_int_equal(sweep_check_requests(&s, &e), -1);
    assert_non_null(strstr(e.message, "base.early_stopping"));
    sweep_spec_free(&s);
    /* a good one */
    assert_int_equal(parse("{" BASE ", \"method\": \"random\", \"trials\": 5, \"space\": {\"solver.lr\": {\"log_uniform\": [0.001, 0.1]}, "
                           "\"solver.momentum\": {\"values\": [0.8, 0.9]}}}", &s, &e), 0);
    assert_int_equal(sweep_check_requests(&s, &e), 0);
    sweep_spec_free(&s);
}

/* ---- asha, by hand ---------------------------------------------------------- */

/* 9 trials, eta 3, rungs 1/3/9 epochs, one at a time: each started or
 * promoted trial completes its rung with the metric below before the next
 * decision. NaN: never reached. */
static const double M[9][3] = {
    { 0.50, NAN, NAN }, { 0.60, 0.75, NAN }, { 0.40, NAN, NAN }, { 0.70, 0.80, 0.90 },
    { 0.55, NAN, NAN }, { 0.30, NAN, NAN }, { 0.65, 0.72, NAN }, { 0.45, NAN, NAN },
    { 0.35, NAN, NAN },
};

static void complete(sweep_trial *t, int i, int nrungs)
{
    t->metrics[t->rung] = M[i][t->rung];
    t->state = t->rung == nrungs - 1 ? TRIAL_DONE : TRIAL_WAITING;
}

static void test_asha_hand_worked(void **state)
{
    (void)state;
    sweep_spec s;
    api_error e;
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 9, \"max_epochs\": 9, \"eta\": 3, "
                           "\"parallel\": 1, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}", &s, &e), 0);
    sweep_trial t[9];
    int n = 0, epochs = 0;
    char log[512] = "";
    for (int guard = 0; guard < 40; guard++) {
        int p = -1;
        sweep_action a = sweep_next(&s, t, n, true, &p);
        char step[32];
        if (a == SWEEP_NEW) {
            memset(&t[n], 0, sizeof t[n]);
            for (int k = 0; k < SWEEP_MAX_RUNGS; k++)
                t[n].metrics[k] = NAN;
            t[n].state = TRIAL_RUNNING;
            snprintf(step, sizeof step, "s%d ", n);
            epochs += s.rungs[0];
            complete(&t[n], n, s.nrungs);
            n++;
        } else if (a == SWEEP_PROMOTE) {
            epochs += s.rungs[t[p].rung + 1] - s.rungs[t[p].rung];
            t[p].rung++;
            t[p].state = TRIAL_RUNNING;
            snprintf(step, sizeof step, "p%d>%d ", p, t[p].rung);
            complete(&t[p], p, s.nrungs);
        } else {
            assert_int_equal(a, SWEEP_END);
            strcat(log, "end");
            break;
        }
        strcat(log, step);
    }
    /* worked by hand: rung 0's top floor(n/3) is promoted as soon as one of
     * them waits; rung 1's top one (trial 3, of 1, 3, 6) goes to rung 2 once
     * rung 1 has three results */
    assert_string_equal(log, "s0 s1 s2 p1>1 s3 p3>1 s4 s5 s6 p6>1 p3>2 s7 s8 end");
    assert_int_equal(epochs, 9 * 1 + 3 * 2 + 1 * 6);
    /* what the sweep then stops: everyone waiting (0, 2, 4, 5, 7, 8 at rung 0; 1 and 6 at rung 1) */
    static const int rung[9] = { 0, 1, 0, 2, 0, 0, 1, 0, 0 };
    for (int i = 0; i < 9; i++) {
        assert_int_equal(t[i].rung, rung[i]);
        assert_int_equal(t[i].state, i == 3 ? TRIAL_DONE : TRIAL_WAITING);
    }
    sweep_spec_free(&s);
}

static void test_asha_async_and_failures(void **state)
{
    (void)state;
    sweep_spec s;
    api_error e;
    assert_int_equal(parse("{" BASE ", \"method\": \"asha\", \"trials\": 4, \"max_epochs\": 3, \"eta\": 3, "
                           "\"parallel\": 2, \"space\": {\"solver.lr\": {\"values\": [0.1]}}}", &s, &e), 0);
    sweep_trial t[4];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < SWEEP_MAX_RUNGS; k++)
            t[i].metrics[k] = NAN;
    int p = -1;
    /* 0 failed, 1 and 2 waiting at rung 0, 3 running: 2 results, top 0: start nothing new but wait */
    t[0].state = TRIAL_FAILED;
    t[1].state = TRIAL_WAITING, t[1].metrics[0] = 0.8;
    t[2].state = TRIAL_WAITING, t[2].metrics[0] = 0.9;
    t[3].state = TRIAL_RUNNING;
    assert_int_equal(sweep_next(&s, t, 4, true, &p), SWEEP_WAIT);
    /* 3 completes: 3 results (the failure is none), top 1 = trial 2, promoted */
    t[3].state = TRIAL_WAITING, t[3].metrics[0] = 0.85;
    assert_int_equal(sweep_next(&s, t, 4, true, &p), SWEEP_PROMOTE);
    assert_int_equal(p, 2);
    /* with no free slot the promotion waits */
    assert_int_equal(sweep_next(&s, t, 4, false, &p), SWEEP_WAIT);
    t[2].rung = 1, t[2].state = TRIAL_DONE, t[2].metrics[1] = 0.95;
    /* nothing more: the end (1 and 3 are then stopped by the sweep) */
    assert_int_equal(sweep_next(&s, t, 4, true, &p), SWEEP_END);
    /* a minimizing sweep ranks the other way */
    s.maximize = false;
    t[2].rung = 0, t[2].state = TRIAL_WAITING, t[2].metrics[1] = NAN;
    assert_int_equal(sweep_next(&s, t, 4, true, &p), SWEEP_PROMOTE);
    assert_int_equal(p, 1);
    sweep_spec_free(&s);

    /* grid and random: new trials while they remain, then wait, then end */
    assert_int_equal(parse("{" BASE ", \"method\": \"grid\", \"parallel\": 1, \"space\": {\"solver.lr\": {\"values\": [0.1, 0.2]}}}",
                           &s, &e), 0);
    memset(t, 0, sizeof t);
    assert_int_equal(sweep_next(&s, t, 0, true, &p), SWEEP_NEW);
    t[0].state = TRIAL_RUNNING;
    assert_int_equal(sweep_next(&s, t, 1, false, &p), SWEEP_WAIT);
    t[0].state = TRIAL_FAILED;
    assert_int_equal(sweep_next(&s, t, 1, true, &p), SWEEP_NEW);
    t[1].state = TRIAL_DONE;
    assert_int_equal(sweep_next(&s, t, 2, true, &p), SWEEP_END);
    sweep_spec_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_spaces),
        cmocka_unit_test(test_defaults_and_round_trip),
        cmocka_unit_test(test_grid_enumeration),
        cmocka_unit_test(test_lists_without_replacement),
        cmocka_unit_test(test_random_sampling),
        cmocka_unit_test(test_trial_request),
        cmocka_unit_test(test_check_requests),
        cmocka_unit_test(test_asha_hand_worked),
        cmocka_unit_test(test_asha_async_and_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
