/* server/serve_flags.c: the table of kiln serve's flags and its one parser
 * (contract in serve_flags.h). */
#define _GNU_SOURCE
#include "server/serve_flags.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"          /* set_err */

#ifndef KILN_DEFAULT_WEB_DIR
#define KILN_DEFAULT_WEB_DIR "web"
#endif
#ifndef KILN_DEFAULT_STATIC_DIR
#define KILN_DEFAULT_STATIC_DIR "static"
#endif

/* ---- apply functions: one a flag ------------------------------------------ */

static bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static int apply_host(serve_opts *o, const char *v, char *err, size_t n)
{
    if (!*v)
        return set_err(err, n, "--host needs an address");
    o->host = v;
    return 0;
}

static int apply_port(serve_opts *o, const char *v, char *err, size_t n)
{
    if (!parse_int(v, 0, 65535, &o->port))
        return set_err(err, n, "--port must be 0..65535, not \"%s\"", v);
    return 0;
}

static int apply_data(serve_opts *o, const char *v, char *err, size_t n)
{
    if (!*v)
        return set_err(err, n, "--data needs a directory");
    o->data = v;
    return 0;
}

static int apply_web_dir(serve_opts *o, const char *v, char *err, size_t n)
{
    (void)err, (void)n;
    o->web_dir = v;
    return 0;
}

static int apply_static_dir(serve_opts *o, const char *v, char *err, size_t n)
{
    (void)err, (void)n;
    o->static_dir = v;
    return 0;
}

static int apply_max_jobs(serve_opts *o, const char *v, char *err, size_t n)
{
    if (!parse_int(v, 1, 256, &o->max_jobs))
        return set_err(err, n, "--max-jobs must be 1..256, not \"%s\"", v);
    return 0;
}

static int apply_import_root(serve_opts *o, const char *v, char *err, size_t n)
{
    return import_roots_add(o->roots, v, err, n);
}

static int apply_limit(serve_opts *o, const char *v, char *err, size_t n)
{
    return serve_limits_set(o->limits, v, err, n);
}

static int apply_allowed_host(serve_opts *o, const char *v, char *err, size_t n)
{
    return guard_hosts_add(o->hosts, v, err, n);
}

static int apply_insecure(serve_opts *o, const char *v, char *err, size_t n)
{
    (void)err, (void)n;
    o->insecure_no_auth = !strcmp(v, "1");
    return 0;
}

static int apply_base_path(serve_opts *o, const char *v, char *err, size_t n)
{
    return serve_base_path(v, o->base_path, err, n);
}

static int apply_access_log(serve_opts *o, const char *v, char *err, size_t n)
{
    static const struct { const char *name; access_log_mode mode; } modes[] = {
        { "on", ACCESS_LOG_ON }, { "off", ACCESS_LOG_OFF }, { "all", ACCESS_LOG_ALL },
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (!strcmp(v, modes[i].name)) {
            o->access_log = modes[i].mode;
            return 0;
        }
    return set_err(err, n, "--access-log takes on, off or all, not \"%s\"", v);
}

static int apply_dispatcher(serve_opts *o, const char *v, char *err, size_t n)
{
    if (dispatch_parse(v, &o->dispatcher) != 0)
        return set_err(err, n, "--dispatcher takes local or slurm, not \"%s\"", v);
    return 0;
}

/* A value for sbatch: no white space or control characters (it is one argument). */
static int slurm_word(const char *flag, const char *v, char *err, size_t n)
{
    for (const char *c = v; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == 0x7f)
            return set_err(err, n, "%s takes one word for sbatch, not \"%s\"", flag, v);
    return 0;
}

static int apply_slurm_bin(serve_opts *o, const char *v, char *err, size_t n)
{
    (void)err, (void)n;
    o->slurm.bin_dir = v;
    return 0;
}

static int apply_slurm_partition(serve_opts *o, const char *v, char *err, size_t n)
{
    o->slurm.partition = v;
    return slurm_word("--slurm-partition", v, err, n);
}

static int apply_slurm_account(serve_opts *o, const char *v, char *err, size_t n)
{
    o->slurm.account = v;
    return slurm_word("--slurm-account", v, err, n);
}

/* Slurm's time forms: minutes, M:S, H:M:S, D-H, D-H:M, D-H:M:S. */
static int apply_slurm_time_limit(serve_opts *o, const char *v, char *err, size_t n)
{
    o->slurm.time_limit = v;
    size_t k = strspn(v, "0123456789:-");
    if (v[k] || (*v && !(v[0] >= '0' && v[0] <= '9')))
        return set_err(err, n, "--slurm-time-limit takes Slurm's time forms (minutes, H:M:S, "
                       "D-H:M:S), not \"%s\"", v);
    return 0;
}

static int apply_slurm_sbatch_options(serve_opts *o, const char *v, char *err, size_t n)
{
    (void)err, (void)n;
    o->slurm.sbatch_options = v;
    return 0;
}

static int apply_slurm_poll(serve_opts *o, const char *v, char *err, size_t n)
{
    if (!parse_int(v, 100, 600000, &o->slurm.poll_ms))
        return set_err(err, n, "--slurm-poll-ms must be 100..600000, not \"%s\"", v);
    return 0;
}

/* ---- the table ------------------------------------------------------------- */

const serve_flag SERVE_FLAGS[] = {
    { .name = "--host", .env = "KILN_HOST", .kind = FLAG_VALUE, .arg = "ADDR", .def = "127.0.0.1",
      .apply = apply_host,
      .help = "address to bind. Any address other than loopback exposes the API to the\n"
              "network: then every API call needs a sign-in (see kiln user add), and with\n"
              "no users kiln serve refuses to start" },
    { .name = "--port", .env = "KILN_PORT", .kind = FLAG_VALUE, .arg = "N", .def = "5000",
      .apply = apply_port, .help = "port to bind (0 picks a free port)" },
    { .name = "--data", .env = "KILN_DATA", .kind = FLAG_VALUE, .arg = "DIR", .def = "./var",
      .apply = apply_data, .help = "the data directory: kiln.db, datasets/, jobs/, uploads/" },
    { .name = "--web-dir", .env = "KILN_WEB_DIR", .kind = FLAG_VALUE, .arg = "DIR",
      .def = KILN_DEFAULT_WEB_DIR, .def_doc = "the build's web/", .apply = apply_web_dir,
      .help = "the dashboard's files" },
    { .name = "--static-dir", .env = "KILN_STATIC_DIR", .kind = FLAG_VALUE, .arg = "DIR",
      .def = KILN_DEFAULT_STATIC_DIR, .def_doc = "the build's static/", .apply = apply_static_dir,
      .help = "static files and vendored browser libraries" },
    { .name = "--max-jobs", .env = "KILN_MAX_JOBS", .kind = FLAG_VALUE, .arg = "N", .def = "1",
      .apply = apply_max_jobs,
      .help = "jobs that may train at the same time on the CPU (1..256); each gets\n"
              "cores/N OpenMP threads unless OMP_NUM_THREADS is set; GPU jobs are not\n"
              "counted: each GPU runs one job at a time" },
    { .name = IMPORT_ROOTS_FLAG, .env = "KILN_IMPORT_ROOT", .kind = FLAG_LIST, .arg = "DIR", .sep = ':',
      .def_doc = "none", .apply = apply_import_root,
      .help = "a folder of this machine whose files a request may import (POST\n"
              "/api/v1/datasets with a JSON source: folder, list, idx, cifar); repeatable,\n"
              "a ':'-separated list in the variable. None by default: every server path is\n"
              "refused (403). Paths are compared after links and \"..\" are resolved" },
    { .name = "--limit", .env = "KILN_LIMIT_", .kind = FLAG_LIMITS, .arg = "NAME=VALUE",
      .def_doc = "see Limits", .apply = apply_limit,
      .help = "set one of the limits below (repeatable; byte counts take K, M, G or T,\n"
              "powers of 1024); GET /api/v1/limits lists them. Variables: one a limit,\n"
              "KILN_LIMIT_ and the name in capitals with '_' for '-' (KILN_LIMIT_UPLOAD_BYTES)" },
    { .name = GUARD_ALLOWED_HOST_FLAG, .env = "KILN_ALLOWED_HOST", .kind = FLAG_LIST, .arg = "NAME[:PORT]",
      .sep = ',', .def_doc = "none", .apply = apply_allowed_host,
      .help = "a name this server is reached by, besides localhost, 127.0.0.1, [::1],\n"
              "--host and the machine's host name (repeatable, a ','-separated list in the\n"
              "variable; without PORT any port, as behind a proxy). A request with another\n"
              "Host header gets 421 (DNS rebinding)" },
    { .name = "--insecure-no-auth", .env = "KILN_INSECURE_NO_AUTH", .kind = FLAG_SWITCH, .def = "0",
      .def_doc = "off", .apply = apply_insecure,
      .help = "serve beyond loopback without users: anyone who can reach the port may do\n"
              "anything (once a user exists, sign-in is required anyway)" },
    { .name = "--base-path", .env = "KILN_BASE_PATH", .kind = FLAG_VALUE, .arg = "/PREFIX", .def = "",
      .def_doc = "none", .apply = apply_base_path,
      .help = "serve everything under /PREFIX (behind a reverse proxy that forwards\n"
              "/PREFIX/... unchanged): the API at /PREFIX/api/v1, the dashboard at\n"
              "/PREFIX/; /PREFIX redirects to /PREFIX/, /healthz answers at both places,\n"
              "and any other path outside the prefix is 404" },
    { .name = "--access-log", .env = "KILN_ACCESS_LOG", .kind = FLAG_VALUE, .arg = "MODE", .def = "on",
      .apply = apply_access_log,
      .help = "one line a request on stderr (format in the README): on (every request\n"
              "but GET /healthz and GET /metrics), all, or off" },
    { .name = "--dispatcher", .env = "KILN_DISPATCHER", .kind = FLAG_VALUE, .arg = "NAME",
      .def = "local", .apply = apply_dispatcher,
      .help = "where jobs run: local (worker processes on this machine) or slurm (one\n"
              "sbatch a job on a Slurm cluster; the data directory must be on a filesystem\n"
              "the nodes share, at the same path; see \"Running kiln with Slurm\")" },
    { .name = "--slurm-bin", .env = "KILN_SLURM_BIN", .kind = FLAG_VALUE, .arg = "DIR", .def = "",
      .def_doc = "PATH", .apply = apply_slurm_bin,
      .help = "the folder of sbatch, srun, squeue, scontrol and scancel" },
    { .name = "--slurm-partition", .env = "KILN_SLURM_PARTITION", .kind = FLAG_VALUE, .arg = "NAME",
      .def = "", .def_doc = "Slurm's default", .apply = apply_slurm_partition,
      .help = "the partition jobs are submitted to (sbatch --partition)" },
    { .name = "--slurm-account", .env = "KILN_SLURM_ACCOUNT", .kind = FLAG_VALUE, .arg = "NAME",
      .def = "", .def_doc = "none", .apply = apply_slurm_account,
      .help = "the account jobs are charged to (sbatch --account)" },
    { .name = "--slurm-time-limit", .env = "KILN_SLURM_TIME_LIMIT", .kind = FLAG_VALUE, .arg = "TIME",
      .def = "", .def_doc = "the partition's", .apply = apply_slurm_time_limit,
      .help = "each job's time limit (sbatch --time: minutes, H:M:S or D-H:M:S); a job\n"
              "that reaches it fails with Slurm's TIMEOUT" },
    { .name = "--slurm-sbatch-options", .env = "KILN_SLURM_SBATCH_OPTIONS", .kind = FLAG_VALUE,
      .arg = "OPTS", .def = "", .def_doc = "none", .apply = apply_slurm_sbatch_options,
      .help = "more sbatch options for every job, split at spaces (no quoting), such as\n"
              "\"--qos=normal --cpus-per-task=8\"" },
    { .name = "--slurm-poll-ms", .env = "KILN_SLURM_POLL_MS", .kind = FLAG_VALUE, .arg = "MS",
      .def = "2000", .apply = apply_slurm_poll,
      .help = "how often squeue is asked for the state of kiln's jobs (100..600000)" },
};
const size_t SERVE_FLAG_COUNT = sizeof SERVE_FLAGS / sizeof SERVE_FLAGS[0];

/* ---- base path ------------------------------------------------------------- */

int serve_base_path(const char *in, char out[SERVE_BASE_PATH_MAX], char *err, size_t errlen)
{
    size_t n = strlen(in);
    while (n > 0 && in[n - 1] == '/')
        n--;
    out[0] = '\0';
    if (n == 0)
        return 0;
    if (in[0] != '/')
        return set_err(err, errlen, "--base-path must start with '/', not \"%s\"", in);
    if (n >= SERVE_BASE_PATH_MAX)
        return set_err(err, errlen, "--base-path is longer than %d bytes", SERVE_BASE_PATH_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (!isalnum(c) && !strchr("-._~/", c))
            return set_err(err, errlen, "--base-path may hold only letters, digits, '-', '.', '_', '~' "
                                        "and '/', not \"%s\"", in);
    }
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && in[j] != '/')
            j++;
        size_t seg = j - i - 1;
        if (seg == 0 || (seg == 1 && in[i + 1] == '.') || (seg == 2 && !strncmp(in + i + 1, "..", 2)))
            return set_err(err, errlen, "--base-path may not have an empty, \".\" or \"..\" segment: \"%s\"",
                           in);
        i = j;
    }
    memcpy(out, in, n);
    out[n] = '\0';
    return 0;
}

/* ---- the parser ------------------------------------------------------------ */

static const char *env_get(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=')
            return (*e)[n + 1] ? *e + n + 1 : NULL;    /* empty: unset */
    return NULL;
}

/* "--name VALUE" or "--name=VALUE" (or "--name" alone for a switch) at argv[*i]:
 * the flag, with *value set; NULL when a does not name one. *missing: the
 * flag takes a value and none followed. */
static const serve_flag *match_flag(int argc, char **argv, int *i, const char **value, bool *missing)
{
    const char *a = argv[*i];
    for (size_t k = 0; k < SERVE_FLAG_COUNT; k++) {
        const serve_flag *f = &SERVE_FLAGS[k];
        size_t n = strlen(f->name);
        if (strncmp(a, f->name, n) != 0 || (a[n] != '\0' && a[n] != '='))
            continue;
        if (f->kind == FLAG_SWITCH) {
            if (a[n] == '=')
                continue;                 /* "--insecure-no-auth=x": unknown */
            *value = "1";
            return f;
        }
        if (a[n] == '=') {
            *value = a + n + 1;
        } else if (*i + 1 < argc) {
            *value = argv[++*i];
        } else {
            *missing = true;
            return f;
        }
        return f;
    }
    return NULL;
}

static int parse_switch(const char *v, const char **out)
{
    static const char *const yes[] = { "1", "true", "yes", "on" }, *const no[] = { "0", "false", "no", "off" };
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) { *out = "1"; return 0; }
        if (!strcasecmp(v, no[i])) { *out = "0"; return 0; }
    }
    return -1;
}

/* err = "VARIABLE=VALUE: what" */
static int env_error(char *err, size_t errlen, const char *var, const char *value, const char *what)
{
    return set_err(err, errlen, "environment variable %s=\"%s\": %s", var, value, what);
}

/* KILN_LIMIT_UPLOAD_BYTES=4G and the like, in environment order. */
static int env_limits(serve_opts *o, const serve_flag *f, char **envp, char *err, size_t errlen)
{
    size_t pn = strlen(f->env);
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, f->env, pn) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq || !eq[1])
            continue;
        char var[128], assign[256], why[768];
        size_t vn = (size_t)(eq - *e);
        if (vn >= sizeof var || vn == pn)
            return env_error(err, errlen, vn == pn ? f->env : "KILN_LIMIT_...", eq + 1, "no such limit");
        memcpy(var, *e, vn);
        var[vn] = '\0';
        size_t k = 0;
        for (const char *p = var + pn; *p && k + 1 < sizeof assign; p++)
            assign[k++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
        snprintf(assign + k, sizeof assign - k, "=%s", eq + 1);
        if (f->apply(o, assign, why, sizeof why) != 0)
            return env_error(err, errlen, var, eq + 1, why);
    }
    return 0;
}

/* One variable's value for a non-limit flag. */
static int env_flag(serve_opts *o, const serve_flag *f, const char *v, char *err, size_t errlen)
{
    char why[PATH_MAX + 128];
    if (f->kind == FLAG_SWITCH) {
        const char *b;
        if (parse_switch(v, &b) != 0)
            return env_error(err, errlen, f->env, v, "takes 1 or 0 (true/false, yes/no, on/off)");
        if (f->apply(o, b, why, sizeof why) != 0)
            return env_error(err, errlen, f->env, v, why);
        return 0;
    }
    if (f->kind == FLAG_VALUE) {
        if (f->apply(o, v, why, sizeof why) != 0)
            return env_error(err, errlen, f->env, v, why);
        return 0;
    }
    /* FLAG_LIST: each non-empty item. */
    char *copy = strdup(v);
    if (!copy)
        return set_err(err, errlen, "out of memory reading %s", f->env);
    int rc = 0;
    char sep[2] = { f->sep, '\0' }, *save = NULL;
    for (char *item = strtok_r(copy, sep, &save); item && rc == 0; item = strtok_r(NULL, sep, &save))
        if (f->apply(o, item, why, sizeof why) != 0)
            rc = env_error(err, errlen, f->env, v, why);
    free(copy);
    return rc;
}

typedef struct given {
    const serve_flag *flag;
    const char *value;
} given;

/* Reads argv into g (at most argc entries): 0, 1 for --help, 2 with err. */
static int read_argv(int argc, char **argv, given *g, size_t *ng, bool *markdown, char *err, size_t errlen)
{
    *ng = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        bool missing = false;
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "--help=markdown")) {
            *markdown = !strcmp(a, "--help=markdown");
            return 1;
        }
        const serve_flag *f = match_flag(argc, argv, &i, &v, &missing);
        if (!f)
            return set_err(err, errlen, a[0] == '-' ? "unknown option %s" : "unexpected argument %s", a), 2;
        if (missing)
            return set_err(err, errlen, "%s needs a value", a), 2;
        g[(*ng)++] = (given){ f, v };
    }
    return 0;
}

static bool given_on_line(const given *g, size_t ng, const serve_flag *f)
{
    for (size_t i = 0; i < ng; i++)
        if (g[i].flag == f)
            return true;
    return false;
}

int serve_flags_parse(serve_opts *o, int argc, char **argv, char **envp, FILE *help_out, char *err,
                      size_t errlen)
{
    given *g = calloc((size_t)(argc > 0 ? argc : 1), sizeof *g);
    if (!g)
        return set_err(err, errlen, "out of memory"), 2;
    size_t ng = 0;
    bool markdown = false;
    int rc = read_argv(argc, argv, g, &ng, &markdown, err, errlen);
    if (rc == 1) {
        if (markdown)
            serve_flags_markdown(help_out);
        else
            serve_flags_usage(help_out);
    }
    if (rc != 0)
        goto out;
    rc = 2;
    for (size_t k = 0; k < SERVE_FLAG_COUNT; k++) {          /* defaults */
        const serve_flag *f = &SERVE_FLAGS[k];
        if (f->def && f->apply(o, f->def, err, errlen) != 0)
            goto out;
    }
    for (size_t k = 0; k < SERVE_FLAG_COUNT; k++) {          /* the environment */
        const serve_flag *f = &SERVE_FLAGS[k];
        const char *v;
        if (f->kind == FLAG_LIMITS) {
            if (env_limits(o, f, envp, err, errlen) != 0)
                goto out;
        } else if (!given_on_line(g, ng, f) && (v = env_get(envp, f->env))) {
            if (env_flag(o, f, v, err, errlen) != 0)
                goto out;
        }
    }
    for (size_t i = 0; i < ng; i++)                          /* the command line */
        if (g[i].flag->apply(o, g[i].value, err, errlen) != 0)
            goto out;
    rc = 0;
out:
    free(g);
    return rc;
}

/* ---- documentation --------------------------------------------------------- */

static const char *shown_default(const serve_flag *f)
{
    return f->def_doc ? f->def_doc : f->def;
}

void serve_flags_usage(FILE *f)
{
    fprintf(f, "usage: kiln serve [FLAG]...\n"
               "\n"
               "Runs the training service: the REST API under /api/v1, the dashboard at /,\n"
               "and the scheduler that runs queued jobs as `kiln worker` processes.\n"
               "\n"
               "Every flag may also be set by its environment variable (KILN_...); the command\n"
               "line wins over the environment.\n"
               "\n");
    for (size_t k = 0; k < SERVE_FLAG_COUNT; k++) {
        const serve_flag *d = &SERVE_FLAGS[k];
        fprintf(f, "  %s%s%s   (%s%s, default %s)\n", d->name, d->arg ? " " : "", d->arg ? d->arg : "", d->env,
                d->kind == FLAG_LIMITS ? "NAME" : "", shown_default(d));
        for (const char *p = d->help; *p;) {
            size_t n = strcspn(p, "\n");
            fprintf(f, "      %.*s\n", (int)n, p);
            p += n + (p[n] == '\n');
        }
    }
    fprintf(f, "  --help             this text (--help=markdown: the README's table)\n"
               "\n"
               "After binding it prints `kiln: listening on http://HOST:PORT`. SIGINT or\n"
               "SIGTERM stops it: requests in progress are answered, running jobs stop at a\n"
               "checkpoint, are requeued and run again at the next start.\n"
               "\n"
               "Limits (--limit NAME=VALUE or KILN_LIMIT_NAME=VALUE):\n");
    serve_limits_usage(f);
}

void serve_flags_markdown(FILE *f)
{
    fprintf(f, "| flag | variable | default | what |\n| --- | --- | --- | --- |\n");
    for (size_t k = 0; k < SERVE_FLAG_COUNT; k++) {
        const serve_flag *d = &SERVE_FLAGS[k];
        fprintf(f, "| `%s%s%s` | `%s%s` | %s | ", d->name, d->arg ? " " : "", d->arg ? d->arg : "", d->env,
                d->kind == FLAG_LIMITS ? "NAME" : "", *shown_default(d) ? shown_default(d) : "\"\"");
        for (const char *p = d->help; *p; p++)
            fputc(*p == '\n' ? ' ' : *p == '|' ? '/' : *p, f);
        fprintf(f, " |\n");
    }
}
