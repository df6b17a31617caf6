/* tests/unit/test_slurm.c: the Slurm client's parsers (jobs/slurm.h) on
 * output shaped like Slurm 22.05's (squeue --json, data_parser v0.0.38;
 * scontrol show job -o), the batch script's exit record, which states are
 * final, and a job's Slurm fields in the store (db/slurm_store.h: submitted,
 * state, offset, active until ended). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "db/slurm_store.h"
#include "db/store.h"
#include "jobs/slurm.h"

static const char SQUEUE[] =
    "{\"meta\": {\"plugin\": {\"type\": \"openapi/v0.0.38\"}}, \"errors\": [], \"jobs\": ["
    "{\"account\": \"\", \"job_id\": 7, \"job_state\": \"RUNNING\", \"state_reason\": \"None\","
    " \"nodes\": \"node[01-02]\", \"name\": \"kiln-3\", \"exit_code\": 0},"
    "{\"job_id\": 8, \"job_state\": \"PENDING\", \"state_reason\": \"Resources\", \"nodes\": \"\"},"
    "{\"job_id\": 9, \"job_state\": [\"TIMEOUT\"], \"state_reason\": \"TimeLimit\", \"nodes\": \"vm\"},"
    "{\"name\": \"no id\"}]}";

static void squeue_json(void **state)
{
    (void)state;
    slurm_job *jobs = NULL;
    size_t n = 0;
    char err[256] = "";
    assert_int_equal(slurm_parse_squeue(SQUEUE, strlen(SQUEUE), &jobs, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);                       /* the entry without a job_id is left out */
    assert_int_equal(jobs[0].id, 7);
    assert_string_equal(jobs[0].state, "RUNNING");
    assert_string_equal(jobs[0].reason, "None");
    assert_string_equal(jobs[0].nodes, "node[01-02]");
    assert_string_equal(jobs[1].state, "PENDING");
    assert_string_equal(jobs[1].reason, "Resources");
    assert_string_equal(jobs[1].nodes, "");
    assert_string_equal(jobs[2].state, "TIMEOUT");   /* later parsers: a list of flags */
    free(jobs);

    assert_int_equal(slurm_parse_squeue("{\"errors\": []}", 14, &jobs, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "jobs"));
    assert_int_equal(slurm_parse_squeue("not json", 8, &jobs, &n, err, sizeof err), -1);
    assert_null(jobs);
    assert_int_equal(n, 0);
}

static void scontrol_line(void **state)
{
    (void)state;
    slurm_job j;
    assert_int_equal(slurm_parse_scontrol("JobId=12 JobName=kiln-4 UserId=root(0) JobState=NODE_FAIL "
                                          "Reason=NodeDown Dependency=(null) ReqNodeList=(null) "
                                          "NodeList=node03 BatchHost=node03\n", &j), 0);
    assert_int_equal(j.id, 12);
    assert_string_equal(j.state, "NODE_FAIL");
    assert_string_equal(j.reason, "NodeDown");
    assert_string_equal(j.nodes, "node03");            /* not ReqNodeList's */
    assert_int_equal(slurm_parse_scontrol("JobId=13 JobState=PENDING Reason=Priority NodeList=(null)", &j), 0);
    assert_string_equal(j.nodes, "");
    assert_int_equal(slurm_parse_scontrol("slurm_load_jobs error: Invalid job id specified", &j), -1);
}

static void final_states(void **state)
{
    (void)state;
    const char *final[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                            "PREEMPTED", "BOOT_FAIL", "DEADLINE" };
    const char *live[] = { "PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "REQUEUED", "" };
    for (size_t i = 0; i < sizeof final / sizeof final[0]; i++)
        assert_true(slurm_state_final(final[i]));
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        assert_false(slurm_state_final(live[i]));
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void exit_record(void **state)
{
    (void)state;
    char dir[] = "/tmp/kiln-test-slurm-XXXXXX", path[128], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/%s", dir, SLURM_EXIT);
    slurm_exit ex;
    assert_int_equal(slurm_exit_read(dir, &ex, err, sizeof err), 1);            /* none yet */
    write_text(path, "{\"slurm_job_id\": 41, \"exit_code\": 0, \"signal\": 15}\n");
    assert_int_equal(slurm_exit_read(dir, &ex, err, sizeof err), 0);
    assert_int_equal(ex.slurm_job_id, 41);
    assert_int_equal(ex.exit_code, 0);
    assert_int_equal(ex.signal, 15);
    write_text(path, "{\"slurm_job_id\": 41}");
    assert_int_equal(slurm_exit_read(dir, &ex, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an exit record"));
    unlink(path);
    rmdir(dir);
}

static void store_fields(void **state)
{
    (void)state;
    char dir[] = "/tmp/kiln-test-slurmdb-XXXXXX", path[128], err[256] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/kiln.db", dir);
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    int64_t ds, job, local;
    assert_int_equal(store_dataset_insert(s, "d", &ds, err, sizeof err), 0);
    assert_int_equal(store_job_insert(s, ds, "lenet", "{}", 1, &job, err, sizeof err), 0);
    assert_int_equal(store_job_insert(s, ds, "lenet", "{}", 1, &local, err, sizeof err), 0);

    store_slurm sl;
    assert_int_equal(store_slurm_get(s, local, &sl), 0);
    assert_int_equal(sl.slurm_job_id, 0);                   /* never in Slurm */
    assert_false(sl.active);
    assert_int_equal(store_slurm_get(s, 999, &sl), STORE_NOT_FOUND);
    assert_int_equal(store_slurm_submitted(s, 999, 5), STORE_NOT_FOUND);

    assert_int_equal(store_slurm_submitted(s, job, 77), 0);
    assert_int_equal(store_slurm_set_state(s, job, "RUNNING", "None", "node01"), 0);
    assert_int_equal(store_slurm_set_offset(s, job, 1234), 0);
    assert_int_equal(store_slurm_get(s, job, &sl), 0);
    assert_int_equal(sl.slurm_job_id, 77);
    assert_string_equal(sl.state, "RUNNING");
    assert_string_equal(sl.reason, "None");
    assert_string_equal(sl.nodes, "node01");
    assert_int_equal(sl.report_offset, 1234);
    assert_true(sl.active);

    int64_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(store_slurm_active(s, &ids, &n), 0);   /* queued and submitted */
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], job);
    free(ids);
    assert_int_equal(store_job_set_status(s, job, "running", NULL), 0);
    assert_int_equal(store_slurm_active(s, &ids, &n), 0);
    assert_int_equal(n, 1);
    free(ids);

    assert_int_equal(store_slurm_ended(s, job), 0);
    assert_int_equal(store_slurm_active(s, &ids, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(store_slurm_get(s, job, &sl), 0);
    assert_int_equal(sl.slurm_job_id, 77);                  /* kept for the job page */
    assert_false(sl.active);

    assert_int_equal(store_slurm_submitted(s, job, 78), 0);  /* resumed: afresh */
    assert_int_equal(store_slurm_get(s, job, &sl), 0);
    assert_int_equal(sl.slurm_job_id, 78);
    assert_string_equal(sl.state, "PENDING");
    assert_string_equal(sl.nodes, "");
    assert_int_equal(sl.report_offset, 0);
    assert_true(sl.active);
    store_close(s);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(squeue_json),
        cmocka_unit_test(scontrol_line),
        cmocka_unit_test(final_states),
        cmocka_unit_test(exit_record),
        cmocka_unit_test(store_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
