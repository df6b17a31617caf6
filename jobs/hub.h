/* jobs/hub.h: live event streams of running jobs, from the supervisor to SSE.
 *
 * The supervisor publishes each event a worker reports (metric, progress,
 * status, log) to the job's stream; readers (SSE connections) pull events after
 * the last id they have. Ids are per job, start at 1 and increase by one, so a
 * reconnecting client's Last-Event-ID says exactly what it missed. A stream
 * keeps the job's last HUB_RING events; a reader that falls further behind is
 * told (*gap) and should replay from the store. After hub_finish the stream ends
 * once a reader has taken every event. Thread-safe.
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

#define HUB_RING 4096

typedef struct hub hub;

typedef struct hub_event {
    uint64_t id;
    char type[16];       /* "metric", "progress", "status", "log" */
    char *data;          /* JSON text, owned by the event (hub_event_clear) */
} hub_event;

hub *hub_create(void);
void hub_destroy(hub *h);

/* Starts (or restarts) a job's stream; events continue from the last id. A
 * finished stream restarted (a resumed job) serves only the events published
 * after this call: readers do not see the earlier run's end again. */
void hub_open(hub *h, int64_t job_id);
/* Appends an event; returns its id (0 if the job has no open stream). */
uint64_t hub_publish(hub *h, int64_t job_id, const char *type, const char *json);
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
