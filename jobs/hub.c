/* jobs/hub.c: per-job event rings and subscriber wake-ups (contract in hub.h).
 *
 * Guarantees:
 * - A stream's ids start at 1 and increase by one per event, across restarts
 *   of the stream (hub_open on an existing stream keeps counting).
 * - A ring holds the last HUB_RING events; older events are dropped and a
 *   reader asking for them is told (*gap).
 * - Wake callbacks run on the publisher's thread with no hub lock held. A
 *   subscription being called is pinned (a count under the lock);
 *   hub_unsubscribe marks it dead and waits until no call of it is running, so
 *   after it returns the callback is never called again and arg may be freed.
 *   hub_unsubscribe must therefore not be called from a callback, nor while
 *   holding a lock that a callback takes.
 * - A finished stream opened again (a job resumed: POST .../resume) goes on
 *   counting ids, but serves only the new run's events: a reader from id 0
 *   starts after the earlier run's last event (run_start), so it does not
 *   end at that run's final status.
 * - With a store (hub_set_store), publish appends to it under the hub's
 *   lock, so the ring's order is the store's; a new stream starts at the
 *   job's stored newest id (a reader from before that is told *gap), and a
 *   reopened one marks a reader from before the new run *gap too (the store
 *   has what is left of the earlier run: its metrics up to the checkpoint).
 *   An id that does not follow the ring's newest (an append of the same job
 *   from elsewhere) restarts the ring at it.
 * - Finished streams are kept so late readers still get them, up to
 *   HUB_KEEP_ENDED of them; beyond that the longest-finished is dropped (its
 *   readers then see live=false and replay from the store).
 */
#include "jobs/hub.h"

#include "db/event_store.h"      /* store_event_append, store_event_last */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HUB_KEEP_ENDED 32

typedef struct stream {
    int64_t job_id;
    uint64_t last_id;          /* id of the newest event, 0 before the first */
    uint64_t run_start;        /* ids up to this one are an earlier, finished run's */
    size_t count;              /* events in the ring: ids last_id-count+1 .. last_id */
    hub_event *ring;           /* HUB_RING slots, allocated at the first event (a queued
                                  job's open stream costs little); id k is at (k-1) % HUB_RING */
    char *progress;            /* the latest progress snapshot (JSON), or NULL */
    uint64_t progress_ver;     /* bumped by each snapshot */
    bool open;                 /* accepting events */
    bool ended;                /* hub_finish was called (and no hub_open since) */
    uint64_t ended_seq;        /* order of finishing, for dropping the oldest */
    struct stream *next;
} stream;

typedef struct sub {
    int64_t job_id;
    hub_wake_fn fn;
    void *arg;
    int calling;               /* callbacks of this sub running now */
    bool dead;                 /* unsubscribing: call no more */
    struct sub *next;
} sub;

struct hub {
    pthread_mutex_t mu;
    pthread_cond_t idle;       /* a sub's calling count fell to 0 */
    stream *streams;
    sub *subs;
    uint64_t finish_seq;
    store *st;                 /* the source of ids, or NULL (ids count here) */
};

hub *hub_create(void)
{
    hub *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->idle, NULL);
    return h;
}

static void stream_free(stream *st)
{
    if (!st)
        return;
    if (st->ring)
        for (size_t i = 0; i < HUB_RING; i++)
            free(st->ring[i].data);
    free(st->ring);
    free(st->progress);
    free(st);
}

void hub_destroy(hub *h)
{
    if (!h)
        return;
    for (stream *st = h->streams, *next; st; st = next) {
        next = st->next;
        stream_free(st);
    }
    for (sub *s = h->subs, *next; s; s = next) {
        next = s->next;
        free(s);
    }
    pthread_cond_destroy(&h->idle);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void hub_set_store(hub *h, store *st)
{
    h->st = st;
}

static stream *find_stream(hub *h, int64_t job_id)
{
    for (stream *st = h->streams; st; st = st->next)
        if (st->job_id == job_id)
            return st;
    return NULL;
}

/* Drops the longest-finished streams beyond HUB_KEEP_ENDED. Lock held. */
static void trim_ended(hub *h)
{
    for (;;) {
        size_t n = 0;
        stream **oldest = NULL;
        for (stream **pp = &h->streams; *pp; pp = &(*pp)->next) {
            if (!(*pp)->ended)
                continue;
            n++;
            if (!oldest || (*pp)->ended_seq < (*oldest)->ended_seq)
                oldest = pp;
        }
        if (n <= HUB_KEEP_ENDED || !oldest)
            return;
        stream *victim = *oldest;
        *oldest = victim->next;
        stream_free(victim);
    }
}

void hub_open(hub *h, int64_t job_id)
{
    pthread_mutex_lock(&h->mu);
    stream *st = find_stream(h, job_id);
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st) {
            /* Without a stream, readers replay from the store. */
            fprintf(stderr, "kiln: hub: out of memory opening the stream of job %lld\n",
                    (long long)job_id);
            pthread_mutex_unlock(&h->mu);
            return;
        }
        st->job_id = job_id;
        st->next = h->streams;
        h->streams = st;
        uint64_t stored = 0;
        if (h->st && store_event_last(h->st, job_id, &stored) == 0)
            st->last_id = st->run_start = stored;   /* earlier events are the store's */
    }
    if (st->ended)
        st->run_start = st->last_id;
    st->open = true;
    st->ended = false;
    pthread_mutex_unlock(&h->mu);
}

/* Calls every live subscriber of job_id, without the lock held during each
 * call. Each called sub is pinned (calling > 0) so that it stays in the list
 * and its next pointer can be read after the call. Lock held on entry and exit. */
static void wake_locked(hub *h, int64_t job_id)
{
    sub *s = h->subs;
    while (s) {
        if (s->job_id != job_id || s->dead) {
            s = s->next;
            continue;
        }
        s->calling++;
        hub_wake_fn fn = s->fn;
        void *arg = s->arg;
        pthread_mutex_unlock(&h->mu);
        fn(arg);
        pthread_mutex_lock(&h->mu);
        sub *next = s->next;
        if (--s->calling == 0 && s->dead)
            pthread_cond_broadcast(&h->idle);
        s = next;
    }
}

/* The id of the next event of st: the store's (after appending it there), or
 * the stream's next. 0 when it could not be stored. Lock held. */
static uint64_t next_id(hub *h, stream *st, const char *type, int64_t step, const char *json)
{
    if (!h->st)
        return st->last_id + 1;
    uint64_t id = 0;
    if (store_event_append(h->st, st->job_id, type, step, json, &id) != 0) {
        fprintf(stderr, "kiln: hub: job %lld: could not store a %s event; dropped\n",
                (long long)st->job_id, type);
        return 0;
    }
    return id;
}

uint64_t hub_publish(hub *h, int64_t job_id, const char *type, const char *json)
{
    return hub_publish_step(h, job_id, type, -1, json);
}

uint64_t hub_publish_step(hub *h, int64_t job_id, const char *type, int64_t step, const char *json)
{
    char *copy = strdup(json ? json : "null");
    if (!copy)
        return 0;
    pthread_mutex_lock(&h->mu);
    stream *st = find_stream(h, job_id);
    if (!st || !st->open) {
        pthread_mutex_unlock(&h->mu);
        free(copy);
        return 0;
    }
    if (!st->ring && !(st->ring = calloc(HUB_RING, sizeof *st->ring))) {
        pthread_mutex_unlock(&h->mu);
        free(copy);
        return 0;
    }
    uint64_t id = next_id(h, st, type, step, copy);
    if (id == 0) {
        pthread_mutex_unlock(&h->mu);
        free(copy);
        return 0;
    }
    if (id != st->last_id + 1)
        st->count = 0;                 /* not the ring's next: it starts again here */
    st->last_id = id;
    hub_event *slot = &st->ring[(id - 1) % HUB_RING];
    free(slot->data);
    slot->id = id;
    snprintf(slot->type, sizeof slot->type, "%s", type);
    slot->data = copy;
    if (st->count < HUB_RING)
        st->count++;
    wake_locked(h, job_id);
    pthread_mutex_unlock(&h->mu);
    return id;
}

void hub_set_progress(hub *h, int64_t job_id, const char *json)
{
    char *copy = strdup(json ? json : "null");
    if (!copy)
        return;
    pthread_mutex_lock(&h->mu);
    stream *st = find_stream(h, job_id);
    if (!st || !st->open) {
        pthread_mutex_unlock(&h->mu);
        free(copy);
        return;
    }
    free(st->progress);
    st->progress = copy;
    st->progress_ver++;
    wake_locked(h, job_id);
    pthread_mutex_unlock(&h->mu);
}

bool hub_progress(hub *h, int64_t job_id, uint64_t *seen, char **json)
{
    bool newer = false;
    *json = NULL;
    pthread_mutex_lock(&h->mu);
    stream *st = find_stream(h, job_id);
    if (st && st->progress && st->progress_ver > *seen && (*json = strdup(st->progress))) {
        *seen = st->progress_ver;
        newer = true;
    }
    pthread_mutex_unlock(&h->mu);
    return newer;
}

void hub_finish(hub *h, int64_t job_id)
{
    pthread_mutex_lock(&h->mu);
    stream *st = find_stream(h, job_id);
    if (!st || st->ended) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    st->open = false;
    st->ended = true;
    st->ended_seq = ++h->finish_seq;
    wake_locked(h, job_id);
    trim_ended(h);
    pthread_mutex_unlock(&h->mu);
}

size_t hub_read(hub *h, int64_t job_id, uint64_t after, hub_event *out, size_t max,
                bool *live, bool *ended, bool *gap)
{
    size_t n = 0;
    *live = false;
    *ended = false;
    *gap = false;
    pthread_mutex_lock(&h->mu);
    stream *st = find_stream(h, job_id);
    if (!st)
        goto out;
    *live = true;
    uint64_t first = st->last_id - st->count + 1;     /* oldest id in the ring */
    uint64_t from = after + 1;
    if (h->st && after < st->run_start)
        *gap = true;                   /* from before this run: the store has what is left */
    if (from <= st->run_start)
        from = st->run_start + 1;      /* the earlier run's events are not this run's */
    if ((st->count > 0 || h->st) && from < first) {
        *gap = true;           /* what the reader missed is gone: it gets the oldest kept */
        from = first;
    }
    for (uint64_t id = from; id <= st->last_id && n < max; id++) {
        const hub_event *ev = &st->ring[(id - 1) % HUB_RING];
        char *data = strdup(ev->data ? ev->data : "null");
        if (!data)
            break;
        out[n].id = ev->id;
        memcpy(out[n].type, ev->type, sizeof out[n].type);
        out[n].data = data;
        n++;
    }
    uint64_t seen = n ? out[n - 1].id : after;
    *ended = st->ended && seen >= st->last_id;
out:
    pthread_mutex_unlock(&h->mu);
    return n;
}

void hub_event_clear(hub_event *e)
{
    if (!e)
        return;
    free(e->data);
    e->data = NULL;
}

void *hub_subscribe(hub *h, int64_t job_id, hub_wake_fn fn, void *arg)
{
    sub *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->job_id = job_id;
    s->fn = fn;
    s->arg = arg;
    pthread_mutex_lock(&h->mu);
    s->next = h->subs;
    h->subs = s;
    pthread_mutex_unlock(&h->mu);
    return s;
}

void hub_unsubscribe(hub *h, void *handle)
{
    sub *s = handle;
    if (!s)
        return;
    pthread_mutex_lock(&h->mu);
    s->dead = true;
    while (s->calling > 0)
        pthread_cond_wait(&h->idle, &h->mu);
    for (sub **pp = &h->subs; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&h->mu);
    free(s);
}
