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
 * Replay from the store (a job not in the hub): the stored metrics are read
 * SSE_REPLAY_PAGE at a time by row id (store_metric_page), the next page only
 * when the client has drained the last one, and at most SSE_FILL_BYTES of
 * events are formatted per fill. So a connection holds at most one page and
 * one fill whatever the job's size, a client that does not read costs no
 * more than that, and between pages it holds no lock and no statement of the
 * store. The replay is bounded at start by the job's newest metric row
 * (upto_row), so it ends with the metrics the job had when it began; event
 * ids are the metrics' positions 1..n and n+1 for the status, as before.
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
#include "server/render.h"     /* render_metric, render_status */

#define SSE_BLOCK 4096           /* the response buffer MHD allocates per stream */
#define SSE_HUB_BATCH 64         /* events taken from the hub per fill */
#define SSE_REPLAY_PAGE 256      /* stored metrics read from the store at a time */
#define SSE_FILL_BYTES 8192      /* a replay fill formats events up to about this much */
#define SSE_SNDBUF (128 * 1024)  /* an event stream socket's send buffer (the kernel doubles it) */

typedef enum sse_mode { SSE_LIVE, SSE_REPLAY } sse_mode;

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

    uint64_t resumed_from;       /* the client's Last-Event-ID (0: none) */
    bool checked_resume;         /* resumed_from was checked against the stream */
    sse_mode mode;
    bool accept_gap;             /* a fresh reader of a running job's gapped ring */
    bool done;                   /* end the stream once buf has drained */
    char *buf;
    size_t len, off, cap;

    /* Replay of a job that is not live: a page of its stored metrics. */
    store_metric *page;          /* SSE_REPLAY_PAGE slots, allocated by start_replay */
    size_t npage, page_next;     /* metrics in the page, the next to send */
    int64_t after_row;           /* row id of the last metric read from the store */
    int64_t upto_row;            /* the job's newest metric row when the replay began */
    uint64_t next_index;         /* the event id (position, from 1) of page[page_next] */
    bool store_done;             /* every metric up to upto_row has been read */
    char *final_status, *final_error;

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
    PUT("id: %" PRIu64 "\nevent: %s\n", id, type);
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

static int append_json(sse_conn *s, uint64_t id, const char *type, cJSON *obj)
{
    char *text = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!text)
        return -1;
    int rc = append_event(s, id, type, text);
    free(text);
    return rc;
}

/* ---- filling the buffer ---------------------------------------------------------- */

static bool final_status(const char *st)
{
    return st && (!strcmp(st, "done") || !strcmp(st, "failed") || !strcmp(st, "cancelled"));
}

/* Positions the replay after the client's Last-Event-ID: event k (k <= n)
 * is the k-th stored metric, n + 1 the status. An id past n + 1 belongs to
 * a live stream of this job, not to this replay: the client gets all of it.
 * Returns 0 or -1. */
static int replay_seek(sse_conn *s)
{
    s->after_row = 0;
    s->next_index = 1;
    if (s->last_id == 0)
        return 0;
    int64_t row = 0;
    int rc = store_metric_row_at(s->srv->st, s->job_id, (int64_t)s->last_id, s->upto_row, &row);
    if (rc == 0) {                          /* the client has metrics 1..last_id */
        s->after_row = row;
        s->next_index = s->last_id + 1;
        return 0;
    }
    if (rc != STORE_NOT_FOUND)
        return -1;
    int64_t n = 0;                          /* fewer metrics than last_id */
    if (store_metric_count(s->srv->st, s->job_id, s->upto_row, &n) != 0)
        return -1;
    if (s->last_id > (uint64_t)n + 1)
        s->last_id = 0;                     /* an id of a live stream, past this replay: all of it */
    else
        s->after_row = s->upto_row;         /* it has every metric (and maybe the status) */
    s->next_index = s->last_id == 0 ? 1 : (uint64_t)n + 1;
    return 0;
}

/* Starts the replay of a finished job: its status, where its metrics end, and
 * where this client is in them. Returns 0, or -1. */
static int start_replay(sse_conn *s, const store_job *j)
{
    s->final_status = strdup(j->status);
    s->final_error = j->error ? strdup(j->error) : NULL;
    s->page = malloc(SSE_REPLAY_PAGE * sizeof *s->page);
    if (!s->final_status || (j->error && !s->final_error) || !s->page)
        return -1;
    if (store_metric_last_row(s->srv->st, s->job_id, &s->upto_row) != 0 || replay_seek(s) != 0)
        return -1;
    s->mode = SSE_REPLAY;
    s->npage = s->page_next = 0;
    s->store_done = s->after_row >= s->upto_row;
    return 0;
}

/* Reads the next page of stored metrics when the last one is spent. Returns
 * 0 or -1. */
static int next_page(sse_conn *s)
{
    if (s->page_next < s->npage || s->store_done)
        return 0;
    size_t n = 0;
    int64_t last = s->after_row;
    if (store_metric_page(s->srv->st, s->job_id, s->after_row, s->upto_row, s->page,
                          SSE_REPLAY_PAGE, &n, &last) != 0)
        return -1;
    s->npage = n;
    s->page_next = 0;
    s->after_row = last;
    if (n < SSE_REPLAY_PAGE || last >= s->upto_row)
        s->store_done = true;
    return 0;
}

/* Replay: the next stored metrics (about SSE_FILL_BYTES of them), then the
 * status. Returns 1 when something was appended or the stream is done, -1 on
 * error. */
static int fill_replay(sse_conn *s)
{
    while (s->len < SSE_FILL_BYTES) {
        if (next_page(s) != 0)
            return -1;
        if (s->page_next >= s->npage)
            break;                          /* no more metrics */
        uint64_t id = s->next_index++;
        if (append_json(s, id, "metric", render_metric(&s->page[s->page_next++])) != 0)
            return -1;
        s->last_id = id;
    }
    if (s->len > 0 && (s->page_next < s->npage || !s->store_done))
        return 1;
    uint64_t id = s->next_index;
    if (id > s->last_id) {
        if (append_json(s, id, "status", render_status(s->final_status, s->final_error)) != 0)
            return -1;
        s->last_id = id;
    }
    free(s->page);                          /* the replay needs no more of the store */
    s->page = NULL;
    s->npage = s->page_next = 0;
    s->done = true;
    return 1;
}

/* Live: events from the hub. Returns 1 when something was appended or the
 * stream is done, 0 when there is nothing yet (wait), -1 on error. */
static int fill_live(sse_conn *s)
{
    hub_event ev[SSE_HUB_BATCH];
    bool live, ended, gap;
    size_t n = hub_read(s->srv->hub, s->job_id, s->last_id, ev, SSE_HUB_BATCH, &live, &ended, &gap);
    if (live && n == 0 && !ended && s->resumed_from > 0 && !s->checked_resume) {
        /* A Last-Event-ID past the newest event: the client saw an earlier
         * stream of this job (before a server restart); it gets all of this one. */
        s->checked_resume = true;
        hub_event probe[1];
        bool l2, e2, g2;
        size_t k = hub_read(s->srv->hub, s->job_id, s->last_id - 1, probe, 1, &l2, &e2, &g2);
        for (size_t i = 0; i < k; i++)
            hub_event_clear(&probe[i]);
        if (k == 0) {
            s->last_id = 0;
            return 1;                       /* read again from the start */
        }
    }
    if (live && (!gap || s->last_id > 0 || s->accept_gap)) {
        int rc = 0;
        for (size_t i = 0; i < n; i++) {
            if (rc == 0 && append_event(s, ev[i].id, ev[i].type, ev[i].data) != 0)
                rc = -1;
            if (rc == 0)
                s->last_id = ev[i].id;
            hub_event_clear(&ev[i]);
        }
        if (rc != 0)
            return -1;
        if (ended)
            s->done = true;
        return n > 0 || ended ? 1 : 0;
    }
    for (size_t i = 0; i < n; i++)
        hub_event_clear(&ev[i]);

    /* Not in the hub, or a fresh reader of a stream whose start has left the
     * ring: the store says what the job is. */
    store_job j;
    int rc = store_job_get(s->srv->st, s->job_id, &j);
    if (rc == STORE_NOT_FOUND) {
        s->done = true;                     /* deleted meanwhile */
        return 1;
    }
    if (rc != 0)
        return -1;
    int ret = 0;
    if (final_status(j.status)) {
        ret = start_replay(s, &j) == 0 ? fill_replay(s) : -1;   /* complete from the store */
    } else if (live) {
        s->accept_gap = true;               /* running: go on from the oldest event kept */
        ret = 1;
    }
    /* else queued (or running without a stream here): wait for the scheduler */
    store_job_clear(&j);
    return ret;
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
        int rc = s->mode == SSE_REPLAY ? fill_replay(s) : fill_live(s);
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
            if (append_text(s, ": ping\n\n") != 0)
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
    free(s->page);
    free(s->final_status);
    free(s->final_error);
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

    sse_conn *s = calloc(1, sizeof *s);
    if (!s)
        return http_error(r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", "out of memory");
    s->srv = srv;
    s->conn = r->conn;
    s->job_id = r->id;
    s->last_id = last;
    s->resumed_from = last;
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
        until.tv_sec += SSE_PING_SECONDS;
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
