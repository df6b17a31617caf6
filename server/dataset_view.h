/* server/dataset_view.h: the dataset explorer's endpoints (issue 13).
 *
 *   GET /api/v1/datasets/{id}/samples?split=train|val|test&class=K&n=N
 *       JSON: the first n images of class K in the split's order (without
 *       class: the first n of every class, grouped by class in label order),
 *       each {"index", "label", "class", "url"}, and the split's images per
 *       class ("class_counts"). split defaults to train; n to
 *       DSVIEW_N_DEFAULT, at most DSVIEW_N_MAX.
 *   GET /api/v1/datasets/{id}/image.png?split=S&index=I
 *       Image I of the split as PNG, exactly the pixels the loader reads (the
 *       stored CHW image after the import's resize and channel conversion;
 *       an encoded split decoded as the loader decodes it).
 *   GET /api/v1/datasets/{id}/mean.png
 *       The per-pixel mean of the training split (rounded to 0..255), in the
 *       dataset's shape. Computed on the first request, streaming train.kds
 *       once, and kept as LAYOUT_MEAN_IMAGE in the dataset's folder (written
 *       atomically) for every later one. One mean is computed at a time in
 *       the whole server, so at most one HTTP thread is ever busy with it: a
 *       request that finds another computation under way gets 503 with
 *       Retry-After.
 *
 * Errors ({"error": {"code", "message"}}): 400 invalid_field naming the
 * parameter (split, class, n, index), 404 dataset_not_found, split_not_found
 * (a split the dataset does not have) or image_not_found (index past the
 * split's end), 409 dataset_importing / dataset_failed.
 *
 * Caching: a ready dataset never changes, so the images carry a strong ETag
 * (If-None-Match gives 304). The URLs the samples list hands out carry a
 * token v naming this dataset's instance (its id and creation time); asked
 * with the matching v an image is cacheable for a year ("immutable"),
 * without it the client revalidates (no-cache), so a data directory made
 * afresh, whose ids start again at 1, never shows a stale picture.
 */
#ifndef KILN_SERVER_DATASET_VIEW_H
#define KILN_SERVER_DATASET_VIEW_H

#include "server/http.h"

#define DSVIEW_N_DEFAULT 16      /* samples per class when n is left out */
#define DSVIEW_N_MAX 256         /* the most samples per class one request may ask */

int dsview_samples(request *r);
int dsview_image(request *r);
int dsview_mean(request *r);

#endif
