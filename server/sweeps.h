/* server/sweeps.h: hyper-parameter sweeps: the REST routes and the controller
 * that drives their trials.
 *
 * The controller is a thread that looks at every running sweep once a
 * second (SWEEPS_TICK_MS), and at once when woken (a sweep created or
 * cancelled). A tick, not a hook in the scheduler's job-finished path: the
 * scheduler stays unaware of sweeps, and all the controller knows is in the
 * store (sweeps, sweep_trials, the trials' jobs), so a tick after a restart
 * picks every open sweep up where it was; a second's delay between a trial's
 * end and the next decision is small beside a trial's minutes.
 *
 * Each drive of a sweep (under one mutex, so a tick and a request never
 * decide together): trials whose jobs ended are recorded (done: the metric's
 * value at the job's last step; failed; cancelled); then, while a slot is free
 * (running trials < parallel), jobs/sweep.h sweep_next says what to do: start
 * a new trial (its job made by jobspec_create from the base and its values,
 * owned by the sweep's owner), promote a waiting asha trial (its done job
 * gets its next rung's epochs in job.json and the store and goes back to the
 * queue; the worker resumes from the rung's checkpoint), or end the sweep
 * (asha trials never promoted are "stopped" by the sweep, their jobs stay done
 * at their rung). The best trial (by its latest metric) is recorded as it
 * changes. A trial that fails does not stop the sweep.
 */
#ifndef KILN_SERVER_SWEEPS_H
#define KILN_SERVER_SWEEPS_H

#include <stddef.h>
#include "server/http.h"

#define SWEEPS_TICK_MS 1000

struct server;
typedef struct sweeper sweeper;

/* Starts the controller thread; NULL with err on failure. */
sweeper *sweeper_start(struct server *srv, char *err, size_t errlen);
/* Stops it (waits for a drive in progress). NULL is a no-op. */
void sweeper_stop(sweeper *w);

/* The routes. */
int sweeps_create(request *r);    /* POST /api/v1/sweeps */
int sweeps_list(request *r);      /* GET /api/v1/sweeps */
int sweeps_get(request *r);       /* GET /api/v1/sweeps/:id */
int sweeps_cancel(request *r);    /* POST /api/v1/sweeps/:id/cancel */
int sweeps_delete(request *r);    /* DELETE /api/v1/sweeps/:id */

#endif
