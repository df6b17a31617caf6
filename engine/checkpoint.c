/* engine/checkpoint.c: checkpoints as safetensors files (format in
 * engine/checkpoint.h). */
#include "engine/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/backend.h"       /* buf_download, buf_upload */
#include "base/err.h"
#include "engine/optim.h"         /* optim_state_tensors, optim_steps */
#include "engine/safetensors.h"   /* st_write, st_open, st_find, st_meta */

#define NAME_MAX_LEN 192
#define HEADER_PEEK_MAX (16u << 20)

/* Everything a checkpoint holds, as host tensors. */
typedef struct ckpt_set {
    size_t n;                      /* tensors */
    net_param *params;             /* parameters then statistics: np + ns */
    size_t np, ns;
    optim_state *states;
    size_t nos;
    char (*names)[NAME_MAX_LEN];   /* one per tensor */
    struct be_buf **bufs;
    size_t *counts;
} ckpt_set;

static void set_free(ckpt_set *s)
{
    free(s->params);
    free(s->states);
    free(s->names);
    free(s->bufs);
    free(s->counts);
    memset(s, 0, sizeof *s);
}

/* Collects the tensors of n (names, buffers, shapes through params/states). */
static int set_collect(net *n, ckpt_set *s, char *err, size_t errlen)
{
    optim *o = net_optim(n);
    memset(s, 0, sizeof *s);
    s->np = net_param_tensors(n, NULL, 0);
    s->ns = net_state_tensors(n, NULL, 0);
    s->nos = optim_state_tensors(o, NULL, 0);
    s->n = s->np + s->ns + s->nos;
    s->params = calloc(s->np + s->ns + 1, sizeof *s->params);
    s->states = calloc(s->nos + 1, sizeof *s->states);
    s->names = calloc(s->n + 1, sizeof *s->names);
    s->bufs = calloc(s->n + 1, sizeof *s->bufs);
    s->counts = calloc(s->n + 1, sizeof *s->counts);
    if (!s->params || !s->states || !s->names || !s->bufs || !s->counts) {
        set_free(s);
        return set_err(err, errlen, "out of memory");
    }
    net_param_tensors(n, s->params, s->np);
    net_state_tensors(n, s->params + s->np, s->ns);
    optim_state_tensors(o, s->states, s->nos);
    for (size_t i = 0; i < s->np + s->ns; i++) {
        snprintf(s->names[i], NAME_MAX_LEN, "%s", s->params[i].name);
        s->bufs[i] = s->params[i].value;
        s->counts[i] = s->params[i].count;
    }
    for (size_t i = 0; i < s->nos; i++) {
        size_t k = s->np + s->ns + i;
        snprintf(s->names[k], NAME_MAX_LEN, "optim/%s/%s", s->states[i].param, s->states[i].slot);
        s->bufs[k] = s->states[i].buf;
        s->counts[k] = s->states[i].count;
    }
    return 0;
}

static void shape_of(const ckpt_set *s, size_t i, int *ndim, int64_t *shape)
{
    if (i < s->np + s->ns) {
        *ndim = s->params[i].ndim;
        memcpy(shape, s->params[i].shape, sizeof s->params[i].shape);
    } else {
        *ndim = s->states[i - s->np - s->ns].ndim;
        memcpy(shape, s->states[i - s->np - s->ns].shape, sizeof s->states[0].shape);
    }
}

int ckpt_save(net *n, const char *path, const ckpt_info *info, char *err, size_t errlen)
{
    ckpt_set s;
    be_ctx *ctx;
    const backend *be = net_backend(n, &ctx);
    float *host = NULL;
    st_tensor *t = NULL;
    int rc = -1;
    if (set_collect(n, &s, err, errlen) < 0)
        return -1;
    size_t total = 0;
    for (size_t i = 0; i < s.n; i++)
        total += s.counts[i];
    host = malloc((total ? total : 1) * sizeof *host);
    t = calloc(s.n + 1, sizeof *t);
    if (!host || !t) {
        set_err(err, errlen, "out of memory saving a checkpoint of %zu values", total);
        goto out;
    }
    size_t off = 0;
    for (size_t i = 0; i < s.n; i++) {
        size_t bytes = s.counts[i] * sizeof *host;
        if (be->buf_download(ctx, s.bufs[i], 0, host + off, bytes, err, errlen) < 0)
            goto out;
        t[i] = (st_tensor){ .name = s.names[i], .dtype = ST_F32, .data = host + off,
                            .bytes = bytes };
        int64_t shape[4];
        shape_of(&s, i, &t[i].ndim, shape);
        memcpy(t[i].shape, shape, sizeof shape);
        off += s.counts[i];
    }
    const net_solver *sv = optim_solver(net_optim(n));
    char step[24], epoch[24], estep[24], osteps[24], nsteps[24], seed[24];
    snprintf(step, sizeof step, "%" PRId64, info->step);
    snprintf(epoch, sizeof epoch, "%d", info->epoch);
    snprintf(estep, sizeof estep, "%" PRId64, info->epoch_step);
    snprintf(osteps, sizeof osteps, "%" PRIu64, optim_steps(net_optim(n)));
    snprintf(nsteps, sizeof nsteps, "%" PRIu64, net_get_step(n));
    snprintf(seed, sizeof seed, "%" PRIu64, info->seed);
    net_amp_state amp;
    net_amp_get(n, &amp);
    char scale[32], clean[24], skipped[24];
    snprintf(scale, sizeof scale, "%.17g", amp.scale);
    snprintf(clean, sizeof clean, "%" PRId64, amp.clean);
    snprintf(skipped, sizeof skipped, "%" PRId64, amp.skipped);
    const char *meta[] = {
        "kiln_checkpoint", CKPT_FORMAT, "solver", solver_type_name(sv->type), "step", step, "epoch", epoch,
        "epoch_step", estep, "optim_steps", osteps, "net_steps", nsteps, "seed", seed,
        "precision", precision_name(net_precision(n)), "loss_scaling", amp.dynamic ? "dynamic" : "off",
        "loss_scale", scale, "loss_scale_clean_steps", clean, "skipped_steps", skipped, NULL,
    };
    rc = st_write(path, t, (int)s.n, meta, err, errlen);
out:
    free(host);
    free(t);
    set_free(&s);
    return rc;
}

static bool parse_u64(const char *v, uint64_t *out)
{
    if (!v || !*v)
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end || v[0] == '-')
        return false;
    *out = x;
    return true;
}

/* Fills info from metadata lookups; false when a value is missing or bad. */
static int info_from_meta(const char *path, const char *format, const char *step,
                          const char *epoch, const char *estep, const char *seed,
                          ckpt_info *info, char *err, size_t errlen)
{
    uint64_t a, b, c, d;
    if (!format)
        return set_err(err, errlen, "%s is not a kiln checkpoint (no kiln_checkpoint metadata)",
                       path);
    if (strcmp(format, CKPT_FORMAT) != 0)
        return set_err(err, errlen, "%s is a checkpoint of format %s; this kiln reads format %s "
                       "(use the kiln that wrote it)", path, format, CKPT_FORMAT);
    if (!parse_u64(step, &a) || !parse_u64(epoch, &b) || !parse_u64(estep, &c) ||
        !parse_u64(seed, &d) || a > INT64_MAX || b > INT_MAX || c > INT64_MAX)
        return set_err(err, errlen, "%s: the checkpoint's step, epoch or seed is missing or bad",
                       path);
    if (info)
        *info = (ckpt_info){ .step = (int64_t)a, .epoch = (int)b, .epoch_step = (int64_t)c,
                             .seed = d };
    return 0;
}

int ckpt_load(net *n, const char *path, ckpt_info *info, char *err, size_t errlen)
{
    ckpt_set s;
    be_ctx *ctx;
    const backend *be = net_backend(n, &ctx);
    int rc = -1;
    uint64_t osteps, nsteps;
    ckpt_info ci;
    st_file *f = st_open(path, err, errlen);
    if (!f)
        return -1;
    if (set_collect(n, &s, err, errlen) < 0) {
        st_close(f);
        return -1;
    }
    if (info_from_meta(path, st_meta(f, "kiln_checkpoint"), st_meta(f, "step"),
                       st_meta(f, "epoch"), st_meta(f, "epoch_step"), st_meta(f, "seed"), &ci,
                       err, errlen) < 0)
        goto out;
    const char *solver = st_meta(f, "solver");
    const char *want = solver_type_name(optim_solver(net_optim(n))->type);
    if (!solver || strcmp(solver, want) != 0) {
        set_err(err, errlen, "%s was written by solver %s; this run uses %s", path,
                solver ? solver : "(none)", want);
        goto out;
    }
    if (!parse_u64(st_meta(f, "optim_steps"), &osteps) ||
        !parse_u64(st_meta(f, "net_steps"), &nsteps)) {
        set_err(err, errlen, "%s: the checkpoint's optim_steps or net_steps is missing", path);
        goto out;
    }
    /* Mixed precision (issue 4): checkpoints from before it are fp32 runs. */
    const char *written = st_meta(f, "precision");
    if (!written)
        written = precision_name(PREC_FP32);
    if (strcmp(written, precision_name(net_precision(n))) != 0) {
        set_err(err, errlen, "%s was written by a %s run; this run is %s", path, written,
                precision_name(net_precision(n)));
        goto out;
    }
    net_amp_state amp;
    net_amp_get(n, &amp);
    const char *scaling = st_meta(f, "loss_scaling");
    uint64_t clean = 0, skipped = 0;
    if (scaling) {
        char *end;
        amp.dynamic = !strcmp(scaling, "dynamic");
        amp.scale = strtod(st_meta(f, "loss_scale") ? st_meta(f, "loss_scale") : "", &end);
        if (*end || !parse_u64(st_meta(f, "loss_scale_clean_steps"), &clean) ||
            !parse_u64(st_meta(f, "skipped_steps"), &skipped) || clean > INT64_MAX ||
            skipped > INT64_MAX) {
            set_err(err, errlen, "%s: the checkpoint's loss scale state is missing or bad", path);
            goto out;
        }
        amp.clean = (int64_t)clean;
        amp.skipped = (int64_t)skipped;
    }
    for (size_t i = 0; i < s.n; i++) {
        const st_tensor *t = st_find(f, s.names[i]);
        int ndim;
        int64_t shape[4];
        shape_of(&s, i, &ndim, shape);
        if (!t) {
            set_err(err, errlen, "%s has no tensor \"%s\" (was it saved from this network and "
                    "solver?)", path, s.names[i]);
            goto out;
        }
        if (t->dtype != ST_F32 || t->ndim != ndim ||
            memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) != 0 ||
            t->bytes != s.counts[i] * sizeof(float)) {
            set_err(err, errlen, "%s: tensor \"%s\" has another dtype or shape than this "
                    "network's", path, s.names[i]);
            goto out;
        }
    }
    if (net_amp_set(n, &amp, err, errlen) < 0) {
        set_err_prefix(err, errlen, path);
        goto out;
    }
    for (size_t i = 0; i < s.n; i++) {
        const st_tensor *t = st_find(f, s.names[i]);
        if (be->buf_upload(ctx, s.bufs[i], 0, t->data, t->bytes, err, errlen) < 0)
            goto out;
    }
    if (net_params_changed(n, err, errlen) < 0)
        goto out;
    optim_set_steps(net_optim(n), osteps);
    net_set_step(n, nsteps);
    if (info)
        *info = ci;
    rc = 0;
out:
    set_free(&s);
    st_close(f);
    return rc;
}

/* The "__metadata__" object of a safetensors file, reading only its header. */
static cJSON *read_meta(const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rbe");
    unsigned char lenb[8];
    char *text = NULL;
    cJSON *root = NULL, *meta = NULL;
    if (!fp) {
        set_err(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    if (fread(lenb, 1, 8, fp) != 8) {
        set_err(err, errlen, "%s is not a safetensors file (too short)", path);
        goto out;
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | lenb[i];
    if (len == 0 || len > HEADER_PEEK_MAX) {
        set_err(err, errlen, "%s is not a safetensors file (header of %" PRIu64 " bytes)", path,
                len);
        goto out;
    }
    if (!(text = malloc((size_t)len + 1))) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    if (fread(text, 1, (size_t)len, fp) != len) {
        set_err(err, errlen, "%s: its header is cut short", path);
        goto out;
    }
    text[len] = '\0';
    root = cJSON_ParseWithLength(text, (size_t)len);
    meta = cJSON_DetachItemFromObjectCaseSensitive(root, "__metadata__");
    if (!cJSON_IsObject(meta)) {
        cJSON_Delete(meta);
        meta = NULL;
        set_err(err, errlen, "%s is not a kiln checkpoint (no metadata)", path);
    }
out:
    cJSON_Delete(root);
    free(text);
    fclose(fp);
    return meta;
}

static const char *meta_str(const cJSON *m, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int ckpt_read_info(const char *path, ckpt_info *info, char *err, size_t errlen)
{
    cJSON *m = read_meta(path, err, errlen);
    if (!m)
        return -1;
    int rc = info_from_meta(path, meta_str(m, "kiln_checkpoint"), meta_str(m, "step"),
                            meta_str(m, "epoch"), meta_str(m, "epoch_step"), meta_str(m, "seed"),
                            info, err, errlen);
    cJSON_Delete(m);
    return rc;
}

int ckpt_latest(const char *dir, char *path, size_t pathlen, ckpt_info *info,
                char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    int found = 0;
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return set_err(err, errlen, "cannot read %s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        const char *ext = ".safetensors";
        if (len <= strlen(ext) || strcmp(e->d_name + len - strlen(ext), ext) != 0)
            continue;
        char p[PATH_MAX];
        ckpt_info ci;
        char ignored[256];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p ||
            ckpt_read_info(p, &ci, ignored, sizeof ignored) < 0)
            continue;                          /* not ours, or unreadable: skip */
        if (!found || ci.step > info->step) {
            if (snprintf(path, pathlen, "%s", p) >= (int)pathlen)
                continue;
            *info = ci;
            found = 1;
        }
    }
    closedir(d);
    return found;
}

int ckpt_export_weights(const char *ckpt_path, const char *out_path, char *err, size_t errlen)
{
    st_file *f = st_open(ckpt_path, err, errlen);
    if (!f)
        return -1;
    int rc = -1, n = st_count(f), k = 0;
    st_tensor *keep = calloc((size_t)(n > 0 ? n : 1), sizeof *keep);
    if (!keep) {
        set_err(err, errlen, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const st_tensor *t = st_get(f, i);
        if (strncmp(t->name, "optim/", 6) != 0)
            keep[k++] = *t;
    }
    const char *network = st_meta(f, "network");
    const char *meta[] = { "kiln_format", "1", network ? "network" : NULL, network, NULL };
    rc = st_write(out_path, keep, k, meta, err, errlen);
out:
    free(keep);
    st_close(f);
    return rc;
}
