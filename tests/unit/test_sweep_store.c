/* tests/unit/test_sweep_store.c: sweeps and trials in the store (db/sweep_store.h)
 * on a temporary database: rows round trip, owners filter lists, a trial marks
 * its job, asha's promotion is all or nothing, and deletes leave the jobs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "db/store.h"
#include "db/sweep_store.h"

typedef struct fixture {
    char dir[64], path[128];
    store *s;
    int64_t dataset, job;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln-test-sweepstore-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/kiln.db", f->dir);
    char err[256] = "";
    f->s = store_open(f->path, err, sizeof err);
    if (!f->s || store_dataset_insert(f->s, "d", &f->dataset, err, sizeof err) != 0 ||
        store_job_insert(f->s, f->dataset, "lenet", "{\"epochs\":1}", 1, &f->job, err, sizeof err) != 0) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    if (system(cmd) != 0)
        return -1;
    free(f);
    return 0;
}

static store_trial trial(int64_t sweep, int n, int64_t job, const char *state, int rung)
{
    store_trial t = { .sweep_id = sweep, .trial = n, .job_id = job, .params_json = (char *)"{\"solver.lr\":0.1}",
                      .rung = rung, .state = (char *)state, .metrics_json = (char *)"[0.5,null]" };
    return t;
}

static void test_round_trip_and_owners(void **state)
{
    fixture *f = *state;
    int64_t a, b;
    assert_int_equal(store_sweep_insert(f->s, "first", "asha", "{\"x\":1}", 0, &a), 0);
    assert_int_equal(store_sweep_insert(f->s, "", "grid", "{}", 7, &b), -1);   /* no user 7: the owner's FK */
    assert_int_equal(store_sweep_insert(f->s, "", "grid", "{}", 0, &b), 0);
    assert_int_equal(store_sweep_insert(f->s, "", "bayes", "{}", 0, &b), -1);  /* the method's CHECK */
    store_sweep w;
    assert_int_equal(store_sweep_get(f->s, a, &w), 0);
    assert_string_equal(w.name, "first");
    assert_string_equal(w.method, "asha");
    assert_string_equal(w.status, "running");
    assert_string_equal(w.spec_json, "{\"x\":1}");
    assert_int_equal(w.best_trial, -1);
    assert_true(isnan(w.best_metric));
    assert_null(w.finished_at);
    assert_int_equal(w.owner_id, 0);
    store_sweep_clear(&w);
    assert_int_equal(store_sweep_get(f->s, 999, &w), STORE_NOT_FOUND);

    assert_int_equal(store_sweep_set_best(f->s, a, 3, 0.97), 0);
    assert_int_equal(store_sweep_get(f->s, a, &w), 0);
    assert_int_equal(w.best_trial, 3);
    assert_true(w.best_metric == 0.97);
    store_sweep_clear(&w);

    store_sweep *list;
    size_t n;
    assert_int_equal(store_sweep_list_for(f->s, 0, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_true(list[0].id > list[1].id);                 /* newest first */
    store_sweep_list_free(list, n);
    assert_int_equal(store_sweep_list_for(f->s, 5, &list, &n), 0);   /* user 5 owns none */
    assert_int_equal(n, 0);
    store_sweep_list_free(list, n);

    int64_t *ids;
    assert_int_equal(store_sweep_finish(f->s, a, "done", NULL), 0);
    assert_int_equal(store_sweep_finish(f->s, a, "cancelled", NULL), STORE_NOT_FOUND);   /* ended already */
    assert_int_equal(store_sweep_ids_with_status(f->s, "running", &ids, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], b);
    free(ids);
    assert_int_equal(store_sweep_get(f->s, a, &w), 0);
    assert_string_equal(w.status, "done");
    assert_non_null(w.finished_at);
    store_sweep_clear(&w);
}

static void test_trials_mark_jobs_and_deletes(void **state)
{
    fixture *f = *state;
    int64_t id, job2;
    char err[128];
    assert_int_equal(store_sweep_insert(f->s, "s", "grid", "{}", 0, &id), 0);
    assert_int_equal(store_job_insert(f->s, f->dataset, "lenet", "{}", 1, &job2, err, sizeof err), 0);
    store_trial t0 = trial(id, 0, f->job, "running", 0), t1 = trial(id, 1, job2, "failed", 0);
    t1.message = (char *)"diverged";
    assert_int_equal(store_trial_insert(f->s, &t0), 0);
    assert_int_equal(store_trial_insert(f->s, &t1), 0);
    assert_int_equal(store_trial_insert(f->s, &t1), -1);          /* (sweep, trial) is unique */
    store_job j;
    assert_int_equal(store_job_get(f->s, f->job, &j), 0);
    assert_int_equal(j.sweep_id, id);
    store_job_clear(&j);

    t0.state = (char *)"done";
    t0.metrics_json = (char *)"[0.9]";
    assert_int_equal(store_trial_update(f->s, &t0), 0);
    store_trial *ts;
    size_t n;
    assert_int_equal(store_trial_list(f->s, id, &ts, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ts[0].trial, 0);
    assert_string_equal(ts[0].state, "done");
    assert_string_equal(ts[0].metrics_json, "[0.9]");
    assert_string_equal(ts[1].message, "diverged");
    store_trial_list_free(ts, n);

    /* a deleted job leaves its trial with no job */
    assert_int_equal(store_job_delete(f->s, job2), 0);
    assert_int_equal(store_trial_list(f->s, id, &ts, &n), 0);
    assert_int_equal(ts[1].job_id, 0);
    store_trial_list_free(ts, n);

    /* a deleted sweep takes its trials; its jobs stay, with no sweep */
    assert_int_equal(store_sweep_delete(f->s, id), 0);
    assert_int_equal(store_trial_list(f->s, id, &ts, &n), 0);
    assert_int_equal(n, 0);
    store_trial_list_free(ts, n);
    assert_int_equal(store_job_get(f->s, f->job, &j), 0);
    assert_int_equal(j.sweep_id, 0);
    store_job_clear(&j);
    assert_int_equal(store_sweep_delete(f->s, id), STORE_NOT_FOUND);
}

static void test_promote_all_or_nothing(void **state)
{
    fixture *f = *state;
    int64_t id;
    assert_int_equal(store_sweep_insert(f->s, "a", "asha", "{}", 0, &id), 0);
    store_trial t = trial(id, 0, f->job, "waiting", 0);
    assert_int_equal(store_trial_insert(f->s, &t), 0);
    store_trial up = trial(id, 0, f->job, "running", 1);
    /* the job is queued, not done: nothing changes */
    assert_int_equal(store_sweep_promote(f->s, &up, f->job, 3, 30, "{\"epochs\":3}"), STORE_NOT_FOUND);
    store_trial *ts;
    size_t n;
    assert_int_equal(store_trial_list(f->s, id, &ts, &n), 0);
    assert_string_equal(ts[0].state, "waiting");
    assert_int_equal(ts[0].rung, 0);
    store_trial_list_free(ts, n);

    assert_int_equal(store_job_set_status(f->s, f->job, "running", NULL), 0);
    assert_int_equal(store_job_set_status(f->s, f->job, "done", NULL), 0);
    assert_int_equal(store_sweep_promote(f->s, &up, f->job, 3, 30, "{\"epochs\":3}"), 0);
    store_job j;
    assert_int_equal(store_job_get(f->s, f->job, &j), 0);
    assert_string_equal(j.status, "queued");
    assert_int_equal(j.epochs, 3);
    assert_int_equal(j.steps, 30);
    assert_string_equal(j.config_json, "{\"epochs\":3}");
    assert_null(j.started_at);
    assert_null(j.finished_at);
    store_job_clear(&j);
    assert_int_equal(store_trial_list(f->s, id, &ts, &n), 0);
    assert_string_equal(ts[0].state, "running");
    assert_int_equal(ts[0].rung, 1);
    store_trial_list_free(ts, n);
    /* twice: the job is no longer done */
    assert_int_equal(store_sweep_promote(f->s, &up, f->job, 9, 90, "{}"), STORE_NOT_FOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_and_owners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trials_mark_jobs_and_deletes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_promote_all_or_nothing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
