/* server/metric_select.c: tag filter and min/max downsampling of a job's
 * metrics (server/metric_select.h). */
#include "server/metric_select.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The smallest and largest finite value among v[lo..hi-1]: their indices in
 * *imin and *imax; false when there is none. */
static bool bucket_extremes(const double *v, size_t lo, size_t hi, size_t *imin, size_t *imax)
{
    bool any = false;
    for (size_t i = lo; i < hi; i++) {
        if (isnan(v[i]))
            continue;
        if (!any || v[i] < v[*imin])
            *imin = i;
        if (!any || v[i] > v[*imax])
            *imax = i;
        any = true;
    }
    return any;
}

size_t metric_downsample(const double *v, size_t n, size_t max_points, size_t *keep)
{
    if (n <= max_points || max_points < 2) {
        size_t m = n <= max_points ? n : max_points;   /* max_points < 2: the contract's caller bug */
        for (size_t i = 0; i < m; i++)
            keep[i] = i;
        return m;
    }
    size_t k = 0;
    keep[k++] = 0;
    size_t inner = n - 2, buckets = (max_points - 2) / 2;
    for (size_t b = 0; b < buckets; b++) {
        size_t lo = 1 + b * inner / buckets, hi = 1 + (b + 1) * inner / buckets;
        size_t imin = lo, imax = lo;
        if (lo >= hi)
            continue;
        if (!bucket_extremes(v, lo, hi, &imin, &imax)) {
            keep[k++] = lo;                 /* a gap stays a gap */
            continue;
        }
        size_t first = imin < imax ? imin : imax, second = imin < imax ? imax : imin;
        keep[k++] = first;
        if (second != first)
            keep[k++] = second;
    }
    keep[k++] = n - 1;
    return k;
}

/* A tag name as the worker writes them: letters, digits, "_./-", 1..47 bytes. */
static bool tag_ok(const char *s, size_t len)
{
    if (len == 0 || len >= sizeof ((store_metric *)0)->tag)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-'))
            return false;
    }
    return true;
}

/* Splits the tag= list into names[] (each a NUL-terminated copy in buf). */
static int parse_tags(const char *tags, char names[][sizeof ((store_metric *)0)->tag], size_t *count,
                      api_error *e)
{
    *count = 0;
    const char *p = tags;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (!tag_ok(p, len))
            return api_fail(e, 400, "invalid_field",
                            "tag must be a comma-separated list of metric tags (letters, digits, "
                            "'_', '.', '/', '-'; at most 47 characters each), such as "
                            "tag=train/loss,val/loss; \"%.*s\" is not one", (int)(len > 48 ? 48 : len), p);
        if (*count == METRIC_SELECT_MAX_TAGS)
            return api_fail(e, 400, "invalid_field", "tag names at most %d tags", METRIC_SELECT_MAX_TAGS);
        memcpy(names[*count], p, len);
        names[(*count)++][len] = '\0';
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static bool tag_listed(const char *tag, char names[][sizeof ((store_metric *)0)->tag], size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!strcmp(tag, names[i]))
            return true;
    return false;
}

/* Marks in keep[] the points of ms that survive downsampling their tag's
 * series to max_points; series are found by tag in order of first appearance. */
static int mark_downsampled(const store_metric *ms, size_t n, size_t max_points, bool *keep, api_error *e)
{
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    size_t *kept = malloc((n ? n : 1) * sizeof *kept);
    double *vals = malloc((n ? n : 1) * sizeof *vals);
    bool *done = calloc(n ? n : 1, sizeof *done);
    int rc = 0;
    if (!idx || !kept || !vals || !done) {
        rc = api_fail(e, 500, "out_of_memory", "out of memory downsampling %zu metrics", n);
        goto out;
    }
    for (size_t first = 0; first < n; first++) {
        if (done[first])
            continue;
        size_t m = 0;                      /* the series of ms[first].tag */
        for (size_t i = first; i < n; i++) {
            if (done[i] || strcmp(ms[i].tag, ms[first].tag))
                continue;
            done[i] = true;
            idx[m] = i;
            vals[m++] = ms[i].value;
        }
        size_t k = metric_downsample(vals, m, max_points, kept);
        for (size_t j = 0; j < k; j++)
            keep[idx[kept[j]]] = true;
    }
out:
    free(idx);
    free(kept);
    free(vals);
    free(done);
    return rc;
}

int metric_select(store_metric *ms, size_t *n, const char *tags, int64_t max_points, api_error *e)
{
    char names[METRIC_SELECT_MAX_TAGS][sizeof ms->tag];
    size_t count = 0;
    if (tags && parse_tags(tags, names, &count, e) != 0)
        return -1;
    size_t w = 0;                          /* the tag filter, in place */
    for (size_t i = 0; i < *n; i++)
        if (!tags || tag_listed(ms[i].tag, names, count))
            ms[w++] = ms[i];
    *n = w;
    if (max_points <= 0 || w == 0)
        return 0;
    bool *keep = calloc(w, sizeof *keep);
    if (!keep)
        return api_fail(e, 500, "out_of_memory", "out of memory downsampling %zu metrics", w);
    if (mark_downsampled(ms, w, (size_t)max_points, keep, e) != 0) {
        free(keep);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < w; i++)
        if (keep[i])
            ms[k++] = ms[i];
    *n = k;
    free(keep);
    return 0;
}
