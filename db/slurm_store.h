/* db/slurm_store.h: what kiln keeps of a job that the Slurm dispatcher runs
 * (jobs/scheduler.c with --dispatcher slurm; migration 11).
 *
 * A job submitted with sbatch has its Slurm job id, the state, reason and
 * nodes squeue last gave, how far the server has read its reports file
 * (jobs/<id>/reports.jsonl; the byte offset of the first line not yet
 * handled) and whether it is active: submitted by kiln and not yet ended in
 * kiln. A restarted server picks up the active ones (store_slurm_active)
 * instead of queueing them again. A job's Slurm fields stay after it ends
 * (the job page names them), until it is submitted again.
 * Thread-safe (the store's lock).
 */
#ifndef KILN_DB_SLURM_STORE_H
#define KILN_DB_SLURM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/store.h"

#define STORE_SLURM_STATE 32       /* "PENDING", "NODE_FAIL", ... and a NUL */
#define STORE_SLURM_REASON 128     /* squeue's reason ("Resources", "None") */
#define STORE_SLURM_NODES 256      /* a node list ("node[01-04]") */

typedef struct store_slurm {
    int64_t slurm_job_id;          /* 0: never dispatched by Slurm (the other fields are "") */
    char state[STORE_SLURM_STATE];
    char reason[STORE_SLURM_REASON];
    char nodes[STORE_SLURM_NODES];
    int64_t report_offset;         /* bytes of reports.jsonl already handled */
    bool active;                   /* submitted and not ended in kiln */
} store_slurm;

/* A job was submitted as Slurm job slurm_job_id: its Slurm fields start
 * afresh (state "PENDING", no reason or nodes, offset 0, active). 0,
 * STORE_NOT_FOUND or -1. */
int store_slurm_submitted(store *s, int64_t job_id, int64_t slurm_job_id);
/* What squeue said of it: state, reason and nodes (each may be ""). */
int store_slurm_set_state(store *s, int64_t job_id, const char *state, const char *reason,
                          const char *nodes);
/* How far its reports file has been read. */
int store_slurm_set_offset(store *s, int64_t job_id, int64_t offset);
/* It ended in kiln: no longer active. */
int store_slurm_ended(store *s, int64_t job_id);
/* A job's Slurm fields into *out (slurm_job_id 0 when it has none). */
int store_slurm_get(store *s, int64_t job_id, store_slurm *out);
/* The ids of the active jobs (queued or running in kiln, submitted to
 * Slurm), oldest first; *ids malloc'ed (NULL when *n is 0). 0 or -1. */
int store_slurm_active(store *s, int64_t **ids, size_t *n);

#endif
