/* tests/unit/test_server_guard.c: server/guard.c's pure parts: the names the
 * server answers to, same-origin, \u0000 and keys given twice in JSON text, and
 * control bytes in a URI as received. The checks on
 * requests themselves are tested against a real server in
 * tests/integration/frontdoor.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "server/guard.h"

static void test_defaults_need_the_port(void **state)
{
    (void)state;
    guard_hosts h;
    memset(&h, 0, sizeof h);
    char err[256];
    assert_int_equal(guard_hosts_defaults(&h, "127.0.0.1", err, sizeof err), 0);
    assert_false(guard_host_allowed(&h, "127.0.0.1:5000"));     /* port not known yet */
    guard_hosts_set_port(&h, 5000);
    assert_true(guard_host_allowed(&h, "127.0.0.1:5000"));
    assert_true(guard_host_allowed(&h, "LocalHost:5000"));
    assert_true(guard_host_allowed(&h, "[::1]:5000"));
    assert_false(guard_host_allowed(&h, "127.0.0.1:5001"));
    assert_false(guard_host_allowed(&h, "127.0.0.1"));          /* port 80 */
    assert_false(guard_host_allowed(&h, "evil.example:5000"));
    assert_false(guard_host_allowed(&h, "localhost.evil.example:5000"));
    assert_false(guard_host_allowed(&h, "localhost:5000:5000"));
    assert_false(guard_host_allowed(&h, ""));
    assert_false(guard_host_allowed(&h, "[::1:5000"));
    guard_hosts_free(&h);
}

static void test_allowed_host_flag(void **state)
{
    (void)state;
    guard_hosts h;
    memset(&h, 0, sizeof h);
    char err[256];
    guard_hosts_set_port(&h, 5000);
    assert_int_equal(guard_hosts_add(&h, "kiln.example.com", err, sizeof err), 0);
    assert_int_equal(guard_hosts_add(&h, "gpu1:8080", err, sizeof err), 0);
    assert_int_equal(guard_hosts_add(&h, "[fe80::1]:5000", err, sizeof err), 0);
    assert_true(guard_host_allowed(&h, "kiln.example.com"));       /* any port, or none */
    assert_true(guard_host_allowed(&h, "KILN.example.com:443"));
    assert_true(guard_host_allowed(&h, "gpu1:8080"));
    assert_false(guard_host_allowed(&h, "gpu1:5000"));
    assert_true(guard_host_allowed(&h, "[FE80::1]:5000"));
    assert_int_equal(guard_hosts_add(&h, "::1", err, sizeof err), -1);   /* IPv6 needs brackets */
    assert_non_null(strstr(err, "--allowed-host"));
    assert_int_equal(guard_hosts_add(&h, "a b", err, sizeof err), -1);
    assert_int_equal(guard_hosts_add(&h, "host:0", err, sizeof err), -1);
    assert_int_equal(guard_hosts_add(&h, "host:65536", err, sizeof err), -1);
    assert_int_equal(guard_hosts_add(&h, "", err, sizeof err), -1);
    guard_hosts_free(&h);
}

static void test_origin_same(void **state)
{
    (void)state;
    assert_true(guard_origin_same("http://127.0.0.1:5000", "127.0.0.1:5000"));
    assert_true(guard_origin_same("http://LOCALHOST:5000", "localhost:5000"));
    assert_true(guard_origin_same("https://kiln.example.com", "kiln.example.com"));
    assert_true(guard_origin_same("https://kiln.example.com", "kiln.example.com:443"));
    assert_true(guard_origin_same("http://kiln.example.com:80", "kiln.example.com"));
    assert_false(guard_origin_same("http://evil.example", "127.0.0.1:5000"));
    assert_false(guard_origin_same("http://127.0.0.1:5001", "127.0.0.1:5000"));
    assert_false(guard_origin_same("https://kiln.example.com", "kiln.example.com:80"));
    assert_false(guard_origin_same("null", "127.0.0.1:5000"));
    assert_false(guard_origin_same("file://", "127.0.0.1:5000"));
    assert_false(guard_origin_same("http://127.0.0.1:5000/x", "127.0.0.1:5000"));
}

/* Checks guard_json_nul on text that cJSON accepts. */
static void nul_case(const char *text, bool want, const char *want_where)
{
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    cJSON_Delete(doc);
    char where[256] = "";
    assert_int_equal(guard_json_nul(text, strlen(text), where, sizeof where), want);
    if (want_where)
        assert_string_equal(where, want_where);
}

static void test_json_nul(void **state)
{
    (void)state;
    nul_case("{\"name\":\"a\\u0000b\"}", true, "the field \"name\"");
    nul_case("{\"name\":\"ok\"}", false, NULL);
    nul_case("{\"name\":\"a\\\\u0000b\"}", false, NULL);            /* a backslash, then text */
    nul_case("{\"name\":\"a\\\\\\u0000b\"}", true, "the field \"name\"");
    nul_case("{\"a\":1,\"network\":{\"layers\":[{\"type\":\"x\"},{\"type\":\"conv\",\"name\":\"\\u0000\"}]}}",
             true, "the field \"network.layers[1].name\"");
    nul_case("{\"tags\":[\"x\",[\"y\", \"\\u0000\"]]}", true, "the field \"tags[1][1]\"");
    nul_case("{\"solver\":{\"l\\u0000r\":0.1}}", true, "a key in \"solver\"");
    nul_case("{\"\\u0000\":0.1}", true, "a key of the body");
    nul_case("{\"a\":\"\\\\\",\"b\":\"\\u0000\"}", true, "the field \"b\"");  /* "\\" ends a string */
    nul_case("{\"a\":\"\\u00001\"}", true, "the field \"a\"");
    nul_case("{\"a\":\"\\u0001\"}", false, NULL);
}

/* Checks guard_json_dup on text that cJSON accepts. */
static void dup_case(const char *text, const char *want_where)
{
    cJSON *doc = cJSON_Parse(text);
    assert_non_null(doc);
    char where[256] = "";
    assert_int_equal(guard_json_dup(doc, where, sizeof where), want_where != NULL);
    if (want_where)
        assert_string_equal(where, want_where);
    cJSON_Delete(doc);
}

static void test_json_dup(void **state)
{
    (void)state;
    dup_case("{\"a\":1,\"b\":2,\"a\":3}", "the key \"a\" is given twice in the body");
    dup_case("{\"a\":1,\"b\":{\"a\":2}}", NULL);                 /* the same key in two objects */
    dup_case("{\"n\":{\"layers\":[{\"t\":1},{\"u\":1,\"t\":2,\"u\":3}]}}",
             "the key \"u\" is given twice in \"n.layers[1]\"");
    dup_case("{\"x\":[[{\"k\":1}],[{\"k\":1,\"k\":1}]]}", "the key \"k\" is given twice in \"x[1][0]\"");
    dup_case("{\"A\":1,\"a\":2}", NULL);                           /* keys are case-sensitive */
    dup_case("{}", NULL);
    dup_case("[1,{\"a\":{}}]", NULL);
}

/* The URI as received: any control byte, raw or %-escaped, and nothing else. */
static void test_uri_ctl(void **state)
{
    (void)state;
    assert_true(guard_uri_ctl("/api/v1/jobs/1%00/evaluations/2"));
    assert_true(guard_uri_ctl("/a?q=x%0a"));
    assert_true(guard_uri_ctl("/a%1F"));
    assert_true(guard_uri_ctl("/a%7f"));
    assert_true(guard_uri_ctl("/a\x01b"));
    assert_false(guard_uri_ctl("/api/v1/jobs?q=a%2500b"));     /* "%00" as text */
    assert_false(guard_uri_ctl("/a%20b%7E%C3%A9"));
    assert_false(guard_uri_ctl("/a%0"));                       /* cut short: not an escape */
    assert_false(guard_uri_ctl("/a%g0"));
}

static void test_memory_limit_above_the_limits(void **state)
{
    (void)state;
    serve_limits l;
    serve_limits_default(&l);
    assert_true(guard_mhd_memory_limit(&l) > 2 * (l.uri_bytes + l.header_bytes));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_need_the_port),
        cmocka_unit_test(test_allowed_host_flag),
        cmocka_unit_test(test_origin_same),
        cmocka_unit_test(test_json_nul),
        cmocka_unit_test(test_json_dup),
        cmocka_unit_test(test_uri_ctl),
        cmocka_unit_test(test_memory_limit_above_the_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
