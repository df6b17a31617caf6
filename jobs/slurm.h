/* jobs/slurm.h: the Slurm client of the Slurm dispatcher (jobs/dispatch.h,
 * jobs/scheduler.c with --dispatcher slurm). Runs Slurm's own commands and
 * reads what they print; it never talks to slurmctld itself.
 *
 * - slurm_submit writes the job's batch script (DIR/slurm.sh) and submits it
 *   with `sbatch --parsable --no-requeue`: the script runs `srun --label kiln worker
 *   --job-dir DIR --report-file DIR/reports.jsonl` on every task, the tasks'
 *   stderr (rank-prefixed) appended to DIR/log, and when srun returns it
 *   writes DIR/slurm-exit.json ({"slurm_job_id", "exit_code", "signal"};
 *   temporary name, then renamed) and exits with srun's status.
 * - slurm_poll runs `squeue --json` (Slurm 22.05: data_parser v0.0.38) and
 *   returns every job the controller knows, finished ones included (for
 *   MinJobAge seconds); slurm_show asks `scontrol show job -o` about one.
 * - slurm_cancel runs `scancel`.
 * Every command runs with a bound (SLURM_CMD_TIMEOUT_MS; then it is killed
 * and the call fails) and is reaped on its own pid. No user input reaches a
 * shell: the script names only the job folder and the kiln binary, quoted.
 */
#ifndef KILN_JOBS_SLURM_H
#define KILN_JOBS_SLURM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/dispatch.h"

#define SLURM_SCRIPT "slurm.sh"            /* in a job's folder: the batch script */
#define SLURM_REPORTS "reports.jsonl"      /* in a job's folder: rank 0's report lines */
#define SLURM_EXIT "slurm-exit.json"       /* in a job's folder: srun's end, written by the script */
#define SLURM_CMD_TIMEOUT_MS 20000

/* What one job asks of Slurm. */
typedef struct slurm_request {
    int64_t kiln_job_id;          /* names the Slurm job kiln-<id> */
    int gpus;                     /* per node: --gres=gpu:N (0: none) */
    int nodes;                    /* -N (>= 1) */
    int tasks_per_node;           /* --ntasks-per-node (>= 1) */
} slurm_request;

/* Writes DIR/slurm.sh and submits it; *slurm_id is Slurm's job id. 0, or
 * -1 with err (sbatch's own message when it refused). */
int slurm_submit(const slurm_options *o, const char *worker_exe, const char *dir,
                 const slurm_request *req, int64_t *slurm_id, char *err, size_t errlen);

/* scancel <id>. 0, or -1 with err. */
int slurm_cancel(const slurm_options *o, int64_t slurm_id, char *err, size_t errlen);

/* One job as Slurm describes it. */
typedef struct slurm_job {
    int64_t id;
    char state[32];               /* "PENDING", "RUNNING", "COMPLETED", "TIMEOUT", ... */
    char reason[128];             /* "None", "Resources", "Priority", ... */
    char nodes[256];              /* its node list; "" while pending */
} slurm_job;

/* Every job `squeue --json` lists; *jobs malloc'ed (free it; NULL when *n
 * is 0). 0, or -1 with err. */
int slurm_poll(const slurm_options *o, slurm_job **jobs, size_t *n, char *err, size_t errlen);

/* Parses squeue --json's output (text, len bytes) as slurm_poll does. */
int slurm_parse_squeue(const char *text, size_t len, slurm_job **jobs, size_t *n, char *err,
                       size_t errlen);

/* `scontrol show job -o <id>` into *out. 0; 1 when Slurm no longer knows the
 * job; -1 with err. */
int slurm_show(const slurm_options *o, int64_t slurm_id, slurm_job *out, char *err, size_t errlen);

/* Parses one line of scontrol show job -o (JobId=.. JobState=.. Reason=..
 * NodeList=..) into *out. 0, or -1 when it names no JobState. */
int slurm_parse_scontrol(const char *line, slurm_job *out);

/* Whether a Slurm job state is final (the job has left the machines). */
bool slurm_state_final(const char *state);

/* The exit record the batch script wrote (DIR/slurm-exit.json). */
typedef struct slurm_exit {
    int64_t slurm_job_id;
    int exit_code;                /* srun's exit status (0..255), 0 when a signal ended it */
    int signal;                   /* the signal that ended a task, 0: none */
} slurm_exit;

/* Reads DIR/slurm-exit.json. 0; 1 when there is none; -1 with err when it
 * cannot be read or is malformed. */
int slurm_exit_read(const char *dir, slurm_exit *out, char *err, size_t errlen);

#endif
