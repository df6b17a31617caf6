/* engine/settings.h: the typed settings a net is built with, and their names.
 *
 * A precision, a solver type, a LARC policy and the devices cross from a job's
 * configuration into the engine as these enums and structs, never as strings
 * to be compared again. Each enum's names live in one table here: the job
 * configuration (jobs/jobcfg.c), the command lines, the summary and the logs
 * all read and print them through these functions. The zero value of each
 * enum is its default.
 */
#ifndef KILN_ENGINE_SETTINGS_H
#define KILN_ENGINE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/limits.h"   /* KILN_MAX_DEVICES */

/* DESIGN.md, AMP: FP32, or 16-bit compute with FP32 master weights. */
typedef enum precision_mode { PREC_FP32, PREC_AMP_BF16, PREC_AMP_FP16, PREC_COUNT } precision_mode;
typedef enum solver_type { SOLVER_SGD, SOLVER_ADAM, SOLVER_ADAMW, SOLVER_COUNT } solver_type;
/* seeds/000: none, or LARC's two policies (engine/optim.h). */
typedef enum larc_policy { LARC_NONE, LARC_CLIP, LARC_SCALE, LARC_COUNT } larc_policy;
typedef enum backend_kind { BACKEND_CPU, BACKEND_CUDA, BACKEND_COUNT } backend_kind;

/* "fp32", "amp-bf16", "amp-fp16"; "sgd", "adam", "adamw"; "none", "clip",
 * "scale"; "cpu", "cuda". An out-of-range value gives "?". */
const char *precision_name(precision_mode p);
const char *solver_type_name(solver_type t);
const char *larc_policy_name(larc_policy l);
const char *backend_kind_name(backend_kind k);

/* The value named s (the names above), or -1 with *out untouched. */
int precision_parse(const char *s, precision_mode *out);
int solver_type_parse(const char *s, solver_type *out);
int larc_policy_parse(const char *s, larc_policy *out);
int backend_kind_parse(const char *s, backend_kind *out);

/* NULL-terminated name lists (for messages and the API's schema). LARC's
 * list leaves out "none", which no request names. */
const char *const *precision_names(void);
const char *const *solver_type_names(void);
const char *const *larc_policy_names(void);

/* "a, b or c" of a name list, into buf. */
void settings_join(const char *const *names, char *buf, size_t n);

/* How a net is trained (engine/net.h, net_create; checked and its defaults
 * resolved by optim_check in engine/optim.h). */
typedef struct net_solver {
    solver_type type;      /* SOLVER_SGD (the zero value), SOLVER_ADAM, SOLVER_ADAMW */
    float lr;              /* base learning rate */
    float momentum;        /* sgd: 0 = plain SGD */
    float weight_decay;    /* L2 (sgd, adam) or decoupled (adamw), 0 = none */
    /* Added in issue 3; zero values mean off, or the defaults noted. */
    bool nesterov;         /* sgd: Nesterov momentum */
    bool decay_bias;       /* weight decay also on biases and batch-norm parameters */
    float beta1, beta2, eps;   /* adam, adamw; all three 0: 0.9, 0.999, 1e-8 */
    float clip_norm;       /* > 0: clip gradients to this global L2 norm */
    larc_policy larc;      /* sgd: LARC_NONE, LARC_CLIP or LARC_SCALE (seeds/000) */
    float larc_eta;        /* LARC's trust coefficient; 0: 0.001 */
    float label_smoothing; /* the loss's: eps in [0, 1), targets (1 - eps) one-hot + eps / classes;
                            * training steps only (evaluation reports the plain loss) */
    /* Added in issue 4: mixed precision (DESIGN.md, AMP; engine/amp.h). */
    precision_mode precision;   /* PREC_FP32 (the zero value), PREC_AMP_BF16, PREC_AMP_FP16 */
    int loss_scaling;      /* dynamic loss scaling: 0 the precision's default (on for
                            * amp-fp16 only), 1 on, -1 off */
} net_solver;

/* The largest device number a device list may name (a GPU's number). */
#define NET_DEVICE_NUMBER_MAX 1024

/* How long a rank of a multi-process net waits for the others in a
 * collective (or while they connect) before it fails: long enough for rank
 * 0 to write a checkpoint of a large net while the others wait for its next
 * step. A rank whose process is gone fails the others at once. */
#define NET_WORLD_TIMEOUT_MS (300 * 1000)
#define NET_WORLD_DIR_MAX 4096
#define NET_WORLD_HOST_MAX 256

/* Data parallelism across processes (engine/net.h, net_create): this process
 * is rank `rank` of `size` (size 0 or 1: no other processes), each rank with
 * one device of its own. The ranks meet through the folder dir, which every
 * rank names alike on a filesystem they share and which is fresh for each
 * run (it is made when missing; its parent must exist); each listens at host,
 * an address or name the other ranks reach it by ("127.0.0.1" when they all
 * run on this machine). A collective fails after timeout_ms (0:
 * NET_WORLD_TIMEOUT_MS) without the others. */
typedef struct net_world {
    int rank, size;
    int timeout_ms;
    char dir[NET_WORLD_DIR_MAX];
    char host[NET_WORLD_HOST_MAX];
} net_world;

/* The devices a net trains on: one, or several data-parallel replicas
 * (engine/net.h), each a device number of the kind's backend; with a world
 * of several processes, this process's one device. */
typedef struct net_devices {
    backend_kind kind;
    int count;                      /* 1..KILN_MAX_DEVICES */
    int ids[KILN_MAX_DEVICES];      /* distinct, 0..NET_DEVICE_NUMBER_MAX */
    net_world world;                /* the zero value: this process alone */
} net_devices;

/* The CPU, device 0: what net_create uses for NULL. */
net_devices net_devices_cpu(void);

/* Reads the command-line form "cpu", "cuda", "cuda:1", "cuda:0,1" (a kind
 * alone is device 0; "cpu:0,1" runs replicas on the one CPU, for tests of
 * data parallelism). For command lines (`kiln bench --backend`) and tests;
 * a job's configuration carries a net_devices already. Device numbers run
 * 0..NET_DEVICE_NUMBER_MAX, at most KILN_MAX_DEVICES of them, none twice.
 * Returns 0, or -1 with err set. */
int net_devices_parse(const char *s, net_devices *out, char *err, size_t errlen);

/* The same form back ("cuda:0,1"), for logs. Returns 0, or -1 when it does
 * not fit in n bytes. */
int net_devices_format(const net_devices *d, char *buf, size_t n);

#endif
