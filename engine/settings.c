/* engine/settings.c: the names of the engine's typed settings (settings.h). */
#include "engine/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static const char *const precisions[] = { "fp32", "amp-bf16", "amp-fp16", NULL };
static const char *const solvers[] = { "sgd", "adam", "adamw", NULL };
static const char *const larcs[] = { "none", "clip", "scale", NULL };
static const char *const kinds[] = { "cpu", "cuda", NULL };

_Static_assert(sizeof precisions / sizeof *precisions == PREC_COUNT + 1, "a name per precision");
_Static_assert(sizeof solvers / sizeof *solvers == SOLVER_COUNT + 1, "a name per solver");
_Static_assert(sizeof larcs / sizeof *larcs == LARC_COUNT + 1, "a name per LARC policy");
_Static_assert(sizeof kinds / sizeof *kinds == BACKEND_COUNT + 1, "a name per backend kind");

static const char *name_of(const char *const *names, int count, int v)
{
    return v >= 0 && v < count ? names[v] : "?";
}

static int index_of(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (!strcmp(names[i], s))
            return i;
    return -1;
}

const char *precision_name(precision_mode p) { return name_of(precisions, PREC_COUNT, (int)p); }
const char *solver_type_name(solver_type t) { return name_of(solvers, SOLVER_COUNT, (int)t); }
const char *larc_policy_name(larc_policy l) { return name_of(larcs, LARC_COUNT, (int)l); }
const char *backend_kind_name(backend_kind k) { return name_of(kinds, BACKEND_COUNT, (int)k); }

#define PARSER(fn, type, names)                  \
    int fn(const char *s, type *out)             \
    {                                            \
        int i = index_of(names, s);              \
        if (i < 0)                               \
            return -1;                           \
        *out = (type)i;                          \
        return 0;                                \
    }
PARSER(precision_parse, precision_mode, precisions)
PARSER(solver_type_parse, solver_type, solvers)
PARSER(larc_policy_parse, larc_policy, larcs)
PARSER(backend_kind_parse, backend_kind, kinds)
#undef PARSER

const char *const *precision_names(void) { return precisions; }
const char *const *solver_type_names(void) { return solvers; }
const char *const *larc_policy_names(void) { return larcs + 1; }

void settings_join(const char *const *names, char *buf, size_t n)
{
    size_t used = 0, count = 0;
    while (names[count])
        count++;
    if (n)
        buf[0] = '\0';
    for (size_t i = 0; i < count && used < n; i++) {
        const char *sep = i == 0 ? "" : i + 1 == count ? " or " : ", ";
        int k = snprintf(buf + used, n - used, "%s%s", sep, names[i]);
        if (k < 0)
            break;
        used += (size_t)k;
    }
}

net_devices net_devices_cpu(void)
{
    return (net_devices){ .kind = BACKEND_CPU, .count = 1, .ids = { 0 } };
}

int net_devices_parse(const char *s, net_devices *out, char *err, size_t errlen)
{
    char name[64];
    snprintf(name, sizeof name, "%s", s ? s : "cpu");
    char *colon = strchr(name, ':');
    if (colon)
        *colon = '\0';
    net_devices d = { .count = 1 };
    if (backend_kind_parse(name, &d.kind) < 0) {
        char known[32];
        settings_join(kinds, known, sizeof known);
        return set_err(err, errlen, "backend \"%s\" is unknown (%s, optionally with devices: "
                       "cuda:0,1)", name, known);
    }
    if (colon) {
        d.count = 0;
        for (char *p = colon + 1;; p++) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || (*end && *end != ',') || v < 0 || v > NET_DEVICE_NUMBER_MAX ||
                d.count == KILN_MAX_DEVICES)
                return set_err(err, errlen, "backend \"%s\": the devices must be numbers, such as "
                               "cuda:0 or cuda:0,1", s);
            for (int k = 0; k < d.count; k++)
                if (d.ids[k] == (int)v)
                    return set_err(err, errlen, "backend \"%s\": device %ld is listed twice", s, v);
            d.ids[d.count++] = (int)v;
            p = end;
            if (!*p)
                break;
        }
    }
    *out = d;
    return 0;
}

int net_devices_format(const net_devices *d, char *buf, size_t n)
{
    int at = snprintf(buf, n, "%s", backend_kind_name(d->kind));
    for (int k = 0; k < d->count && at >= 0 && (size_t)at < n; k++)
        at += snprintf(buf + at, n - (size_t)at, "%s%d", k ? "," : ":", d->ids[k]);
    return at >= 0 && (size_t)at < n ? 0 : -1;
}
