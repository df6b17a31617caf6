/* base/limits.h: limits that more than one module must agree on. Request
 * fields' limits and defaults are in jobs/jobcfg.c's table, not here. */
#ifndef KILN_BASE_LIMITS_H
#define KILN_BASE_LIMITS_H

#include <stdint.h>

/* Devices one job can train on (data-parallel replicas, engine/net.h). The
 * scheduler keeps a job's GPUs as bits of a uint64_t, so no more than 64. */
#define KILN_MAX_DEVICES 64
#ifdef __cplusplus                      /* nvcc compiles headers as C++ */
static_assert(KILN_MAX_DEVICES >= 1 && KILN_MAX_DEVICES <= 64,
              "KILN_MAX_DEVICES must fit the scheduler's uint64_t GPU masks");
#else
_Static_assert(KILN_MAX_DEVICES >= 1 && KILN_MAX_DEVICES <= 64,
               "KILN_MAX_DEVICES must fit the scheduler's uint64_t GPU masks");
#endif

/* Nodes one job can span ("nodes", jobs/jobcfg.c; a multi-process job's
 * ranks run on them, engine/settings.h net_world). */
#define KILN_MAX_NODES 64
/* Worker processes (ranks) one job can run as: nodes times the ranks on each
 * ("tasks_per_node" on the CPU, one per GPU). */
#define KILN_MAX_RANKS (KILN_MAX_NODES * KILN_MAX_DEVICES)

#endif
