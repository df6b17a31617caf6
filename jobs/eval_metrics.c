/* jobs/eval_metrics.c: an evaluation's counts and their result (contract in eval_metrics.h). */
#include "jobs/eval_metrics.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

int eval_acc_init(eval_acc *a, int nclasses, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (nclasses < 1 || nclasses > EVAL_CLASSES_MAX)
        return set_err(err, errlen, "an evaluation takes 1 to %d classes, not %d", EVAL_CLASSES_MAX,
                       nclasses);
    size_t cells = (size_t)nclasses * (size_t)nclasses;
    a->nclasses = nclasses;
    a->topk = nclasses < EVAL_TOPK ? nclasses : EVAL_TOPK;
    a->matrix = calloc(cells, sizeof *a->matrix);
    a->pair_kept = calloc(cells, sizeof *a->pair_kept);
    a->misses = malloc(EVAL_MISS_MAX * sizeof *a->misses);
    if (!a->matrix || !a->pair_kept || !a->misses) {
        eval_acc_free(a);
        return set_err(err, errlen, "out of memory for a %dx%d confusion matrix", nclasses, nclasses);
    }
    return 0;
}

void eval_acc_free(eval_acc *a)
{
    if (!a)
        return;
    free(a->matrix);
    free(a->pair_kept);
    free(a->misses);
    memset(a, 0, sizeof *a);
}

/* The first class of highest probability. */
static int argmax(const float *p, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (p[i] > p[best])
            best = i;
    return best;
}

/* Classes with a probability strictly above p[c]. */
static int rank_of(const float *p, int n, int c)
{
    int above = 0;
    for (int i = 0; i < n; i++)
        above += p[i] > p[c];
    return above;
}

int eval_acc_add(eval_acc *a, const float *probs, const int32_t *labels, int count,
                 int64_t first_index, char *err, size_t errlen)
{
    int n = a->nclasses;
    for (int i = 0; i < count; i++)
        if (labels[i] < 0 || labels[i] >= n)
            return set_err(err, errlen, "image %lld has label %d, but the model has %d classes",
                           (long long)(first_index + i), (int)labels[i], n);
    for (int i = 0; i < count; i++) {
        const float *p = probs + (size_t)i * (size_t)n;
        int t = labels[i], pred = argmax(p, n);
        float pt = p[t] > FLT_MIN ? p[t] : FLT_MIN;
        a->loss_sum -= log((double)pt);
        a->top1 += pred == t;
        a->topk_hits += rank_of(p, n, t) < a->topk;
        size_t cell = (size_t)t * (size_t)n + (size_t)pred;
        a->matrix[cell]++;
        if (pred != t && a->nmisses < EVAL_MISS_MAX && a->pair_kept[cell] < EVAL_MISS_PER_PAIR) {
            a->pair_kept[cell]++;
            a->misses[a->nmisses++] = (eval_miss){ .index = first_index + i, .true_class = t,
                                                   .predicted = pred, .probability = p[pred],
                                                   .true_probability = p[t] };
        }
    }
    a->count += count;
    return 0;
}

void eval_image_url(char *buf, size_t n, int64_t dataset_id, const char *split, int64_t index)
{
    snprintf(buf, n, "/api/v1/datasets/%lld/image.png?split=%s&index=%lld", (long long)dataset_id,
             split, (long long)index);
}

/* ---- the result ----------------------------------------------------------- */

/* A number, or null when it is not finite. */
static bool add_num(cJSON *o, const char *k, double v)
{
    return isfinite(v) ? cJSON_AddNumberToObject(o, k, v) != NULL : cJSON_AddNullToObject(o, k) != NULL;
}

static double ratio(int64_t num, int64_t den)
{
    return den > 0 ? (double)num / (double)den : 0;
}

typedef struct prf {
    double precision, recall, f1;
} prf;

static prf class_prf(int64_t tp, int64_t support, int64_t predicted)
{
    prf r = { ratio(tp, predicted), ratio(tp, support), 0 };
    if (r.precision + r.recall > 0)
        r.f1 = 2 * r.precision * r.recall / (r.precision + r.recall);
    return r;
}

static cJSON *prf_json(prf v)
{
    cJSON *o = cJSON_CreateObject();
    if (o && add_num(o, "precision", v.precision) && add_num(o, "recall", v.recall) &&
        add_num(o, "f1", v.f1))
        return o;
    cJSON_Delete(o);
    return NULL;
}

/* "per_class", "macro_avg" and "weighted_avg" into o. */
static bool add_per_class(cJSON *o, const eval_acc *a, const char *const *classes)
{
    int n = a->nclasses;
    cJSON *arr = cJSON_AddArrayToObject(o, "per_class");
    prf macro = { 0, 0, 0 }, weighted = { 0, 0, 0 };
    int64_t total = 0;
    for (int c = 0; arr && c < n; c++) {
        int64_t support = 0, predicted = 0;
        for (int k = 0; k < n; k++) {
            support += a->matrix[(size_t)c * n + k];
            predicted += a->matrix[(size_t)k * n + c];
        }
        prf v = class_prf(a->matrix[(size_t)c * n + c], support, predicted);
        macro.precision += v.precision / n;
        macro.recall += v.recall / n;
        macro.f1 += v.f1 / n;
        weighted.precision += v.precision * (double)support;
        weighted.recall += v.recall * (double)support;
        weighted.f1 += v.f1 * (double)support;
        total += support;
        cJSON *item = prf_json(v);
        if (!item || !cJSON_AddItemToArray(arr, item)) {
            cJSON_Delete(item);
            return false;
        }
        if (!cJSON_AddNumberToObject(item, "index", c) || !cJSON_AddStringToObject(item, "class", classes[c]) ||
            !cJSON_AddNumberToObject(item, "support", (double)support) ||
            !cJSON_AddNumberToObject(item, "predicted", (double)predicted))
            return false;
    }
    if (total > 0) {
        weighted.precision /= (double)total;
        weighted.recall /= (double)total;
        weighted.f1 /= (double)total;
    }
    cJSON *m = prf_json(macro), *w = prf_json(weighted);
    bool ok = arr && m && w && cJSON_AddItemToObject(o, "macro_avg", m);
    if (ok)
        m = NULL;
    ok = ok && cJSON_AddItemToObject(o, "weighted_avg", w);
    if (ok)
        w = NULL;
    cJSON_Delete(m);
    cJSON_Delete(w);
    return ok;
}

static bool add_matrix(cJSON *o, const eval_acc *a)
{
    int n = a->nclasses;
    cJSON *rows = cJSON_AddArrayToObject(o, "confusion_matrix");
    for (int t = 0; rows && t < n; t++) {
        cJSON *row = cJSON_CreateArray();
        if (!row || !cJSON_AddItemToArray(rows, row)) {
            cJSON_Delete(row);
            return false;
        }
        for (int p = 0; p < n; p++)
            if (!cJSON_AddItemToArray(row, cJSON_CreateNumber((double)a->matrix[(size_t)t * n + p])))
                return false;
    }
    return rows != NULL;
}

static bool add_misses(cJSON *o, const eval_acc *a, const char *const *classes, int64_t dataset_id,
                       const char *split)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "misclassified");
    for (size_t i = 0; arr && i < a->nmisses; i++) {
        const eval_miss *m = &a->misses[i];
        char url[160];
        eval_image_url(url, sizeof url, dataset_id, split, m->index);
        cJSON *item = cJSON_CreateObject();
        if (!item || !cJSON_AddItemToArray(arr, item)) {
            cJSON_Delete(item);
            return false;
        }
        if (!cJSON_AddNumberToObject(item, "index", (double)m->index) ||
            !cJSON_AddStringToObject(item, "url", url) ||
            !cJSON_AddNumberToObject(item, "true_index", m->true_class) ||
            !cJSON_AddStringToObject(item, "true_label", classes[m->true_class]) ||
            !cJSON_AddNumberToObject(item, "predicted_index", m->predicted) ||
            !cJSON_AddStringToObject(item, "predicted_label", classes[m->predicted]) ||
            !add_num(item, "probability", m->probability) ||
            !add_num(item, "true_probability", m->true_probability))
            return false;
    }
    int64_t diag = 0;
    for (int c = 0; c < a->nclasses; c++)
        diag += a->matrix[(size_t)c * a->nclasses + c];
    if (!arr || !cJSON_AddNumberToObject(o, "misclassified_total", (double)(a->count - diag)))
        return false;
    cJSON *lim = cJSON_CreateObject();
    bool ok = lim && cJSON_AddNumberToObject(lim, "per_pair", EVAL_MISS_PER_PAIR) &&
              cJSON_AddNumberToObject(lim, "total", EVAL_MISS_MAX) &&
              cJSON_AddItemToObject(o, "misclassified_limits", lim);
    if (!ok)
        cJSON_Delete(lim);
    return ok;
}

cJSON *eval_acc_to_json(const eval_acc *a, const char *const *classes, int64_t dataset_id,
                        const char *split)
{
    cJSON *o = cJSON_CreateObject();
    double count = (double)a->count;
    bool ok = o && cJSON_AddNumberToObject(o, "count", count) &&
              add_num(o, "loss", a->count ? a->loss_sum / count : NAN) &&
              add_num(o, "top1_accuracy", a->count ? (double)a->top1 / count : NAN) &&
              add_num(o, "top5_accuracy", a->count ? (double)a->topk_hits / count : NAN) &&
              cJSON_AddNumberToObject(o, "top_k", a->topk);
    cJSON *names = ok ? cJSON_CreateStringArray(classes, a->nclasses) : NULL;
    if (ok && (!names || !cJSON_AddItemToObject(o, "classes", names))) {
        cJSON_Delete(names);
        ok = false;
    }
    ok = ok && add_matrix(o, a) && add_per_class(o, a, classes) &&
         add_misses(o, a, classes, dataset_id, split);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
