/* engine/amp.h: mixed precision's dynamic loss scaler (DESIGN.md, AMP;
 * seeds/004), a small state machine the net drives once per training step.
 *
 * The loss is multiplied by the scale S before the backward pass, so that
 * small FP16 activation gradients do not flush to zero; the weight gradients
 * are unscaled (x 1/S) in FP32 and checked for NaN and infinity. Then:
 *   - an overflow skips the whole step (weights, momentum and Adam moments
 *     untouched; the optimizer's step count does not advance) and halves S;
 *     if S falls below AMP_SCALE_FLOOR the run has diverged;
 *   - AMP_GROWTH_INTERVAL clean steps in a row double S (up to
 *     AMP_SCALE_MAX, so that S stays finite in long runs).
 * S starts at AMP_SCALE_INIT. A disabled scaler (FP32, and amp-bf16 unless
 * asked: bfloat16 has FP32's range) keeps S = 1 and treats an overflow as
 * divergence at once.
 */
#ifndef KILN_ENGINE_AMP_H
#define KILN_ENGINE_AMP_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/spec.h"            /* layer_kind */

/* The op lists (seeds/004's whitelist, blacklist and graylist): the
 * precision each layer computes and writes in under mixed precision.
 *   AMP_LOW    in the 16-bit type, with FP32 accumulation: convolution and
 *              dense (the one that writes the logits writes FP32)
 *   AMP_INPUT  in the type of its input: activations, pooling, dropout,
 *              add, concat, flatten, and batch norm (whose statistics,
 *              scale and shift are FP32 inside)
 * Softmax and the loss are not layers: they are FP32 always. A tensor is
 * cast only where it crosses from one type to another (engine/net_build.c,
 * plan_dtypes). */
typedef enum amp_class { AMP_LOW, AMP_INPUT } amp_class;
amp_class amp_layer_class(layer_kind k);

/* Which activations of s are 16-bit under mixed precision: low[a] for a in
 * 0..s->nlayers (0 the images, a = i + 1 layer i's output), by the op lists;
 * all false for fp32 (amp false). Returns 0, or -1 with err naming a layer
 * that joins a 16-bit input with an FP32 one (the images before any
 * AMP_LOW layer), which mixed precision does not run. */
int amp_plan(const net_spec *s, bool amp, bool *low, char *err, size_t errlen);

#define AMP_SCALE_INIT 65536.0f         /* 2^16 */
#define AMP_GROWTH_INTERVAL 2000
#define AMP_SCALE_FLOOR 1.0f            /* below: every overflow is the model's, not underflow's */
#define AMP_SCALE_MAX 4294967296.0f     /* 2^32 */

typedef struct amp_scaler {
    bool dynamic;                       /* false: S = 1, no skipping */
    float scale;                        /* S */
    int64_t clean;                      /* clean steps since S last changed */
    int64_t skipped;                    /* steps skipped so far */
} amp_scaler;

typedef enum amp_verdict {
    AMP_APPLY,                          /* gradients are finite: update */
    AMP_SKIP,                           /* overflow: skip this update; S halved */
    AMP_DIVERGED,                       /* overflow with S at the floor, or without scaling */
} amp_verdict;

void amp_scaler_init(amp_scaler *s, bool dynamic);

/* After the backward pass: overflow says whether any unscaled gradient was
 * NaN or infinite. Updates the state and says what to do with the step. */
amp_verdict amp_scaler_update(amp_scaler *s, bool overflow);

/* Restores a saved state (a checkpoint); returns false, leaving s alone,
 * when the values are not a state the scaler can reach. */
bool amp_scaler_restore(amp_scaler *s, bool dynamic, double scale, int64_t clean,
                        int64_t skipped);

#endif
