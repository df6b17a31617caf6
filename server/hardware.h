/* server/hardware.h: the hardware sampler behind GET /api/v1/hardware, the
 * dashboard's hardware panel and the device figures of GET /metrics.
 *
 * One thread samples every hardware-interval seconds (server/limits.h): CPU
 * utilisation from /proc/stat deltas, memory from /proc/meminfo (used is
 * MemTotal - MemAvailable), load averages from /proc/loadavg, and for each
 * GPU that NVML lists (opened at run time, base/nvml_lib.h) its utilisation,
 * memory, temperature, power and the work the scheduler gave it. The last
 * HW_HISTORY_SECONDS of samples are kept in a ring buffer; readers copy out
 * under the sampler's lock, so a request never waits on NVML or /proc.
 *
 * GPU i in NVML's order is matched to the scheduler's GPU i (CUDA's order): the
 * two agree when CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES is unset.
 * A figure NVML cannot give is reported as unknown (null), never as 0. Memory
 * used is nvmlDeviceGetMemoryInfo's, which counts the driver's reserved memory
 * (about 615 MiB on an idle H200, where nvidia-smi shows 0 MiB).
 */
#ifndef KILN_SERVER_HARDWARE_H
#define KILN_SERVER_HARDWARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "jobs/scheduler.h"   /* sched, sched_gpu_work */

#define HW_HISTORY_SECONDS 600     /* the history GET /api/v1/hardware answers with */
#define HW_MAX_GPUS 16             /* GPUs sampled (more are not shown) */
#define HW_GPU_NAME_MAX 96

typedef struct hw_gpu {
    int index;                     /* NVML's index */
    double utilization;            /* percent busy over NVML's last period; < 0: unknown */
    double memory_used, memory_total;   /* bytes; < 0: unknown */
    double temperature_c;          /* < 0: unknown */
    double power_w;                /* < 0: unknown */
    store_work work_kind;          /* what the scheduler runs on it ... */
    int64_t work_id;               /* ... its id; 0: nothing */
} hw_gpu;

typedef struct hw_sample {
    double time;                   /* Unix seconds */
    double cpu_utilization;        /* percent of all cores busy since the last sample; < 0: unknown */
    double memory_used, memory_total;   /* bytes */
    double load[3];                /* 1, 5 and 15 minute load averages */
    int ngpus;
    hw_gpu gpus[HW_MAX_GPUS];
} hw_sample;

typedef struct hw_sampler hw_sampler;

/* Starts the sampler thread; the first sample is taken before this returns.
 * s may be NULL (no job is shown on a GPU). Returns the sampler, or NULL with
 * err set. */
hw_sampler *hw_start(unsigned interval_s, sched *s, char *err, size_t errlen);
/* Stops the thread and frees the sampler; NULL is a no-op. */
void hw_stop(hw_sampler *hw);

/* The newest sample into *out; false when there is none. */
bool hw_latest(hw_sampler *hw, hw_sample *out);
/* The name of NVML's GPU index into out ("" when unknown). */
void hw_gpu_name(hw_sampler *hw, int index, char *out, size_t len);

/* GET /api/v1/hardware's body: {"interval_seconds", "history_seconds",
 * "cores", "nvml": {"available", "error"}, "current": sample or null,
 * "history": [samples taken after `since` (Unix seconds; 0: all), oldest
 * first]}. NULL when out of memory. */
cJSON *hw_json(hw_sampler *hw, double since);

#endif
