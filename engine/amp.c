/* engine/amp.c: the dynamic loss scaler (engine/amp.h). */
#include "engine/amp.h"

#include <math.h>

#include "base/err.h"

/* The op lists of engine/amp.h, one line per layer kind. A switch with no
 * default: a new layer kind does not compile (-Wswitch) until it is listed. */
amp_class amp_layer_class(layer_kind k)
{
    switch (k) {
    case LAYER_CONV2D:          return AMP_LOW;
    case LAYER_DENSE:           return AMP_LOW;
    case LAYER_MAXPOOL:         return AMP_INPUT;
    case LAYER_AVGPOOL:         return AMP_INPUT;
    case LAYER_GLOBAL_AVGPOOL:  return AMP_INPUT;
    case LAYER_RELU:            return AMP_INPUT;
    case LAYER_LEAKY_RELU:      return AMP_INPUT;
    case LAYER_SIGMOID:         return AMP_INPUT;
    case LAYER_TANH:            return AMP_INPUT;
    case LAYER_DROPOUT:         return AMP_INPUT;
    case LAYER_BATCHNORM:       return AMP_INPUT;      /* statistics in FP32 inside */
    case LAYER_ADD:             return AMP_INPUT;
    case LAYER_CONCAT:          return AMP_INPUT;
    case LAYER_FLATTEN:         return AMP_INPUT;
    }
    return AMP_INPUT;
}

int amp_plan(const net_spec *s, bool amp, bool *low, char *err, size_t errlen)
{
    const int L = s->nlayers;
    low[0] = false;
    for (int i = 0; i < L; i++) {
        const layer_spec *l = &s->layers[i];
        bool t = low[l->inputs[0]];
        if (amp_layer_class(l->kind) == AMP_LOW) {
            t = amp && i + 1 < L;           /* the logits are FP32 for the loss */
        } else {
            for (int k = 1; k < l->ninputs; k++)
                if (low[l->inputs[k]] != t)
                    return set_err(err, errlen, "layer %d (%s \"%s\") joins a %s input with a "
                                   "%s one: mixed precision keeps the images in FP32 until a "
                                   "convolution or dense layer, so join them after one",
                                   l->number, l->type, l->name, t ? "16-bit" : "32-bit",
                                   t ? "32-bit" : "16-bit");
        }
        low[i + 1] = t;
    }
    return 0;
}

void amp_scaler_init(amp_scaler *s, bool dynamic)
{
    s->dynamic = dynamic;
    s->scale = dynamic ? AMP_SCALE_INIT : 1.0f;
    s->clean = 0;
    s->skipped = 0;
}

amp_verdict amp_scaler_update(amp_scaler *s, bool overflow)
{
    if (!s->dynamic)
        return overflow ? AMP_DIVERGED : AMP_APPLY;
    if (overflow) {
        s->skipped++;
        s->clean = 0;
        s->scale *= 0.5f;
        return s->scale < AMP_SCALE_FLOOR ? AMP_DIVERGED : AMP_SKIP;
    }
    if (++s->clean >= AMP_GROWTH_INTERVAL) {
        s->clean = 0;
        if (s->scale * 2.0f <= AMP_SCALE_MAX)
            s->scale *= 2.0f;
    }
    return AMP_APPLY;
}

bool amp_scaler_restore(amp_scaler *s, bool dynamic, double scale, int64_t clean,
                        int64_t skipped)
{
    /* reachable scales are powers of two in [floor / 2, max] (1 without scaling) */
    int e;
    if (!isfinite(scale) || frexp(scale, &e) != 0.5 || clean < 0 || skipped < 0 ||
        clean >= AMP_GROWTH_INTERVAL ||
        (dynamic ? scale < AMP_SCALE_FLOOR / 2 || scale > AMP_SCALE_MAX : scale != 1.0))
        return false;
    s->dynamic = dynamic;
    s->scale = (float)scale;
    s->clean = clean;
    s->skipped = skipped;
    return true;
}
