/* server/sse.c: job event streams over Server-Sent Events (contract in sse.h).
 *
 * Locks: srv->sse_mu guards the registry (the list of live connections); each
 * connection's mu guards its suspended/pending/ping_due flags. Nobody calls
 * into libmicrohttpd while holding sse_mu: a waker takes a connection's mu,
 * and when the connection is suspended clears the mark and resumes it after
 * unlocking. That is safe because a connection MHD holds suspended cannot be
 * closed or freed, and with the mark cleared nobody else resumes it. The
 * reader sets the mark and calls MHD_suspend_connection under the same mu, so
 * a waker never resumes a connection that is not yet suspended.
 *
 * Lifetime: a connection's state belongs to its MHD response and is freed by
 * the response's free callback: it leaves the registry, then unsubscribes
 * from the hub (which waits out a wake call in progress), then is freed.
 *
 * Where events come from (one id sequence per job, db/event_store.h): the
 * hub's ring when it holds everything after the connection's last id, else
 * the store, a page of SSE_STORE_PAGE events per fill, until the connection
 * has caught up with the store and the hub can serve it again. Both hold the
 * same events under the same ids (the hub stores each event before it
 * publishes it), so the switch loses and repeats nothing; a reconnect after a
 * server restart or after the hub dropped the stream resumes exactly. A
 * store-only stream ends when it has caught up and the job is finished.
 * Between fills a connection holds no lock and no statement of the store, and
 * at most one page of events.
 * Progress events carry no id: they are snapshots (hub_progress), and the
 * latest is in the job's row, so a reconnecting client needs only the newest,
 * which it gets first; storing them would cost a row per report for nothing.
 * An event stream's socket gets a fixed send buffer (SSE_SNDBUF) instead of
 * the kernel's autotuned one, which grew to the whole replay (2.5 MB of a
 * 20,000-metric job per client that did not read): so a client that does
 * not read also holds little kernel memory and stops the server's work on
 * its stream once that buffer is full.
 */
#include "server/sse.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/lookup.h"     /* lookup_job */
#include "db/event_store.h"   /* store_event_page, store_event_last */

#define SSE_BLOCK 4096           /* the response buffer MHD allocates per stream */
#define SSE_HUB_BATCH 64         /* events taken from the hub per fill */
#define SSE_STORE_PAGE 64        /* events read from the store per fill */
#define SSE_SNDBUF (128 * 1024)  /* an event stream socket's send buffer (the kernel doubles it) */

typedef struct sse_conn {
    server *srv;
    struct MHD_Connection *conn;
    int64_t job_id;
    uint64_t last_id;            /* the last event id sent (or Last-Event-ID) */
    void *sub;                   /* hub subscription */

    pthread_mutex_t mu;
    bool suspended;              /* suspended by the reader, not yet resumed */
    bool pending;                /* woken while not suspended: look again */
    bool ping_due;

    uint64_t progress_seen;      /* the hub's progress snapshot version sent */
    bool done;                   /* end the stream once buf has drained */
    char *buf;
    size_t len, off, cap;

    struct sse_conn *prev, *next;   /* registry */
} sse_conn;

/* ---- formatting -------------------------------------------------------------- */

size_t sse_format(char *buf, size_t cap, uint64_t id, const char *type, const char *data)
{
    size_t need = 0;
    int k;
#define PUT(...)                                                                           \
    do {                                                                                   \
        k = snprintf(need < cap ? buf + need : NULL, need < cap ? cap - need : 0, __VA_ARGS__); \
        if (k > 0)                                                                         \
            need += (size_t)k;                                                             \
    } while (0)
    if (id > 0)
        PUT("id: %" PRIu64 "\n", id);
    PUT("event: %s\n", type);
    const char *p = data ? data : "null";
    for (;;) {
        size_t n = strcspn(p, "\r\n");
        PUT("data: %.*s\n", (int)n, p);
        p += n;
        if (*p == '\r' && p[1] == '\n')
            p += 2;
        else if (*p)
            p++;
        else
            break;
        if (!*p)
            break;
    }
    PUT("\n");
#undef PUT
    return need;
}

/* Appends text to the connection's buffer. Returns 0 or -1 (out of memory). */
static int buf_reserve(sse_conn *s, size_t more)
{
    if (s->len + more + 1 <= s->cap)
        return 0;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + more + 1) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    char *nb = realloc(s->buf, cap);
    if (!nb)
        return -1;
    s->buf = nb;
    s->cap = cap;
    return 0;
}

static int append_event(sse_conn *s, uint64_t id, const char *type, const char *data)
{
    size_t need = sse_format(NULL, 0, id, type, data);
    if (buf_reserve(s, need) != 0)
        return -1;
    sse_format(s->buf + s->len, s->cap - s->len, id, type, data);
    s->len += need;
    return 0;
}

static int append_text(sse_conn *s, const char *text)
{
    size_t n = strlen(text);
    if (buf_reserve(s, n) != 0)
        return -1;
    memcpy(s->buf + s->len, text, n);
    s->len += n;
    return 0;
}

/* ---- filling the buffer ---------------------------------------------------------- */

static bool final_status(const char *st)
{
    return st && (!strcmp(st, "done") || !strcmp(st, "failed") || !strcmp(st, "cancelled"));
}

/* The job's progress snapshot when it is newer than the one sent (no id).
 * Returns 1 when appended, 0 when none, -1 on error. */
static int fill_progress(sse_conn *s)
{
    char *json = NULL;
    if (!hub_progress(s->srv->hub, s->job_id, &s->progress_seen, &json))
        return 0;
    int rc = append_event(s, 0, "progress", json);
    free(json);
    return rc == 0 ? 1 : -1;
}

/* From the hub. Returns 1 when it served the connection (something appended
 * or the stream is done), 0 when it has nothing yet (wait), 2 when it cannot
 * serve it (no stream, or events after last_id have left the ring or are an
 * earlier run's): read the store. -1 on error. */
static int fill_hub(sse_conn *s)
{
    hub_event ev[SSE_HUB_BATCH];
    bool live, ended, gap;
    size_t n = hub_read(s->srv->hub, s->job_id, s->last_id, ev, SSE_HUB_BATCH, &live, &ended, &gap);
    int rc = live && !gap ? 0 : 2;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && append_event(s, ev[i].id, ev[i].type, ev[i].data) != 0)
            rc = -1;
        if (rc == 0)
            s->last_id = ev[i].id;
        hub_event_clear(&ev[i]);
    }
    if (rc != 0)
        return rc;
    if (ended)
        s->done = true;
    return n > 0 || ended ? 1 : 0;
}

/* From the store: the next page after last_id. When there is none (caught
 * up), a job with no stream in the hub ends here if it is finished (or
 * deleted); otherwise the connection waits for the hub. Returns 1 (appended
 * or done), 0 (wait) or -1. */
static int fill_store(sse_conn *s)
{
    store_event ev[SSE_STORE_PAGE];
    size_t n = 0;
    if (store_event_page(s->srv->st, s->job_id, s->last_id, ev, SSE_STORE_PAGE, &n) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && append_event(s, ev[i].id, ev[i].type, ev[i].data) != 0)
            rc = -1;
        if (rc == 0)
            s->last_id = ev[i].id;
        store_event_clear(&ev[i]);
    }
    if (rc != 0 || n > 0)
        return rc == 0 ? 1 : -1;

    bool live, ended, gap;
    size_t k = hub_read(s->srv->hub, s->job_id, s->last_id, NULL, 0, &live, &ended, &gap);
    (void)k;
    if (live)
        return 0;                           /* the hub has nothing newer yet: wait for it */
    store_job j;
    int jr = store_job_get(s->srv->st, s->job_id, &j);
    if (jr == STORE_NOT_FOUND) {
        s->done = true;                     /* deleted meanwhile */
        return 1;
    }
    if (jr != 0)
        return -1;
    if (final_status(j.status))
        s->done = true;                     /* every event it will ever have was sent */
    store_job_clear(&j);
    return s->done ? 1 : 0;                 /* queued: wait for the scheduler's stream */
}

/* Fills the buffer: the newest progress, then events after last_id from the
 * hub or, when it cannot serve them, the store. 1, 0 (nothing: wait) or -1. */
static int fill(sse_conn *s)
{
    int p = fill_progress(s);
    if (p < 0)
        return -1;
    int rc = fill_hub(s);
    if (rc == 2)
        rc = fill_store(s);
    if (rc < 0)
        return -1;
    return rc > 0 || p > 0 ? 1 : 0;
}

/* ---- the reader ------------------------------------------------------------------ */

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    (void)pos;
    sse_conn *s = cls;
    for (;;) {
        if (s->off < s->len) {
            size_t n = s->len - s->off;
            if (n > max)
                n = max;
            memcpy(out, s->buf + s->off, n);
            s->off += n;
            return (ssize_t)n;
        }
        s->off = s->len = 0;
        if (s->done || atomic_load(&s->srv->stopping))
            return MHD_CONTENT_READER_END_OF_STREAM;
        int rc = fill(s);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc > 0)
            continue;

        /* Nothing to send: a heartbeat if one is due, else suspend. */
        pthread_mutex_lock(&s->mu);
        if (s->pending) {
            s->pending = false;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        if (s->ping_due) {
            s->ping_due = false;
            pthread_mutex_unlock(&s->mu);
            if (append_text(s, ": heartbeat\n\n") != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (atomic_load(&s->srv->stopping)) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        s->suspended = true;
        MHD_suspend_connection(s->conn);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
}

/* Marks s to look again; returns true when the caller must resume its
 * connection (after unlocking everything). */
static bool mark_wake(sse_conn *s, bool ping)
{
    bool resume = false;
    pthread_mutex_lock(&s->mu);
    if (ping)
        s->ping_due = true;
    if (s->suspended) {
        s->suspended = false;
        resume = true;
    } else {
        s->pending = true;
    }
    pthread_mutex_unlock(&s->mu);
    return resume;
}

/* The hub's wake callback (publisher's thread, no hub lock held). */
static void on_hub_wake(void *arg)
{
    sse_conn *s = arg;
    if (mark_wake(s, false))
        MHD_resume_connection(s->conn);
}

static void registry_remove(sse_conn *s)
{
    server *srv = s->srv;
    pthread_mutex_lock(&srv->sse_mu);
    if (s->prev)
        s->prev->next = s->next;
    else if (srv->sse_list == s)
        srv->sse_list = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    pthread_mutex_unlock(&srv->sse_mu);
}

static void sse_conn_free(sse_conn *s)
{
    if (!s)
        return;
    if (s->sub)
        hub_unsubscribe(s->srv->hub, s->sub);
    pthread_mutex_destroy(&s->mu);
    free(s->buf);
    free(s);
}

/* The response's free callback. */
static void sse_release(void *cls)
{
    sse_conn *s = cls;
    registry_remove(s);
    sse_conn_free(s);
}

/* ---- the handler ------------------------------------------------------------------ */

int sse_handle(request *r)
{
    server *srv = r->srv;
    enum MHD_Result answered;
    if (!lookup_job(r, r->id, NULL, &answered))
        return answered;

    uint64_t last = 0;
    const char *lei = http_header(r, MHD_HTTP_HEADER_LAST_EVENT_ID);
    if (!lei)
        lei = http_arg(r, "last_event_id");
    if (lei && *lei) {
        int64_t v;
        if (!http_parse_i64(lei, 0, INT64_MAX, &v))
            return http_error(r, MHD_HTTP_BAD_REQUEST, "invalid_field",
                              "Last-Event-ID must be a non-negative integer, not \"%.40s\"", lei);
        last = (uint64_t)v;
    }

    /* An id past the job's newest is not one of this job's (another data
     * directory's, or made up): the client gets the whole stream. */
    uint64_t newest = 0;
    if (last > 0 && store_event_last(srv->st, r->id, &newest) == 0 && last > newest)
        last = 0;

    sse_conn *s = calloc(1, sizeof *s);
    if (!s)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    s->srv = srv;
    s->conn = r->conn;
    s->job_id = r->id;
    s->last_id = last;
    pthread_mutex_init(&s->mu, NULL);
    /* A first comment, so the headers go out at once even when the job is
     * still queued (MHD sends them with the first body bytes). */
    char hello[64];
    snprintf(hello, sizeof hello, ": events of job %lld\n\n", (long long)r->id);
    if (append_text(s, hello) != 0) {
        sse_conn_free(s);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    }
    s->sub = hub_subscribe(srv->hub, r->id, on_hub_wake, s);
    if (!s->sub) {
        sse_conn_free(s);
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK,
                                                                  sse_read, s, sse_release);
    if (!resp) {
        sse_conn_free(s);
        return MHD_NO;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    int sndbuf = SSE_SNDBUF;
    if (ci && setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf) != 0)
        fprintf(stderr, "kiln: sse: cannot set the send buffer of a stream: %s\n", strerror(errno));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");

    pthread_mutex_lock(&srv->sse_mu);
    bool stopping = atomic_load(&srv->stopping);
    if (!stopping) {
        s->next = srv->sse_list;
        if (s->next)
            s->next->prev = s;
        srv->sse_list = s;
    }
    pthread_mutex_unlock(&srv->sse_mu);
    if (stopping) {
        MHD_destroy_response(resp);         /* frees s through sse_release */
        return http_error(r, MHD_HTTP_SERVICE_UNAVAILABLE, "shutting_down",
                          "the server is shutting down");
    }
    return http_queue(r, MHD_HTTP_OK, resp);
}

/* ---- heartbeat and shutdown -------------------------------------------------------- */

/* Wakes every connection (ping: with a heartbeat due). Marks them under the
 * registry lock and resumes the suspended ones after releasing it. */
static void wake_all(server *srv, bool ping)
{
    pthread_mutex_lock(&srv->sse_mu);
    size_t count = 0;
    for (sse_conn *s = srv->sse_list; s; s = s->next)
        count++;
    struct MHD_Connection **todo = count ? malloc(count * sizeof *todo) : NULL;
    size_t n = 0;
    for (sse_conn *s = srv->sse_list; s; s = s->next) {
        if (!todo) {
            /* Out of memory: mark only; no resume (a later round retries). */
            pthread_mutex_lock(&s->mu);
            if (ping)
                s->ping_due = true;
            s->pending = true;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        if (mark_wake(s, ping))
            todo[n++] = s->conn;
    }
    pthread_mutex_unlock(&srv->sse_mu);
    for (size_t i = 0; i < n; i++)
        MHD_resume_connection(todo[i]);
    free(todo);
}

static void *ping_main(void *arg)
{
    server *srv = arg;
    pthread_mutex_lock(&srv->sse_mu);
    while (!atomic_load(&srv->stopping)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)srv->limits.sse_heartbeat_s;
        while (!atomic_load(&srv->stopping)) {
            if (pthread_cond_timedwait(&srv->ping_cond, &srv->sse_mu, &until) == ETIMEDOUT)
                break;
        }
        if (atomic_load(&srv->stopping))
            break;
        pthread_mutex_unlock(&srv->sse_mu);
        wake_all(srv, true);
        pthread_mutex_lock(&srv->sse_mu);
    }
    pthread_mutex_unlock(&srv->sse_mu);
    return NULL;
}

int sse_start(server *srv)
{
    if (pthread_create(&srv->ping_thread, NULL, ping_main, srv) != 0)
        return -1;
    srv->ping_started = true;
    return 0;
}

void sse_stop(server *srv)
{
    atomic_store(&srv->stopping, true);
    if (srv->ping_started) {
        pthread_mutex_lock(&srv->sse_mu);
        pthread_cond_broadcast(&srv->ping_cond);
        pthread_mutex_unlock(&srv->sse_mu);
        pthread_join(srv->ping_thread, NULL);
        srv->ping_started = false;
    }
    wake_all(srv, false);
}

size_t sse_client_count(server *srv)
{
    size_t n = 0;
    pthread_mutex_lock(&srv->sse_mu);
    for (const sse_conn *s = srv->sse_list; s; s = s->next)
        n++;
    pthread_mutex_unlock(&srv->sse_mu);
    return n;
}
