/* server/sse.h: GET /api/v1/jobs/{id}/events, Server-Sent Events.
 *
 * Each connection streams its job's events after the last id it has sent
 * (from Last-Event-ID, or ?last_event_id=, when the client reconnects):
 *   id: N\nevent: TYPE\ndata: JSON\n\n
 * Ids are the job's one stored sequence (db/event_store.h): metric, status and
 * log events ({"line": "..."}, the worker's log lines as GET .../log has them)
 * have one, the same live and after a restart, so a reconnect resumes exactly
 * where the client left off, whether the hub still has the stream or not.
 * progress events have none (a snapshot: the newest is sent first, and then
 * each new one). The stream ends after the job's final status (a client that
 * comes back after it gets nothing more and the end). A queued job waits until
 * the scheduler opens its stream. A comment `: heartbeat` goes out every
 * sse-heartbeat seconds (server/limits.c, 15 by default) on an idle stream, so
 * a vanished client's connection fails its write and is closed.
 *
 * Suspend and resume (libmicrohttpd 0.9.75, whose header says
 * MHD_suspend_connection may be called from the access handler or the content
 * reader callback): the reader callback never returns 0 without suspending.
 * With nothing to send it marks the connection suspended and suspends it, under
 * the connection's mutex; the hub's wake callback and the heartbeat thread
 * resume it only when that mark is set (clearing it), and otherwise set a
 * pending flag that the reader checks before suspending, which closes the race
 * between "nothing to send" and a publish.
 */
#ifndef KILN_SERVER_SSE_H
#define KILN_SERVER_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "server/http.h"

/* The route handler (GET /api/v1/jobs/:id/events). */
int sse_handle(request *r);

/* Starts the heartbeat thread. Returns 0 or -1. */
int sse_start(server *srv);
/* Shutdown: stops the heartbeat thread and resumes every suspended SSE
 * connection so that each ends its stream; call after srv->stopping is set
 * and before MHD_stop_daemon. */
void sse_stop(server *srv);

/* How many SSE clients are connected now (GET /metrics). */
size_t sse_client_count(server *srv);

/* Formats one event into buf (cap bytes). A data text holding newlines
 * becomes several data: lines. Returns the length the event needs (without
 * a NUL); when that is >= cap nothing useful was written (like snprintf). */
size_t sse_format(char *buf, size_t cap, uint64_t id, const char *type, const char *data);

#endif
