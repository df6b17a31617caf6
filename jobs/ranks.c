/* jobs/ranks.c: this worker's rank from its environment (contract in ranks.h). */
#include "jobs/ranks.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"   /* KILN_MAX_RANKS */

/* The integer in environment variable name into *out, lo..hi. 1: read; 0:
 * not set; -1 with err set: not such an integer. */
static int env_int(const char *name, long lo, long hi, int *out, char *err, size_t errlen)
{
    const char *v = getenv(name);
    if (!v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi)
        return set_err(err, errlen, "%s is \"%s\": it must be an integer from %ld to %ld", name,
                       v, lo, hi);
    *out = (int)x;
    return 1;
}

static bool run_id_ok(const char *s)
{
    if (!*s || strlen(s) >= RANKS_RUN_ID_MAX)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
            return false;
    return true;
}

static int read_run_id(worker_rank *w, char *err, size_t errlen)
{
    const char *id = getenv("KILN_RUN_ID");
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    const char *restart = getenv("SLURM_RESTART_COUNT");     /* a requeued job keeps its id */
    if (id)
        snprintf(w->run_id, sizeof w->run_id, "%s", id);
    else if (job)
        snprintf(w->run_id, sizeof w->run_id, "slurm-%s.%s%s%s", job, step ? step : "0",
                 restart ? ".r" : "", restart ? restart : "");
    else
        snprintf(w->run_id, sizeof w->run_id, "0");
    if (!run_id_ok(w->run_id))
        return set_err(err, errlen, "%s gives the run id \"%s\": it must be 1 to %d letters, "
                       "digits, '.', '_' or '-'", id ? "KILN_RUN_ID" : "SLURM_JOB_ID",
                       w->run_id, RANKS_RUN_ID_MAX - 1);
    return 0;
}

/* The three variables of one launcher: size first (absent: 0). */
static int read_triple(const char *size_name, const char *rank_name, const char *local_name,
                       worker_rank *w, char *err, size_t errlen)
{
    int got = env_int(size_name, 1, KILN_MAX_RANKS, &w->size, err, errlen);
    if (got <= 0)
        return got;
    int r = env_int(rank_name, 0, w->size - 1, &w->rank, err, errlen);
    if (r < 0)
        return -1;
    if (r == 0)
        return set_err(err, errlen, "%s is set but %s is not", size_name, rank_name);
    w->local_rank = w->rank;
    if (env_int(local_name, 0, w->size - 1, &w->local_rank, err, errlen) < 0)
        return -1;
    return 1;
}

int ranks_from_env(worker_rank *out, char *err, size_t errlen)
{
    worker_rank w = { .rank = 0, .size = 1 };
    int got = read_triple("KILN_WORLD_SIZE", "KILN_RANK", "KILN_LOCAL_RANK", &w, err, errlen);
    if (got < 0)
        return -1;
    if (got > 0) {
        w.source = "KILN_RANK";
    } else if (getenv("KILN_RANK")) {
        return set_err(err, errlen, "KILN_RANK is set but KILN_WORLD_SIZE is not");
    } else {
        worker_rank s = { .rank = 0, .size = 1 };
        got = read_triple("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", &s, err, errlen);
        if (got < 0)
            return -1;
        if (got > 0 && s.size > 1) {
            w = s;
            w.source = "SLURM_PROCID";
        }
    }
    if (read_run_id(&w, err, errlen) < 0)
        return -1;
    const char *host = getenv("KILN_RANK_HOST");
    if (host && (!*host || strlen(host) >= sizeof w.host))
        return set_err(err, errlen, "KILN_RANK_HOST must be an address or host name of 1 to "
                       "%zu bytes", sizeof w.host - 1);
    snprintf(w.host, sizeof w.host, "%s", host ? host : "");
    *out = w;
    return 0;
}
