/* jobs/scheduler.h: runs queued jobs as `kiln worker` processes.
 *
 * Ordering: queued jobs start oldest first: CPU jobs at most max_cpu_jobs at a
 * time, GPU jobs when every GPU they need is free (a GPU runs one job at a
 * time; a waiting job keeps later ones off the GPUs it waits for).
 * Each job runs in its own process (crash isolation): the worker reports JSON
 * lines on its stdout (jobs/runner.h), its stderr goes to jobs/<id>/log. The
 * supervisor thread stores every metric, updates progress, and publishes to the
 * hub. When a worker exits, its last report, exit status or signal decides the
 * job's final status; an exit without a final report fails the job with the
 * last lines of its log as the reason.
 * Cancel: SIGTERM, then SIGKILL after a grace period.
 * At start, jobs left "running" by a previous server are requeued.
 *
 * Evaluations (jobs/evaluation.h) are work of the same queue: they start
 * oldest first together with jobs (store_queue_list), take a CPU slot or a
 * GPU as a job does, run as `kiln evaluate --eval-dir DIR` with the same
 * reports, cancel and supervision; one that ends done has its result.json
 * stored (store_eval_finish). At start, evaluations left "running" are
 * requeued and run again from their start.
 */
#ifndef KILN_JOBS_SCHEDULER_H
#define KILN_JOBS_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>
#include "db/store.h"
#include "jobs/hub.h"

typedef struct sched sched;

typedef struct sched_config {
    const char *data_dir;       /* jobs/<id>/ live here */
    const char *worker_exe;     /* path of the kiln binary (/proc/self/exe) */
    int max_cpu_jobs;           /* concurrent CPU jobs (default 1) */
    int kill_grace_ms;          /* SIGTERM to SIGKILL on cancel and stop (0: 10 s) */
    int gpus;                   /* GPUs to share out; 0: those engine_devices finds (tests
                                 * give a number, the fake worker needs none) */
} sched_config;

sched *sched_start(store *st, hub *h, const sched_config *cfg, char *err, size_t errlen);
/* A job was queued: look at the queue now. */
void sched_wake(sched *s);
/* sched_cancel's answer for a job that had already ended (distinct from
 * STORE_NOT_FOUND). */
#define SCHED_ALREADY_ENDED 2

/* Cancels a queued or running job. Returns 0, STORE_NOT_FOUND,
 * SCHED_ALREADY_ENDED, or -1 on a store error. */
int sched_cancel(sched *s, int64_t job_id);
/* The same for an evaluation. */
int sched_cancel_eval(sched *s, int64_t eval_id);
/* Which work runs on each GPU (the scheduler's own assignment): for GPU i <
 * n, kind_out[i] and id_out[i] (0: none) are what runs on it now. Returns how
 * many GPUs the scheduler shares out (may exceed n). For the hardware panel. */
int sched_gpu_work(sched *s, store_work *kind_out, int64_t *id_out, int n);
/* Stops the scheduler: running workers get SIGTERM and are waited for. */
void sched_stop(sched *s);

#endif
