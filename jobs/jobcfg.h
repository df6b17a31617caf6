/* jobs/jobcfg.h: a training job's configuration, typed, with its rules in one place.
 *
 * Every entry point reads a job through this module: the API's POST
 * /api/v1/jobs and POST /api/v1/networks/summary (server/), `kiln train`
 * (jobs/train_cli.c, through jobspec), the worker reading job.json
 * (jobs/runner.c), the scheduler (jobs/scheduler.c) and the model download
 * (server/model.c). Each field's type, range and default is one row of the
 * table in jobcfg.c, which GET /api/v1/schema publishes and the dashboard's
 * form reads; a new setting is added there once.
 *
 * Two forms of the same object:
 *   a request   what a client sends: dataset_id (or, for kiln train, none),
 *               network as a built-in name or a spec, the optional settings;
 *   resolved    job.json: the request with every default filled (the
 *               augmentation object too), the network
 *               spec, the dataset's folder, input shape and classes, the
 *               devices as backend/gpus/gpu_count, the learning-rate policy's
 *               warm-up in steps. jobcfg_to_json writes it; jobcfg_from_json
 *               reads it back with the same checks (a hand-edited job.json
 *               gets the limits an API request gets).
 */
#ifndef KILN_JOBS_JOBCFG_H
#define KILN_JOBS_JOBCFG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "base/err.h"         /* api_error */
#include "base/limits.h"      /* KILN_MAX_DEVICES */
#include "engine/dataset.h"   /* ds_augment */
#include "engine/net.h"       /* net_shape, net_solver, net_devices */
#include "jobs/snapshots.h"   /* snap_metric */

/* The largest id of a dataset, job or evaluation a request may name: 2^53 - 1,
 * exact in a JSON number. */
#define JOBCFG_ID_MAX 9007199254740991.0
#define JOBCFG_NAME_MAX 200            /* bytes of a job's name */
#define JOBCFG_NETWORK_NAME_MAX 63
/* A job's priority in the queue (the "priority" rule of jobs/jobcfg.c):
 * higher starts first, then the oldest; 0 by default. PATCH /api/v1/jobs/{id}
 * checks a new one against the same range. */
#define JOBCFG_PRIORITY_MIN (-100)
#define JOBCFG_PRIORITY_MAX 100
#define JOBCFG_JSON_MAX (64u << 20)    /* bytes of a job folder's job.json, read back */

/* The devices a job asks for. The CPU, or GPUs: `count` of them, the ones in
 * ids when listed, else any free ones (the scheduler picks; the worker is
 * told which with --gpus). A CPU job has count 1, or more replicas on the one
 * CPU when job.json says "replicas" (a seam for testing data parallelism;
 * requests cannot ask for it). */
typedef struct jobcfg_devices {
    backend_kind kind;                 /* BACKEND_CPU or BACKEND_CUDA */
    int count;                         /* GPUs, or the CPU's replicas (1) */
    bool listed;
    int ids[KILN_MAX_DEVICES];
} jobcfg_devices;

/* The solver as the request gave it, in double (job.json keeps 0.01, not
 * its float); jobcfg_net_solver converts it at the engine's border. */
typedef struct jobcfg_solver {
    solver_type type;
    double lr, momentum, weight_decay, beta1, beta2, eps, clip_norm, label_smoothing, larc_eta;
    bool nesterov, decay_bias;
    larc_policy larc;                  /* LARC_NONE: no "larc" object */
} jobcfg_solver;

/* The loader's augmentation as the request gave it ("augmentation"):
 * jobcfg_ds_augment converts it at the engine's border. */
typedef struct jobcfg_augment {
    int crop;                          /* a crop x crop window; 0: the stored size */
    int pad;                           /* zero pixels around the image before cropping */
    bool mirror;                       /* flip left to right at random in training */
} jobcfg_augment;

/* "early_stopping": absent, off; given (even {}), the run ends as done once
 * `metric` has not improved on its best by more than min_delta for
 * `patience` epochs in a row (jobs/early_stop.h decides; runner.h tells
 * what the worker does then). */
typedef struct jobcfg_early_stop {
    bool enabled;                      /* the object was given */
    snap_metric metric;                /* val/loss by default, or val/accuracy */
    int patience;                      /* epochs without an improvement; >= 1 */
    double min_delta;                  /* what counts as one; >= 0 */
} jobcfg_early_stop;

typedef struct jobcfg {
    /* identity and data (resolved form) */
    int64_t id;                        /* 0 until the job's row exists */
    int64_t dataset_id;                /* 0: kiln train's dataset folder */
    char dataset_dir[PATH_MAX];
    char name[JOBCFG_NAME_MAX + 1];    /* "": none */
    char network_name[JOBCFG_NETWORK_NAME_MAX + 1];
    cJSON *network;                    /* owned; a request's name or spec; resolved: the spec */
    net_shape input;                   /* resolved: the dataset's C, H, W (the stored
                                        * images; the network's is jobcfg_net_input) */
    int nclasses;
    char **classes;                    /* owned, nclasses names (resolved) */

    /* the run */
    int epochs, batch_size, snapshot_interval;
    int priority;                      /* its place in the queue (JOBCFG_PRIORITY_*); the store
                                        * keeps the current one (store_job.priority) */
    int loader_threads;                /* decoding threads; 0: what fits the machine */
    int nodes;                         /* nodes the job's ranks run on (1..KILN_MAX_NODES) */
    int tasks_per_node;                /* CPU jobs: ranks on each node; GPU jobs: 1 */
    jobcfg_augment augment;
    uint64_t seed;
    jobcfg_devices devices;
    precision_mode precision;
    bool dynamic_scaling;              /* loss_scaling "dynamic" (resolved from the precision) */
    jobcfg_solver solver;
    cJSON *lr_policy;                  /* owned; NULL: fixed. engine/lr.h reads it */

    /* snapshots (jobs/snapshots.h) */
    snap_metric checkpoint_metric;     /* which snapshot is "best" (val/accuracy) */
    int keep_checkpoints;              /* keep the last N snapshots plus the best; 0: all
                                        * (absent or null in JSON) */
    jobcfg_early_stop early_stop;
} jobcfg;

typedef enum jobcfg_form {
    JOBCFG_REQUEST,                    /* POST /api/v1/jobs: dataset_id required */
    JOBCFG_LOCAL_REQUEST,              /* kiln train: a dataset folder, no dataset_id */
    JOBCFG_RESOLVED,                   /* job.json */
} jobcfg_form;

/* Where jobs run, for a request's checks: this machine (the default, and
 * kiln train), or a cluster's nodes (kiln serve --dispatcher slurm). On a
 * cluster a request without devices trains on the CPU, a GPU count is a
 * node's and Slurm checks it at submission, a list of GPU numbers is
 * refused, and a job may run as several processes (nodes, tasks_per_node);
 * on this machine a request that needs several processes is a 400
 * invalid_field naming --dispatcher slurm (the local worker pool runs one
 * process a job). Call once at start, before any request. */
void jobcfg_set_cluster(bool cluster);
bool jobcfg_cluster(void);

/* Reads j in the given form: unknown fields, each field's type and range,
 * which fields go with which solver, devices against this machine (requests
 * only), defaults. Returns 0 with *out filled (free it with jobcfg_free), or
 * -1 with e naming the field (400 invalid_field, unknown_field,
 * missing_field; 422 no_gpu, unknown_device) and *out empty. */
int jobcfg_from_json(const cJSON *j, jobcfg_form form, jobcfg *out, api_error *e);

/* The resolved form of c (job.json), owned by the caller, or NULL when out of
 * memory. jobcfg_from_json(jobcfg_to_json(c), JOBCFG_RESOLVED) gives c back. */
cJSON *jobcfg_to_json(const jobcfg *c);

/* Reads dir/job.json (jobcfg_from_json, resolved form). */
int jobcfg_load(const char *dir, jobcfg *out, api_error *e);

void jobcfg_free(jobcfg *c);           /* frees what c owns; NULL is a no-op */

/* A request's dataset part, once jobspec has found the dataset: its folder,
 * the input shape (the stored images') and the class names (copied). The
 * augmentation is checked against the shape here: a crop larger than the
 * images is a 400 invalid_field naming augmentation.crop. Returns 0, or -1
 * with e. */
int jobcfg_set_data(jobcfg *c, const char *dataset_dir, net_shape input, const char *const *classes,
                    int nclasses, api_error *e);

/* Steps of the whole run for a training split of train_count images: the
 * training loader's batches an epoch (engine/dataset.h, loader_batch_count:
 * the last short batch of an epoch is dropped, except in a split smaller
 * than one batch) times the epochs. */
int64_t jobcfg_steps(const jobcfg *c, int64_t train_count);

/* The network's input: the dataset's channels, and the crop's size (or the
 * stored one). What the network is built and checked with. */
net_shape jobcfg_net_input(const jobcfg *c);

/* The augmentation for loader_open (engine/dataset.h). */
ds_augment jobcfg_ds_augment(const jobcfg *c);

/* The solver for net_create: the settings above as the engine takes them. */
net_solver jobcfg_net_solver(const jobcfg *c);

/* The devices for net_create: the CPU, or the job's GPUs (ids when listed,
 * else the first count). */
net_devices jobcfg_net_devices(const jobcfg *c);

/* Several worker processes (ranks) for one job, data parallel across them
 * (engine/net.h, net_world). A job's ranks: on the CPU nodes x
 * tasks_per_node; on GPUs one per GPU, nodes x the GPU count. A job needs
 * several processes (jobcfg_multi_process) when it spans more than one node
 * or asks for more than one task per node; a GPU job on one node may run as
 * one process driving its GPUs as in-process replicas (the local
 * dispatcher's way) or as one rank per GPU (kiln worker takes either, from
 * its environment: jobs/runner.h). */
int jobcfg_ranks(const jobcfg *c);
bool jobcfg_multi_process(const jobcfg *c);


/* The schema of a job request (GET /api/v1/schema, "job"): every field with
 * its type, default, range or choices, and the solver types it applies to.
 * Owned by the caller; NULL when out of memory. */
cJSON *jobcfg_schema(void);

/* The readers the table uses, for requests that share fields with a job
 * (POST /api/v1/networks/summary): the field `path` ("batch_size",
 * "precision", "solver.type", "solver.momentum") of obj, absent or null
 * giving the table's default (a request that refuses null says so with
 * jobcfg_refuse). Returns 0, or -1 with e filled as
 * jobcfg_from_json would. */
int jobcfg_read_int(const cJSON *obj, const char *path, int *out, api_error *e);
int jobcfg_read_num(const cJSON *obj, const char *path, double *out, api_error *e);
int jobcfg_read_choice(const cJSON *obj, const char *path, int *out, api_error *e);
/* Fills e with the 400 that states what field `path` must be; returns -1. */
int jobcfg_refuse(const char *path, api_error *e);

#endif
