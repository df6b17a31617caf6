/* tests/unit/test_cluster.c: server/cluster.c, the Slurm cluster's nodes
 * from `sinfo --json`: gres strings, sinfo outputs recorded from the test
 * cluster (tests/data/sinfo/, Slurm 22.05.8) and malformed ones, and the
 * sampler's handling of an sinfo that fails, floods or hangs (shell scripts
 * standing in for sinfo in a temporary folder: the real one is driven by
 * tests/integration/cluster_hardware.test.mjs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/cluster.h"

static char *read_file(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/sinfo/%s", KILN_SOURCE_DIR, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void test_gres(void **state)
{
    (void)state;
    static const struct { const char *s; int64_t gpus; } cases[] = {
        { "gpu:2", 2 }, { "gpu:0", 0 }, { "gpu:0(IDX:N/A)", 0 }, { "gpu:2(IDX:0-1)", 2 },
        { "gpu:1(IDX:1)", 1 }, { "gpu:tesla:2(S:0-1)", 2 }, { "gpu:a100:4(IDX:0,2-3)", 4 },
        { "gpu:2(IDX:0-1),shard:4(0/4,0/4)", 2 }, { "gpu:a100:1,gpu:v100:2", 3 }, { "gpu", 1 },
        { "gpu:a100", 1 }, { "gpu:(null):0(IDX:N/A)", 0 }, { "gpu:(null)", 1 }, { "mps:100", 0 },
        { "", 0 }, { "(null)", 0 }, { "N/A", 0 }, { " gpu:3 ", 3 },
        /* unreadable: unknown */
        { "gpu:", -1 }, { "gpu:2x", -1 }, { "gpu:a:b", -1 }, { "gpu:2(IDX:0-1", -1 }, { "gpu:2)", -1 },
        { ":2", -1 }, { "gpu:2,,gpu:1", -1 }, { "gpu:99999999999999999999", -1 }, { ",", -1 },
        { "gpu:2)(", -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t got = cluster_gres_gpus(cases[i].s);
        if (got != cases[i].gpus)
            fail_msg("cluster_gres_gpus(\"%s\") = %lld, want %lld", cases[i].s, (long long)got,
                     (long long)cases[i].gpus);
    }
    assert_int_equal(cluster_gres_gpus(NULL), -1);
}

static void test_recorded(void **state)
{
    (void)state;
    static const struct {
        const char *file, *state, *flags, *reason;
        int64_t cpus_alloc, gpus_used;
    } rec[] = {
        { "idle.json", "idle", "", "", 0, 0 },
        { "mixed.json", "mixed", "", "", 1, 1 },
        { "draining.json", "mixed", "drain", "disk check, by kiln test", 1, 1 },
    };
    for (size_t i = 0; i < sizeof rec / sizeof rec[0]; i++) {
        size_t len;
        char *text = read_file(rec[i].file, &len);
        cluster_nodes n;
        char err[256] = "";
        assert_int_equal(cluster_parse_sinfo(text, len, &n, err, sizeof err), 0);
        assert_int_equal(n.n, 1);
        assert_int_equal(n.omitted, 0);
        assert_string_equal(n.version, "22.05.8");
        assert_string_equal(n.warning, "");
        const cluster_node *c = &n.nodes[0];
        assert_string_equal(c->name, "vm");
        assert_string_equal(c->state, rec[i].state);
        assert_string_equal(c->flags, rec[i].flags);
        assert_string_equal(c->reason, rec[i].reason);
        assert_int_equal(c->cpus, 2);
        assert_int_equal(c->cpus_allocated, rec[i].cpus_alloc);
        assert_int_equal(c->memory_mib, 4000);
        assert_true(c->memory_free_mib > 0);
        assert_int_equal(c->memory_allocated_mib, 0);
        assert_int_equal(c->gpus, 2);
        assert_int_equal(c->gpus_used, rec[i].gpus_used);
        assert_int_equal(c->npartitions, 1);
        assert_string_equal(c->partitions[0], "kiln");

        cJSON *j = cluster_node_json(c);
        assert_non_null(j);
        assert_int_equal(cJSON_GetObjectItem(j, "memory_total_bytes")->valuedouble, 4000.0 * 1024 * 1024);
        assert_int_equal(cJSON_GetObjectItem(j, "gpus_used")->valuedouble, (double)rec[i].gpus_used);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "state_flags")), rec[i].flags[0] ? 1 : 0);
        assert_true(rec[i].reason[0] ? cJSON_IsString(cJSON_GetObjectItem(j, "reason"))
                                     : cJSON_IsNull(cJSON_GetObjectItem(j, "reason")));
        cJSON_Delete(j);
        cluster_nodes_free(&n);

        /* Every cut of the recording is either refused or read; never a crash. */
        for (size_t cut = 0; cut < len; cut++) {
            int rc = cluster_parse_sinfo(text, cut, &n, err, sizeof err);
            assert_true(rc == 0 || (rc == -1 && strstr(err, "sinfo --json")));
            cluster_nodes_free(&n);
        }
        free(text);
    }

    /* Recorded with slurmctld stopped: exit status 0, an "errors" list, no nodes. */
    size_t len;
    char *text = read_file("no_controller.json", &len);
    cluster_nodes n;
    char err[256];
    assert_int_equal(cluster_parse_sinfo(text, len, &n, err, sizeof err), 0);
    assert_int_equal(n.n, 0);
    assert_string_equal(n.warning, "Unspecified error (errno -1)");
    cluster_nodes_free(&n);
    free(text);
}

/* Parses s; returns the result code, the nodes in *n. */
static int parse(const char *s, cluster_nodes *n, char *err, size_t errlen)
{
    return cluster_parse_sinfo(s, strlen(s), n, err, errlen);
}

static void test_malformed(void **state)
{
    (void)state;
    cluster_nodes n;
    char err[256];
    static const char *const refused[] = { "", "garbage", "{", "[]", "{}", "{\"nodes\": 5}", "null",
                                           "{\"nodes\": {\"a\": 1}}", "\"nodes\"" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        err[0] = '\0';
        assert_int_equal(parse(refused[i], &n, err, sizeof err), -1);
        assert_non_null(strstr(err, "sinfo --json"));
        assert_int_equal(n.n, 0);
        cluster_nodes_free(&n);
    }

    /* Entries that are not objects are skipped; an empty object is a node of unknowns. */
    assert_int_equal(parse("{\"nodes\": [1, \"x\", null, [], {}]}", &n, err, sizeof err), 0);
    assert_int_equal(n.n, 1);
    assert_string_equal(n.nodes[0].name, "");
    assert_string_equal(n.nodes[0].state, "unknown");
    assert_int_equal(n.nodes[0].cpus, -1);
    assert_int_equal(n.nodes[0].gpus, -1);
    assert_int_equal(n.nodes[0].memory_free_mib, -1);
    cJSON *j = cluster_node_json(&n.nodes[0]);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "cpus")) && cJSON_IsNull(cJSON_GetObjectItem(j, "gpus")));
    cJSON_Delete(j);
    cluster_nodes_free(&n);

    /* Wrong types, NO_VAL, fractions, negatives, huge numbers: unknown. */
    assert_int_equal(parse("{\"nodes\": [{\"name\": 7, \"state\": 3, \"cpus\": \"2\", \"alloc_cpus\": -1,"
                           " \"real_memory\": 1.5, \"free_memory\": 1e300, \"alloc_memory\": 4294967294,"
                           " \"gres\": 7, \"gres_used\": null, \"partitions\": \"kiln\", \"reason\": {}}]}",
                           &n, err, sizeof err), 0);
    const cluster_node *c = &n.nodes[0];
    assert_string_equal(c->name, "");
    assert_string_equal(c->state, "unknown");
    assert_int_equal(c->cpus, -1);
    assert_int_equal(c->cpus_allocated, -1);
    assert_int_equal(c->memory_mib, -1);
    assert_int_equal(c->memory_free_mib, -1);
    assert_int_equal(c->memory_allocated_mib, -1);
    assert_int_equal(c->gpus, -1);
    assert_int_equal(c->gpus_used, 0);           /* null: none in use */
    assert_int_equal(c->npartitions, 0);
    assert_string_equal(c->reason, "");
    cluster_nodes_free(&n);

    /* Later Slurm forms: a state array, numbers as {"set", "number"}. */
    assert_int_equal(parse("{\"nodes\": [{\"name\": \"n1\", \"state\": [\"IDLE\", \"DRAIN\", \"NOT_RESPONDING\"],"
                           " \"cpus\": 64, \"alloc_cpus\": {\"set\": true, \"infinite\": false, \"number\": 8},"
                           " \"free_memory\": {\"set\": false, \"number\": 0},"
                           " \"gres\": \"gpu:h100:8(S:0-1)\", \"gres_used\": \"gpu:h100:3(IDX:0-2)\"}],"
                           " \"errors\": [{\"error\": \"something odd\"}, \"and more\"]}", &n, err, sizeof err), 0);
    c = &n.nodes[0];
    assert_string_equal(c->state, "idle");
    assert_string_equal(c->flags, "drain+not_responding");
    assert_int_equal(c->cpus, 64);
    assert_int_equal(c->cpus_allocated, 8);
    assert_int_equal(c->memory_free_mib, -1);
    assert_int_equal(c->gpus, 8);
    assert_int_equal(c->gpus_used, 3);
    assert_string_equal(n.warning, "something odd; and more");
    j = cluster_node_json(c);
    cJSON *flags = cJSON_GetObjectItem(j, "state_flags");
    assert_int_equal(cJSON_GetArraySize(flags), 2);
    assert_string_equal(cJSON_GetArrayItem(flags, 1)->valuestring, "not_responding");
    cJSON_Delete(j);
    cluster_nodes_free(&n);

    /* Too deep for cJSON: refused, not a stack overflow. */
    size_t deep = 100000;
    char *d = malloc(2 * deep + 1);
    assert_non_null(d);
    memset(d, '[', deep);
    memset(d + deep, ']', deep);
    d[2 * deep] = '\0';
    assert_int_equal(parse(d, &n, err, sizeof err), -1);
    free(d);
}

/* Long strings are cut at a character boundary; bytes that are not UTF-8
 * become characters; many partitions are cut to CLUSTER_NODE_PARTITIONS. */
static void test_long_and_odd_strings(void **state)
{
    (void)state;
    size_t big = 200000;
    char *s = malloc(big + 4096);
    assert_non_null(s);
    int o = sprintf(s, "{\"nodes\": [{\"name\": \"caf\xe9\", \"partitions\": [");
    for (int i = 0; i < 20; i++)
        o += sprintf(s + o, "%s\"p%d\"", i ? "," : "", i);
    o += sprintf(s + o, "], \"reason\": \"");
    for (size_t i = 0; i < big; i += 2)
        o += sprintf(s + o, "\xc3\xa9");             /* é, two bytes each */
    sprintf(s + o, "\"}]}");
    cluster_nodes n;
    char err[256];
    assert_int_equal(parse(s, &n, err, sizeof err), 0);
    free(s);
    const cluster_node *c = &n.nodes[0];
    assert_string_equal(c->name, "caf\xc3\xa9");
    assert_int_equal(c->npartitions, CLUSTER_NODE_PARTITIONS);
    assert_string_equal(c->partitions[CLUSTER_NODE_PARTITIONS - 1], "p7");
    size_t rl = strlen(c->reason);
    assert_true(rl > 0 && rl < CLUSTER_REASON_MAX && rl % 2 == 0);   /* whole characters only */
    cluster_nodes_free(&n);
}

/* More nodes than CLUSTER_MAX_NODES: the first are kept, the rest counted. */
static void test_many_nodes(void **state)
{
    (void)state;
    size_t count = CLUSTER_MAX_NODES + 123;
    char *s = malloc(count * 64 + 64);
    assert_non_null(s);
    size_t o = (size_t)sprintf(s, "{\"nodes\": [");
    for (size_t i = 0; i < count; i++)
        o += (size_t)sprintf(s + o, "%s{\"name\": \"n%zu\", \"gres\": \"gpu:%zu\"}", i ? "," : "", i, i % 9);
    sprintf(s + o, "]}");
    cluster_nodes n;
    char err[256];
    assert_int_equal(parse(s, &n, err, sizeof err), 0);
    free(s);
    assert_int_equal(n.n, CLUSTER_MAX_NODES);
    assert_int_equal(n.omitted, 123);
    assert_string_equal(n.nodes[CLUSTER_MAX_NODES - 1].name, "n9999");
    assert_int_equal(n.nodes[17].gpus, 17 % 9);
    cluster_nodes_free(&n);
}

/* ---- the sampler, with scripts in sinfo's place ------------------------------ */

static char bindir[256];

static void write_sinfo(const char *body)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sinfo", bindir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The sampler's JSON once its first sinfo has run (waits up to 10 s). */
static cJSON *first_result(cluster *c)
{
    for (double t0 = mono(); mono() - t0 < 10;) {
        cJSON *j = cluster_json(c);
        assert_non_null(j);
        if (cJSON_IsNumber(cJSON_GetObjectItem(j, "time")))
            return j;
        cJSON_Delete(j);
        usleep(20000);
    }
    fail_msg("no sinfo result within 10 s");
    return NULL;
}

/* Runs the sampler with the current script; its first result. */
static cJSON *sample_with(const char *slurm_bin, const char *conf)
{
    cluster_config cfg = { .interval_s = 60, .slurm_bin = slurm_bin, .slurm_conf = conf };
    char err[256];
    cluster *c = cluster_start(&cfg, err, sizeof err);
    assert_non_null(c);
    cJSON *j = first_result(c);
    cluster_stop(c);
    return j;
}

static const char *error_of(const cJSON *j)
{
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    return cJSON_IsString(e) ? e->valuestring : NULL;
}

static void test_sampler(void **state)
{
    (void)state;
    snprintf(bindir, sizeof bindir, "/tmp/kiln-test-cluster-XXXXXX");
    assert_non_null(mkdtemp(bindir));
    cJSON *null = cluster_json(NULL);
    assert_true(cJSON_IsNull(null));
    cJSON_Delete(null);

    /* A good answer, with SLURM_CONF passed through as configured. */
    char body[1024];
    snprintf(body, sizeof body, "[ \"$1\" = --json ] && [ \"$SLURM_CONF\" = /etc/kiln-test.conf ] && "
                                "exec cat %s/tests/data/sinfo/mixed.json; echo wrong call >&2; exit 3",
             KILN_SOURCE_DIR);
    write_sinfo(body);
    cJSON *j = sample_with(bindir, "/etc/kiln-test.conf");
    assert_null(error_of(j));
    assert_string_equal(cJSON_GetObjectItem(j, "slurm_version")->valuestring, "22.05.8");
    assert_int_equal(cJSON_GetObjectItem(j, "interval_seconds")->valuedouble, 60);
    cJSON *node = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "nodes"), 0);
    assert_string_equal(cJSON_GetObjectItem(node, "state")->valuestring, "mixed");
    assert_int_equal(cJSON_GetObjectItem(node, "gpus_used")->valuedouble, 1);
    cJSON_Delete(j);

    /* sinfo's errors list (as with slurmctld down): an error. */
    snprintf(body, sizeof body, "exec cat %s/tests/data/sinfo/no_controller.json", KILN_SOURCE_DIR);
    write_sinfo(body);
    j = sample_with(bindir, NULL);
    assert_string_equal(error_of(j), "sinfo --json reported: Unspecified error (errno -1) (and no nodes: is "
                                     "slurmctld running and reachable?)");
    cJSON_Delete(j);

    /* A failing sinfo: its exit status and stderr, no nodes. */
    write_sinfo("printf 'sinfo: error: Unable to contact slurm controller (connect failure)\\n\\n  "
                "sinfo: fatal: giving up \\r\\n' >&2; exit 1");
    j = sample_with(bindir, NULL);
    assert_non_null(strstr(error_of(j), "exited with status 1: sinfo: error: Unable to contact slurm controller "
                                        "(connect failure); sinfo: fatal: giving up"));
    assert_true(error_of(j)[strlen(error_of(j)) - 1] == 'p');
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodes")), 0);
    cJSON_Delete(j);

    /* Garbage on stdout. */
    write_sinfo("echo 'this is not json'");
    j = sample_with(bindir, NULL);
    assert_non_null(strstr(error_of(j), "not JSON"));
    cJSON_Delete(j);

    /* Killed by a signal. */
    write_sinfo("kill -9 $$");
    j = sample_with(bindir, NULL);
    assert_non_null(strstr(error_of(j), "killed by signal 9"));
    cJSON_Delete(j);

    /* More than CLUSTER_OUTPUT_MAX bytes: an error, and sinfo is killed. */
    write_sinfo("exec cat /dev/zero");
    j = sample_with(bindir, NULL);
    assert_non_null(strstr(error_of(j), "wrote more than 32 MiB"));
    cJSON_Delete(j);

    /* No sinfo in the folder. */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none", bindir);
    j = sample_with(missing, NULL);
    assert_non_null(strstr(error_of(j), "cannot run"));
    assert_non_null(strstr(error_of(j), "No such file"));
    cJSON_Delete(j);

    /* A hanging sinfo: stopping the sampler kills it at once, without
     * waiting for the time limit. */
    write_sinfo("exec sleep 120");
    cluster_config cfg = { .interval_s = 1, .slurm_bin = bindir };
    char err[256];
    cluster *c = cluster_start(&cfg, err, sizeof err);
    assert_non_null(c);
    j = cluster_json(c);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "time")));     /* no result yet, and no wait for one */
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "nodes")), 0);
    cJSON_Delete(j);
    usleep(300000);
    double t0 = mono();
    cluster_stop(c);
    assert_true(mono() - t0 < 5.0);   /* a bound on a hang, not a timing */

    /* One that closes its output and lingers: not an endless wait either. */
    write_sinfo("exec >&- 2>&-; exec sleep 120");
    c = cluster_start(&cfg, err, sizeof err);
    assert_non_null(c);
    usleep(300000);
    t0 = mono();
    cluster_stop(c);
    assert_true(mono() - t0 < 5.0);

    cfg.interval_s = 0;
    assert_null(cluster_start(&cfg, err, sizeof err));
    assert_non_null(strstr(err, "at least 1 s"));

    char path[512];
    snprintf(path, sizeof path, "%s/sinfo", bindir);
    unlink(path);
    rmdir(bindir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gres),
        cmocka_unit_test(test_recorded),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_long_and_odd_strings),
        cmocka_unit_test(test_many_nodes),
        cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
