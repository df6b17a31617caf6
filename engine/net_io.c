/* engine/net_io.c: a net's parameters and batch-norm statistics to and
 * from safetensors files (engine/net.h, net_save and net_load). Saving is
 * atomic (st_write); loading checks every tensor before it changes any. */
#include "engine/net_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/safetensors.h"   /* st_write, st_open, st_find */

int net_save(const net *n, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    size_t total = 0, off = 0;
    for (int i = 0; i < net_saved_count(n); i++)
        total += net_saved_at(n, i)->count;
    float *host = malloc((total ? total : 1) * sizeof *host);
    st_tensor *t = calloc((size_t)net_saved_count(n) + 1, sizeof *t);
    const char *meta[] = { "kiln_format", "1", "network", n->spec.name, NULL };
    if (!host || !t) {
        set_err(err, errlen, "out of memory saving %zu parameters", total);
        goto out;
    }
    for (int i = 0; i < net_saved_count(n); i++) {
        const param *p = net_saved_at(n, i);
        if (n->be->buf_download(n->ctx, p->w, 0, host + off, p->count * sizeof *host,
                                err, errlen) < 0)
            goto out;
        t[i] = (st_tensor){ .name = p->name, .dtype = ST_F32, .ndim = p->ndim,
                            .data = host + off, .bytes = p->count * sizeof *host };
        memcpy(t[i].shape, p->shape, sizeof p->shape);
        off += p->count;
    }
    rc = st_write(path, t, net_saved_count(n), meta, err, errlen);
out:
    free(host);
    free(t);
    return rc;
}

static void shape_str(char *buf, size_t len, const int64_t *shape, int ndim)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

int net_load(net *n, const char *path, char *err, size_t errlen)
{
    int rc = -1;
    st_file *f = st_open(path, err, errlen);
    if (!f)
        return -1;
    /* Check everything before changing anything: all or nothing. */
    for (int i = 0; i < net_saved_count(n); i++) {
        const param *p = net_saved_at(n, i);
        const st_tensor *t = st_find(f, p->name);
        char want[96], got[96];
        if (!t) {
            set_err(err, errlen, "%s has no tensor \"%s\" (was it saved from this network?)",
                    path, p->name);
            goto out;
        }
        if (t->dtype != ST_F32) {
            set_err(err, errlen, "%s: tensor \"%s\" is %s, expected F32", path, p->name,
                    st_dtype_name(t->dtype));
            goto out;
        }
        if (t->ndim != p->ndim || memcmp(t->shape, p->shape, (size_t)p->ndim * sizeof(int64_t))) {
            shape_str(want, sizeof want, p->shape, p->ndim);
            shape_str(got, sizeof got, t->shape, t->ndim);
            set_err(err, errlen, "%s: tensor \"%s\" has shape %s, this network needs %s",
                    path, p->name, got, want);
            goto out;
        }
    }
    for (int i = 0; i < net_saved_count(n); i++) {
        const param *p = net_saved_at(n, i);
        const st_tensor *t = st_find(f, p->name);
        if (n->be->buf_upload(n->ctx, p->w, 0, t->data, t->bytes, err, errlen) < 0)
            goto out;
    }
    rc = net_params_changed(n, err, errlen);
out:
    st_close(f);
    return rc;
}
