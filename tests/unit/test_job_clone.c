/* tests/unit/test_job_clone.c: job_clone_request (server/job_clone.h): a
 * clone's request is the job's with the overrides merged and, unless they
 * mention "name", the job's name + " (copy)" ("job <id> (copy)" without
 * one), cut at a UTF-8 character to JOBCFG_NAME_MAX bytes. The checks of the
 * result are jobspec_create's (tests/unit/test_jobspec.c, integration_clone). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "jobs/jobcfg.h"        /* JOBCFG_NAME_MAX */
#include "server/job_clone.h"

#define NET "\"network\": {\"layers\": [{\"type\": \"flatten\"}, {\"type\": \"dense\", \"units\": \"classes\"}]}"

/* The clone request of a job with this stored config and overrides (JSON text or NULL). */
static cJSON *clone_of(int64_t id, const char *config, const char *overrides, api_error *e)
{
    char *text = strdup(config);
    store_job j = { .id = id, .config_json = text };
    cJSON *o = overrides ? cJSON_Parse(overrides) : NULL;
    if (overrides)
        assert_non_null(o);
    cJSON *out = NULL;
    int rc = job_clone_request(&j, o, &out, e);
    cJSON_Delete(o);
    free(text);
    assert_true(rc == 0 ? out != NULL : out == NULL);
    return out;
}

static const char *name_of(const cJSON *req)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(req, "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

static void test_default_name(void **state)
{
    (void)state;
    api_error e;
    cJSON *r = clone_of(4, "{" NET ", \"name\": \"base\", \"epochs\": 2, \"id\": 4}", NULL, &e);
    assert_string_equal(name_of(r), "base" JOB_CLONE_SUFFIX);
    assert_null(cJSON_GetObjectItemCaseSensitive(r, "id"));              /* a request, not a config */
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(r, "epochs")->valueint, 2);
    cJSON_Delete(r);
    r = clone_of(7, "{" NET "}", "{}", &e);
    assert_string_equal(name_of(r), "job 7" JOB_CLONE_SUFFIX);
    cJSON_Delete(r);
}

static void test_overrides(void **state)
{
    (void)state;
    api_error e;
    const char *cfg = "{" NET ", \"name\": \"base\", \"solver\": {\"type\": \"sgd\", \"lr\": 0.01, \"momentum\": 0.9}}";
    cJSON *r = clone_of(1, cfg, "{\"name\": \"lr 0.1\", \"solver\": {\"lr\": 0.1, \"momentum\": null}}", &e);
    assert_string_equal(name_of(r), "lr 0.1");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "solver");
    assert_true(cJSON_GetObjectItemCaseSensitive(s, "lr")->valuedouble == 0.1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(s, "type")->valuestring, "sgd");
    assert_null(cJSON_GetObjectItemCaseSensitive(s, "momentum"));          /* null removes it */
    cJSON_Delete(r);
    r = clone_of(1, cfg, "{\"name\": null}", &e);                          /* no name at all */
    assert_null(cJSON_GetObjectItemCaseSensitive(r, "name"));
    cJSON_Delete(r);
    r = clone_of(1, cfg, "{\"Name\": \"x\"}", &e);    /* not "name": the default stays (jobspec refuses Name) */
    assert_string_equal(name_of(r), "base" JOB_CLONE_SUFFIX);
    cJSON_Delete(r);
}

/* A name at the limit keeps as many whole characters as leave room for the
 * suffix: of 2-byte characters (é), an even count of bytes. */
static void test_name_cut(void **state)
{
    (void)state;
    char name[JOBCFG_NAME_MAX + 1] = "";
    for (size_t i = 0; i + 2 <= JOBCFG_NAME_MAX; i += 2)
        memcpy(name + i, "\xc3\xa9", 3);                 /* é, and the terminator */
    char cfg[2 * JOBCFG_NAME_MAX];
    snprintf(cfg, sizeof cfg, "{" NET ", \"name\": \"%s\"}", name);
    api_error e;
    cJSON *r = clone_of(1, cfg, NULL, &e);
    const char *got = name_of(r);
    size_t room = JOBCFG_NAME_MAX - strlen(JOB_CLONE_SUFFIX);
    size_t keep = room - room % 2;                        /* not half an é */
    assert_true(strlen(name) > room);
    assert_int_equal(strlen(got), keep + strlen(JOB_CLONE_SUFFIX));
    assert_memory_equal(got, name, keep);
    assert_string_equal(got + keep, JOB_CLONE_SUFFIX);
    cJSON_Delete(r);
    /* a short name is kept whole */
    r = clone_of(1, "{" NET ", \"name\": \"\xc3\xa9t\xc3\xa9\"}", NULL, &e);
    assert_string_equal(name_of(r), "\xc3\xa9t\xc3\xa9" JOB_CLONE_SUFFIX);
    cJSON_Delete(r);
}

static void test_bad_config(void **state)
{
    (void)state;
    api_error e;
    assert_null(clone_of(3, "not json", NULL, &e));
    assert_int_equal(e.status, 500);
    assert_null(clone_of(3, "{\"name\": \"no network\"}", NULL, &e));
    assert_int_equal(e.status, 500);                      /* the job's config, not the caller's fault */
    assert_non_null(strstr(e.message, "job 3"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_name),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_name_cut),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
