/* tests/unit/test_jobsafe.c: job safety (issue 15, findings 6, 7, 9):
 * jobs/memfit.h against fake /proc/meminfo files, jobs/joblock.h, and the
 * store's paging of a job's metrics and requeue of an ended job (db/store.h). */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "db/store.h"
#include "engine/spec.h"
#include "engine/summary.h"
#include "jobs/jobcfg.h"
#include "jobs/joblock.h"
#include "jobs/memfit.h"
#include "jobcfg_util.h"

/* A temporary folder, removed by the test's end (rm -r). */
static void make_tmp(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/kiln-jobsafe-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void rm_tmp(const char *dir)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- memfit ------------------------------------------------------------------ */

static const char MEMINFO[] =
    "MemTotal:       24683472 kB\n"
    "MemFree:        19625000 kB\n"
    "MemAvailable:    2097152 kB\n"       /* 2 GiB */
    "Buffers:          123456 kB\n";

static void mem_available_reads_meminfo(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_tmp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/meminfo", dir);
    write_text(path, MEMINFO);
    assert_int_equal(memfit_mem_available(path), (uint64_t)2097152 * 1024);
    write_text(path, "MemTotal:       24683472 kB\nMemFree: 100 kB\n");    /* an old kernel: none */
    assert_int_equal(memfit_mem_available(path), 0);
    assert_int_equal(memfit_mem_available("/nonexistent/meminfo"), 0);
    /* The margin: 10% is kept. */
    assert_int_equal(memfit_usable(1000), 900);
    assert_int_equal(memfit_usable((uint64_t)2 << 30), ((int64_t)2 << 30) - (((int64_t)2 << 30) / 10));
    assert_int_equal(memfit_usable(0), 0);
    rm_tmp(dir);
}

/* A CPU job of a network with big activations (64 channels of 64 x 64 an
 * image, 4 MiB with its gradient per layer), checked against fake meminfo. */
static void job_fits_against_available_memory(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_tmp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/meminfo", dir);
    cJSON *j = job_json_with("{\"network\": {\"layers\": [{\"type\": \"conv2d\", \"filters\": 64, "
                             "\"kernel\": 3, \"padding\": 1}, {\"type\": \"relu\"}, "
                             "{\"type\": \"global_avgpool\"}, {\"type\": \"dense\", \"units\": \"classes\"}]},"
                             " \"input\": [1, 64, 64], \"batch_size\": 512}");
    assert_non_null(j);
    jobcfg c;
    api_error e;
    assert_int_equal(jobcfg_from_json(j, JOBCFG_RESOLVED, &c, &e), 0);
    cJSON_Delete(j);
    net_shape in = { 1, 64, 64 };

    /* The expected figures, from the summary's own arithmetic. */
    net_spec s;
    char err[512];
    assert_int_equal(spec_parse(c.network, in, 2, &s, err, sizeof err), 0);
    summary_mem m;
    assert_int_equal(summary_memory(&s, summary_opt_states(c.solver.type, c.solver.momentum > 0),
                                    c.precision, &m, err, sizeof err), 0);
    spec_free(&s);
    int64_t need = summary_train_bytes(&m, 512);
    assert_true(need > ((int64_t)2 << 30));           /* over 2 GiB at batch 512 */

    int64_t most = -1;
    write_text(path, "MemAvailable:   16777216 kB\n");  /* 16 GiB: fits */
    assert_int_equal(memfit_check(&c, in, 2, path, &most, err, sizeof err), 0);
    assert_int_equal(most, 0);

    write_text(path, MEMINFO);                         /* 2 GiB less 10%: not at 512 */
    int64_t usable = memfit_usable((uint64_t)2097152 * 1024);
    assert_int_equal(memfit_check(&c, in, 2, path, &most, err, sizeof err), 1);
    assert_int_equal(most, summary_max_batch(&m, usable));
    assert_true(most >= 1 && most < 512);
    char fits[64];
    snprintf(fits, sizeof fits, "at most %lld fits", (long long)most);
    assert_non_null(strstr(err, fits));
    assert_non_null(strstr(err, "2,048 MiB MemAvailable less a 10% margin"));
    assert_non_null(strstr(err, "lower bound"));
    assert_non_null(strstr(err, "at batch size 512"));
    /* Exactly what fits, fits; one more does not. */
    int64_t at = summary_max_batch(&m, usable);
    c.batch_size = (int)at;
    assert_int_equal(memfit_check(&c, in, 2, path, &most, err, sizeof err), 0);
    c.batch_size = (int)at + 1;
    assert_int_equal(memfit_check(&c, in, 2, path, &most, err, sizeof err), 1);

    write_text(path, "MemTotal: 1 kB\n");             /* not known: no refusal */
    assert_int_equal(memfit_check(&c, in, 2, path, &most, err, sizeof err), 0);
    jobcfg_free(&c);
    rm_tmp(dir);
}

/* ---- the job folder's lock ------------------------------------------------------ */

static void lock_is_exclusive_and_names_its_holder(void **state)
{
    (void)state;
    char dir[64], path[128];
    make_tmp(dir, sizeof dir);
    int fd = -1, fd2 = -1;
    pid_t holder = -1;
    char err[256];
    assert_int_equal(joblock_take(dir, 0, &fd, &holder, err, sizeof err), 0);
    assert_true(fd >= 0);
    assert_int_equal(joblock_holder(dir), getpid());
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    /* A second taker (another open file: flock conflicts even within one process). */
    assert_int_equal(joblock_take(dir, 0, &fd2, &holder, err, sizeof err), JOBLOCK_BUSY);
    assert_int_equal(fd2, -1);
    assert_int_equal(holder, getpid());
    assert_int_equal(joblock_take(dir, 120, &fd2, &holder, err, sizeof err), JOBLOCK_BUSY);  /* waits, then gives up */
    /* The holder adopts its own descriptor (what a worker does with --lock-fd). */
    assert_int_equal(joblock_adopt(dir, fd, err, sizeof err), 0);
    /* Another file is not the lock. */
    snprintf(path, sizeof path, "%s/other", dir);
    int other = open(path, O_RDWR | O_CREAT, 0644);
    assert_true(other >= 0);
    assert_int_equal(joblock_adopt(dir, other, err, sizeof err), -1);
    assert_non_null(strstr(err, "is not"));
    close(other);
    /* Released: the next one takes it. */
    close(fd);
    assert_int_equal(joblock_take(dir, 0, &fd2, &holder, err, sizeof err), 0);
    /* A descriptor of the lock file that does not hold the lock cannot adopt it. */
    snprintf(path, sizeof path, "%s/%s", dir, JOBLOCK_FILE);
    int plain = open(path, O_RDWR);
    assert_true(plain >= 0);
    assert_int_equal(joblock_adopt(dir, plain, err, sizeof err), -1);
    assert_non_null(strstr(err, "held by another process"));
    close(plain);
    close(fd2);
    /* A folder that does not exist is an error, not "busy". */
    assert_int_equal(joblock_take("/nonexistent/kiln-job", 0, &fd, &holder, err, sizeof err), -1);
    rm_tmp(dir);
}

/* ---- the store: paging metrics, requeueing an ended job ---------------------------- */

static void store_pages_metrics_by_row(void **state)
{
    (void)state;
    char dir[64], path[128], err[256];
    make_tmp(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/kiln.db", dir);
    store *st = store_open(path, err, sizeof err);
    assert_non_null(st);
    int64_t ds = 0, a = 0, b = 0;
    assert_int_equal(store_dataset_insert(st, "d", &ds, err, sizeof err), 0);
    assert_int_equal(store_job_insert(st, ds, "lenet", "{}", 1, &a, err, sizeof err), 0);
    assert_int_equal(store_job_insert(st, ds, "lenet", "{}", 1, &b, err, sizeof err), 0);
    int64_t last = -1;
    assert_int_equal(store_metric_last_row(st, a, &last), 0);
    assert_int_equal(last, 0);                         /* no metrics */
    for (int i = 0; i < 10; i++) {                     /* interleaved with job b's */
        store_metric m = { .step = 10 - i, .epoch = 0.5, .value = i, .wall_time = 1 };
        snprintf(m.tag, sizeof m.tag, "t%d", i);
        assert_int_equal(store_metric_insert(st, a, &m), 0);
        assert_int_equal(store_metric_insert(st, b, &m), 0);
    }
    assert_int_equal(store_metric_last_row(st, a, &last), 0);
    int64_t upto = last;
    store_metric page[4];
    size_t n = 0;
    int64_t after = 0, row = 0;
    int seen = 0;
    do {                                               /* insertion order, 4 at a time */
        assert_int_equal(store_metric_page(st, a, after, upto, page, 4, &n, &row), 0);
        for (size_t k = 0; k < n; k++, seen++) {
            char tag[16];
            snprintf(tag, sizeof tag, "t%d", seen);
            assert_string_equal(page[k].tag, tag);
            assert_int_equal(page[k].step, 10 - seen);
        }
        after = row;
    } while (n == 4);
    assert_int_equal(seen, 10);
    /* Later rows are past upto: the page stops there. */
    store_metric m = { .step = 99, .wall_time = 1 };
    snprintf(m.tag, sizeof m.tag, "late");
    assert_int_equal(store_metric_insert(st, a, &m), 0);
    assert_int_equal(store_metric_page(st, a, after, upto, page, 4, &n, &row), 0);
    assert_int_equal(n, 0);
    /* The k-th metric's row, and the count. */
    int64_t r3 = 0, cnt = 0;
    assert_int_equal(store_metric_row_at(st, a, 3, upto, &r3), 0);
    assert_int_equal(store_metric_page(st, a, r3, upto, page, 1, &n, &row), 0);
    assert_string_equal(page[0].tag, "t3");            /* after the 3rd comes the 4th */
    assert_int_equal(store_metric_row_at(st, a, 11, upto, &r3), STORE_NOT_FOUND);
    assert_int_equal(store_metric_row_at(st, a, 0, upto, &r3), STORE_NOT_FOUND);
    assert_int_equal(store_metric_count(st, a, upto, &cnt), 0);
    assert_int_equal(cnt, 10);

    /* Requeue: only a failed or cancelled job, once. */
    assert_int_equal(store_job_requeue_ended(st, a), STORE_NOT_FOUND);    /* queued */
    assert_int_equal(store_job_set_status(st, a, "running", NULL), 0);
    assert_int_equal(store_job_requeue_ended(st, a), STORE_NOT_FOUND);
    assert_int_equal(store_job_set_status(st, a, "failed", "boom"), 0);
    assert_int_equal(store_job_requeue_ended(st, a), 0);
    store_job j;
    assert_int_equal(store_job_get(st, a, &j), 0);
    assert_string_equal(j.status, "queued");
    assert_null(j.error);
    assert_null(j.finished_at);
    store_job_clear(&j);
    assert_int_equal(store_job_requeue_ended(st, a), STORE_NOT_FOUND);    /* already queued */
    assert_int_equal(store_job_set_status(st, b, "done", NULL), 0);
    assert_int_equal(store_job_requeue_ended(st, b), STORE_NOT_FOUND);    /* done stays done */
    assert_int_equal(store_job_requeue_ended(st, 9999), STORE_NOT_FOUND);
    store_close(st);
    rm_tmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mem_available_reads_meminfo),
        cmocka_unit_test(job_fits_against_available_memory),
        cmocka_unit_test(lock_is_exclusive_and_names_its_holder),
        cmocka_unit_test(store_pages_metrics_by_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
