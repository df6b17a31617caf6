/* tests/unit/test_server_http.c: the HTTP layer's pure parts: route matching,
 * SSE event formatting, static path checks and content types, the JSON
 * representations, and the OpenAPI document against the route table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cjson/cJSON.h>

#include "server/http.h"
#include "server/openapi.h"
#include "server/render.h"
#include "server/route.h"
#include "server/sse.h"
#include "server/static_files.h"

/* ---- route matching ---------------------------------------------------------- */

static void test_route_match_literal_and_id(void **state)
{
    (void)state;
    int64_t id = -1;
    assert_true(route_match("/api/v1/jobs", "/api/v1/jobs", &id));
    assert_int_equal(id, 0);
    assert_true(route_match("/api/v1/jobs", "/api/v1/jobs/", &id));   /* trailing slash */
    assert_true(route_match("/api/v1/jobs/:id", "/api/v1/jobs/42", &id));
    assert_int_equal(id, 42);
    assert_true(route_match("/api/v1/jobs/:id/cancel", "/api/v1/jobs/7/cancel", &id));
    assert_int_equal(id, 7);
    assert_true(route_match("/api/v1/jobs/:id", "/api/v1/jobs/9223372036854775807", &id));
    assert_int_equal(id, INT64_MAX);
    assert_true(route_match("/", "/", &id));
}

static void test_route_match_rejects(void **state)
{
    (void)state;
    int64_t id = 0;
    assert_false(route_match("/api/v1/jobs", "/api/v1/job", &id));
    assert_false(route_match("/api/v1/jobs", "/api/v1/jobsx", &id));
    assert_false(route_match("/api/v1/jobs", "/api/v1/jobs/1", &id));
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs", &id));
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs/", &id));
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs/0", &id));          /* ids start at 1 */
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs/-3", &id));
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs/1x", &id));
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs/9223372036854775808", &id));
    assert_false(route_match("/api/v1/jobs/:id", "/api/v1/jobs/99999999999999999999", &id));
    assert_false(route_match("/api/v1/jobs/:id/cancel", "/api/v1/jobs/1/cancel/x", &id));
    assert_false(route_match("/api/v1/jobs/:id/cancel", "/api/v1/jobs//cancel", &id));
    assert_false(route_match("/api/v1/jobs", "/api//v1/jobs", &id));
    assert_false(route_match("/api/v1/jobs", "/api/v1/jobs//", &id));
    assert_false(route_match("/", "/x", &id));
    assert_false(route_match("/api/v1/jobs", "", &id));
    assert_false(route_match("/api/v1/jobs", "api/v1/jobs", &id));
}

static int fake_handler(struct request *r)
{
    (void)r;
    return 0;
}

static const route table[] = {
    { .method = "GET", .pattern = "/a", .fn = fake_handler },
    { .method = "POST", .pattern = "/a", .fn = fake_handler, .body = BODY_JSON },
    { .method = "GET", .pattern = "/a/:id", .fn = fake_handler },
    { .method = "DELETE", .pattern = "/a/:id", .fn = fake_handler },
};

static void test_route_find(void **state)
{
    (void)state;
    const route *rt = NULL;
    int64_t id = 0;
    char allow[64];
    size_t n = sizeof table / sizeof table[0];
    assert_int_equal(route_find(table, n, "POST", "/a", &rt, &id, allow, sizeof allow), ROUTE_FOUND);
    assert_ptr_equal(rt, &table[1]);
    assert_int_equal(route_find(table, n, "HEAD", "/a/5", &rt, &id, allow, sizeof allow), ROUTE_FOUND);
    assert_ptr_equal(rt, &table[2]);
    assert_int_equal(id, 5);
    assert_int_equal(route_find(table, n, "PUT", "/a/5", &rt, &id, allow, sizeof allow), ROUTE_BAD_METHOD);
    assert_string_equal(allow, "GET, HEAD, DELETE");
    assert_int_equal(route_find(table, n, "DELETE", "/a", &rt, &id, allow, sizeof allow), ROUTE_BAD_METHOD);
    assert_string_equal(allow, "GET, HEAD, POST");
    assert_int_equal(route_find(table, n, "GET", "/b", &rt, &id, allow, sizeof allow), ROUTE_NOT_FOUND);
    assert_int_equal(route_find(table, n, "GET", "/a/zero", &rt, &id, NULL, 0), ROUTE_NOT_FOUND);
}

/* ---- SSE formatting --------------------------------------------------------------- */

static void test_sse_format(void **state)
{
    (void)state;
    char buf[256];
    size_t n = sse_format(buf, sizeof buf, 12, "metric", "{\"step\":1}");
    assert_string_equal(buf, "id: 12\nevent: metric\ndata: {\"step\":1}\n\n");
    assert_int_equal(n, strlen(buf));

    /* Newlines in the data become several data: lines (one event). */
    n = sse_format(buf, sizeof buf, 3, "log", "a\nb\r\nc");
    assert_string_equal(buf, "id: 3\nevent: log\ndata: a\ndata: b\ndata: c\n\n");
    assert_int_equal(n, strlen(buf));
    n = sse_format(buf, sizeof buf, 4, "log", "");
    assert_string_equal(buf, "id: 4\nevent: log\ndata: \n\n");

    /* Sizing: a NULL buffer gives the length; a short one is not overrun. */
    size_t need = sse_format(NULL, 0, 18446744073709551615ull, "status", "{\"status\":\"done\"}");
    assert_int_equal(need, strlen("id: 18446744073709551615\nevent: status\ndata: {\"status\":\"done\"}\n\n"));
    char small[16];
    memset(small, 'Z', sizeof small);
    assert_int_equal(sse_format(small, 8, 1, "metric", "{}"), strlen("id: 1\nevent: metric\ndata: {}\n\n"));
    assert_int_equal(small[7], '\0');
    assert_int_equal(small[8], 'Z');
}

/* ---- UTF-8 ------------------------------------------------------------------------ */

static void test_utf8(void **state)
{
    (void)state;
    size_t at = 99;
    assert_true(http_utf8_valid("plain ascii", 11, &at));
    assert_true(http_utf8_valid("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5", 14, &at));
    assert_true(http_utf8_valid("", 0, &at));
    assert_false(http_utf8_valid("ab\xff", 3, &at));
    assert_int_equal(at, 2);
    assert_false(http_utf8_valid("\xc0\xaf", 2, &at));             /* overlong '/' */
    assert_int_equal(at, 0);
    assert_false(http_utf8_valid("\xe0\x80\xaf", 3, &at));         /* overlong, 3 bytes */
    assert_false(http_utf8_valid("\xed\xa0\x80", 3, &at));         /* a surrogate */
    assert_false(http_utf8_valid("\xf4\x90\x80\x80", 4, &at));     /* past U+10FFFF */
    assert_false(http_utf8_valid("x\xe2\x82", 3, &at));            /* cut short */
    assert_int_equal(at, 1);
    assert_false(http_utf8_valid("\xc3\x28", 2, &at));             /* bad continuation */
}

/* ---- static files ---------------------------------------------------------------- */

static void test_static_paths(void **state)
{
    (void)state;
    assert_true(static_path_ok("/"));
    assert_true(static_path_ok("/app.js"));
    assert_true(static_path_ok("/static/vendor/uPlot.min.css"));
    assert_true(static_path_ok("/.well-known/x"));
    assert_true(static_path_ok("/a..b/c"));
    assert_false(static_path_ok("/../etc/passwd"));
    assert_false(static_path_ok("/static/../kiln.db"));
    assert_false(static_path_ok("/static/vendor/.."));
    assert_false(static_path_ok("/static/./x"));
    assert_false(static_path_ok("/static\\..\\x"));
    assert_false(static_path_ok("/a\x01"));
    assert_false(static_path_ok("relative"));
    assert_false(static_path_ok(NULL));

    assert_string_equal(static_content_type("index.html"), "text/html; charset=utf-8");
    assert_string_equal(static_content_type("/x/app.JS"), "text/javascript; charset=utf-8");
    assert_string_equal(static_content_type("uPlot.min.css"), "text/css; charset=utf-8");
    assert_string_equal(static_content_type("a.woff2"), "font/woff2");
    assert_string_equal(static_content_type("a.svg"), "image/svg+xml");
    assert_string_equal(static_content_type("a.map"), "application/json");
    assert_string_equal(static_content_type("kiln.db"), "application/octet-stream");
    assert_string_equal(static_content_type("js"), "application/octet-stream");
}

/* ---- representations ---------------------------------------------------------------- */

static void test_render_dataset(void **state)
{
    (void)state;
    store_dataset d = {
        .id = 3, .name = "digits", .status = "importing", .progress = 0.25,
        .info_json = NULL, .error = NULL, .created_at = "2026-11-22T08:00:00Z",
    };
    cJSON *o = render_dataset(&d);
    assert_non_null(o);
    assert_int_equal(cJSON_GetObjectItem(o, "id")->valueint, 3);
    assert_true(cJSON_GetObjectItem(o, "progress")->valuedouble == 0.25);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "classes")), 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "shape")));
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "error")));
    cJSON_Delete(o);

    d.status = "ready";
    d.progress = 0.99;
    d.info_json = "{\"format\":1,\"classes\":[\"cat\",\"dog\"],\"shape\":[3,32,32],"
                  "\"counts\":{\"train\":80,\"val\":20},\"mean\":[1,2,3],\"resize\":\"crop\","
                  "\"encoding\":\"png\",\"options\":{\"val_percent\":20,\"width\":null},\"format_x\":7}";
    o = render_dataset(&d);
    assert_non_null(o);
    assert_true(cJSON_GetObjectItem(o, "progress")->valuedouble == 1.0);   /* ready is 1 */
    cJSON *classes = cJSON_GetObjectItem(o, "classes");
    assert_int_equal(cJSON_GetArraySize(classes), 2);
    assert_string_equal(cJSON_GetArrayItem(classes, 1)->valuestring, "dog");
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "shape"), 0)->valueint, 3);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "counts"), "val")->valueint, 20);
    /* how the images were made (issue 13's dataset page): passed through; nothing else is */
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "mean"), 2)->valueint, 3);
    assert_string_equal(cJSON_GetObjectItem(o, "resize")->valuestring, "crop");
    assert_string_equal(cJSON_GetObjectItem(o, "encoding")->valuestring, "png");
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "options"), "val_percent")->valueint, 20);
    assert_null(cJSON_GetObjectItem(o, "format_x"));
    cJSON_Delete(o);

    d.status = "failed";
    d.error = "archive holds no images";
    o = render_dataset(&d);
    assert_string_equal(cJSON_GetObjectItem(o, "error")->valuestring, "archive holds no images");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "counts")));
    cJSON_Delete(o);
}

static void test_render_job_progress(void **state)
{
    (void)state;
    store_job j = { .status = "running", .step = 50, .steps = 200 };
    assert_true(render_job_progress(&j) == 0.25);
    j.steps = 0;
    assert_true(render_job_progress(&j) == 0.0);
    j.steps = 10;
    j.step = 11;
    assert_true(render_job_progress(&j) == 1.0);
    j.status = "done";
    j.step = 3;
    assert_true(render_job_progress(&j) == 1.0);

    cJSON *s = render_status("failed", "worker killed by signal 9");
    assert_string_equal(cJSON_GetObjectItem(s, "status")->valuestring, "failed");
    assert_string_equal(cJSON_GetObjectItem(s, "error")->valuestring, "worker killed by signal 9");
    cJSON_Delete(s);
    s = render_status("done", NULL);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(s, "error")));
    cJSON_Delete(s);

    store_metric m = { .step = 5, .epoch = 0.5, .tag = "train/loss", .value = 0.75, .wall_time = 1e9 };
    cJSON *mo = render_metric(&m);
    assert_int_equal(cJSON_GetObjectItem(mo, "step")->valueint, 5);
    assert_string_equal(cJSON_GetObjectItem(mo, "tag")->valuestring, "train/loss");
    assert_true(cJSON_GetObjectItem(mo, "value")->valuedouble == 0.75);
    cJSON_Delete(mo);
}

/* ---- OpenAPI ----------------------------------------------------------------------- */

/* Fails unless every "$ref": "#/a/b" under node names a node of doc. */
static void check_refs(const cJSON *doc, const cJSON *node)
{
    for (const cJSON *c = node ? node->child : NULL; c; c = c->next) {
        if (c->string && !strcmp(c->string, "$ref") && cJSON_IsString(c)) {
            const char *ref = c->valuestring;
            if (strncmp(ref, "#/", 2) != 0)
                fail_msg("$ref %s is not a reference into the document", ref);
            const cJSON *at = doc;
            char part[128];
            for (const char *p = ref + 2; at && *p;) {
                size_t n = strcspn(p, "/");
                snprintf(part, sizeof part, "%.*s", (int)n, p);
                at = cJSON_GetObjectItemCaseSensitive(at, part);
                p += n + (p[n] == '/');
            }
            if (!at)
                fail_msg("the OpenAPI document's $ref %s names nothing", ref);
        }
        check_refs(doc, c);
    }
}

static void test_openapi_covers_routes(void **state)
{
    (void)state;
    assert_int_equal(strlen(kiln_openapi_json), kiln_openapi_json_len);
    cJSON *doc = cJSON_ParseWithLength(kiln_openapi_json, kiln_openapi_json_len);
    assert_non_null(doc);
    assert_string_equal(cJSON_GetObjectItem(doc, "openapi")->valuestring, "3.0.3");
    cJSON *paths = cJSON_GetObjectItem(doc, "paths");
    assert_non_null(paths);
    for (size_t i = 0; i < http_route_count; i++) {
        char path[256], method[16];
        const char *p = http_routes[i].pattern;
        const char *at = strstr(p, ":id");
        if (at)
            snprintf(path, sizeof path, "%.*s{id}%s", (int)(at - p), p, at + 3);
        else
            snprintf(path, sizeof path, "%s", p);
        size_t k;
        for (k = 0; http_routes[i].method[k] && k + 1 < sizeof method; k++)
            method[k] = (char)(http_routes[i].method[k] | 0x20);      /* lower case */
        method[k] = '\0';
        cJSON *item = cJSON_GetObjectItemCaseSensitive(paths, path);
        if (!item)
            fail_msg("the OpenAPI document lacks the path %s", path);
        if (!cJSON_GetObjectItemCaseSensitive(item, method))
            fail_msg("the OpenAPI document lacks %s %s", method, path);
    }
    /* And it documents no route the table lacks. */
    int documented = 0;
    cJSON *item;
    cJSON_ArrayForEach(item, paths) {
        static const char *const verbs[] = { "get", "post", "delete", "put", "patch" };
        for (size_t v = 0; v < 5; v++)
            documented += cJSON_GetObjectItemCaseSensitive(item, verbs[v]) != NULL;
    }
    assert_int_equal(documented, (int)http_route_count);
    check_refs(doc, doc);
    cJSON_Delete(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_match_literal_and_id),
        cmocka_unit_test(test_route_match_rejects),
        cmocka_unit_test(test_route_find),
        cmocka_unit_test(test_sse_format),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_static_paths),
        cmocka_unit_test(test_render_dataset),
        cmocka_unit_test(test_render_job_progress),
        cmocka_unit_test(test_openapi_covers_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
