/* jobs/hub.h: live event streams of running jobs, from the supervisor to SSE.
 *
 * The supervisor publishes each event a worker reports (metric, progress,
 * status, log) to the job's stream; readers (SSE connections) pull events after
 * the last id they have. Ids are per job, start at 1 and increase by one, so a
 * reconnecting client's Last-Event-ID says exactly what it missed. With a store
 * attached (hub_set_store, as kiln serve does) each event is stored first
 * (db/event_store.h) and takes the store's id, so ids go on across server
 * restarts and a reader the ring cannot serve reads the store. A stream
 * keeps the job's last HUB_RING events; a reader that falls further behind, or
 * (with a store) one from before the stream's current run, is told (*gap) and
 * should read the store. After hub_finish the stream ends once a reader has
 * taken every event. Progress is not an event with an id: a job's latest
 * progress is a snapshot (hub_set_progress, hub_progress). Thread-safe.
 *
 * Wake-ups: a subscriber's callback runs on every publish and finish of its
 * job, on the publisher's thread, without the hub's lock held; it must be short
 * (an SSE connection resumes itself) and must not call back into the hub.
 */
#ifndef KILN_JOBS_HUB_H
#define KILN_JOBS_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/store.h"

#define HUB_RING 4096

typedef struct hub hub;

typedef struct hub_event {
    uint64_t id;
    char type[16];       /* "metric", "progress", "status", "log" */
    char *data;          /* JSON text, owned by the event (hub_event_clear) */
} hub_event;

hub *hub_create(void);
void hub_destroy(hub *h);
/* Makes the store the source of ids: each publish appends to it first (an
 * event that cannot be stored is dropped, and logged), and a stream opened
 * continues from the job's stored ids. Call before the first hub_open. */
void hub_set_store(hub *h, store *st);

/* Starts (or restarts) a job's stream; events continue from the last id. A
 * finished stream restarted (a resumed job) serves only the events published
 * after this call: readers do not see the earlier run's end again. */
void hub_open(hub *h, int64_t job_id);
/* Appends an event; returns its id (0 if the job has no open stream, or it
 * could not be stored). hub_publish_step: a metric, with its step (kept with
 * the stored event for trimming on resume; -1: none). */
uint64_t hub_publish(hub *h, int64_t job_id, const char *type, const char *json);
uint64_t hub_publish_step(hub *h, int64_t job_id, const char *type, int64_t step, const char *json);
/* Replaces the job's progress snapshot (not stored, no id) and wakes readers.
 * Ignored without an open stream. */
void hub_set_progress(hub *h, int64_t job_id, const char *json);
/* When the job's snapshot is newer than version *seen: a copy in *json (the
 * caller frees it), *seen updated, returns true. */
bool hub_progress(hub *h, int64_t job_id, uint64_t *seen, char **json);
/* Marks the stream ended: no more events will come. */
void hub_finish(hub *h, int64_t job_id);

/* Copies up to max events with id > after into out. Returns the count.
 * *live is false when the job has no stream (never opened, e.g. after a server
 * restart); *ended is true when the stream is finished and every event after
 * `after` has been returned; *gap is true when events after `after` have left
 * the ring. */
size_t hub_read(hub *h, int64_t job_id, uint64_t after, hub_event *out, size_t max,
                bool *live, bool *ended, bool *gap);
void hub_event_clear(hub_event *e);

typedef void (*hub_wake_fn)(void *arg);
/* Registers fn(arg) for the job's publishes; returns a handle for unsubscribe. */
void *hub_subscribe(hub *h, int64_t job_id, hub_wake_fn fn, void *arg);
/* After this returns, fn will not be called again for this handle. */
void hub_unsubscribe(hub *h, void *handle);

#endif
