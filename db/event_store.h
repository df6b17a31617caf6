/* db/event_store.h: a job's stored event stream (the SSE ids; server/sse.c).
 *
 * Every event that carries an SSE id is a row here before any reader sees it
 * (jobs/hub.c appends, then publishes): metrics, statuses and the worker's log
 * lines. Ids (seq) are per job, from 1, in the order of appends, and never
 * reused: the counter is jobs.event_seq, which only grows, even when a resumed
 * job's later events are trimmed. So a client's Last-Event-ID means the same
 * thing before and after a server restart, and "every event with a larger id"
 * is exactly what it has not seen. Progress is not here: it is a snapshot (the
 * latest is in the job's row). Thread-safe (the store's lock).
 */
#ifndef KILN_DB_EVENT_STORE_H
#define KILN_DB_EVENT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "db/store.h"

#define STORE_EVENT_TYPE 16        /* "metric", "status", "log" and a NUL fit */

typedef struct store_event {
    uint64_t id;
    char type[STORE_EVENT_TYPE];
    char *data;                    /* JSON text, owned (store_event_clear) */
} store_event;

/* Appends an event to the job's stream in one transaction; step is a metric's
 * step (-1: none). Returns 0 with *id, STORE_NOT_FOUND when the job does not
 * exist, -1 on an error (nothing stored). */
int store_event_append(store *s, int64_t job_id, const char *type, int64_t step, const char *data,
                       uint64_t *id);
/* Up to max events with id > after, oldest first, into out (each to be
 * cleared). 0 with *n, or -1. */
int store_event_page(store *s, int64_t job_id, uint64_t after, store_event *out, size_t max,
                     size_t *n);
/* Before a job runs again (resume): its metric events with step > after_step
 * (-1: all) and its earlier statuses go, as its metrics do, so that a reader
 * from the start gets the job as it is; log lines stay (the log file keeps
 * them). The counter is untouched. 0 or -1. */
int store_event_trim(store *s, int64_t job_id, int64_t after_step);
/* The job's newest id (jobs.event_seq; 0 before its first event): 0 with *id,
 * STORE_NOT_FOUND, or -1. */
int store_event_last(store *s, int64_t job_id, uint64_t *id);
void store_event_clear(store_event *e);

#endif
