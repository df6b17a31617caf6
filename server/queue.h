/* server/queue.h: GET /api/v1/queue (issue 17), the queue as the scheduler
 * sees it.
 *
 * {"running": [item...], "queued": [item...], "priority_min": -100,
 *  "priority_max": 100}
 * An item: {"kind": "job"|"evaluation", "id", "job_id" (an evaluation's job),
 * "name", "owner_id", "hidden", "status", "priority", "created_at",
 * "started_at", "assigned_devices" (running: ["cpu"] or ["cuda:0", ...]),
 * "position" (queued: 1 is next), "waiting_for" (queued: what for, in words,
 * from the scheduler's own rule: sched_queue_view), "can_change_priority"}.
 *
 * Who sees what: every caller sees every item, so that a user sees why
 * their job waits; an item the caller may not read (another user's, see
 * server/lookup.h) is anonymised: "hidden": true, id, job_id, name,
 * owner_id, created_at and started_at null; its kind, priority, position,
 * devices and reason stay. can_change_priority: a queued job the caller
 * owns, or any queued job for an admin (and everyone on a server without
 * users).
 */
#ifndef KILN_SERVER_QUEUE_H
#define KILN_SERVER_QUEUE_H

#include "server/http.h"     /* request */

/* GET /api/v1/queue. */
int queue_handle(request *r);

#endif
