/* jobs/infer_server.c: `kiln infer-server`, the inference process (protocol
 * and guarantees in infer_server.h).
 *
 * One thread reads stdin with poll (the idle timeout) into its own line
 * buffer, handles the request, writes the answer and reads on. A failed
 * write means the server is gone: the process exits. The model cache is an
 * array of INFER_LIMITS.cached_models slots; the least recently used one is
 * freed for a new model.
 */
#include "jobs/infer_server.h"

#include <errno.h>
#include <omp.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "jobs/cli_args.h"      /* cli_int */
#include "jobs/infer.h"         /* infer_set, infer_model, infer_run, infer_answer, INFER_LIMITS */
#include "jobs/model_bundle.h"  /* model_bundle_from_job */

#define LINE_MAX_BYTES ((size_t)64 << 20)    /* one request: 10,000 items of long paths fit */

typedef struct cached_net {
    char weights[PATH_MAX];
    struct timespec mtime;
    off_t size;
    infer_model m;                /* m.count 0: a free slot */
    uint64_t used;                /* the request that last used it */
} cached_net;

typedef struct server_state {
    cached_net *cache;
    int ncache;
    uint64_t requests;
    char *line;                   /* the input buffer */
    size_t len, cap;
} server_state;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- the cache ----------------------------------------------------------------- */

/* The loaded model for b's weights: from the cache (*hit true), or built and
 * loaded into the least recently used slot. NULL with e (500) when it cannot
 * be built. */
static const infer_model *cache_get(server_state *st, const model_bundle *b, bool *hit, api_error *e)
{
    struct stat sb;
    if (stat(b->weights, &sb) != 0) {
        api_fail(e, 500, "internal_error", "cannot read the weights file %s: %s", b->weights, strerror(errno));
        return NULL;
    }
    cached_net *victim = &st->cache[0];
    for (int i = 0; i < st->ncache; i++) {
        cached_net *c = &st->cache[i];
        if (c->m.count && !strcmp(c->weights, b->weights) && c->size == sb.st_size &&
            c->mtime.tv_sec == sb.st_mtim.tv_sec && c->mtime.tv_nsec == sb.st_mtim.tv_nsec) {
            c->used = st->requests;
            *hit = true;
            return &c->m;
        }
        if (!c->m.count || (victim->m.count && c->used < victim->used))
            victim = c;
    }
    *hit = false;
    infer_model_free(&victim->m);
    double t0 = now_ms();
    char err[512];
    if (infer_model_open(&victim->m, b, infer_replicas(b, omp_get_max_threads()), err, sizeof err) != 0) {
        api_fail(e, 500, "model_load_failed", "the model could not be loaded: %s", err);
        return NULL;
    }
    snprintf(victim->weights, sizeof victim->weights, "%s", b->weights);
    victim->mtime = sb.st_mtim;
    victim->size = sb.st_size;
    victim->used = st->requests;
    fprintf(stderr, "kiln infer-server: loaded %s (%s, epoch %d, %d classes; %d net%s) in %.0f ms\n", b->weights,
            b->network_name[0] ? b->network_name : "network", b->epoch, b->nclasses, victim->m.count,
            victim->m.count == 1 ? "" : "s", now_ms() - t0);
    return &victim->m;
}

/* ---- one request ------------------------------------------------------------------ */

/* The spool file (the images' bytes one after another) read whole into
 * *buf; 0, or -1 with e. */
static int read_spool(const char *path, uint8_t **buf, size_t *len, api_error *e)
{
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size > INFER_LIMITS.max_total_bytes) {
        if (f)
            fclose(f);
        return api_fail(e, 500, "storage_error", "the uploaded images cannot be read back");
    }
    *len = (size_t)sb.st_size;
    *buf = malloc(*len ? *len : 1);
    bool ok = *buf && fread(*buf, 1, *len, f) == *len;
    fclose(f);
    if (!ok)
        return api_fail(e, 500, *buf ? "storage_error" : "internal_error", "the uploaded images cannot be read back");
    return 0;
}

/* One file of the request: a slice of the spool, or an error decided before. */
static int read_file_item(const cJSON *f, const uint8_t *spool, size_t spool_len, infer_set *s, api_error *e)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(f, "offset");
    const cJSON *len = cJSON_GetObjectItemCaseSensitive(f, "length");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(f, "error");
    const char *nm = cJSON_IsString(name) ? name->valuestring : NULL;
    if (cJSON_IsObject(err)) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
        return infer_set_add_failed(s, nm, cJSON_IsString(code) ? code->valuestring : "invalid_image",
                                    cJSON_IsString(msg) ? msg->valuestring : "", e);
    }
    if (!cJSON_IsNumber(off) || !cJSON_IsNumber(len) || off->valuedouble < 0 || len->valuedouble < 0 ||
        off->valuedouble + len->valuedouble > (double)spool_len)
        return api_fail(e, 500, "internal_error", "the inference request names bytes outside the uploaded images");
    size_t o = (size_t)off->valuedouble, n = (size_t)len->valuedouble;
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy)
        return api_fail(e, 500, "internal_error", "out of memory");
    memcpy(copy, spool + o, n);
    return infer_set_add(s, nm, copy, n, e);
}

/* The request's items into s: the files (slices of the spool), then the
 * archive's images. 0, or -1 with e. */
static int read_items(const cJSON *req, infer_set *s, api_error *e)
{
    const cJSON *spool = cJSON_GetObjectItemCaseSensitive(req, "spool");
    uint8_t *buf = NULL;
    size_t len = 0;
    if (cJSON_IsString(spool) && read_spool(spool->valuestring, &buf, &len, e) != 0)
        return -1;
    const cJSON *f;
    int rc = 0;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(req, "files"))
        if ((rc = read_file_item(f, buf, len, s, e)) != 0)
            break;
    free(buf);
    if (rc != 0)
        return -1;
    const cJSON *archive = cJSON_GetObjectItemCaseSensitive(req, "archive");
    if (cJSON_IsString(archive) && infer_set_add_archive(s, archive->valuestring, e) != 0)
        return -1;
    return 0;
}

/* One request's answer: the status, whether the model was in the cache
 * ("hit", "miss", "" when none was loaded), and the body's JSON text. */
typedef struct reply {
    int status;
    const char *cache;
    char *body;                   /* malloc'ed; NULL when out of memory */
    size_t len;
} reply;

static void error_reply(reply *r, const api_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *o = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    r->status = e->status;
    r->body = o && cJSON_AddStringToObject(o, "code", e->code) && cJSON_AddStringToObject(o, "message", e->message)
                  ? cJSON_PrintUnformatted(root) : NULL;
    r->len = r->body ? strlen(r->body) : 0;
    cJSON_Delete(root);
}

/* Handles one request into *r. */
static void handle(server_state *st, const cJSON *req, reply *r)
{
    api_error e = { 0 };
    model_bundle b;
    memset(&b, 0, sizeof b);
    memset(r, 0, sizeof *r);
    r->cache = "";
    bool opened = false, hit = false;
    infer_set s;
    infer_set_init(&s);

    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(req, "job_dir");
    const cJSON *topk = cJSON_GetObjectItemCaseSensitive(req, "top_k");
    snap_select sel;
    if (!cJSON_IsString(dir)) {
        api_fail(&e, 500, "internal_error", "the inference request has no job_dir");
        goto out;
    }
    if (snap_select_from_json(cJSON_GetObjectItemCaseSensitive(req, "epoch"), "epoch", &sel, &e) != 0)
        goto out;
    if (model_bundle_from_job(dir->valuestring, sel, &b, &e) != 0)
        goto out;
    opened = true;
    int k = cJSON_IsNumber(topk) ? topk->valueint : INFER_LIMITS.top_k_default;
    if (cJSON_IsNumber(topk) && (double)k != topk->valuedouble)
        k = 0;
    if (!cJSON_IsNumber(topk) && k > b.nclasses)
        k = b.nclasses;             /* the default asks for no more than there are */
    if (infer_check_top_k(k, b.nclasses, &e) != 0 || read_items(req, &s, &e) != 0)
        goto out;
    const infer_model *m = cache_get(st, &b, &hit, &e);
    if (!m)
        goto out;
    r->cache = hit ? "hit" : "miss";
    char err[512];
    if (infer_run(m, &b, &s, k, err, sizeof err) != 0) {
        api_fail(&e, 500, "inference_failed", "classifying failed: %s", err);
        goto out;
    }
    r->body = infer_answer(&b, &s, &r->status, &r->len);
out:
    if (!r->body) {
        if (!e.status)
            api_fail(&e, 500, "internal_error", "out of memory");
        error_reply(r, &e);
    }
    infer_set_free(&s);
    if (opened)
        model_bundle_free(&b);
}

/* ---- the loop -------------------------------------------------------------------- */

int infer_write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Writes the answer: its envelope {"status", "cache", "bytes"} as one line,
 * then the body's text (bytes of it) and a newline. */
static int answer(const reply *r)
{
    static const char oom_body[] = "{\"error\":{\"code\":\"internal_error\","
                                   "\"message\":\"the inference process ran out of memory\"}}";
    const char *body = r->body ? r->body : oom_body;
    size_t n = r->body ? r->len : sizeof oom_body - 1;
    char head[128];
    if (r->body && r->cache[0])
        snprintf(head, sizeof head, "{\"status\":%d,\"cache\":\"%s\",\"bytes\":%zu}\n", r->status, r->cache, n);
    else
        snprintf(head, sizeof head, "{\"status\":%d,\"bytes\":%zu}\n", r->body ? r->status : 500, n);
    return infer_write_all(STDOUT_FILENO, head, strlen(head)) || infer_write_all(STDOUT_FILENO, body, n) ||
           infer_write_all(STDOUT_FILENO, "\n", 1) ? -1 : 0;
}

/* The next line of stdin into st->line (NUL-terminated, without its newline),
 * moving what follows it to the front. Returns 1 with a line, 0 at the end of
 * input or after idle_ms without a byte, -1 on a line over LINE_MAX_BYTES. */
static int next_line(server_state *st, size_t *line_len, int idle_ms)
{
    for (;;) {
        char *nl = st->len ? memchr(st->line, '\n', st->len) : NULL;
        if (nl) {
            *nl = '\0';
            *line_len = (size_t)(nl - st->line);
            return 1;
        }
        if (st->len >= LINE_MAX_BYTES)
            return -1;
        if (st->cap - st->len < 65536) {
            size_t cap = st->cap ? st->cap * 2 : 1 << 20;
            char *nb = realloc(st->line, cap);
            if (!nb)
                return -1;
            st->line = nb;
            st->cap = cap;
        }
        struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
        int pr = poll(&pfd, 1, idle_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return 0;
        ssize_t k = read(STDIN_FILENO, st->line + st->len, st->cap - st->len - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        st->len += (size_t)k;
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kiln %s [--idle-seconds N]\n"
               "The inference process of kiln serve (POST /api/v1/jobs/{id}/infer): JSON requests\n"
               "on stdin, one a line, answers on stdout. Not meant to be run by hand; see kiln infer.\n",
            INFER_SERVER_COMMAND);
}

int infer_server_main(int argc, char **argv)
{
    int idle = INFER_LIMITS.idle_seconds;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--idle-seconds") && i + 1 < argc && cli_int(argv[i + 1], 1, 86400, &idle)) {
            i++;
            continue;
        }
        usage(stderr);
        return 2;
    }
    server_state st;
    memset(&st, 0, sizeof st);
    st.ncache = INFER_LIMITS.cached_models;
    if (!(st.cache = calloc((size_t)st.ncache, sizeof *st.cache))) {
        fprintf(stderr, "kiln %s: out of memory\n", INFER_SERVER_COMMAND);
        return 1;
    }
    int status = 0;
    for (;;) {
        size_t n = 0;
        int got = next_line(&st, &n, idle * 1000);
        if (got == 0)
            break;
        if (got < 0) {
            fprintf(stderr, "kiln %s: a request line over %zu bytes\n", INFER_SERVER_COMMAND, LINE_MAX_BYTES);
            status = 1;
            break;
        }
        st.requests++;
        cJSON *req = cJSON_ParseWithLength(st.line, n);
        reply r = { .cache = "" };
        if (!cJSON_IsObject(req)) {
            api_error e;
            api_fail(&e, 500, "internal_error", "the inference process got a request that is not JSON");
            error_reply(&r, &e);
        } else {
            handle(&st, req, &r);
        }
        cJSON_Delete(req);
        int wr = answer(&r);
        free(r.body);
        memmove(st.line, st.line + n + 1, st.len - n - 1);
        st.len -= n + 1;
        if (wr != 0)
            break;                  /* the server is gone */
    }
    for (int i = 0; i < st.ncache; i++)
        infer_model_free(&st.cache[i].m);
    free(st.cache);
    free(st.line);
    return status;
}
