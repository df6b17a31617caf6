/* server/metric_select.h: choosing which of a job's stored metrics GET
 * /api/v1/jobs/{id}/metrics answers with (its tag= and max_points= query
 * parameters), so that a page comparing 20 runs of 10,000 steps each fetches
 * a few hundred points per curve instead of every one.
 *
 * Downsampling keeps extremes: a series is cut into equal buckets of
 * consecutive points and each bucket keeps its smallest and its largest value
 * (a loss spike survives any factor), plus the series' first and last point
 * (so a curve starts and ends where the run did, and "final" and "best" read
 * off the sampled series equal those of the whole one).
 */
#ifndef KILN_SERVER_METRIC_SELECT_H
#define KILN_SERVER_METRIC_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"     /* api_error */
#include "db/store.h"     /* store_metric */

/* The most tags one tag= list may name. */
#define METRIC_SELECT_MAX_TAGS 32

/* Which of the n values v[0..n-1] (one series, in order) to keep so that at
 * most max_points remain (max_points >= 2): all of them when n <= max_points;
 * else the first, the last, and in each of (max_points - 2) / 2 buckets that
 * split the points between them as evenly as integer division does, the
 * index of the smallest and of the largest value, in index order (one index
 * when they are the same point; NaN values are never a bucket's extreme, and
 * a bucket of NaN only keeps its first point). Writes the kept indices,
 * ascending, to keep (the caller's, room for min(n, max_points)) and returns
 * their count. */
size_t metric_downsample(const double *v, size_t n, size_t max_points, size_t *keep);

/* Filters ms[0..*n-1] in place, keeping their order: with tags (a
 * comma-separated list of tag names; NULL: every tag) only the tags named,
 * and with max_points > 0 each tag's series downsampled to at most
 * max_points by metric_downsample. *n becomes the count kept. Returns 0, or
 * -1 with e filled (400 invalid_field for a malformed tag list; 500 when
 * memory runs out). */
int metric_select(store_metric *ms, size_t *n, const char *tags, int64_t max_points, api_error *e);

#endif
