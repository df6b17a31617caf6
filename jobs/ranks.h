/* jobs/ranks.h: which rank of a multi-process job this worker is, from its
 * environment (kiln worker, jobs/runner.c).
 *
 * A job that runs as several processes (jobs/jobcfg.h, jobcfg_ranks) is
 * started by a launcher that tells each process its place: Slurm's srun
 * sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID; a test or a person
 * without Slurm sets KILN_RANK, KILN_WORLD_SIZE and KILN_LOCAL_RANK, which
 * take precedence. The ranks meet in the job folder's rendezvous/<run>
 * (engine/settings.h, net_world), <run> naming this launch so that a
 * relaunch never reads an earlier one's addresses: KILN_RUN_ID, else Slurm's
 * "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>" (".r<SLURM_RESTART_COUNT>" after it
 * for a requeued job, which keeps its id), else "0" (then a relaunch by hand needs a new
 * KILN_RUN_ID, or the old folder removed).
 */
#ifndef KILN_JOBS_RANKS_H
#define KILN_JOBS_RANKS_H

#include <stddef.h>

#define RANKS_RUN_ID_MAX 64

typedef struct worker_rank {
    int rank, size;          /* rank of size; 0 of 1 when alone */
    int local_rank;          /* its place among the ranks on this node (its GPU) */
    char run_id[RANKS_RUN_ID_MAX];
    const char *source;      /* "KILN_RANK", "SLURM_PROCID", or NULL when alone */
    char host[256];          /* KILN_RANK_HOST: the address the other ranks reach this one
                              * by, where the host name does not give it (Debian's
                              * /etc/hosts maps it to 127.0.1.1); "": not set */
} worker_rank;

/* Reads the environment as the file comment says: KILN_WORLD_SIZE (with
 * KILN_RANK; KILN_LOCAL_RANK defaults to the rank) when it is set, else the
 * SLURM_* variables when SLURM_NTASKS is above 1 (a Slurm step of one task
 * is a job of one process); else rank 0 of 1. Sizes run 1..KILN_MAX_RANKS,
 * ranks 0..size - 1; a run id has letters, digits, '.', '_' and '-'.
 * Returns 0 with *out set, or -1 with err naming the variable at fault. */
int ranks_from_env(worker_rank *out, char *err, size_t errlen);

#endif
