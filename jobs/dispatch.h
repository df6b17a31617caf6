/* jobs/dispatch.h: the dispatcher seam. Where the scheduler (jobs/scheduler.h)
 * runs a job's worker:
 *
 *   local  `kiln worker` child processes of the server on this machine, on
 *          the GPUs the scheduler shares out (decide()); reports on a pipe.
 *   slurm  one `sbatch --parsable` per job (jobs/slurm.h): Slurm places it on
 *          the cluster's nodes; the worker's reports reach the server through
 *          the job folder (DIR/reports.jsonl, tailed), its state from squeue.
 *
 * Both share the scheduler's queue order, report handling, cancel and the one
 * rule that turns a worker's reports and end into the job's final status;
 * only starting, stopping and noticing the end of a worker differ (the
 * dispatcher table in jobs/scheduler.c). Chosen once, at `kiln serve`
 * (--dispatcher, server/serve_flags.c).
 */
#ifndef KILN_JOBS_DISPATCH_H
#define KILN_JOBS_DISPATCH_H

#include <string.h>

typedef enum { DISPATCH_LOCAL = 0, DISPATCH_SLURM } dispatch_kind;

/* The Slurm dispatcher's settings (kiln serve's --slurm-* flags). Strings may
 * be NULL or "" (not given). */
typedef struct slurm_options {
    const char *bin_dir;          /* the folder of sbatch, srun, squeue, scontrol, scancel; "": PATH */
    const char *partition;        /* sbatch --partition */
    const char *account;          /* sbatch --account */
    const char *time_limit;       /* sbatch --time (Slurm's forms: "30", "2:00:00", "1-0") */
    const char *sbatch_options;   /* more sbatch options, split at white space (no quoting) */
    int poll_ms;                  /* squeue every poll_ms (0: 2000) */
} slurm_options;

/* A dispatcher's name, as --dispatcher takes it and GET /api/v1/info says it. */
static inline const char *dispatch_name(dispatch_kind k)
{
    return k == DISPATCH_SLURM ? "slurm" : "local";
}

/* "local" or "slurm" into *out: 0, or -1 for any other name. */
static inline int dispatch_parse(const char *name, dispatch_kind *out)
{
    for (dispatch_kind k = DISPATCH_LOCAL; k <= DISPATCH_SLURM; k++) {
        if (name && !strcmp(name, dispatch_name(k))) {
            *out = k;
            return 0;
        }
    }
    return -1;
}

#endif
