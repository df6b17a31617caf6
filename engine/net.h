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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "engine/param.h"      /* net_param */
#include "engine/settings.h"   /* precision_mode, net_solver, net_devices */

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

/* Builds a network for batches of up to max_batch images on devices (NULL:
 * the CPU), parameters initialised from seed; solver NULL is plain SGD at
 * lr 0.01. Returns a new net owned by the caller, or NULL with err set.
 *
 * Several devices (devices->count > 1, up to KILN_MAX_DEVICES) train synchronously
 * data parallel: one replica per device, each batch split across them (the
 * first count % n replicas take one image more), gradients summed across
 * them in buckets while the backward pass goes on, every replica making the
 * same update. The result is the one net trained on the whole batch, within
 * rounding, except that batch norm normalises each replica's share with its
 * own statistics (no synchronised batch norm; running statistics are
 * averaged across replicas). The net's functions are used as for one
 * device: net_eval splits its images over the replicas too, net_predict
 * runs on the first. (Several CPU "devices" run replicas on the one CPU: that
 * exists to test this code.)
 *
 * Across processes (devices->world.size > 1, engine/settings.h net_world):
 * this process is one rank with one device (devices->count 1), and the net
 * is the same data-parallel net with its replicas in other processes, on
 * this machine or others: each rank gives net_train_step and net_eval the
 * whole batch and runs its rows of it (the replicas' split), and the
 * results are those of one process with as many replicas, bit for bit on
 * the CPU (engine/net_world.c). net_train_step, net_eval and net_any are
 * then collectives: every rank calls them alike, in the same order. A rank
 * that fails makes the others' next collective fail (at once when its
 * process is gone, after the world's timeout when it hangs). Each rank
 * builds its parameters from the seed; a checkpoint restored (net_load,
 * ckpt_load) must be the same one on every rank. */
net *net_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                const net_devices *devices, const net_solver *solver, uint64_t seed,
                char *err, size_t errlen);
void net_free(net *n);            /* net_free(NULL) is a no-op */

typedef struct net_stats {
    double loss;      /* mean softmax cross-entropy over the batch */
    int correct;      /* top-1 hits */
    int count;        /* images in the batch */
    /* training steps under AMP (engine/amp.h); 1 and false otherwise */
    float loss_scale; /* the scale this step's loss was multiplied by */
    bool skipped;     /* the gradients overflowed: no update was made (the scale halved) */
} net_stats;

/* One training step on n <= max_batch images: x is n*C*H*W floats (NCHW,
 * already normalised), labels are n class indices in [0, classes). Runs
 * forward, loss, backward and the solver update at learning rate lr.
 * Returns 0, or -1 with err set (a numerical or backend failure). */
int net_train_step(net *n, const float *x, const int32_t *labels, int count,
                   float lr, net_stats *out, char *err, size_t errlen);

/* Forward only (inference mode: no dropout), loss and accuracy on n images.
 *
 * Inference (net_eval and net_predict alike) runs each convolution with the
 * layers after it that only it feeds in one pass where the backend can (the
 * CPU's): its batch norm folded into the weights and bias (w' = w s, b' =
 * (b - mean) s + shift, s = scale / sqrt(var + eps)), then an add's other
 * input and a ReLU as post-ops (engine/net_fuse.c). The results are the
 * layer-by-layer ones up to rounding (tests/unit/test_engine_fuse.c has the
 * bound). The folded weights are made again whenever the parameters or
 * statistics changed (a training step, net_load, net_params_changed), so a
 * net that trains and validates between steps validates its current
 * weights, and a validation during training and an evaluation of the same
 * weights later give the same bits (same batch sizes and threads).
 * Training steps never fold (a batch norm or an add and the ReLU after it
 * do share one pass, net_fused_relus, with the same results as apart).
 * KILN_INFER_FUSE=0 in the environment when a net is created turns the
 * fusion off for that net (comparisons). */
int net_eval(net *n, const float *x, const int32_t *labels, int count,
             net_stats *out, char *err, size_t errlen);

/* Forward only, as net_eval; writes count*classes softmax probabilities into
 * probs. */
int net_predict(net *n, const float *x, int count, float *probs, char *err, size_t errlen);

/* Writes all parameters as a safetensors file (F32, names like
 * "conv1.weight", "conv1.bias"; batch norm also "bn1.running_mean" and
 * "bn1.running_var"), atomically (temporary name, fsync, rename). */
int net_save(const net *n, const char *path, char *err, size_t errlen);
/* Loads parameters saved by net_save into a net built from the same spec. */
int net_load(net *n, const char *path, char *err, size_t errlen);

/* Parameter count, for logs and info.json. */
size_t net_param_count(const net *n);
/* The devices n trains on: 1, or its replicas under data parallelism (with
 * the other processes' of a multi-process net). */
int net_device_count(const net *n);
/* The ReLUs that run in the pass of the batch norm, add or convolution
 * before them, training and inference alike (engine/net_build.c,
 * plan_relu_pairs; the same results as apart). */
int net_fused_relus(const net *n);
/* The activations n keeps channels-last (BE_NHWC: the backend's layout for
 * their channel count and type, engine/net_build.c plan_layouts). */
int net_channels_last(const net *n);

/* A multi-process net (net_create): this process's rank; 0 for any other. */
int net_world_rank(const net *n);

/* Whether mine is true on any rank of a multi-process net (a collective: a
 * stop that one rank's signal asked for, made by all at the same step);
 * mine itself for any other net. Returns 0 with *any set, or -1 with err
 * set (the net is then broken). */
int net_any(net *n, bool mine, bool *any, char *err, size_t errlen);

/* ---- parameters for optimizers (engine/optim.*, engine/checkpoint.*) ------ */

struct be_ctx;
struct backend;

/* Fills out[0..min(max, total)) with the net's trainable tensors
 * (engine/param.h) in a fixed order (layer order, weight before bias) and
 * returns the total; out may be NULL with max 0 to ask for the count. The
 * buffers belong to the net (its backend, its context: net_backend below);
 * they stay valid until net_free. After net_train_step's backward pass, grad
 * holds dL/dvalue for the latest batch (mean over the batch). */
size_t net_param_tensors(const net *n, net_param *out, size_t max);

/* The same for the net's state that is saved but not trained (batch norm's
 * running statistics, "bn1.running_mean"): value set, grad and momentum NULL. */
size_t net_state_tensors(const net *n, net_param *out, size_t max);

/* The backend and context the net's buffers live on (for optimizer ops). */
const struct backend *net_backend(const net *n, struct be_ctx **ctx);

/* The net's optimizer (engine/optim.h), made by net_create from its solver:
 * its state and step count, for checkpoints. */
struct optim;
struct optim *net_optim(net *n);

/* Training steps run so far (net_train_step counts them; dropout masks are
 * drawn from streams of the seed, the layer and this count). A checkpoint
 * saves it and restores it with net_set_step so that a resumed run draws the
 * same masks. */
uint64_t net_get_step(const net *n);
void net_set_step(net *n, uint64_t steps);

/* Mixed precision: the precision the net trains in, and the loss scaler's
 * state (engine/amp.h) for checkpoints and metrics. net_amp_set refuses (-1,
 * err set) a state the scaler cannot be in or one whose scaling differs from
 * the net's. */
precision_mode net_precision(const net *n);
typedef struct net_amp_state {
    bool dynamic;          /* dynamic loss scaling is on */
    double scale;          /* the current loss scale (1 without scaling) */
    int64_t clean;         /* clean steps since the scale last changed */
    int64_t skipped;       /* steps skipped for overflow so far */
} net_amp_state;
void net_amp_get(const net *n, net_amp_state *out);
int net_amp_set(net *n, const net_amp_state *s, char *err, size_t errlen);

/* After a parameter's or statistic's value buffer was written from outside
 * (a checkpoint restored, a test's edit): refreshes the 16-bit copies AMP
 * computes with and marks the folded inference weights stale (net_eval).
 * net_load and ckpt_load call it; so must anyone else who writes them.
 * Returns 0, or -1 with err set. */
int net_params_changed(net *n, char *err, size_t errlen);

/* ---- backends and devices ------------------------------------------------- */

typedef struct engine_device {
    char kind[8];          /* "cpu" or "cuda" */
    int index;
    char name[128];
    uint64_t memory_bytes;
    uint64_t free_bytes;   /* free now (the CPU: MemAvailable); 0: not known */
    int cc_major, cc_minor;    /* a GPU's compute capability (0.0 for the CPU) */
} engine_device;

/* NULL-terminated names of the backends compiled into this binary ("cuda"
 * whenever it is built, whether or not this machine can load it). */
const char *const *engine_backends(void);
/* Fills up to max devices (the CPU first, then any CUDA devices found);
 * returns how many there are. Never fails: a missing driver means no GPUs.
 * With a driver, the first call loads the CUDA plugin (engine/cuda/plugin.h);
 * one that cannot be loaded means no GPUs, and a line on stderr says why. */
int engine_devices(engine_device *out, int max);

#endif
