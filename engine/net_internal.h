/* engine/net_internal.h: the inside of a net, shared by the files that
 * implement engine/net.h. Nothing outside engine/net*.c includes it.
 *
 *   net.c          net_create over a device list, net_free, the accessors
 *   net_build.c    one net (one replica) from a spec: parameters, layouts,
 *                  element types, buffers, the memory check, its optimizer
 *   net_plans.c    the backend's plans, one set per batch size
 *   net_step.c     forward, loss, backward and update: train, eval, predict
 *   net_dp.c       data parallelism: replicas, their threads, the batch
 *                  split, allreduce, broadcast
 *   net_io.c       net_save, net_load
 *   net_fuse.c     inference: convolutions with the batch norm, residual add
 *                  and ReLU after them folded in (fuse groups, below)
 *   net_builtin.c  the built-in specs and net_validate
 *
 * A net is a DAG of layers (engine/spec.h; each layer's inputs are earlier
 * layers, so list order is a topological order) over buffers the backend owns:
 *   act[a]   activation a: act[0] the images, act[i + 1] layer i's output,
 *            act[L] the logits
 *   grad[a]  dL/d act[a], only where a depends on some parameter (need_grad;
 *            the first layers' input gradients are never computed)
 * Flatten is a view: its act is its input's buffer, and so is its grad when
 * the flatten is its input's only consumer. Where an activation feeds several
 * layers, its gradient is the sum of their contributions: backward runs the
 * layers in reverse order, the first contribution (from the last consumer)
 * overwrites grad[a] and later ones are added (directly by ops that take a
 * beta, through the scratch buffer `tmp` otherwise). Every buffer is sized for
 * max_batch; a batch of n uses the first n images.
 *
 * Determinism: initialisation draws from seed-derived streams per parameter;
 * the backend's ops are deterministic for a given thread count; the loss is
 * added in row order. So the same seed, data and thread count give the same
 * losses bit for bit.
 */
#ifndef KILN_ENGINE_NET_INTERNAL_H
#define KILN_ENGINE_NET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/amp.h"       /* amp_scaler */
#include "engine/backend.h"
#include "engine/net.h"
#include "engine/optim.h"
#include "engine/spec.h"

#define NET_PLAN_SETS 4
#define PARAM_NAME_MAX (SPEC_NAME_MAX + 8)

typedef struct param {
    char name[PARAM_NAME_MAX];      /* "<layer>.weight" */
    int ndim;
    int64_t shape[4];
    size_t count;
    bool decay;                     /* weight decay applies (weights, not biases) */
    be_buf *w, *g, *v;              /* value, gradient, momentum */
    be_buf *h;                      /* AMP: the 16-bit copy of a conv or dense weight, which
                                     * the forward and backward passes read; else NULL */
} param;

typedef struct layer {
    const layer_spec *s;
    int w, b;                       /* parameter indices, -1 for none */
    int rm, rv;                     /* batchnorm: running mean and variance (n->stats) */
    bool need_dx;                   /* compute the gradient of some input */
    bool dx[SPEC_MAX_INPUTS];       /* ... of input k */
    bool first[SPEC_MAX_INPUTS];    /* input k's gradient is overwritten, not added to */
    bool grad_alias;                /* flatten: grad[out] is grad[in] */
    int relu_pair;                  /* a batch norm, an add of two or a convolution and the
                                     * ReLU that alone reads it, run as one backend pass
                                     * (be_bn_desc.relu, be_add_desc.relu; the convolution's
                                     * forward pass only, be_conv_desc.relu): on the host,
                                     * that ReLU's index; on the ReLU, the host's; -1
                                     * elsewhere (net_build.c, plan_relu_pairs) */
    uint64_t seed;                  /* dropout: the layer's stream */
    be_buf *mask;                   /* dropout: the latest training mask */
    be_buf *mean, *var;             /* batchnorm: the latest batch statistics */
    int bucket_lo, bucket_hi;       /* data parallelism: after this layer's backward pass,
                                     * the gradients of parameters [lo, hi) are final and
                                     * travel as one bucket (none when equal) */
} layer;

_Static_assert(SPEC_MAX_INPUTS == BE_MAX_INPUTS, "the spec's inputs fit the backend's");

typedef struct plan_set {
    int n;                          /* batch size; 0: slot unused */
    be_plan **plans;                /* nlayers + 1: one per layer (NULL for flatten), loss */
    be_plan **infer;                /* ngroups: each fuse group's inference plan, made at the
                                     * first inference pass of this size; NULL before */
    unsigned long used;
} plan_set;

/* Inference (net_eval, net_predict; engine/net_fuse.c): every convolution
 * heads a fuse group, one backend conv_infer pass that also does the work of
 * the layers after it that only it feeds: a batch norm (folded into its
 * weights and bias, w' = w s, b' = (b - mean) s + shift with s = scale /
 * sqrt(var + eps)), then an add of two inputs (the other input, `addend`,
 * added by the pass), then a ReLU or leaky ReLU. The group runs at its last
 * layer's turn (every input is ready by then), writes that layer's output,
 * and the layers inside it are skipped: their activations are not written
 * in inference. Training never uses groups.
 *
 * The folded weights follow the parameters through a generation count:
 * net->gen changes with every change of the parameters or the batch norm
 * statistics (net_refresh_copies, which every such change calls: an applied
 * update, net_load, a checkpoint's restore, a broadcast to replicas), and a
 * group folds again when its gen differs. So validation between training
 * steps, an evaluation of a snapshot and inference all run the same folded
 * arithmetic on the same weights. */
typedef struct fuse_group {
    int conv, bn, add, act;         /* layer indices; bn, add, act -1 where absent */
    int addend;                     /* add: the activation of its other input */
    int tail;                       /* the last layer of the group: it runs at its turn */
    int out;                        /* the activation it writes (tail + 1) */
    be_buf *w32, *wh, *b;           /* bn: the folded FP32 weights, their 16-bit copy under
                                     * AMP (else NULL) and the folded bias */
    uint64_t gen;                   /* net->gen they were folded at (0: never) */
} fuse_group;

struct rep_pool;                    /* net_dp.c: the replicas' threads */

struct net {
    const backend *be;
    be_ctx *ctx;
    net_spec spec;
    int max_batch, classes;
    net_solver solver;
    optim *opt;                     /* the solver's update and state (engine/optim.h) */
    int nlayers;
    layer *layers;
    int nparams;
    param *params;
    int nstats;
    param *stats;                   /* not trained: batch norm running statistics */
    be_buf **act, **grad;           /* nlayers + 1 each */
    bool *act_own, *grad_own;
    bool *need_grad;                /* nlayers + 1: activation depends on a parameter */
    be_layout *layout;              /* nlayers + 1: how activation a and its gradient lie */
    be_dtype *dtype;                /* nlayers + 1: activation a's type, and its gradient's */
    be_dtype half;                  /* the 16-bit type of AMP (BE_BF16, BE_F16), or BE_F32 */
    amp_scaler scaler;              /* the dynamic loss scaler (engine/amp.h) */
    be_buf *logits32, *dlogits32;   /* the logits and their gradient in FP32 for the loss,
                                     * when the last layer writes a 16-bit type */
    be_buf *tmp;                    /* one activation: gradient contributions to add */
    uint64_t steps;                 /* training steps run (dropout streams) */
    be_buf *labels;                 /* int32 x max_batch */
    be_buf *probs;                  /* float x max_batch x classes */
    plan_set sets[NET_PLAN_SETS];
    unsigned long clock;
    int ngroups;                    /* fuse groups (above); 0 where the backend has no
                                     * conv_infer or KILN_INFER_FUSE=0 */
    fuse_group *groups;
    int *group_of;                  /* nlayers: the group a layer belongs to, or -1 */
    uint64_t gen;                   /* the parameters' generation (fuse_group), from 1 */
    int last_batch;                 /* images of the latest training step (batch norm's m) */
    /* Data parallelism (engine/net.h, net_create): a net on several devices
     * is this net, rank 0 (the primary), and nrep - 1 replicas, nets of
     * their own built alike from the same seed, one per device. */
    int nrep, rank;
    int device;                     /* the backend's device number this net runs on */
    int global_batch;               /* the primary: the largest batch a step takes in all */
    net **rep;                      /* the primary: nrep nets, rep[0] itself; else NULL */
    be_comm *comm;                  /* shared by the replicas; the primary owns it */
    struct rep_pool *pool;          /* the primary: the threads running replicas 1.. */
    bool broken;                    /* a replica failed mid-step; the replicas may differ */
    bool world;                     /* rank `rank` of nrep processes (engine/net_world.c):
                                     * no replicas here, comm reaches the other processes */
    float *zeros;                   /* host zeros for a replica without images in a step */
    size_t zeros_count;
};

/* What net_save writes and net_load reads (and a broadcast copies): the
 * parameters, then the state that is not trained (batch norm running
 * statistics). */
static inline int net_saved_count(const net *n)
{
    return n->nparams + n->nstats;
}

static inline const param *net_saved_at(const net *n, int i)
{
    return i < n->nparams ? &n->params[i] : &n->stats[i - n->nparams];
}

/* Whether host (a layer with relu_pair >= 0 that is not the ReLU) runs its
 * ReLU's backward pass too, reading the ReLU's gradient as its own: a batch
 * norm or an add does; a convolution hosts the forward pass only, and the
 * ReLU's backward pass writes the convolution's gradient. */
static inline bool net_relu_bwd_hosted(const layer *host)
{
    return host->s->kind != LAYER_CONV2D;
}

/* ---- net_build.c ---------------------------------------------------------- */

/* One net (one replica, rank of nrep) on device `device` of backend be: the
 * spec parsed, the solver checked, the memory checked, every buffer, the
 * plans for max_batch and the optimizer made. Returns the net, or NULL with
 * err set. */
net *net_build(const cJSON *spec, net_shape in, int classes, int max_batch,
               const backend *be, int device, int rank, int nrep,
               const net_solver *solver, uint64_t seed, char *err, size_t errlen);
/* Everything net_build made; net_free's part for one replica. NULL is a no-op. */
void net_build_free(net *n);
/* Prefixes err with "layer 2 (conv2d \"conv2\")"; returns -1. */
int net_layer_fail(const layer *l, char *err, size_t errlen);
/* Floats one image of activation a (and of its gradient) takes in its layout. */
size_t net_act_elems(const net *n, int a);
/* The parameters or statistics changed: the 16-bit weight copies of AMP
 * made again from the FP32 weights, and the generation that the folded
 * inference weights follow (fuse_group) moved on. Everything that writes
 * parameters or statistics calls it. */
int net_refresh_copies(net *n, char *err, size_t errlen);
/* How many layer inputs read activation a. */
int net_consumers(const net *n, int a);

/* ---- net_plans.c ---------------------------------------------------------- */

/* The plan set for batch size bn, made if needed (the least recently used
 * other than max_batch's replaced), or NULL with err set. */
plan_set *net_plans_for(net *n, int bn, char *err, size_t errlen);
/* Frees every plan set. */
void net_plans_free(net *n);
/* The descriptor of convolution layer i at batch size bn, as its training
 * plan has it (no post-ops). */
be_conv_desc net_conv_desc(const net *n, int i, int bn);

/* ---- net_step.c: one replica's halves of a step -------------------------- */

int net_step_grads(net *n, const float *x, const int32_t *labels, int count, int total,
                   double *loss_sum, int *correct, char *err, size_t errlen);
int net_step_update(net *n, float lr, bool loss_finite, double mean_loss, int active,
                    bool *skipped, char *err, size_t errlen);
int net_eval_chunks(net *n, const float *x, const int32_t *labels, int count, double *total,
                    int *correct, char *err, size_t errlen);

/* ---- net_fuse.c ----------------------------------------------------------- */

/* The fuse groups of a built net (layouts and types known), with their
 * folded-weight buffers; none where the backend cannot run them. Returns 0,
 * or -1 with err set. */
int net_fuse_build(net *n, char *err, size_t errlen);
/* What net_fuse_build made, and the inference plans of ps. */
void net_fuse_free(net *n);
void net_fuse_plans_free(net *n, plan_set *ps);
/* Inference forward pass at layer i, for ps's batch size: 1 when the groups
 * took care of the layer (ran its group, or skipped it as part of one), 0
 * when it runs on its own, -1 with err set (naming the layer) on a failure. */
int net_fuse_layer(net *n, plan_set *ps, int i, char *err, size_t errlen);

/* ---- net_dp.c ------------------------------------------------------------- */

/* A net on d->count >= 2 devices of backend be (engine/net.h, net_create):
 * the primary and its replicas, their communicator and threads. Returns the
 * primary, or NULL with err set. */
net *net_dp_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                   const backend *be, const net_devices *d, const net_solver *solver,
                   uint64_t seed, char *err, size_t errlen);
/* The primary's threads, replicas and communicator freed (net_free's part). */
void net_dp_free(net *n);
/* Sums tensors [lo, hi) of ps over the replicas: gradients, or (grads false)
 * values (engine/backend.h, allreduce). Nothing when lo == hi. */
int net_dp_allreduce(net *n, const param *ps, int lo, int hi, bool grads, char *err,
                     size_t errlen);
/* A training step and an evaluation with the images split over the replicas. */
int net_dp_train_step(net *n, const float *x, const int32_t *labels, int count, float lr,
                      net_stats *out, char *err, size_t errlen);
int net_dp_eval(net *n, const float *x, const int32_t *labels, int count, double *total,
                int *correct, char *err, size_t errlen);
/* Replica r's share of count images split over nrep (the first count % nrep
 * take one more), and where it starts. */
int net_dp_share(int count, int nrep, int r);
int net_dp_offset(int count, int nrep, int r);
/* The gradient buckets of n's layers (layer.bucket_lo, bucket_hi). */
void net_dp_plan_buckets(net *n);

/* ---- net_world.c: data parallelism across processes ----------------------- */

/* Rank d->world.rank of d->world.size processes on d's one device
 * (engine/net.h, net_create). Returns the net, or NULL with err set. */
net *net_world_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                      const backend *be, const net_devices *d, const net_solver *solver,
                      uint64_t seed, char *err, size_t errlen);
/* Its communicator freed (net_free's part). */
void net_world_free(net *n);
/* A training step and an evaluation of the whole batch, this rank's share
 * here, the losses and hits gathered from the others. */
int net_world_train_step(net *n, const float *x, const int32_t *labels, int count, float lr,
                         net_stats *out, char *err, size_t errlen);
int net_world_eval(net *n, const float *x, const int32_t *labels, int count, double *total,
                   int *correct, char *err, size_t errlen);

#endif
