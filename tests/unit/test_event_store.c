/* tests/unit/test_event_store.c: a job's stored event stream
 * (db/event_store.h) on a temporary database: ids count per job from 1,
 * pages come in order after an id, a trim on resume drops the later metrics
 * and the statuses but never lets an id come back, and an unknown job is
 * STORE_NOT_FOUND with nothing stored. */
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
#include "db/event_store.h"

typedef struct fixture {
    char dir[64], path[128];
    store *s;
    int64_t dataset, job, other;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/kiln-test-events-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/kiln.db", f->dir);
    char err[256] = "";
    f->s = store_open(f->path, err, sizeof err);
    if (!f->s || store_dataset_insert(f->s, "d", &f->dataset, err, sizeof err) != 0 ||
        store_job_insert(f->s, f->dataset, "lenet", "{}", 1, &f->job, err, sizeof err) != 0 ||
        store_job_insert(f->s, f->dataset, "lenet", "{}", 1, &f->other, err, sizeof err) != 0) {
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

static uint64_t append(fixture *f, int64_t job, const char *type, int64_t step, const char *data)
{
    uint64_t id = 0;
    assert_int_equal(store_event_append(f->s, job, type, step, data, &id), 0);
    return id;
}

/* The ids of the job's events after `after`, as a string "1,2,3". */
static void ids_after(fixture *f, int64_t job, uint64_t after, char *out, size_t cap)
{
    store_event ev[16];
    size_t n = 0;
    assert_int_equal(store_event_page(f->s, job, after, ev, 16, &n), 0);
    out[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%llu", i ? "," : "", (unsigned long long)ev[i].id);
        store_event_clear(&ev[i]);
    }
}

static void test_ids_count_per_job_and_pages_follow(void **state)
{
    fixture *f = *state;
    assert_int_equal(append(f, f->job, "status", -1, "{\"status\":\"running\"}"), 1);
    assert_int_equal(append(f, f->job, "metric", 10, "{\"step\":10}"), 2);
    assert_int_equal(append(f, f->other, "log", -1, "{\"line\":\"x\"}"), 1);   /* per job */
    assert_int_equal(append(f, f->job, "log", -1, "{\"line\":\"hello\"}"), 3);
    uint64_t last = 0;
    assert_int_equal(store_event_last(f->s, f->job, &last), 0);
    assert_int_equal(last, 3);

    store_event ev[2];
    size_t n = 0;
    assert_int_equal(store_event_page(f->s, f->job, 1, ev, 2, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ev[0].id, 2);
    assert_string_equal(ev[0].type, "metric");
    assert_string_equal(ev[0].data, "{\"step\":10}");
    assert_int_equal(ev[1].id, 3);
    assert_string_equal(ev[1].data, "{\"line\":\"hello\"}");
    store_event_clear(&ev[0]);
    store_event_clear(&ev[1]);
    assert_int_equal(store_event_page(f->s, f->job, 3, ev, 2, &n), 0);
    assert_int_equal(n, 0);
}

static void test_trim_keeps_ids_growing(void **state)
{
    fixture *f = *state;
    append(f, f->job, "status", -1, "{\"status\":\"running\"}");   /* 1 */
    append(f, f->job, "metric", 10, "{}");                          /* 2 */
    append(f, f->job, "log", -1, "{\"line\":\"a\"}");               /* 3 */
    append(f, f->job, "metric", 20, "{}");                          /* 4 */
    append(f, f->job, "status", -1, "{\"status\":\"cancelled\"}");  /* 5 */
    /* Resumed from the checkpoint at step 10: metric 20 and both statuses go. */
    assert_int_equal(store_event_trim(f->s, f->job, 10), 0);
    char ids[128];
    ids_after(f, f->job, 0, ids, sizeof ids);
    assert_string_equal(ids, "2,3");
    assert_int_equal(append(f, f->job, "status", -1, "{\"status\":\"running\"}"), 6);  /* never 4 again */
    ids_after(f, f->job, 3, ids, sizeof ids);
    assert_string_equal(ids, "6");
    /* From the start (-1): every metric goes, the log stays. */
    assert_int_equal(store_event_trim(f->s, f->job, -1), 0);
    ids_after(f, f->job, 0, ids, sizeof ids);
    assert_string_equal(ids, "3");
}

static void test_unknown_job(void **state)
{
    fixture *f = *state;
    uint64_t id = 7;
    assert_int_equal(store_event_append(f->s, 987654, "log", -1, "{}", &id), STORE_NOT_FOUND);
    assert_int_equal(store_event_last(f->s, 987654, &id), STORE_NOT_FOUND);
    char ids[32];
    ids_after(f, 987654, 0, ids, sizeof ids);
    assert_string_equal(ids, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ids_count_per_job_and_pages_follow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_keeps_ids_growing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_job, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
