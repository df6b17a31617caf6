/* server/cluster.h: the Slurm cluster seen from kiln serve (issue 18): the
 * nodes that `sinfo --json` lists, for GET /api/v1/hardware's "cluster" object
 * and the dashboard's hardware panel.
 *
 * One thread of its own runs `sinfo --json` every cluster-interval seconds
 * (server/limits.h) with a time limit (CLUSTER_SINFO_TIMEOUT_S) and a cap on
 * what it reads (CLUSTER_OUTPUT_MAX), parses it (Slurm 22.05's openapi v0.0.38
 * form; the later forms' state arrays and {"set","number"} numbers are read
 * too) and swaps the result in under a lock. A request copies the last result
 * out and never waits on sinfo. A failing sinfo (not found, a non-zero exit, a
 * timeout, output that is not sinfo's JSON) is a result too: its message in
 * "error" and no nodes; the thread goes on and tries again next interval.
 * sinfo's own "errors" list (Slurm 22.05 prints {"error": "Unspecified
 * error", "errno": -1} and no nodes, with exit status 0, when slurmctld is
 * down) is an error too, beside whatever nodes it did list.
 *
 * Nothing here trusts sinfo's output: a missing or odd field is unknown
 * (null in the JSON), never a crash; strings are cut to their fields' sizes at
 * a character boundary and made UTF-8 (base/utf8.h); past CLUSTER_MAX_NODES
 * nodes the rest are counted, not kept.
 */
#ifndef KILN_SERVER_CLUSTER_H
#define KILN_SERVER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define CLUSTER_MAX_NODES 10000          /* nodes kept from one sinfo (more are counted in nodes_omitted) */
#define CLUSTER_OUTPUT_MAX (32u << 20)   /* bytes of sinfo's stdout read (about 1.5 KB a node); more is an error */
#define CLUSTER_SINFO_TIMEOUT_S 20       /* a sinfo still running after this is killed: an error */
#define CLUSTER_NAME_MAX 64              /* a node's or a partition's name (HOST_NAME_MAX) */
#define CLUSTER_STATE_MAX 64             /* "idle", "mixed", "allocated", "down", ... */
#define CLUSTER_REASON_MAX 256           /* why a node is down or drained, as an admin wrote it */
#define CLUSTER_NODE_PARTITIONS 8        /* partitions kept a node (more are dropped) */

/* One node as sinfo lists it. A count Slurm did not give (or gave as
 * NO_VAL/INFINITE, or as garbage) is -1: unknown. */
typedef struct cluster_node {
    char name[CLUSTER_NAME_MAX];
    char state[CLUSTER_STATE_MAX];       /* base state, lower case: "idle", "mixed", "allocated", "down" ... */
    char flags[CLUSTER_STATE_MAX];       /* state flags, lower case, '+' between: "drain", "drain+reboot", "" */
    int64_t cpus, cpus_allocated;
    int64_t memory_mib, memory_free_mib, memory_allocated_mib;   /* MiB, as Slurm counts */
    int64_t gpus, gpus_used;             /* from "gres" and "gres_used" (cluster_gres_gpus); 0: none */
    int npartitions;
    char partitions[CLUSTER_NODE_PARTITIONS][CLUSTER_NAME_MAX];
    char reason[CLUSTER_REASON_MAX];     /* "" when none */
} cluster_node;

/* What one sinfo gave. */
typedef struct cluster_nodes {
    cluster_node *nodes;                 /* n of them, malloc'ed; NULL when n == 0 */
    size_t n;
    size_t omitted;                      /* nodes past CLUSTER_MAX_NODES, not kept */
    char version[32];                    /* Slurm's release ("22.05.8"), "" when not said */
    char warning[256];                   /* sinfo's own "errors" list, joined; "" when empty */
} cluster_nodes;

/* The GPUs that a Slurm gres string names: "gpu:2" -> 2, "gpu:tesla:2(S:0-1)"
 * -> 2, "gpu:0(IDX:N/A)" -> 0, "gpu:2(IDX:0-1),shard:4" -> 2, "gpu" -> 1,
 * "gpu:a100:1,gpu:v100:2" -> 3; "", "(null)" or "N/A" (no gres) -> 0. NULL or
 * a string it cannot read -> -1 (unknown). */
int64_t cluster_gres_gpus(const char *gres);

/* Parses len bytes of `sinfo --json` output into *out (zeroed first; free it
 * with cluster_nodes_free, also after an error). Returns 0, or -1 with err
 * saying why (not JSON, no "nodes" list, out of memory). text need not be
 * NUL-terminated. */
int cluster_parse_sinfo(const char *text, size_t len, cluster_nodes *out, char *err, size_t errlen);
void cluster_nodes_free(cluster_nodes *n);

/* The JSON of one node: {"name", "state", "state_flags": [...], "cpus",
 * "cpus_allocated", "memory_total_bytes", "memory_free_bytes",
 * "memory_allocated_bytes", "gpus", "gpus_used", "partitions": [...],
 * "reason": string or null}; unknown counts are null. NULL when out of memory. */
cJSON *cluster_node_json(const cluster_node *n);

/* ---- the sampler --------------------------------------------------------- */

typedef struct cluster_config {
    unsigned interval_s;        /* seconds between two sinfo runs (the cluster-interval limit); >= 1 */
    const char *slurm_bin;      /* the folder holding sinfo; NULL or "": sinfo is looked up on PATH */
    const char *slurm_conf;     /* SLURM_CONF for sinfo; NULL or "": sinfo inherits the server's environment */
} cluster_config;

typedef struct cluster cluster;

/* Starts the sampler thread; its first sinfo runs at once, in the thread (a
 * slow or dead controller never holds up the server's start). The strings of
 * cfg are copied. Returns the sampler, or NULL with err set. */
cluster *cluster_start(const cluster_config *cfg, char *err, size_t errlen);
/* Stops the thread (killing a sinfo still running) and frees the sampler;
 * NULL is a no-op. */
void cluster_stop(cluster *c);

/* GET /api/v1/hardware's "cluster": JSON null when c is NULL (no cluster);
 * else {"interval_seconds", "time": Unix seconds of the last sinfo or null
 * before the first, "slurm_version", "error": string or null, "nodes": [...],
 * "nodes_omitted"}. NULL when out of memory. */
cJSON *cluster_json(cluster *c);

#endif
