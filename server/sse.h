/* server/sse.h: GET /api/v1/jobs/{id}/events, Server-Sent Events.
 *
 * Each connection streams its job's hub events after the last id it has sent
 * (from Last-Event-ID when the client reconnects), formatted as
 *   id: N\nevent: TYPE\ndata: JSON\n\n
 * and ends after the final status. A job whose stream is not in the hub
 * (finished before this server started, or dropped from the hub) is replayed
 * from the store: its metrics as metric events with ids 1..n, then its status
 * as event n+1, then the end. A queued job waits until the scheduler opens its
 * stream. A comment `: ping` goes out every SSE_PING_SECONDS so a vanished
 * client is noticed.
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

#define SSE_PING_SECONDS 15

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
