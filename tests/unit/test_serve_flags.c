/* tests/unit/test_serve_flags.c: server/serve_flags.c, the one table of kiln
 * serve's flags: defaults, the KILN_* environment, the command line winning
 * over it, lists, limits, switches, bad values naming their variable, the
 * base path's rules, and the README's table being the table's own output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/serve_flags.h"

typedef struct fixture {
    serve_opts o;
    import_roots roots;
    serve_limits limits;
    guard_hosts hosts;
    char err[8192];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    serve_limits_default(&f->limits);
    f->o.roots = &f->roots;
    f->o.limits = &f->limits;
    f->o.hosts = &f->hosts;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    import_roots_free(&f->roots);
    guard_hosts_free(&f->hosts);
    free(f);
    return 0;
}

/* Parses argv (NULL-terminated, "kiln-serve" first added here) under envp. */
static int parse(fixture *f, char **envp, const char *const *args)
{
    char *argv[32] = { "serve" };
    int argc = 1;
    for (; args && args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    FILE *sink = fopen("/dev/null", "w");
    int rc = serve_flags_parse(&f->o, argc, argv, envp, sink, f->err, sizeof f->err);
    fclose(sink);
    return rc;
}

static void test_table_rules(void **state)
{
    (void)state;
    for (size_t k = 0; k < SERVE_FLAG_COUNT; k++) {
        const serve_flag *d = &SERVE_FLAGS[k];
        /* The variable is KILN_ and the name in capitals with '_' for '-'. */
        char want[64] = "KILN_";
        size_t n = 5;
        for (const char *p = d->name + 2; *p; p++)
            want[n++] = *p == '-' ? '_' : (char)(*p - ('a' <= *p && *p <= 'z' ? 32 : 0));
        want[n] = '\0';
        if (d->kind == FLAG_LIMITS)
            assert_string_equal(d->env, "KILN_LIMIT_");
        else
            assert_string_equal(d->env, want);
        assert_non_null(d->help);
        assert_non_null(d->apply);
        assert_true(d->def || d->def_doc);
        assert_true((d->kind == FLAG_SWITCH) == (d->arg == NULL));
        for (size_t j = 0; j < k; j++)
            assert_true(strcmp(SERVE_FLAGS[j].name, d->name) != 0);
    }
}

static void test_defaults(void **state)
{
    fixture *f = *state;
    char *env[] = { NULL };
    assert_int_equal(parse(f, env, NULL), 0);
    assert_string_equal(f->o.host, "127.0.0.1");
    assert_int_equal(f->o.port, 5000);
    assert_string_equal(f->o.data, "./var");
    assert_int_equal(f->o.max_jobs, 1);
    assert_string_equal(f->o.base_path, "");
    assert_int_equal(f->o.access_log, ACCESS_LOG_ON);
    assert_false(f->o.insecure_no_auth);
    assert_int_equal(f->roots.n, 0);
}

static void test_env_then_command_line(void **state)
{
    fixture *f = *state;
    char *env[] = { "KILN_PORT=6001", "KILN_DATA=/srv/kiln", "KILN_MAX_JOBS=3", "KILN_BASE_PATH=/kiln/",
                    "KILN_ACCESS_LOG=off", "KILN_INSECURE_NO_AUTH=yes", "KILN_LIMIT_UPLOAD_BYTES=8M",
                    "KILN_LIMIT_CHECKS=5", "KILN_HOST=", "OTHER=1", NULL };
    const char *args[] = { "--port", "7002", "--max-jobs=4", "--limit", "checks=7", NULL };
    assert_int_equal(parse(f, env, args), 0);
    assert_int_equal(f->o.port, 7002);                    /* the command line wins */
    assert_int_equal(f->o.max_jobs, 4);
    assert_string_equal(f->o.data, "/srv/kiln");          /* the environment over the default */
    assert_string_equal(f->o.base_path, "/kiln");         /* trailing slash dropped */
    assert_int_equal(f->o.access_log, ACCESS_LOG_OFF);
    assert_true(f->o.insecure_no_auth);
    assert_string_equal(f->o.host, "127.0.0.1");          /* empty variable: unset */
    assert_int_equal(f->limits.upload_bytes, (uint64_t)8 << 20);   /* its variable, not overridden */
    assert_int_equal(f->limits.checks, 7);                /* --limit checks=7 over KILN_LIMIT_CHECKS */
}

static void test_lists(void **state)
{
    fixture *f = *state;
    char a[] = "/tmp/kiln-flags-a-XXXXXX", b[] = "/tmp/kiln-flags-b-XXXXXX";
    assert_non_null(mkdtemp(a));
    assert_non_null(mkdtemp(b));
    char var[128];
    snprintf(var, sizeof var, "KILN_IMPORT_ROOT=%s::%s", a, b);
    char *env[] = { var, "KILN_ALLOWED_HOST=kiln.example,gpu.example:8443", NULL };
    assert_int_equal(parse(f, env, NULL), 0);
    assert_int_equal(f->roots.n, 2);
    assert_non_null(strstr(f->roots.dirs[0], "kiln-flags-a-"));
    assert_non_null(strstr(f->roots.dirs[1], "kiln-flags-b-"));
    import_roots_free(&f->roots);

    /* The flag on the command line replaces the variable's list. */
    const char *args[] = { "--import-root", b, NULL };
    assert_int_equal(parse(f, env, args), 0);
    assert_int_equal(f->roots.n, 1);
    assert_non_null(strstr(f->roots.dirs[0], "kiln-flags-b-"));
    rmdir(a);
    rmdir(b);
}

static void test_bad_values_name_the_variable(void **state)
{
    fixture *f = *state;
    static const struct { const char *var, *needle; } cases[] = {
        { "KILN_PORT=70000", "KILN_PORT=\"70000\": --port must be 0..65535" },
        { "KILN_PORT=12ab", "KILN_PORT" },
        { "KILN_MAX_JOBS=0", "KILN_MAX_JOBS=\"0\": --max-jobs must be 1..256" },
        { "KILN_INSECURE_NO_AUTH=maybe", "KILN_INSECURE_NO_AUTH=\"maybe\": takes 1 or 0" },
        { "KILN_ACCESS_LOG=verbose", "KILN_ACCESS_LOG=\"verbose\": --access-log takes on, off or all" },
        { "KILN_BASE_PATH=kiln", "KILN_BASE_PATH=\"kiln\": --base-path must start with '/'" },
        { "KILN_BASE_PATH=/a/../b", "KILN_BASE_PATH" },
        { "KILN_LIMIT_UPLOAD_BYTES=lots", "KILN_LIMIT_UPLOAD_BYTES=\"lots\": limit upload-bytes" },
        { "KILN_LIMIT_NO_SUCH=1", "KILN_LIMIT_NO_SUCH=\"1\": unknown limit \"no-such\"" },
        { "KILN_IMPORT_ROOT=/no/such/folder/anywhere", "KILN_IMPORT_ROOT" },
        { "KILN_ALLOWED_HOST=bad host!", "KILN_ALLOWED_HOST" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *env[] = { (char *)cases[i].var, NULL };
        f->err[0] = '\0';
        assert_int_equal(parse(f, env, NULL), 2);
        if (!strstr(f->err, cases[i].needle))
            fail_msg("%s gave \"%s\", which lacks \"%s\"", cases[i].var, f->err, cases[i].needle);
    }
    /* The command line wins: a flag given there leaves its variable unread. */
    char *env[] = { "KILN_PORT=nope", NULL };
    const char *args[] = { "--port", "0", NULL };
    assert_int_equal(parse(f, env, args), 0);
    assert_int_equal(f->o.port, 0);
}

static void test_command_line_errors(void **state)
{
    fixture *f = *state;
    char *env[] = { NULL };
    const char *unknown[] = { "--prot", "1", NULL };
    assert_int_equal(parse(f, env, unknown), 2);
    assert_non_null(strstr(f->err, "unknown option --prot"));
    const char *missing[] = { "--port", NULL };
    assert_int_equal(parse(f, env, missing), 2);
    assert_non_null(strstr(f->err, "--port needs a value"));
    const char *bad[] = { "--access-log=loud", NULL };
    assert_int_equal(parse(f, env, bad), 2);
    assert_non_null(strstr(f->err, "--access-log takes on, off or all"));
    const char *help[] = { "--help", NULL };
    assert_int_equal(parse(f, env, help), 1);
}

static void test_base_path(void **state)
{
    (void)state;
    char out[SERVE_BASE_PATH_MAX], err[256];
    assert_int_equal(serve_base_path("", out, err, sizeof err), 0);
    assert_string_equal(out, "");
    assert_int_equal(serve_base_path("/", out, err, sizeof err), 0);
    assert_string_equal(out, "");
    assert_int_equal(serve_base_path("/tools/kiln-1.0//", out, err, sizeof err), 0);
    assert_string_equal(out, "/tools/kiln-1.0");
    static const char *const bad[] = { "kiln", "/a//b", "/./a", "/a/..", "/a b", "/a?b", "/a\"b", "/<x>" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(serve_base_path(bad[i], out, err, sizeof err), -1);
}

/* The README's configuration table is `kiln serve --help=markdown`. */
static void test_readme_table(void **state)
{
    (void)state;
    char *table = NULL;
    size_t tn = 0;
    FILE *m = open_memstream(&table, &tn);
    assert_non_null(m);
    serve_flags_markdown(m);
    fclose(m);
    FILE *r = fopen(KILN_SOURCE_DIR "/README.md", "rb");
    assert_non_null(r);
    static char readme[1 << 20];
    size_t n = fread(readme, 1, sizeof readme - 1, r);
    fclose(r);
    readme[n] = '\0';
    if (!strstr(readme, table))
        fail_msg("README.md lacks the flag table; paste `kiln serve --help=markdown`:\n%s", table);
    free(table);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_rules),
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_then_command_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values_name_the_variable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_line_errors, setup, teardown),
        cmocka_unit_test(test_base_path),
        cmocka_unit_test(test_readme_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
