/* tests/unit/test_store.c: the SQLite store (db/store.h) on temporary files. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "db/store.h"
#include "db/migrations.h"
#include "db/users.h"        /* store_user_insert: an owner */

typedef struct fixture {
    char dir[64];
    char path[128];
    store *s;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln-test-store-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/kiln.db", f->dir);
    char err[256] = "";
    f->s = store_open(f->path, err, sizeof err);
    if (!f->s) {
        fprintf(stderr, "store_open: %s\n", err);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    store_close(f->s);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

static int latest_migration(void)
{
    return store_migrations[store_migration_count - 1].version;
}

/* A second connection of our own, to look at the file as SQLite sees it. */
static void raw_exec_text(const char *path, const char *sql, char *out, size_t n)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int rc = sqlite3_step(q);
    out[0] = '\0';
    if (rc == SQLITE_ROW && sqlite3_column_text(q, 0))
        snprintf(out, n, "%s", (const char *)sqlite3_column_text(q, 0));
    else
        assert_int_equal(rc, SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

static void open_sets_version_and_wal(void **state)
{
    fixture *f = *state;
    assert_true(latest_migration() >= 1);
    assert_int_equal(store_schema_version(f->s), latest_migration());
    char mode[32];
    raw_exec_text(f->path, "PRAGMA journal_mode", mode, sizeof mode);
    assert_string_equal(mode, "wal");
    char fk[8];
    raw_exec_text(f->path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'metrics_by_job_step'", fk,
                  sizeof fk);
    assert_string_equal(fk, "1");
}

static int is_rfc3339_utc(const char *t)
{
    /* 2026-11-22T08:00:00Z */
    if (!t || strlen(t) != 20)
        return 0;
    for (int i = 0; i < 20; i++) {
        char c = t[i];
        int ok = (i == 4 || i == 7) ? c == '-' : i == 10 ? c == 'T' : (i == 13 || i == 16) ? c == ':'
                 : i == 19 ? c == 'Z' : (c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

static void datasets_roundtrip(void **state)
{
    fixture *f = *state;
    int64_t a = 0, b = 0;
    char err[256];
    assert_int_equal(store_dataset_insert(f->s, "mnist", &a, err, sizeof err), 0);
    assert_int_equal(store_dataset_insert(f->s, "cifar", &b, err, sizeof err), 0);
    assert_true(a > 0 && b > a);

    store_dataset d;
    assert_int_equal(store_dataset_get(f->s, a, &d), 0);
    assert_int_equal(d.id, a);
    assert_string_equal(d.name, "mnist");
    assert_string_equal(d.status, "importing");
    assert_null(d.info_json);
    assert_null(d.error);
    assert_true(is_rfc3339_utc(d.created_at));
    store_dataset_clear(&d);

    assert_int_equal(store_dataset_set_progress(f->s, a, 0.5), 0);
    assert_int_equal(store_dataset_get(f->s, a, &d), 0);
    assert_true(fabs(d.progress - 0.5) < 1e-12);
    store_dataset_clear(&d);

    assert_int_equal(store_dataset_finish(f->s, a, "ready", "{\"format\":1}", NULL), 0);
    assert_int_equal(store_dataset_finish(f->s, b, "failed", NULL, "archive holds no images"), 0);
    assert_int_equal(store_dataset_finish(f->s, a + 100, "ready", "{}", NULL), STORE_NOT_FOUND);
    assert_int_equal(store_dataset_finish(f->s, a, "bogus", NULL, NULL), -1);

    assert_int_equal(store_dataset_get(f->s, a, &d), 0);
    assert_string_equal(d.status, "ready");
    assert_string_equal(d.info_json, "{\"format\":1}");
    assert_true(fabs(d.progress - 1.0) < 1e-12);
    store_dataset_clear(&d);
    assert_int_equal(store_dataset_get(f->s, b, &d), 0);
    assert_string_equal(d.status, "failed");
    assert_string_equal(d.error, "archive holds no images");
    store_dataset_clear(&d);

    assert_int_equal(store_dataset_find_by_name(f->s, "cifar", &d), 0);
    assert_int_equal(d.id, b);
    store_dataset_clear(&d);
    assert_int_equal(store_dataset_find_by_name(f->s, "nope", &d), STORE_NOT_FOUND);
    /* A name with SQL in it is just a name. */
    assert_int_equal(store_dataset_find_by_name(f->s, "x' OR '1'='1", &d), STORE_NOT_FOUND);

    store_dataset *list = NULL;
    size_t n = 0;
    assert_int_equal(store_dataset_list(f->s, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, b);       /* newest first */
    assert_int_equal(list[1].id, a);
    store_dataset_list_free(list, n);

    assert_int_equal(store_dataset_delete(f->s, b), 0);
    assert_int_equal(store_dataset_delete(f->s, b), STORE_NOT_FOUND);
    assert_int_equal(store_dataset_get(f->s, b, &d), STORE_NOT_FOUND);
}

static int64_t make_dataset(store *s)
{
    int64_t id = 0;
    char err[256];
    assert_int_equal(store_dataset_insert(s, "ds", &id, err, sizeof err), 0);
    assert_int_equal(store_dataset_finish(s, id, "ready", "{}", NULL), 0);
    return id;
}

static void jobs_roundtrip(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s);
    int64_t j1 = 0, j2 = 0, j3 = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{\"epochs\":2}", 2, &j1, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "custom", "{}", 5, &j2, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 1, &j3, err, sizeof err), 0);
    assert_true(j1 < j2 && j2 < j3);
    /* A job needs an existing dataset (foreign key). */
    int64_t bad = 0;
    assert_int_equal(store_job_insert(f->s, ds + 1000, "lenet", "{}", 1, &bad, err, sizeof err), -1);
    assert_true(strlen(err) > 0);

    store_job j;
    assert_int_equal(store_job_get(f->s, j1, &j), 0);
    assert_int_equal(j.dataset_id, ds);
    assert_string_equal(j.status, "queued");
    assert_string_equal(j.network, "lenet");
    assert_string_equal(j.config_json, "{\"epochs\":2}");
    assert_int_equal(j.epochs, 2);
    assert_int_equal(j.epoch, 0);
    assert_int_equal(j.step, 0);
    assert_true(j.eta_seconds < 0);
    assert_true(is_rfc3339_utc(j.created_at));
    assert_null(j.started_at);
    assert_null(j.finished_at);
    assert_null(j.error);
    store_job_clear(&j);

    int64_t next = 0;
    assert_int_equal(store_job_next_queued(f->s, &next), 0);
    assert_int_equal(next, j1);

    assert_int_equal(store_job_set_status(f->s, j1, "running", NULL), 0);
    assert_int_equal(store_job_set_progress(f->s, j1, 1, 120, 250, 812.5, 33.0), 0);
    assert_int_equal(store_job_set_config(f->s, j1, "{\"id\":1}"), 0);
    assert_int_equal(store_job_get(f->s, j1, &j), 0);
    assert_string_equal(j.status, "running");
    assert_true(is_rfc3339_utc(j.started_at));
    assert_null(j.finished_at);
    assert_int_equal(j.epoch, 1);
    assert_int_equal(j.step, 120);
    assert_int_equal(j.steps, 250);
    assert_true(fabs(j.images_per_sec - 812.5) < 1e-9);
    assert_true(fabs(j.eta_seconds - 33.0) < 1e-9);
    assert_string_equal(j.config_json, "{\"id\":1}");
    store_job_clear(&j);

    /* an early stop: none until recorded, then kept with the job */
    assert_int_equal(store_job_get(f->s, j1, &j), 0);
    assert_int_equal(j.stopped_epoch, 0);
    assert_null(j.stopped_message);
    store_job_clear(&j);
    assert_int_equal(store_job_set_stopped_early(f->s, j1, 14, 9, "stopped early after epoch 14"), 0);
    assert_int_equal(store_job_get(f->s, j1, &j), 0);
    assert_int_equal(j.stopped_epoch, 14);
    assert_int_equal(j.stopped_best_epoch, 9);
    assert_string_equal(j.stopped_message, "stopped early after epoch 14");
    store_job_clear(&j);
    assert_int_equal(store_job_set_stopped_early(f->s, j1 + 1000, 1, 1, "x"), STORE_NOT_FOUND);

    assert_int_equal(store_job_next_queued(f->s, &next), 0);
    assert_int_equal(next, j2);           /* the oldest still queued */

    assert_int_equal(store_job_set_status(f->s, j1, "failed", "worker exited with status 1"), 0);
    assert_int_equal(store_job_get(f->s, j1, &j), 0);
    assert_string_equal(j.status, "failed");
    assert_string_equal(j.error, "worker exited with status 1");
    assert_true(is_rfc3339_utc(j.finished_at));
    store_job_clear(&j);
    assert_int_equal(store_job_set_status(f->s, j1, "exploded", NULL), -1);
    assert_int_equal(store_job_set_status(f->s, j1 + 1000, "done", NULL), STORE_NOT_FOUND);

    /* Requeueing clears the run's times and error. */
    assert_int_equal(store_job_set_status(f->s, j1, "queued", NULL), 0);
    assert_int_equal(store_job_get(f->s, j1, &j), 0);
    assert_null(j.started_at);
    assert_null(j.finished_at);
    assert_null(j.error);
    store_job_clear(&j);

    assert_int_equal(store_job_set_status(f->s, j3, "running", NULL), 0);
    int64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(store_job_ids_with_status(f->s, "queued", &ids, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], j1);
    assert_int_equal(ids[1], j2);
    free(ids);
    assert_int_equal(store_job_ids_with_status(f->s, "running", &ids, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], j3);
    free(ids);

    store_job *list = NULL;
    assert_int_equal(store_job_list(f->s, &list, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(list[0].id, j3);
    assert_int_equal(list[2].id, j1);
    store_job_list_free(list, n);

    /* A dataset with jobs cannot be deleted; without them it can. */
    assert_int_equal(store_dataset_delete(f->s, ds), -1);
    assert_int_equal(store_job_delete(f->s, j1), 0);
    assert_int_equal(store_job_delete(f->s, j1), STORE_NOT_FOUND);
    assert_int_equal(store_job_get(f->s, j1, &j), STORE_NOT_FOUND);
    assert_int_equal(store_job_delete(f->s, j2), 0);
    assert_int_equal(store_job_delete(f->s, j3), 0);
    assert_int_equal(store_dataset_delete(f->s, ds), 0);
}

static store_metric mk(int64_t step, double epoch, const char *tag, double value)
{
    store_metric m;
    memset(&m, 0, sizeof m);
    m.step = step;
    m.epoch = epoch;
    snprintf(m.tag, sizeof m.tag, "%s", tag);
    m.value = value;
    m.wall_time = 1700000000.0 + (double)step;
    return m;
}

static void metrics_roundtrip(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), job = 0, other = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 2, &job, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 2, &other, err, sizeof err), 0);

    store_metric ms[] = {
        mk(10, 0.1, "train/loss", 2.0), mk(10, 0.1, "train/accuracy", 0.3),
        mk(20, 0.2, "train/loss", 1.5), mk(20, 0.2, "train/accuracy", 0.5),
        mk(20, 1.0, "val/accuracy", 0.6), mk(30, 1.3, "train/loss", NAN),
    };
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        assert_int_equal(store_metric_insert(f->s, job, &ms[i]), 0);
    store_metric o = mk(5, 0.05, "train/loss", 9.0);
    assert_int_equal(store_metric_insert(f->s, other, &o), 0);
    store_metric orphan = mk(1, 0, "train/loss", 1);
    assert_int_equal(store_metric_insert(f->s, job + 1000, &orphan), -1);   /* no such job */

    store_metric *out = NULL;
    size_t n = 0;
    assert_int_equal(store_metric_list(f->s, job, -1, &out, &n), 0);
    assert_int_equal(n, 6);
    for (size_t i = 0; i < 5; i++) {         /* insertion order, values intact */
        assert_int_equal(out[i].step, ms[i].step);
        assert_string_equal(out[i].tag, ms[i].tag);
        assert_true(fabs(out[i].value - ms[i].value) < 1e-12);
        assert_true(fabs(out[i].epoch - ms[i].epoch) < 1e-12);
        assert_true(fabs(out[i].wall_time - ms[i].wall_time) < 1e-6);
    }
    assert_true(isnan(out[5].value));        /* a NaN loss comes back as NaN */
    free(out);

    assert_int_equal(store_metric_list(f->s, job, 10, &out, &n), 0);
    assert_int_equal(n, 4);                  /* step > 10 */
    assert_int_equal(out[0].step, 20);
    free(out);
    assert_int_equal(store_metric_list(f->s, job, 30, &out, &n), 0);
    assert_int_equal(n, 0);
    free(out);

    assert_int_equal(store_metric_latest(f->s, job, &out, &n), 0);
    assert_int_equal(n, 3);                  /* one per tag, sorted by tag */
    assert_string_equal(out[0].tag, "train/accuracy");
    assert_true(fabs(out[0].value - 0.5) < 1e-12);
    assert_string_equal(out[1].tag, "train/loss");
    assert_int_equal(out[1].step, 30);
    assert_string_equal(out[2].tag, "val/accuracy");
    free(out);

    assert_int_equal(store_metric_delete(f->s, job, 10), 0);
    assert_int_equal(store_metric_list(f->s, job, -1, &out, &n), 0);
    assert_int_equal(n, 2);
    free(out);

    /* Deleting a job deletes its metrics (ON DELETE CASCADE), not others'. */
    assert_int_equal(store_job_delete(f->s, job), 0);
    assert_int_equal(store_metric_list(f->s, job, -1, &out, &n), 0);
    assert_int_equal(n, 0);
    free(out);
    char count[16];
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM metrics WHERE job_id = %lld", (long long)job);
    raw_exec_text(f->path, sql, count, sizeof count);
    assert_string_equal(count, "0");
    assert_int_equal(store_metric_list(f->s, other, -1, &out, &n), 0);
    assert_int_equal(n, 1);
    free(out);
}

static void evaluations_roundtrip(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), ds2 = make_dataset(f->s), job = 0, other = 0, a = 0, b = 0, c = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 2, &job, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 2, &other, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, job, ds2, "val", "best", 2, &a, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, job, ds, "test", "final", 0, &b, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, other, ds, "train", "1", 1, &c, err, sizeof err), 0);
    assert_true(a > 0 && b > a && c > b);
    /* a split that is not one, refused before SQL */
    int64_t bad = 0;
    assert_int_equal(store_eval_insert(f->s, job, ds, "holdout", "final", 0, &bad, err, sizeof err), -1);
    assert_int_equal(bad, 0);

    store_eval e;
    assert_int_equal(store_eval_get(f->s, a, &e), 0);
    assert_int_equal(e.job_id, job);
    assert_int_equal(e.dataset_id, ds2);
    assert_string_equal(e.split, "val");
    assert_string_equal(e.selection, "best");
    assert_int_equal(e.epoch, 2);
    assert_string_equal(e.status, "queued");
    assert_true(e.progress == 0);
    assert_null(e.result_json);
    assert_null(e.error);
    assert_true(is_rfc3339_utc(e.created_at));
    assert_null(e.started_at);
    assert_null(e.finished_at);
    store_eval_clear(&e);

    /* running -> progress -> done with a result */
    assert_int_equal(store_eval_set_status(f->s, a, "running", NULL), 0);
    assert_int_equal(store_eval_set_progress(f->s, a, 0.25), 0);
    assert_int_equal(store_eval_set_progress(f->s, a, 7), 0);          /* clamped to 1 */
    assert_int_equal(store_eval_get(f->s, a, &e), 0);
    assert_string_equal(e.status, "running");
    assert_true(e.progress == 1);
    assert_true(is_rfc3339_utc(e.started_at));
    store_eval_clear(&e);
    assert_int_equal(store_eval_set_progress(f->s, a, 0.5), 0);
    assert_int_equal(store_eval_finish(f->s, a, "done", NULL, NULL), -1);       /* done needs a result */
    assert_int_equal(store_eval_finish(f->s, a, "failed", "{}", "x"), -1);      /* failed has none */
    assert_int_equal(store_eval_finish(f->s, a, "running", NULL, NULL), -1);    /* not a final status */
    assert_int_equal(store_eval_finish(f->s, a, "done", "{\"loss\":0.5}", NULL), 0);
    assert_int_equal(store_eval_get(f->s, a, &e), 0);
    assert_string_equal(e.status, "done");
    assert_string_equal(e.result_json, "{\"loss\":0.5}");
    assert_true(e.progress == 1);
    assert_true(is_rfc3339_utc(e.finished_at));
    store_eval_clear(&e);

    /* failed with a reason; requeued clears the progress and started_at */
    assert_int_equal(store_eval_set_status(f->s, b, "running", NULL), 0);
    assert_int_equal(store_eval_set_progress(f->s, b, 0.5), 0);
    assert_int_equal(store_eval_set_status(f->s, b, "queued", NULL), 0);
    assert_int_equal(store_eval_get(f->s, b, &e), 0);
    assert_true(e.progress == 0);
    assert_null(e.started_at);
    store_eval_clear(&e);
    assert_int_equal(store_eval_finish(f->s, b, "failed", NULL, "worker killed by signal 9"), 0);
    assert_int_equal(store_eval_get(f->s, b, &e), 0);
    assert_string_equal(e.status, "failed");
    assert_string_equal(e.error, "worker killed by signal 9");
    assert_null(e.result_json);
    store_eval_clear(&e);
    assert_int_equal(store_eval_set_status(f->s, b, "bogus", NULL), -1);
    assert_int_equal(store_eval_set_status(f->s, 9999, "running", NULL), STORE_NOT_FOUND);
    assert_int_equal(store_eval_get(f->s, 9999, &e), STORE_NOT_FOUND);

    /* list by job: newest first, only that job's */
    store_eval *list = NULL;
    size_t n = 0;
    assert_int_equal(store_eval_list_by_job(f->s, job, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, b);
    assert_int_equal(list[1].id, a);
    assert_string_equal(list[1].result_json, "{\"loss\":0.5}");
    store_eval_list_free(list, n);

    int64_t *ids = NULL;
    assert_int_equal(store_eval_ids_with_status(f->s, "queued", &ids, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], c);
    free(ids);
    assert_int_equal(store_eval_count_by_dataset(f->s, ds, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(store_eval_count_by_dataset(f->s, ds2, &n), 0);
    assert_int_equal(n, 1);

    /* a dataset an evaluation uses cannot be deleted */
    assert_int_equal(store_dataset_delete(f->s, ds2), -1);

    /* deleting one; deleting a job deletes its evaluations, not others' */
    assert_int_equal(store_eval_delete(f->s, b), 0);
    assert_int_equal(store_eval_delete(f->s, b), STORE_NOT_FOUND);
    assert_int_equal(store_job_delete(f->s, job), 0);
    assert_int_equal(store_eval_get(f->s, a, &e), STORE_NOT_FOUND);
    assert_int_equal(store_eval_list_by_job(f->s, job, &list, &n), 0);
    assert_int_equal(n, 0);
    free(list);
    assert_int_equal(store_eval_get(f->s, c, &e), 0);
    store_eval_clear(&e);
    assert_int_equal(store_dataset_delete(f->s, ds2), 0);     /* no evaluation uses it now */
}

/* The queue holds jobs and evaluations together, oldest first. */
static void queue_orders_both_kinds(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), j1 = 0, j2 = 0, e1 = 0, e2 = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 1, &j1, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, j1, ds, "val", "final", 0, &e1, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 1, &j2, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, j1, ds, "val", "final", 0, &e2, err, sizeof err), 0);
    /* Creation times set by hand: e1 oldest, then j2, then j1 and e2 in the same second. */
    char sql[256], out[16];
    snprintf(sql, sizeof sql, "UPDATE evaluations SET created_at = '2026-01-01T00:00:01Z' WHERE id = %lld",
             (long long)e1);
    raw_exec_text(f->path, sql, out, sizeof out);
    snprintf(sql, sizeof sql, "UPDATE jobs SET created_at = '2026-01-01T00:00:02Z' WHERE id = %lld",
             (long long)j2);
    raw_exec_text(f->path, sql, out, sizeof out);
    snprintf(sql, sizeof sql, "UPDATE jobs SET created_at = '2026-01-01T00:00:03Z' WHERE id = %lld",
             (long long)j1);
    raw_exec_text(f->path, sql, out, sizeof out);
    snprintf(sql, sizeof sql, "UPDATE evaluations SET created_at = '2026-01-01T00:00:03Z' WHERE id = %lld",
             (long long)e2);
    raw_exec_text(f->path, sql, out, sizeof out);

    store_queued *q = NULL;
    size_t n = 0;
    assert_int_equal(store_queue_list(f->s, &q, &n), 0);
    assert_int_equal(n, 4);
    assert_true(q[0].kind == STORE_WORK_EVAL && q[0].id == e1);
    assert_true(q[1].kind == STORE_WORK_JOB && q[1].id == j2);
    assert_true(q[2].kind == STORE_WORK_JOB && q[2].id == j1);
    assert_true(q[3].kind == STORE_WORK_EVAL && q[3].id == e2);
    free(q);

    /* Only queued ones. */
    assert_int_equal(store_job_set_status(f->s, j2, "running", NULL), 0);
    assert_int_equal(store_eval_set_status(f->s, e1, "running", NULL), 0);
    assert_int_equal(store_queue_list(f->s, &q, &n), 0);
    assert_int_equal(n, 2);
    assert_true(q[0].kind == STORE_WORK_JOB && q[0].id == j1);
    assert_true(q[1].kind == STORE_WORK_EVAL && q[1].id == e2);
    free(q);
}

/* Priority (migration 9) goes before age: higher first, evaluations at 0;
 * it is read from the config at insert, changes only while queued; the
 * devices a worker got are kept and cleared when the job is queued again. */
static void queue_priority_and_devices(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), old = 0, urgent = 0, low = 0, ev = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 1, &old, err, sizeof err), 0);
    assert_int_equal(store_eval_insert(f->s, old, ds, "val", "final", 0, &ev, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{\"priority\": 7}", 1, &urgent, err,
                                      sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{\"priority\": -3}", 1, &low, err,
                                      sizeof err), 0);
    store_job j;
    assert_int_equal(store_job_get(f->s, urgent, &j), 0);
    assert_int_equal(j.priority, 7);
    assert_null(j.devices_json);
    store_job_clear(&j);

    store_queued *q = NULL;
    size_t n = 0;
    assert_int_equal(store_queue_list(f->s, &q, &n), 0);
    assert_int_equal(n, 4);
    assert_true(q[0].kind == STORE_WORK_JOB && q[0].id == urgent && q[0].priority == 7);
    assert_true(q[1].kind == STORE_WORK_JOB && q[1].id == old && q[1].priority == 0);
    assert_true(q[2].kind == STORE_WORK_EVAL && q[2].id == ev && q[2].priority == 0);
    assert_true(q[3].kind == STORE_WORK_JOB && q[3].id == low && q[3].priority == -3);
    free(q);

    /* Raised above the others, the lowest goes first. */
    assert_int_equal(store_job_set_priority(f->s, low, 9), 0);
    assert_int_equal(store_queue_list(f->s, &q, &n), 0);
    assert_true(n == 4 && q[0].id == low && q[1].id == urgent);
    free(q);

    /* Running: its priority stays; the devices it got are kept. */
    assert_int_equal(store_job_set_status(f->s, urgent, "running", NULL), 0);
    assert_int_equal(store_set_devices(f->s, STORE_WORK_JOB, urgent, "[\"cuda:0\",\"cuda:2\"]"), 0);
    assert_int_equal(store_set_devices(f->s, STORE_WORK_EVAL, ev, "[\"cpu\"]"), 0);
    assert_int_equal(store_job_set_priority(f->s, urgent, 1), STORE_NOT_FOUND);
    assert_int_equal(store_job_set_priority(f->s, 4242, 1), STORE_NOT_FOUND);
    assert_int_equal(store_job_get(f->s, urgent, &j), 0);
    assert_int_equal(j.priority, 7);
    assert_string_equal(j.devices_json, "[\"cuda:0\",\"cuda:2\"]");
    store_job_clear(&j);
    store_eval e;
    assert_int_equal(store_eval_get(f->s, ev, &e), 0);
    assert_string_equal(e.devices_json, "[\"cpu\"]");
    store_eval_clear(&e);

    /* Ended, it keeps them; queued again (a restart, a resume), they go. */
    assert_int_equal(store_job_set_status(f->s, urgent, "failed", "boom"), 0);
    assert_int_equal(store_job_get(f->s, urgent, &j), 0);
    assert_non_null(j.devices_json);
    store_job_clear(&j);
    assert_int_equal(store_job_requeue_ended(f->s, urgent), 0);
    assert_int_equal(store_job_get(f->s, urgent, &j), 0);
    assert_null(j.devices_json);
    store_job_clear(&j);
    assert_int_equal(store_eval_set_status(f->s, ev, "queued", NULL), 0);
    assert_int_equal(store_eval_get(f->s, ev, &e), 0);
    assert_null(e.devices_json);
    store_eval_clear(&e);
}

/* A database from before evaluations (made by the migrations up to then, as
 * an older kiln made it) is migrated forward with its rows kept. */
static void version2_database_migrates(void **state)
{
    fixture *f = *state;
    char err[256], path[160];
    store_close(f->s);
    f->s = NULL;
    static const char *const suffixes[] = { "", "-wal", "-shm" };
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", f->path, suffixes[i]);
        unlink(path);
    }
    int before = 0;                  /* the schema version before the evaluations' migration */
    for (size_t i = 0; i < store_migration_count; i++)
        if (!strcmp(store_migrations[i].what, "evaluations"))
            before = store_migrations[i].version - 1;
    assert_true(before >= 2);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    for (size_t i = 0; i < store_migration_count && store_migrations[i].version <= before; i++)
        assert_int_equal(sqlite3_exec(db, store_migrations[i].sql, NULL, NULL, NULL), SQLITE_OK);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", before);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "INSERT INTO datasets (name, status, created_at) VALUES "
                                      "('old', 'ready', '2026-01-01T00:00:00Z');"
                                      "INSERT INTO jobs (dataset_id, network, config_json, epochs, created_at) "
                                      "VALUES (1, 'lenet', '{}', 1, '2026-01-01T00:00:00Z');", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    int64_t ds = 1, job = 1;

    f->s = store_open(f->path, err, sizeof err);
    assert_non_null(f->s);
    assert_int_equal(store_schema_version(f->s), latest_migration());
    int64_t e = 0;
    assert_int_equal(store_eval_insert(f->s, job, ds, "val", "final", 0, &e, err, sizeof err), 0);
    store_job j;
    assert_int_equal(store_job_get(f->s, job, &j), 0);
    assert_string_equal(j.network, "lenet");
    store_job_clear(&j);
}

static void reopen_keeps_data(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), job = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{\"k\":1}", 3, &job, err, sizeof err), 0);
    store_metric m = mk(7, 0.5, "lr", 0.01);
    assert_int_equal(store_metric_insert(f->s, job, &m), 0);
    store_close(f->s);

    f->s = store_open(f->path, err, sizeof err);
    assert_non_null(f->s);
    assert_int_equal(store_schema_version(f->s), latest_migration());
    store_job j;
    assert_int_equal(store_job_get(f->s, job, &j), 0);
    assert_string_equal(j.config_json, "{\"k\":1}");
    assert_int_equal(j.epochs, 3);
    store_job_clear(&j);
    store_metric *out = NULL;
    size_t n = 0;
    assert_int_equal(store_metric_list(f->s, job, -1, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_true(fabs(out[0].value - 0.01) < 1e-12);
    free(out);
}

static void newer_schema_is_refused(void **state)
{
    fixture *f = *state;
    store_close(f->s);
    f->s = NULL;
    char v[16];
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", latest_migration() + 5);
    raw_exec_text(f->path, sql, v, sizeof v);

    char err[512] = "";
    store *s = store_open(f->path, err, sizeof err);
    assert_null(s);
    assert_non_null(strstr(err, "newer"));
    char want[32];
    snprintf(want, sizeof want, "%d", latest_migration() + 5);
    assert_non_null(strstr(err, want));       /* names the version it found */
    raw_exec_text(f->path, "PRAGMA user_version", v, sizeof v);
    assert_string_equal(v, want);             /* and left the file alone */

    /* Put it back so teardown's store_close has a handle to close. */
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", latest_migration());
    raw_exec_text(f->path, sql, v, sizeof v);
    f->s = store_open(f->path, err, sizeof err);
    assert_non_null(f->s);
}

static void not_a_database_is_refused(void **state)
{
    fixture *f = *state;
    char path[160];
    snprintf(path, sizeof path, "%s/garbage.db", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (int i = 0; i < 200; i++)
        fputs("this is not an SQLite file. ", fp);
    fclose(fp);
    char err[512] = "";
    assert_null(store_open(path, err, sizeof err));
    assert_true(strlen(err) > 0);
}

typedef struct thread_arg {
    store *s;
    int64_t job;
    int index;
    int failures;
} thread_arg;

static void *insert_and_read(void *p)
{
    thread_arg *a = p;
    for (int i = 0; i < 200; i++) {
        store_metric m = mk(a->index * 1000 + i, 0, "train/loss", i);
        if (store_metric_insert(a->s, a->job, &m) != 0)
            a->failures++;
        if (i % 20 == 0) {
            store_metric *out = NULL;
            size_t n = 0;
            if (store_metric_latest(a->s, a->job, &out, &n) != 0 || n != 1)
                a->failures++;
            free(out);
            store_job j;
            if (store_job_get(a->s, a->job, &j) != 0)
                a->failures++;
            else
                store_job_clear(&j);
        }
    }
    return NULL;
}

static void threads_share_a_handle(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), job = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{}", 1, &job, err, sizeof err), 0);
    store_metric first = mk(0, 0, "train/loss", 0);
    assert_int_equal(store_metric_insert(f->s, job, &first), 0);
    pthread_t t[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){ .s = f->s, .job = job, .index = i + 1 };
        assert_int_equal(pthread_create(&t[i], NULL, insert_and_read, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    store_metric *out = NULL;
    size_t n = 0;
    assert_int_equal(store_metric_list(f->s, job, -1, &out, &n), 0);
    assert_int_equal(n, 1 + 4 * 200);
    free(out);
}

/* ---- the jobs list (issue 16, db/job_list.c) ------------------------------ */

#define LJOBS 40

/* Job i of the list fixture: names with ties and mixed case, three networks,
 * epochs 1..4, every status, progress with ties (done: 1). */
static int64_t make_list_job(store *s, const int64_t *ds, int i)
{
    static const char *const names[] = { "alpha", "Beta", "beta", "", "gamma", "Alpha_1" };
    static const char *const nets[] = { "lenet", "resnet20", "alexnet" };
    static const char *const precs[] = { "fp32", "amp-bf16", "amp-fp16" };
    static const char *const st[] = { "done", "failed", "cancelled", "queued", "running" };
    char cfg[160], err[256];
    snprintf(cfg, sizeof cfg, "{\"name\":\"%s\",\"precision\":\"%s\"}", names[i % 6], precs[i % 3]);
    int64_t id = 0;
    int epochs = 1 + i % 4;
    assert_int_equal(store_job_insert(s, ds[i % 2], nets[i % 3], cfg, epochs, &id, err, sizeof err), 0);
    assert_int_equal(store_job_set_progress(s, id, 0, (i * 7) % 5, 4, 1, -1), 0);
    assert_int_equal(store_job_set_status(s, id, st[i % 5], NULL), 0);
    char tags[64];
    snprintf(tags, sizeof tags, "[\"t%d\"%s]", i % 4, i % 5 == 0 ? ",\"50%_off\"" : "");
    assert_int_equal(store_job_set_meta(s, id, NULL, tags, i % 9 == 0 ? "Notes about LR" : NULL), 0);
    return id;
}

static void make_list_jobs(store *s, int64_t *ds, int64_t *ids)
{
    char err[256];
    assert_int_equal(store_dataset_insert(s, "one", &ds[0], err, sizeof err), 0);
    assert_int_equal(store_dataset_insert(s, "two", &ds[1], err, sizeof err), 0);
    for (int i = 0; i < LJOBS; i++)
        ids[i] = make_list_job(s, ds, i);
}

/* What the generated progress column holds for a job. */
static double job_progress(const store_job *j)
{
    if (!strcmp(j->status, "done"))
        return 1.0;
    if (j->steps <= 0)
        return 0.0;
    double p = (double)j->step / (double)j->steps;
    return p < 0 ? 0 : p > 1 ? 1 : p;
}

static store_job_sort cmp_sort;
static bool cmp_desc;

static int cmp_jobs(const void *pa, const void *pb)
{
    const store_job *a = pa, *b = pb;
    int c = 0;
    switch (cmp_sort) {
    case STORE_JOB_SORT_NAME: c = strcasecmp(a->name, b->name); break;
    case STORE_JOB_SORT_STATUS: c = strcmp(a->status, b->status); break;
    case STORE_JOB_SORT_NETWORK: c = strcmp(a->network, b->network); break;
    case STORE_JOB_SORT_DATASET: c = (a->dataset_id > b->dataset_id) - (a->dataset_id < b->dataset_id); break;
    case STORE_JOB_SORT_EPOCHS: c = (a->epochs > b->epochs) - (a->epochs < b->epochs); break;
    case STORE_JOB_SORT_PROGRESS: c = (job_progress(a) > job_progress(b)) - (job_progress(a) < job_progress(b)); break;
    default: break;
    }
    if (c == 0)
        c = (a->id > b->id) - (a->id < b->id);
    return cmp_desc ? -c : c;
}

/* Pages through q (limit per page) and returns the ids in order (n of them,
 * at most max). Asserts every page but the last is full and total. */
static size_t page_all(store *s, store_job_query *q, size_t limit, int64_t *ids, size_t max, int64_t want_total)
{
    size_t got = 0;
    store_job_key key = { 0 }, next;
    q->limit = limit;
    q->after = NULL;
    for (int pages = 0; pages < 1000; pages++) {
        store_job *list = NULL;
        size_t n = 0;
        bool more = false;
        int64_t total = -1;
        assert_int_equal(store_job_query_run(s, q, &list, &n, &more, &next, &total), 0);
        assert_int_equal(total, want_total);
        if (more)
            assert_int_equal(n, limit);
        for (size_t i = 0; i < n; i++) {
            assert_true(got < max);
            ids[got++] = list[i].id;
        }
        store_job_list_free(list, n);
        store_job_key_clear(&key);
        if (!more)
            break;
        key = next;
        q->after = &key;
    }
    store_job_key_clear(&key);
    q->after = NULL;
    return got;
}

static void jobs_list_every_sort_pages_each_job_once(void **state)
{
    fixture *f = *state;
    int64_t ds[2], ids[LJOBS];
    make_list_jobs(f->s, ds, ids);
    store_job all[LJOBS];
    for (int i = 0; i < LJOBS; i++)
        assert_int_equal(store_job_get(f->s, ids[i], &all[i]), 0);
    /* the fixture's name came from the config and the precision too */
    assert_string_equal(all[1].name, "Beta");
    assert_string_equal(all[2].precision, "amp-fp16");
    assert_string_equal(all[0].dataset_name, "one");
    for (int sort = 0; sort < STORE_JOB_SORT_COUNT; sort++) {
        for (int desc = 0; desc < 2; desc++) {
            cmp_sort = (store_job_sort)sort;
            cmp_desc = desc;
            qsort(all, LJOBS, sizeof all[0], cmp_jobs);
            for (size_t limit = 1; limit <= 9; limit += 4) {
                store_job_query q = { .sort = (store_job_sort)sort, .desc = desc };
                int64_t got[LJOBS + 1];
                size_t n = page_all(f->s, &q, limit, got, LJOBS + 1, LJOBS);
                assert_int_equal(n, LJOBS);
                for (int i = 0; i < LJOBS; i++)
                    if (got[i] != all[i].id)
                        fail_msg("sort %s %s, pages of %zu: row %d is job %lld, not %lld",
                                 store_job_sort_names[sort], desc ? "desc" : "asc", limit, i,
                                 (long long)got[i], (long long)all[i].id);
            }
        }
    }
    for (int i = 0; i < LJOBS; i++)
        store_job_clear(&all[i]);
}

static void jobs_list_cursor_survives_inserts(void **state)
{
    fixture *f = *state;
    int64_t ds[2], ids[LJOBS];
    make_list_jobs(f->s, ds, ids);
    /* newest first: jobs made after the first page are newer, so they are
     * not in the later pages; every earlier job shows exactly once */
    store_job_query q = { .sort = STORE_JOB_SORT_CREATED, .desc = true, .limit = 10 };
    store_job *list = NULL;
    size_t n = 0;
    bool more = false;
    store_job_key next;
    assert_int_equal(store_job_query_run(f->s, &q, &list, &n, &more, &next, NULL), 0);
    assert_true(more);
    assert_int_equal(n, 10);
    assert_int_equal(list[0].id, ids[LJOBS - 1]);
    store_job_list_free(list, n);
    int64_t extra[3];
    for (int k = 0; k < 3; k++)
        extra[k] = make_list_job(f->s, ds, k);
    int seen[LJOBS] = { 0 };
    for (int i = 0; i < 10; i++)
        seen[LJOBS - 1 - i]++;
    store_job_key key = next;
    q.after = &key;
    for (;;) {
        assert_int_equal(store_job_query_run(f->s, &q, &list, &n, &more, &next, NULL), 0);
        for (size_t i = 0; i < n; i++) {
            for (int k = 0; k < 3; k++)
                assert_int_not_equal(list[i].id, extra[k]);
            seen[list[i].id - ids[0]]++;
        }
        store_job_list_free(list, n);
        store_job_key_clear(&key);
        if (!more)
            break;
        key = next;
    }
    for (int i = 0; i < LJOBS; i++)
        assert_int_equal(seen[i], 1);

    /* by name: a new job sorting after the place shows up in a later page,
     * one before it does not, and no job repeats */
    store_job_query qn = { .sort = STORE_JOB_SORT_NAME, .limit = 15 };
    assert_int_equal(store_job_query_run(f->s, &qn, &list, &n, &more, &next, NULL), 0);
    assert_true(more);
    int64_t first_page[15];
    for (size_t i = 0; i < n; i++)
        first_page[i] = list[i].id;
    store_job_list_free(list, n);
    char err[256];
    int64_t early = 0, late = 0;
    assert_int_equal(store_job_insert(f->s, ds[0], "lenet", "{\"name\":\"AAA first\"}", 1, &early, err, sizeof err), 0);
    assert_int_equal(store_job_insert(f->s, ds[0], "lenet", "{\"name\":\"zzz last\"}", 1, &late, err, sizeof err), 0);
    key = next;
    qn.after = &key;
    bool saw_late = false;
    for (;;) {
        assert_int_equal(store_job_query_run(f->s, &qn, &list, &n, &more, &next, NULL), 0);
        for (size_t i = 0; i < n; i++) {
            assert_int_not_equal(list[i].id, early);
            saw_late = saw_late || list[i].id == late;
            for (int k = 0; k < 15; k++)
                assert_int_not_equal(list[i].id, first_page[k]);
        }
        store_job_list_free(list, n);
        store_job_key_clear(&key);
        if (!more)
            break;
        key = next;
    }
    assert_true(saw_late);
}

/* How many of the fixture's jobs q matches, all pages together (and total agrees). */
static size_t count_query(store *s, store_job_query q)
{
    int64_t got[LJOBS + 8];
    store_job *list = NULL;
    size_t n = 0;
    bool more = false;
    store_job_key next;
    int64_t total = -1;
    q.limit = 1;
    assert_int_equal(store_job_query_run(s, &q, &list, &n, &more, &next, &total), 0);
    store_job_list_free(list, n);
    store_job_key_clear(&next);
    return page_all(s, &q, 4, got, LJOBS + 8, total);
}

static void jobs_list_filters_and_search(void **state)
{
    fixture *f = *state;
    int64_t ds[2], ids[LJOBS];
    make_list_jobs(f->s, ds, ids);
    store_job_query q = { .sort = STORE_JOB_SORT_CREATED, .desc = true };
    assert_int_equal(count_query(f->s, q), LJOBS);
    store_job_query st = q;
    st.statuses[0] = "failed";
    st.statuses[1] = "cancelled";
    st.nstatuses = 2;
    assert_int_equal(count_query(f->s, st), 16);               /* i % 5 in {1, 2} */
    store_job_query d = q;
    d.dataset_id = ds[1];
    assert_int_equal(count_query(f->s, d), 20);
    store_job_query net = q;
    net.network = "alexnet";
    net.precision = "amp-fp16";
    assert_int_equal(count_query(f->s, net), 13);              /* i % 3 == 2 */
    net.precision = "fp32";
    assert_int_equal(count_query(f->s, net), 0);
    store_job_query tag = q;
    tag.tag = "t1";
    assert_int_equal(count_query(f->s, tag), 10);
    tag.tag = "t";                                             /* a tag is matched whole */
    assert_int_equal(count_query(f->s, tag), 0);
    store_job_query t = q;
    t.text = "BETA";                                           /* names Beta and beta: i % 6 in {1, 2} */
    assert_int_equal(count_query(f->s, t), 14);
    t.text = "lr";                                             /* notes, case-insensitive: i % 9 == 0 */
    assert_int_equal(count_query(f->s, t), 5);
    t.text = "50%";                                            /* % is literal: the tag 50%_off */
    assert_int_equal(count_query(f->s, t), 8);
    t.text = "a_1";                                            /* _ is literal: Alpha_1 only (i % 6 == 5) */
    assert_int_equal(count_query(f->s, t), 6);
    char idtext[32];
    snprintf(idtext, sizeof idtext, "#%lld", (long long)ids[33]);
    t.text = idtext;
    assert_int_equal(count_query(f->s, t), 1);
    t.text = "resnet";
    t.dataset_id = ds[0];                                      /* i % 3 == 1 and i even */
    assert_int_equal(count_query(f->s, t), 6);
    /* owners: only theirs; -1 matches nothing */
    int64_t user = 0;
    char err[256];
    assert_int_equal(store_user_insert(f->s, "ann", "hash", false, &user, err, sizeof err), 0);
    assert_int_equal(store_set_owner(f->s, STORE_OWNED_JOB, ids[3], user), 0);
    store_job_query own = q;
    own.owner = user;
    assert_int_equal(count_query(f->s, own), 1);
    own.owner = -1;
    assert_int_equal(count_query(f->s, own), 0);
}

static void jobs_set_meta_edits_only_what_it_names(void **state)
{
    fixture *f = *state;
    int64_t ds = make_dataset(f->s), job = 0;
    char err[256];
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "{\"name\":\"first\"}", 1, &job, err, sizeof err), 0);
    store_job j;
    assert_int_equal(store_job_get(f->s, job, &j), 0);
    assert_string_equal(j.name, "first");
    assert_string_equal(j.tags_json, "[]");
    assert_string_equal(j.notes, "");
    assert_string_equal(j.precision, "fp32");
    store_job_clear(&j);
    assert_int_equal(store_job_set_meta(f->s, job, NULL, "[\"a\",\"b\"]", "n"), 0);
    assert_int_equal(store_job_set_meta(f->s, job, "second", NULL, NULL), 0);
    assert_int_equal(store_job_get(f->s, job, &j), 0);
    assert_string_equal(j.name, "second");
    assert_string_equal(j.tags_json, "[\"a\",\"b\"]");
    assert_string_equal(j.notes, "n");
    assert_string_equal(j.config_json, "{\"name\":\"first\"}");   /* job.json's record stays */
    store_job_clear(&j);
    assert_int_equal(store_job_set_meta(f->s, job + 1, "x", NULL, NULL), STORE_NOT_FOUND);
    /* a config that is not JSON still inserts, unnamed */
    int64_t odd = 0;
    assert_int_equal(store_job_insert(f->s, ds, "lenet", "not json", 1, &odd, err, sizeof err), 0);
    assert_int_equal(store_job_get(f->s, odd, &j), 0);
    assert_string_equal(j.name, "");
    store_job_clear(&j);
}

/* A database of version 6 gets the names and precisions of its jobs' configs. */
static void version6_jobs_get_names(void **state)
{
    fixture *f = *state;
    char err[256], path[160];
    store_close(f->s);
    f->s = NULL;
    static const char *const suffixes[] = { "", "-wal", "-shm" };
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", f->path, suffixes[i]);
        unlink(path);
    }
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    for (size_t i = 0; i < store_migration_count && store_migrations[i].version <= 6; i++)
        assert_int_equal(sqlite3_exec(db, store_migrations[i].sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 6;"
                                      "INSERT INTO datasets (name, status, created_at) VALUES "
                                      "('old', 'ready', '2026-01-01T00:00:00Z');"
                                      "INSERT INTO jobs (dataset_id, network, config_json, epochs, created_at) "
                                      "VALUES (1, 'lenet', '{\"name\":\"old run\",\"precision\":\"amp-bf16\"}', 1, "
                                      "'2026-01-01T00:00:00Z'), (1, 'lenet', 'garbage', 1, '2026-01-01T00:00:00Z');",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    f->s = store_open(f->path, err, sizeof err);
    assert_non_null(f->s);
    store_job j;
    assert_int_equal(store_job_get(f->s, 1, &j), 0);
    assert_string_equal(j.name, "old run");
    assert_string_equal(j.precision, "amp-bf16");
    assert_string_equal(j.dataset_name, "old");
    store_job_clear(&j);
    assert_int_equal(store_job_get(f->s, 2, &j), 0);
    assert_string_equal(j.name, "");
    assert_string_equal(j.precision, "fp32");
    store_job_clear(&j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(open_sets_version_and_wal, setup, teardown),
        cmocka_unit_test_setup_teardown(datasets_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(metrics_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(reopen_keeps_data, setup, teardown),
        cmocka_unit_test_setup_teardown(newer_schema_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(not_a_database_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(threads_share_a_handle, setup, teardown),
        cmocka_unit_test_setup_teardown(evaluations_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(queue_orders_both_kinds, setup, teardown),
        cmocka_unit_test_setup_teardown(queue_priority_and_devices, setup, teardown),
        cmocka_unit_test_setup_teardown(version2_database_migrates, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_list_every_sort_pages_each_job_once, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_list_cursor_survives_inserts, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_list_filters_and_search, setup, teardown),
        cmocka_unit_test_setup_teardown(jobs_set_meta_edits_only_what_it_names, setup, teardown),
        cmocka_unit_test_setup_teardown(version6_jobs_get_names, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
