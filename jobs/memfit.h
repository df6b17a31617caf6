/* jobs/memfit.h: does a job's training fit in the memory available now?
 * (issue 15, finding 7)
 *
 * The training-memory estimate is engine/summary.h's (summary_memory: the
 * weights, gradients, optimizer state, 16-bit copies, and for each image the
 * input and every layer's output and gradient). It is a lower bound: it
 * leaves out convolution and matmul workspaces, staging buffers and the
 * runtime's own memory. It is compared with what is available, not with the
 * machine's total:
 *   the CPU   MemAvailable of /proc/meminfo (what the kernel can give without
 *             swapping, other processes and running jobs already taken off);
 *   a GPU     its free memory (engine_devices' free_bytes), the smallest of
 *             the job's GPUs; skipped where it is not known;
 * less MEMFIT_MARGIN_PERCENT of it, kept for what the estimate leaves out. A
 * job is checked twice: at creation (POST /api/v1/jobs answers 422
 * insufficient_memory with the largest batch that fits) and when its worker
 * starts (the job fails with the same reason instead of swapping or being
 * killed), since what is free changes while it waits in the queue.
 */
#ifndef KILN_JOBS_MEMFIT_H
#define KILN_JOBS_MEMFIT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "jobs/jobcfg.h"     /* jobcfg */

#define MEMFIT_MARGIN_PERCENT 10       /* of the available memory, not planned on */
#define MEMFIT_MEMINFO "/proc/meminfo"

/* MemAvailable of a meminfo file (MEMFIT_MEMINFO's format: "MemAvailable:
 * 123456 kB"), in bytes; 0 when the file cannot be read or has no such line. */
uint64_t memfit_mem_available(const char *meminfo_path);

/* What a job may plan on out of `available` bytes: the margin taken off. */
int64_t memfit_usable(uint64_t available);

/* Whether job c (resolved: network spec, precision, solver, devices,
 * batch_size) trained on input `in` with `classes` classes fits in what is
 * available now: the CPU's MemAvailable read from meminfo_path (NULL:
 * MEMFIT_MEMINFO), or the free memory of its GPUs. Returns 0 when it fits or
 * the memory is not known; 1 when it does not, with err saying what it needs
 * at least, what is available, the layer responsible and the largest batch
 * that fits, and *max_batch that batch (0: not even one image); -1 with err
 * when the spec cannot be read. */
int memfit_check(const jobcfg *c, net_shape in, int classes, const char *meminfo_path,
                 int64_t *max_batch, char *err, size_t errlen);

#endif
