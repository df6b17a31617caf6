/* server/cluster.c: the Slurm cluster's nodes from sinfo (contract in cluster.h). */
#include "server/cluster.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"    /* set_err */
#include "base/utf8.h"   /* utf8_from_any: sinfo's strings made fit for JSON */
#include "jobs/command.h" /* command_run: sinfo with a time limit and capped output */

extern char **environ;

/* ---- gres strings ---------------------------------------------------------- */

/* The GPUs of one gres item ("gpu", "gpu:2", "gpu:a100:2(IDX:0-1)"), n bytes
 * at s; 0 for another gres ("shard:4"), -1 when unreadable. */
static int64_t gres_item_gpus(const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    /* A trailing "(IDX:0-1)", "(S:0)" or "(IDX:N/A)"; not "(null)", which
     * Slurm prints for a missing type. */
    if (n && s[n - 1] == ')') {
        const char *open = NULL;
        for (size_t i = n; i-- > 0;)
            if (s[i] == '(') {
                open = s + i;
                break;
            }
        if (!open)
            return -1;
        if (strncmp(open, "(null)", 6) != 0)
            n = (size_t)(open - s);
    }
    if (n == 0)
        return -1;
    const char *colon = memchr(s, ':', n);
    size_t namelen = colon ? (size_t)(colon - s) : n;
    if (namelen != 3 || strncmp(s, "gpu", 3) != 0)
        return namelen ? 0 : -1;
    if (!colon)
        return 1;                                /* "gpu": one */
    const char *last = s + n;                    /* the last ':'-separated field */
    while (last > colon + 1 && last[-1] != ':')
        last--;
    size_t lastlen = (size_t)(s + n - last);
    if (lastlen == 0)
        return -1;
    if (!isdigit((unsigned char)*last))
        return last == colon + 1 ? 1 : -1;       /* "gpu:a100": one of that type; "gpu:a:b": unreadable */
    int64_t v = 0;
    for (size_t i = 0; i < lastlen; i++) {
        if (!isdigit((unsigned char)last[i]) || v > 1000000000)
            return -1;
        v = v * 10 + (last[i] - '0');
    }
    return v;
}

int64_t cluster_gres_gpus(const char *gres)
{
    if (!gres)
        return -1;
    if (!*gres || !strcmp(gres, "(null)") || !strcmp(gres, "N/A"))
        return 0;
    int64_t total = 0;
    int depth = 0;
    const char *item = gres;
    for (const char *p = gres;; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')' && --depth < 0)
            return -1;
        else if ((*p == ',' && depth == 0) || !*p) {
            int64_t g = gres_item_gpus(item, (size_t)(p - item));
            if (g < 0 || total > INT32_MAX)
                return -1;
            total += g;
            item = p + 1;
            if (!*p)
                break;
        }
    }
    return depth == 0 ? total : -1;
}

/* ---- sinfo's JSON ------------------------------------------------------------ */

/* A count: a number, or (openapi v0.0.39 on) {"set": true, "number": N}. -1
 * when missing, not a whole number from 0, or Slurm's NO_VAL/INFINITE. */
static int64_t count_field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsObject(v)) {
        const cJSON *set = cJSON_GetObjectItemCaseSensitive(v, "set");
        if (set && !cJSON_IsTrue(set))
            return -1;
        v = cJSON_GetObjectItemCaseSensitive(v, "number");
    }
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d >= 4294967294.0 || d != floor(d))
        return -1;
    return (int64_t)d;
}

/* A string field into out (UTF-8, cut to fit); "" when missing or not a string. */
static void string_field(const cJSON *o, const char *key, char *out, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    out[0] = '\0';
    if (cJSON_IsString(v) && v->valuestring)
        utf8_from_any(v->valuestring, strlen(v->valuestring), out, len);
}

/* Appends s in lower case to out (len bytes), after sep when out is not empty. */
static void append_lower(char *out, size_t len, const char *sep, const char *s)
{
    size_t o = strlen(out);
    if (o && o + 1 < len)
        o += (size_t)snprintf(out + o, len - o, "%s", sep);
    for (; *s && o + 1 < len; s++)
        out[o++] = (char)tolower((unsigned char)*s);
    out[o < len ? o : len - 1] = '\0';
}

/* "state" (a string in v0.0.38; an array, base state first, from v0.0.39)
 * and "state_flags" into the node. Unknown: state "unknown". */
static void node_state(const cJSON *o, cluster_node *n)
{
    char buf[CLUSTER_STATE_MAX];
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "state");
    const cJSON *flags = cJSON_GetObjectItemCaseSensitive(o, "state_flags");
    const cJSON *e;
    n->state[0] = n->flags[0] = '\0';
    if (cJSON_IsString(st) && st->valuestring) {
        utf8_from_any(st->valuestring, strlen(st->valuestring), buf, sizeof buf);
        append_lower(n->state, sizeof n->state, "", buf);
    } else if (cJSON_IsArray(st)) {
        cJSON_ArrayForEach(e, st) {
            if (!cJSON_IsString(e) || !e->valuestring)
                continue;
            utf8_from_any(e->valuestring, strlen(e->valuestring), buf, sizeof buf);
            if (!n->state[0])
                append_lower(n->state, sizeof n->state, "", buf);
            else
                append_lower(n->flags, sizeof n->flags, "+", buf);
        }
    }
    if (cJSON_IsArray(flags))
        cJSON_ArrayForEach(e, flags) {
            if (!cJSON_IsString(e) || !e->valuestring)
                continue;
            utf8_from_any(e->valuestring, strlen(e->valuestring), buf, sizeof buf);
            append_lower(n->flags, sizeof n->flags, "+", buf);
        }
    if (!n->state[0])
        snprintf(n->state, sizeof n->state, "unknown");
}

static void node_partitions(const cJSON *o, cluster_node *n)
{
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(o, "partitions"), *e;
    n->npartitions = 0;
    if (!cJSON_IsArray(parts))
        return;
    cJSON_ArrayForEach(e, parts) {
        if (n->npartitions == CLUSTER_NODE_PARTITIONS)
            break;
        if (cJSON_IsString(e) && e->valuestring && *e->valuestring)
            utf8_from_any(e->valuestring, strlen(e->valuestring), n->partitions[n->npartitions++],
                          CLUSTER_NAME_MAX);
    }
}

/* A gres field's GPUs; -1 when missing or unreadable. */
static int64_t gres_field(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNull(v))
        return 0;                                /* v0.0.38 prints a node without gres_used as null */
    return cJSON_IsString(v) ? cluster_gres_gpus(v->valuestring) : -1;
}

static void node_from_json(const cJSON *o, cluster_node *n)
{
    memset(n, 0, sizeof *n);
    string_field(o, "name", n->name, sizeof n->name);
    node_state(o, n);
    n->cpus = count_field(o, "cpus");
    n->cpus_allocated = count_field(o, "alloc_cpus");
    n->memory_mib = count_field(o, "real_memory");
    n->memory_free_mib = count_field(o, "free_memory");
    n->memory_allocated_mib = count_field(o, "alloc_memory");
    n->gpus = gres_field(o, "gres");
    n->gpus_used = gres_field(o, "gres_used");
    node_partitions(o, n);
    string_field(o, "reason", n->reason, sizeof n->reason);
}

/* sinfo's "errors" list, joined into out ("" when empty). Each entry is
 * {"error": "...", ...} (v0.0.38: also "description") or a string. */
static void errors_field(const cJSON *root, char *out, size_t len)
{
    const cJSON *errs = cJSON_GetObjectItemCaseSensitive(root, "errors"), *e;
    out[0] = '\0';
    if (!cJSON_IsArray(errs))
        return;
    cJSON_ArrayForEach(e, errs) {
        const cJSON *msg = cJSON_IsString(e) ? e : cJSON_GetObjectItemCaseSensitive(e, "error");
        if (!cJSON_IsString(msg) || !msg->valuestring)
            msg = cJSON_GetObjectItemCaseSensitive(e, "description");
        char buf[200];
        if (cJSON_IsString(msg) && msg->valuestring)
            utf8_from_any(msg->valuestring, strlen(msg->valuestring), buf, sizeof buf);
        else
            snprintf(buf, sizeof buf, "an error without a message");
        const cJSON *no = cJSON_GetObjectItemCaseSensitive(e, "errno");
        size_t o = strlen(out);
        if (cJSON_IsNumber(no) && fabs(no->valuedouble) < 1e9)
            snprintf(out + o, len - o, "%s%s (errno %d)", o ? "; " : "", buf, (int)no->valuedouble);
        else
            snprintf(out + o, len - o, "%s%s", o ? "; " : "", buf);
    }
}

static void version_field(const cJSON *root, char *out, size_t len)
{
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    const cJSON *slurm = cJSON_GetObjectItemCaseSensitive(meta, "Slurm");
    string_field(slurm, "release", out, len);
}

int cluster_parse_sinfo(const char *text, size_t len, cluster_nodes *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return set_err(err, errlen, "sinfo --json's output is not JSON (near byte %zu of %zu)", at, len);
    }
    int rc = -1;
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes"), *e;
    if (!cJSON_IsObject(root) || !cJSON_IsArray(nodes)) {
        set_err(err, errlen, "sinfo --json's output has no \"nodes\" list (is this Slurm 22.05 or later?)");
        goto out;
    }
    version_field(root, out->version, sizeof out->version);
    errors_field(root, out->warning, sizeof out->warning);
    size_t total = 0;
    cJSON_ArrayForEach(e, nodes)
        total += cJSON_IsObject(e);
    size_t keep = total < CLUSTER_MAX_NODES ? total : CLUSTER_MAX_NODES;
    if (keep && !(out->nodes = calloc(keep, sizeof *out->nodes))) {
        set_err(err, errlen, "out of memory for %zu nodes", keep);
        goto out;
    }
    cJSON_ArrayForEach(e, nodes) {
        if (!cJSON_IsObject(e))
            continue;
        if (out->n == keep) {
            out->omitted++;
            continue;
        }
        node_from_json(e, &out->nodes[out->n++]);
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

void cluster_nodes_free(cluster_nodes *n)
{
    if (!n)
        return;
    free(n->nodes);
    memset(n, 0, sizeof *n);
}

/* ---- JSON out ------------------------------------------------------------------ */

/* v scaled, or null when unknown (< 0). */
static bool add_count(cJSON *o, const char *key, int64_t v, double scale)
{
    return v < 0 ? cJSON_AddNullToObject(o, key) != NULL : cJSON_AddNumberToObject(o, key, (double)v * scale) != NULL;
}

/* "a+b" as ["a", "b"]; "" as []. */
static bool add_flags(cJSON *o, const char *flags)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "state_flags");
    if (!arr)
        return false;
    for (const char *p = flags; *p;) {
        size_t n = strcspn(p, "+");
        char one[CLUSTER_STATE_MAX];
        snprintf(one, sizeof one, "%.*s", (int)n, p);
        cJSON *s = cJSON_CreateString(one);
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            return false;
        }
        p += n + (p[n] == '+');
    }
    return true;
}

cJSON *cluster_node_json(const cluster_node *n)
{
    const double mib = 1024.0 * 1024.0;
    cJSON *o = cJSON_CreateObject(), *parts = NULL;
    bool ok = o && cJSON_AddStringToObject(o, "name", n->name) && cJSON_AddStringToObject(o, "state", n->state) &&
              add_flags(o, n->flags) && add_count(o, "cpus", n->cpus, 1) &&
              add_count(o, "cpus_allocated", n->cpus_allocated, 1) &&
              add_count(o, "memory_total_bytes", n->memory_mib, mib) &&
              add_count(o, "memory_free_bytes", n->memory_free_mib, mib) &&
              add_count(o, "memory_allocated_bytes", n->memory_allocated_mib, mib) &&
              add_count(o, "gpus", n->gpus, 1) && add_count(o, "gpus_used", n->gpus_used, 1) &&
              (parts = cJSON_AddArrayToObject(o, "partitions"));
    for (int i = 0; ok && i < n->npartitions; i++) {
        cJSON *s = cJSON_CreateString(n->partitions[i]);
        ok = s && cJSON_AddItemToArray(parts, s);
        if (!ok)
            cJSON_Delete(s);
    }
    ok = ok && (n->reason[0] ? cJSON_AddStringToObject(o, "reason", n->reason) != NULL
                             : cJSON_AddNullToObject(o, "reason") != NULL);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- running sinfo ------------------------------------------------------------- */

#define SINFO_STDERR_MAX 1024   /* bytes of sinfo's stderr kept for its error message */

struct cluster {
    unsigned interval_s;
    char *sinfo;                /* "sinfo" (PATH) or "<slurm_bin>/sinfo" */
    char **envp;                /* the environment sinfo runs with (NULL: the server's) */
    atomic_bool stopping;

    pthread_t thread;
    pthread_mutex_t mu;         /* everything below */
    pthread_cond_t cond;
    double time;                /* of the last sinfo; 0: none yet */
    cluster_nodes nodes;        /* its nodes */
    char error[512];            /* its error, "" when none */
};

/* The server's environment with SLURM_CONF=conf (malloc'ed; the strings but
 * the one added are the environment's). NULL when out of memory. */
static char **env_with_conf(const char *conf)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **envp = calloc(n + 2, sizeof *envp);
    size_t len = strlen("SLURM_CONF=") + strlen(conf) + 1;
    char *var = malloc(len);
    if (!envp || !var) {
        free(envp);
        free(var);
        return NULL;
    }
    snprintf(var, len, "SLURM_CONF=%s", conf);
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "SLURM_CONF=", 11) != 0)
            envp[o++] = environ[i];
    envp[o] = var;
    return envp;
}

static void env_free(char **envp)
{
    if (!envp)
        return;
    for (size_t i = 0; envp[i]; i++)
        if (!strncmp(envp[i], "SLURM_CONF=", 11))
            free(envp[i]);   /* the one we added; the rest belong to environ */
    free(envp);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* whole milliseconds, as the hardware sampler's times (they print exactly) */
    return (double)((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000) / 1000.0;
}

/* Runs sinfo --json once: *o holds its output (the caller frees it with
 * command_result_free). 0, or -1 with err set. */
static int run_sinfo(cluster *c, command_result *o, char *err, size_t errlen)
{
    char name[PATH_MAX + 16];
    snprintf(name, sizeof name, "%s --json", c->sinfo);
    char *argv[] = { c->sinfo, "--json", NULL };
    command_spec spec = { .path = c->sinfo, .argv = argv, .envp = c->envp, .name = name,
                          .timeout_ms = CLUSTER_SINFO_TIMEOUT_S * 1000, .out_max = CLUSTER_OUTPUT_MAX,
                          .err_max = SINFO_STDERR_MAX, .stop = &c->stopping };
    return command_run(&spec, o, err, errlen);
}

/* One sinfo, parsed, swapped in as the current result. */
static void sample_once(cluster *c)
{
    command_result o;
    cluster_nodes nodes;
    char err[sizeof c->error] = "";
    memset(&nodes, 0, sizeof nodes);
    if (run_sinfo(c, &o, err, sizeof err) == 0 && cluster_parse_sinfo(o.out, o.out_len, &nodes, err,
                                                                      sizeof err) == 0 && nodes.warning[0])
        set_err(err, sizeof err, "sinfo --json reported: %s%s", nodes.warning,
                nodes.n ? "" : " (and no nodes: is slurmctld running and reachable?)");
    command_result_free(&o);
    if (err[0] && !nodes.warning[0])
        cluster_nodes_free(&nodes);    /* a failed sinfo shows no nodes, not half of them */
    pthread_mutex_lock(&c->mu);
    cluster_nodes old = c->nodes;
    c->nodes = nodes;
    c->time = now_ms();
    snprintf(c->error, sizeof c->error, "%s", err);
    pthread_mutex_unlock(&c->mu);
    cluster_nodes_free(&old);
}

static void *cluster_main(void *arg)
{
    cluster *c = arg;
    while (!atomic_load(&c->stopping)) {
        sample_once(c);
        pthread_mutex_lock(&c->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += c->interval_s;
        while (!atomic_load(&c->stopping) && pthread_cond_timedwait(&c->cond, &c->mu, &until) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

cluster *cluster_start(const cluster_config *cfg, char *err, size_t errlen)
{
    if (cfg->interval_s == 0) {
        set_err(err, errlen, "the cluster interval must be at least 1 s");
        return NULL;
    }
    cluster *c = calloc(1, sizeof *c);
    if (!c)
        goto oom;
    c->interval_s = cfg->interval_s;
    bool on_path = !cfg->slurm_bin || !*cfg->slurm_bin;
    size_t len = on_path ? 6 : strlen(cfg->slurm_bin) + 7;
    if (!(c->sinfo = malloc(len)))
        goto oom;
    snprintf(c->sinfo, len, on_path ? "sinfo" : "%s/sinfo", cfg->slurm_bin);
    if (cfg->slurm_conf && *cfg->slurm_conf && !(c->envp = env_with_conf(cfg->slurm_conf)))
        goto oom;
    atomic_init(&c->stopping, false);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cond, NULL);
    int rc = pthread_create(&c->thread, NULL, cluster_main, c);
    if (rc != 0) {
        set_err(err, errlen, "cannot start the cluster sampler: %s", strerror(rc));
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cond);
        goto fail;
    }
    return c;
oom:
    set_err(err, errlen, "out of memory");
fail:
    if (c) {
        env_free(c->envp);
        free(c->sinfo);
        free(c);
    }
    return NULL;
}

void cluster_stop(cluster *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->stopping, true);
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cond);
    cluster_nodes_free(&c->nodes);
    env_free(c->envp);
    free(c->sinfo);
    free(c);
}

/* The current result's fields (c->mu held). */
static bool add_result(cJSON *o, const cluster *c)
{
    cJSON *arr = NULL;
    bool ok = (c->time > 0 ? cJSON_AddNumberToObject(o, "time", c->time) != NULL
                           : cJSON_AddNullToObject(o, "time") != NULL) &&
              (c->nodes.version[0] ? cJSON_AddStringToObject(o, "slurm_version", c->nodes.version) != NULL
                                   : cJSON_AddNullToObject(o, "slurm_version") != NULL) &&
              (c->error[0] ? cJSON_AddStringToObject(o, "error", c->error) != NULL
                           : cJSON_AddNullToObject(o, "error") != NULL) &&
              (arr = cJSON_AddArrayToObject(o, "nodes")) &&
              cJSON_AddNumberToObject(o, "nodes_omitted", (double)c->nodes.omitted);
    for (size_t i = 0; ok && i < c->nodes.n; i++) {
        cJSON *n = cluster_node_json(&c->nodes.nodes[i]);
        ok = n && cJSON_AddItemToArray(arr, n);
        if (!ok)
            cJSON_Delete(n);
    }
    return ok;
}

cJSON *cluster_json(cluster *c)
{
    if (!c)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    bool ok = o && cJSON_AddNumberToObject(o, "interval_seconds", c->interval_s);
    pthread_mutex_lock(&c->mu);
    ok = ok && add_result(o, c);
    pthread_mutex_unlock(&c->mu);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
