/* engine/net.c: networks from specs, trained on a backend (engine/net.h):
 * net_create over a device list, net_free and the accessors. How a net is
 * laid out, and which file does what, is in engine/net_internal.h.
 */
#include "engine/net_internal.h"

#include <string.h>

#include "base/err.h"

net *net_create(const cJSON *spec, net_shape in, int classes, int max_batch,
                const net_devices *devices, const net_solver *solver, uint64_t seed,
                char *err, size_t errlen)
{
    net_devices cpu = net_devices_cpu();
    const net_devices *d = devices ? devices : &cpu;
    const int *devs = d->ids;
    int nd = d->count;
    if (nd < 1 || nd > KILN_MAX_DEVICES) {
        set_err(err, errlen, "a net trains on 1 to %d devices, not %d", KILN_MAX_DEVICES, nd);
        return NULL;
    }
    for (int i = 0; i < nd; i++)
        for (int k = 0; k < i; k++)
            if (devs[k] == devs[i]) {
                set_err(err, errlen, "device %d is listed twice", devs[i]);
                return NULL;
            }
    const backend *be = backend_for(d->kind, err, errlen);
    if (!be)
        return NULL;
    if (d->world.size > 1)
        return net_world_create(spec, in, classes, max_batch, be, d, solver, seed, err, errlen);
    if (nd == 1)
        return net_build(spec, in, classes, max_batch, be, devs[0], 0, 1, solver, seed, err,
                         errlen);
    return net_dp_create(spec, in, classes, max_batch, be, d, solver, seed, err, errlen);
}

void net_free(net *n)
{
    if (!n)
        return;
    if (n->rep)                 /* the primary: its replicas first, which share its comm */
        net_dp_free(n);
    if (n->world)
        net_world_free(n);
    net_build_free(n);
}

/* ---- accessors ------------------------------------------------------------- */

size_t net_param_count(const net *n)
{
    size_t total = 0;
    for (int i = 0; i < n->nparams; i++)
        total += n->params[i].count;
    return total;
}

int net_device_count(const net *n)
{
    return n->nrep;
}

int net_fused_relus(const net *n)
{
    int c = 0;
    for (int i = 0; i < n->nlayers; i++)
        c += n->layers[i].s->kind == LAYER_RELU && n->layers[i].relu_pair >= 0;
    return c;
}

int net_channels_last(const net *n)
{
    int c = 0;
    for (int a = 0; a <= n->nlayers; a++)
        c += n->layout[a] == BE_NHWC;
    return c;
}

size_t net_param_tensors(const net *n, net_param *out, size_t max)
{
    for (int i = 0; i < n->nparams && (size_t)i < max; i++) {
        const param *p = &n->params[i];
        out[i] = (net_param){ .name = p->name, .ndim = p->ndim, .count = p->count,
                              .decay = p->decay, .value = p->w, .grad = p->g,
                              .momentum = p->v };
        memcpy(out[i].shape, p->shape, sizeof p->shape);
    }
    return (size_t)n->nparams;
}

size_t net_state_tensors(const net *n, net_param *out, size_t max)
{
    for (int i = 0; i < n->nstats && (size_t)i < max; i++) {
        const param *p = &n->stats[i];
        out[i] = (net_param){ .name = p->name, .ndim = p->ndim, .count = p->count,
                              .value = p->w };
        memcpy(out[i].shape, p->shape, sizeof p->shape);
    }
    return (size_t)n->nstats;
}

const backend *net_backend(const net *n, be_ctx **ctx)
{
    if (ctx)
        *ctx = n->ctx;
    return n->be;
}

optim *net_optim(net *n)
{
    return n->opt;
}

uint64_t net_get_step(const net *n)
{
    return n->steps;
}

void net_set_step(net *n, uint64_t steps)
{
    n->steps = steps;
}

precision_mode net_precision(const net *n)
{
    return n->solver.precision;
}

void net_amp_get(const net *n, net_amp_state *out)
{
    *out = (net_amp_state){ .dynamic = n->scaler.dynamic, .scale = n->scaler.scale,
                            .clean = n->scaler.clean, .skipped = n->scaler.skipped };
}

int net_amp_set(net *n, const net_amp_state *s, char *err, size_t errlen)
{
    if (s->dynamic != n->scaler.dynamic)
        return set_err(err, errlen, "the saved state %s loss scaling; this run %s",
                       s->dynamic ? "uses" : "has no", n->scaler.dynamic ? "uses it" : "does not");
    if (!amp_scaler_restore(&n->scaler, s->dynamic, s->scale, s->clean, s->skipped))
        return set_err(err, errlen, "loss scale %g (after %lld clean steps) is not a state the "
                       "scaler can be in", s->scale, (long long)s->clean);
    return 0;
}
