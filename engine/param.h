/* engine/param.h: one trainable tensor as the optimizers and checkpoints see
 * it, without the net that owns it.
 *
 * A net hands out its parameters as net_param records (net_param_tensors in
 * engine/net.h); engine/optim.h updates them and engine/checkpoint.h saves
 * them. Keeping the record here lets the optimizer take a parameter list
 * without knowing what a net is.
 */
#ifndef KILN_ENGINE_PARAM_H
#define KILN_ENGINE_PARAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct be_buf;

/* One tensor on a backend (its buffers belong to whoever made it: for a
 * net's parameters, the net, until net_free). grad holds dL/dvalue after a
 * backward pass (mean over the batch). decay is false for biases and
 * batch-norm scale/shift, which weight decay skips unless a solver asks
 * otherwise. */
typedef struct net_param {
    const char *name;              /* "conv1.weight", "bn1.bias", ...: the safetensors name */
    int ndim;
    int64_t shape[4];
    size_t count;                  /* FP32 elements */
    bool decay;                    /* weight decay applies */
    struct be_buf *value;          /* the parameter */
    struct be_buf *grad;           /* its gradient */
    struct be_buf *momentum;       /* count zeroed FP32s kept for SGD momentum (Adam's first
                                    * moment) */
} net_param;

#endif
