/* engine/net.h: networks built from JSON specs, trained on a backend.
 *
 * This is the engine's public surface used by jobs/ (the worker) and server/
 * (validation of requests). It knows nothing of HTTP, SQL or jobs.
 *
 * Errors: functions that can fail on user input take (char *err, size_t errlen)
 * and fill err with a message a user can act on, naming the layer at fault
 * ("layer 3 (conv2d \"conv2\"): kernel 7 is larger than its 5x5 input").
 */
#ifndef KILN_ENGINE_NET_H
#define KILN_ENGINE_NET_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

typedef struct net_shape { int c, h, w; } net_shape;

/* ---- built-in networks ---------------------------------------------------- */

/* The JSON text of a built-in spec ("lenet", ...), or NULL if there is none by
 * that name. The string is static. */
const char *net_builtin(const char *name);
/* NULL-terminated list of built-in names. */
const char *const *net_builtin_names(void);

/* ---- validation ----------------------------------------------------------- */

/* Checks a spec (a cJSON object as in DESIGN.md) for an input shape and a class
 * count without allocating tensors: unknown keys or layer types, non-positive
 * sizes, impossible shapes. If spec has "input" it must match `in` (or `in` may be
 * {0,0,0} to take it from the spec). Returns 0, or -1 with err set. */
int net_validate(const cJSON *spec, net_shape in, int classes, char *err, size_t errlen);

/* ---- building and training ------------------------------------------------ */

typedef struct net net;

typedef struct net_solver {
    char type[16];         /* "sgd" (issue 2); later "adam", "adamw" */
    float lr;              /* base learning rate */
    float momentum;        /* 0 = plain SGD */
    float weight_decay;    /* L2, 0 = none */
} net_solver;

/* Builds a network for batches of up to max_batch images on the named backend
 * ("cpu"), parameters initialised from seed. Returns a new net owned by the
 * caller, or NULL with err set. */
net *net_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                const char *backend, const net_solver *solver, uint64_t seed,
                char *err, size_t errlen);
void net_free(net *n);            /* net_free(NULL) is a no-op */

typedef struct net_stats {
    double loss;      /* mean softmax cross-entropy over the batch */
    int correct;      /* top-1 hits */
    int count;        /* images in the batch */
} net_stats;

/* One training step on n <= max_batch images: x is n*C*H*W floats (NCHW,
 * already normalised), labels are n class indices in [0, classes). Runs
 * forward, loss, backward and the solver update at learning rate lr.
 * Returns 0, or -1 with err set (a numerical or backend failure). */
int net_train_step(net *n, const float *x, const int32_t *labels, int count,
                   float lr, net_stats *out, char *err, size_t errlen);

/* Forward only (inference mode: no dropout), loss and accuracy on n images. */
int net_eval(net *n, const float *x, const int32_t *labels, int count,
             net_stats *out, char *err, size_t errlen);

/* Forward only; writes count*classes softmax probabilities into probs. */
int net_predict(net *n, const float *x, int count, float *probs, char *err, size_t errlen);

/* Writes all parameters as a safetensors file (F32, names like
 * "conv1.weight", "conv1.bias"), atomically (temporary name, fsync, rename). */
int net_save(const net *n, const char *path, char *err, size_t errlen);
/* Loads parameters saved by net_save into a net built from the same spec. */
int net_load(net *n, const char *path, char *err, size_t errlen);

/* Parameter count, for logs and info.json. */
size_t net_param_count(const net *n);

/* ---- backends and devices ------------------------------------------------- */

typedef struct engine_device {
    char kind[8];          /* "cpu" or "cuda" */
    int index;
    char name[128];
    uint64_t memory_bytes;
} engine_device;

/* NULL-terminated names of the backends compiled into this binary. */
const char *const *engine_backends(void);
/* Fills up to max devices (the CPU first, then any CUDA devices found);
 * returns how many there are. Never fails: a missing driver means no GPUs. */
int engine_devices(engine_device *out, int max);

#endif
