/* engine/optim.h: the optimizers that update a list of parameters.
 *
 * SGD (momentum, Nesterov), Adam and AdamW, in PyTorch's forms; weight decay
 * (not on biases and batch-norm parameters unless the solver's decay_bias
 * asks); gradient clipping by global L2 norm; LARC (seeds/000) with the
 * "clip" and "scale" policies. One step, after the backward pass:
 *   1. global norm  N = sqrt(sum over all gradients of g^2); with clip_norm > 0
 *      and N > clip_norm, every gradient is scaled by clip_norm / (N + 1e-6)
 *      (torch.nn.utils.clip_grad_norm_);
 *   2. LARC (sgd only): per tensor, the multiplier ew_larc_factor of its weight
 *      norm and clipped gradient norm; it scales the gradient and the weight
 *      decay term alike (apex's LARC: (g + wd w) * factor);
 *   3. the update, element-wise on the backend (ew_sgd, ew_adam in
 *      engine/elementwise.h).
 * The plain SGD path (no Nesterov, clipping or LARC) runs the backend's
 * sgd_update, the same arithmetic as before issue 3.
 *
 * State: SGD keeps one velocity per parameter (the net's momentum buffer),
 * Adam and AdamW a first and second moment and the step count t. The state is
 * exposed for checkpoints (optim_state_tensors, optim_set_steps); restoring it
 * and the weights continues training bit for bit.
 *
 * Determinism: norms are summed by the backend in a fixed order, the rest is
 * element-wise: the same inputs and thread count give the same weights.
 *
 * An optimizer knows a backend, its context and a parameter list
 * (engine/param.h), not a net: a net makes its own (net_create) and hands it
 * out for checkpoints (net_optim in engine/net.h).
 */
#ifndef KILN_ENGINE_OPTIM_H
#define KILN_ENGINE_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"    /* backend, be_ctx, be_buf */
#include "engine/param.h"      /* net_param */
#include "engine/settings.h"   /* net_solver */

/* The defaults a solver gets for what it leaves at zero (optim_check): Adam's
 * betas and eps (PyTorch's), LARC's trust coefficient (seeds/000). The job
 * configuration's table (jobs/jobcfg.c) publishes the same values. */
#define OPTIM_ADAM_BETA1 0.9
#define OPTIM_ADAM_BETA2 0.999
#define OPTIM_ADAM_EPS 1e-8
#define OPTIM_LARC_ETA 0.001

typedef struct optim optim;

/* Checks a solver's type and ranges and fills *out with it, defaults
 * resolved (Adam's betas and eps when all three are 0, LARC's eta).
 * Returns 0, or -1 with err set to a message naming the field. */
int optim_check(const net_solver *s, net_solver *out, char *err, size_t errlen);

/* An optimizer for the nparams parameters params[] (each value, grad and
 * momentum buffer a count-float buffer of backend be on context ctx),
 * allocating the state it needs beyond their momentum buffers on that
 * backend. It copies the array; the names and buffers it points to must
 * outlive the optimizer. s must have passed optim_check. Returns a new optim
 * owned by the caller (net_create keeps one inside the net), or NULL with
 * err set. */
optim *optim_create(const backend *be, be_ctx *ctx, const net_param *params, size_t nparams,
                    const net_solver *s, char *err, size_t errlen);
void optim_free(optim *o);                     /* NULL is a no-op */

/* One update of every parameter from its gradient at learning rate lr.
 * *grad_norm (when not NULL) gets the global gradient norm before clipping
 * (computed only when clipping or LARC needs it; otherwise -1).
 * Returns 0, or -1 with err set (a backend failure). */
int optim_step(optim *o, float lr, double *grad_norm, char *err, size_t errlen);

/* Updates run so far (Adam's t). */
uint64_t optim_steps(const optim *o);
void optim_set_steps(optim *o, uint64_t t);

/* The solver in use (defaults resolved). */
const net_solver *optim_solver(const optim *o);

/* One state tensor: slot "momentum" (sgd), "exp_avg" or "exp_avg_sq"
 * (adam, adamw) of parameter `param` (a net_param name), count FP32 values in
 * buf on the optimizer's backend. */
typedef struct optim_state {
    const char *param;
    const char *slot;
    int ndim;
    int64_t shape[4];
    size_t count;
    be_buf *buf;
} optim_state;

/* Fills out[0..min(max, total)) and returns the total (out may be NULL with
 * max 0). Order: parameters in the order given to optim_create, slots in the
 * order above. */
size_t optim_state_tensors(const optim *o, optim_state *out, size_t max);

#endif
