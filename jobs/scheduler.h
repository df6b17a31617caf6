/* jobs/scheduler.h: runs queued jobs as `kiln worker` processes.
 *
 * Ordering: queued jobs start in the queue's order (store_queue_list: higher
 * priority first, then oldest): CPU jobs at most max_cpu_jobs at a
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
 * The Slurm dispatcher (cfg.dispatcher DISPATCH_SLURM, jobs/dispatch.h):
 * every queued job is submitted at once (Slurm places it; the local GPU rule
 * does not apply) as one sbatch (jobs/slurm.h). It stays "queued" in kiln
 * while Slurm holds it pending and turns "running" when Slurm runs it. Its
 * reports are read from DIR/reports.jsonl (the offset is stored, a partial
 * last line waits for its end), its state from squeue --json every
 * poll_ms; once Slurm says it ended (or no longer knows it), its exit record
 * DIR/slurm-exit.json and Slurm's state decide with its reports, by the same
 * rule as a local worker's exit: Slurm's TIMEOUT, NODE_FAIL, a cancel from
 * outside kiln (CANCELLED without sched_cancel) and the like fail the job
 * with that reason. Cancel is scancel. sched_stop leaves Slurm jobs running;
 * the next sched_start picks them up again (db/slurm_store.h) and goes on
 * reading their reports where it stopped.
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "db/store.h"
#include "jobs/dispatch.h"   /* dispatch_kind, slurm_options */
#include "jobs/hub.h"

typedef struct sched sched;

typedef struct sched_config {
    const char *data_dir;       /* jobs/<id>/ live here */
    const char *worker_exe;     /* path of the kiln binary (/proc/self/exe) */
    int max_cpu_jobs;           /* concurrent CPU jobs (default 1) */
    int kill_grace_ms;          /* SIGTERM to SIGKILL on cancel and stop (0: 10 s) */
    int gpus;                   /* GPUs to share out; 0: those engine_devices finds (tests
                                 * give a number, the fake worker needs none) */
    dispatch_kind dispatcher;   /* where jobs run (jobs/dispatch.h); evaluations run locally */
    slurm_options slurm;        /* DISPATCH_SLURM's settings (copied) */
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

#define SCHED_WHY_MAX 256

/* One item of the queue as the scheduler sees it (sched_queue_view). */
typedef struct sched_queue_item {
    store_work kind;            /* a job or an evaluation */
    int64_t id;
    bool running;               /* a worker runs it; else it waits in the queue (or in Slurm) */
    int64_t slurm_job_id;       /* submitted to Slurm: its job id (why: Slurm's state and
                                 * reason while it waits there); 0 otherwise */
    uint64_t gpus;              /* running: bit i, GPU i; 0: the CPU */
    char why[SCHED_WHY_MAX];    /* waiting: what for, in words, from the rule that starts
                                 * work ("a free CPU slot (1 of 1 in use by job 4)",
                                 * "GPU 1 (used by job 7)", "2 GPUs (1 free)", or
                                 * "nothing: ..." when it starts at the next look) */
} sched_queue_item;

/* The running items (in the order they started), then the waiting ones in
 * the order they will start, each with what it waits for. *out is malloc'ed
 * (free it; NULL when *n is 0). 0, or -1 on a store error or out of memory. */
int sched_queue_view(sched *s, sched_queue_item **out, size_t *n);

/* Which work runs on each GPU (the scheduler's own assignment): for GPU i <
 * n, kind_out[i] and id_out[i] (0: none) are what runs on it now. Returns how
 * many GPUs the scheduler shares out (may exceed n). For the hardware panel. */
int sched_gpu_work(sched *s, store_work *kind_out, int64_t *id_out, int n);
/* Stops the scheduler: running workers get SIGTERM and are waited for
 * (jobs in Slurm keep running there). */
void sched_stop(sched *s);

#endif
