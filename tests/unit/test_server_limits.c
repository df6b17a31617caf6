/* tests/unit/test_server_limits.c: server/limits.c, the one table of kiln
 * serve's configurable limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/limits.h"

static void test_defaults_in_range(void **state)
{
    (void)state;
    serve_limits l;
    serve_limits_default(&l);
    for (size_t i = 0; i < SERVE_LIMIT_COUNT; i++) {
        const limit_def *d = &SERVE_LIMIT_DEFS[i];
        assert_true(d->min <= d->def && d->def <= d->max);
        assert_int_equal(serve_limit_value(&l, d), d->def);
        assert_ptr_equal(serve_limit_find(d->name), d);
        for (size_t j = 0; j < i; j++)
            assert_true(strcmp(SERVE_LIMIT_DEFS[j].name, d->name) != 0 && SERVE_LIMIT_DEFS[j].offset != d->offset);
    }
    assert_int_equal(l.json_body_bytes, (uint64_t)1 << 20);
    assert_int_equal(l.upload_bytes, (uint64_t)2 << 30);
}

static void test_set(void **state)
{
    (void)state;
    serve_limits l;
    serve_limits_default(&l);
    char err[512];
    assert_int_equal(serve_limits_set(&l, "upload-bytes=4G", err, sizeof err), 0);
    assert_int_equal(l.upload_bytes, (uint64_t)4 << 30);
    assert_int_equal(serve_limits_set(&l, "upload-bytes=512MiB", err, sizeof err), 0);
    assert_int_equal(l.upload_bytes, (uint64_t)512 << 20);
    assert_int_equal(serve_limits_set(&l, "json-body-bytes=65536", err, sizeof err), 0);
    assert_int_equal(l.json_body_bytes, 65536);
    assert_int_equal(serve_limits_set(&l, "idle-timeout=30", err, sizeof err), 0);
    assert_int_equal(l.idle_timeout_s, 30);

    /* refused, naming the problem; the value unchanged */
    assert_int_equal(serve_limits_set(&l, "idle-timeout=30s", err, sizeof err), -1);  /* no suffix on seconds */
    assert_non_null(strstr(err, "idle-timeout"));
    assert_int_equal(serve_limits_set(&l, "idle-timeout=1", err, sizeof err), -1);    /* under the minimum */
    assert_non_null(strstr(err, "from 5 to 86400"));
    assert_int_equal(serve_limits_set(&l, "upload-bytes=-1", err, sizeof err), -1);
    assert_int_equal(serve_limits_set(&l, "upload-bytes=99999999999T", err, sizeof err), -1);  /* overflows */
    assert_int_equal(serve_limits_set(&l, "upload-bytes", err, sizeof err), -1);
    assert_non_null(strstr(err, "NAME=VALUE"));
    assert_int_equal(serve_limits_set(&l, "no-such=1", err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown limit \"no-such\""));
    assert_non_null(strstr(err, "upload-bytes"));
    assert_int_equal(l.idle_timeout_s, 30);
    assert_int_equal(l.upload_bytes, (uint64_t)512 << 20);
}

static void test_json(void **state)
{
    (void)state;
    serve_limits l;
    serve_limits_default(&l);
    l.connections = 77;
    cJSON *j = serve_limits_json(&l);
    assert_non_null(j);
    cJSON *arr = cJSON_GetObjectItem(j, "limits");
    assert_int_equal(cJSON_GetArraySize(arr), (int)SERVE_LIMIT_COUNT);
    bool seen = false;
    cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        if (!strcmp(cJSON_GetObjectItem(o, "name")->valuestring, "connections")) {
            seen = true;
            assert_int_equal(cJSON_GetObjectItem(o, "value")->valueint, 77);
            assert_int_equal(cJSON_GetObjectItem(o, "default")->valueint, 10000);
            assert_string_equal(cJSON_GetObjectItem(o, "unit")->valuestring, "count");
        }
    }
    assert_true(seen);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_in_range),
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
