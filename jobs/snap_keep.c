/* jobs/snap_keep.c: the worker's keeping decisions and its record of the
 * epochs (contract in snap_keep.h). */
#include "jobs/snap_keep.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"         /* set_err */
#include "base/layout.h"      /* layout_file */
#include "engine/fileio.h"    /* fio_read_file, fio_write_atomic */

#define EPOCHS_JSON_MAX (64u << 20)

/* ---- which snapshots stay ---------------------------------------------------- */

int snap_keep_plan(const snap_list *l, int keep, int pinned, bool *keep_out)
{
    int gone = 0;
    for (int i = 0; i < l->n; i++) {
        int epoch = l->items[i].epoch;
        keep_out[i] = keep <= 0 || i >= l->n - keep || (l->best && epoch == l->best) ||
                      (pinned && epoch == pinned);
        gone += !keep_out[i];
    }
    return gone;
}

/* ---- early stopping ---------------------------------------------------------- */

void es_init(es_state *s)
{
    memset(s, 0, sizeof *s);
    s->best = NAN;
}

bool es_update(es_state *s, const jobcfg_early_stop *cfg, int epoch, double value)
{
    s->last_epoch = epoch;
    bool first = s->best_epoch == 0 && isfinite(value);
    if (first || (s->best_epoch && isfinite(value) &&
                  snap_metric_improves(cfg->metric, value, s->best, cfg->min_delta))) {
        s->best = value;
        s->best_epoch = epoch;
        s->wait = 0;
    } else {
        s->wait++;
    }
    s->stop = cfg->patience > 0 && s->wait >= cfg->patience;
    return s->stop;
}

void es_message(const es_state *s, const jobcfg_early_stop *cfg, char *buf, size_t n)
{
    const char *name = snap_metric_name(cfg->metric);
    if (s->best_epoch)
        snprintf(buf, n, "stopped early after epoch %d: %s has not improved for %d epoch%s; best "
                 "epoch %d", s->last_epoch, name, s->wait, s->wait == 1 ? "" : "s", s->best_epoch);
    else
        snprintf(buf, n, "stopped early after epoch %d: %s has had no finite value for %d epoch%s",
                 s->last_epoch, name, s->wait, s->wait == 1 ? "" : "s");
}

/* ---- the record of the epochs ------------------------------------------------ */

cJSON *snap_epochs_load(const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX], e[512];
    if (layout_file(path, sizeof path, dir, SNAP_EPOCHS_JSON) != 0) {
        set_err(err, errlen, "the path of %s's %s is too long", dir, SNAP_EPOCHS_JSON);
        return NULL;
    }
    FILE *probe = fopen(path, "rb");
    if (!probe)
        return cJSON_CreateArray();             /* none yet (or from before it existed) */
    fclose(probe);
    size_t len = 0;
    char *text = fio_read_file(path, EPOCHS_JSON_MAX, &len, e, sizeof e);
    if (!text) {
        set_err(err, errlen, "%s", e);
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(root, "items");
    cJSON_Delete(root);
    bool ok = cJSON_IsArray(items);
    const cJSON *it;
    int prev = 0;
    const cJSON *walk = ok ? items : NULL;
    cJSON_ArrayForEach(it, walk) {
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(it, "epoch");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(it, "metrics");
        if (!cJSON_IsNumber(ep) || ep->valuedouble <= prev || ep->valuedouble > SNAP_EPOCH_MAX ||
            floor(ep->valuedouble) != ep->valuedouble || !cJSON_IsObject(m)) {
            ok = false;
            break;
        }
        prev = (int)ep->valuedouble;
    }
    if (!ok) {
        cJSON_Delete(items);
        set_err(err, errlen, "%s is not a record of epochs ({\"items\": [{\"epoch\", \"step\", "
                "\"metrics\"}, ...] in increasing epochs)", path);
        return NULL;
    }
    return items;
}

int snap_epochs_save(const char *dir, const cJSON *items, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (layout_file(path, sizeof path, dir, SNAP_EPOCHS_JSON) != 0)
        return set_err(err, errlen, "the path of %s's %s is too long", dir, SNAP_EPOCHS_JSON);
    cJSON *root = cJSON_CreateObject();
    cJSON *copy = cJSON_Duplicate(items, 1);
    char *text = NULL;
    if (root && copy && cJSON_AddItemToObject(root, "items", copy)) {
        copy = NULL;
        text = cJSON_Print(root);
    }
    cJSON_Delete(copy);
    cJSON_Delete(root);
    if (!text)
        return set_err(err, errlen, "out of memory writing %s", SNAP_EPOCHS_JSON);
    int rc = fio_write_atomic(path, text, strlen(text), err, errlen);
    cJSON_free(text);
    return rc;
}

int snap_epochs_truncate(cJSON *items, int epoch)
{
    int gone = 0;
    for (int i = cJSON_GetArraySize(items) - 1; i >= 0; i--) {
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(items, i), "epoch");
        if (cJSON_IsNumber(ep) && ep->valuedouble > epoch) {
            cJSON_DeleteItemFromArray(items, i);
            gone++;
        }
    }
    return gone;
}

double snap_epochs_value(const cJSON *item, snap_metric m)
{
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(item, "metrics");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(metrics, snap_metric_name(m));
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}
