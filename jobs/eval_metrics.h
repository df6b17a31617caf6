/* jobs/eval_metrics.h: what an evaluation counts, in one pass over a split.
 *
 * An accumulator takes batches of softmax probabilities with their true
 * labels and keeps: the loss (mean of -log p[true], p clamped to FLT_MIN),
 * top-1 hits (the predicted class is the first one of highest probability)
 * and top-k hits (k = min(5, classes): the true class is a hit when fewer
 * than k classes have a strictly higher probability), the confusion matrix
 * (rows the true class, columns the predicted one), and misclassified
 * images in split order: an image is kept while its (true, predicted) pair
 * has fewer than EVAL_MISS_PER_PAIR kept and the list fewer than
 * EVAL_MISS_MAX, so every confused pair keeps examples.
 *
 * The result (eval_acc_to_json), per class i with support s_i (row sum),
 * predicted p_i (column sum) and tp_i (the diagonal):
 *   precision = tp/p (0 when the class was never predicted),
 *   recall    = tp/s (0 when it has no images),
 *   f1        = 2 precision recall / (precision + recall) (0 when both are 0)
 * (scikit-learn's zero_division=0), with their macro average (the mean over
 * the classes) and the support-weighted average.
 */
#ifndef KILN_JOBS_EVAL_METRICS_H
#define KILN_JOBS_EVAL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define EVAL_TOPK 5                 /* top-5 accuracy (fewer with fewer classes) */
#define EVAL_MISS_PER_PAIR 10       /* misclassified images kept per (true, predicted) pair */
#define EVAL_MISS_MAX 1000          /* misclassified images kept in all */
#define EVAL_CLASSES_MAX 4096       /* the confusion matrix's side at most */

typedef struct eval_miss {
    int64_t index;                  /* the image's index in its split */
    int true_class, predicted;
    float probability;              /* of the predicted class */
    float true_probability;         /* of the true class */
} eval_miss;

typedef struct eval_acc {
    int nclasses;
    int topk;
    int64_t count;                  /* images seen */
    double loss_sum;
    int64_t top1, topk_hits;
    int64_t *matrix;                /* nclasses x nclasses, [true * nclasses + predicted] */
    uint16_t *pair_kept;            /* misses kept per pair, same indexing */
    eval_miss *misses;              /* in split order */
    size_t nmisses;
} eval_acc;

/* Prepares an accumulator for nclasses (1..EVAL_CLASSES_MAX) classes.
 * Returns 0, or -1 with err (out of range, out of memory). */
int eval_acc_init(eval_acc *a, int nclasses, char *err, size_t errlen);
void eval_acc_free(eval_acc *a);    /* NULL-safe; leaves *a empty */

/* Adds count images: probs is count x nclasses probabilities, labels their
 * true classes, the first of them image first_index of its split. Returns
 * 0, or -1 with err when a label is out of range (nothing of the batch is
 * counted then). */
int eval_acc_add(eval_acc *a, const float *probs, const int32_t *labels, int count,
                 int64_t first_index, char *err, size_t errlen);

/* Where a misclassified image can be seen: the dataset's image URL
 * (server/dataset_view.c), "/api/v1/datasets/{id}/image.png?split=S&index=I". */
void eval_image_url(char *buf, size_t n, int64_t dataset_id, const char *split, int64_t index);

/* The result as JSON, owned by the caller (NULL when out of memory):
 *   {"count","loss","top1_accuracy","top5_accuracy","top_k","classes":[names],
 *    "confusion_matrix":[[...]],"per_class":[{"index","class","precision",
 *    "recall","f1","support","predicted"}],"macro_avg":{"precision","recall",
 *    "f1"},"weighted_avg":{...},"misclassified":[{"index","url","true_index",
 *    "true_label","predicted_index","predicted_label","probability",
 *    "true_probability"}],"misclassified_total","misclassified_limits":
 *    {"per_pair","total"}}
 * classes names the nclasses classes; the URLs name dataset_id and split.
 * With no images, loss and accuracies are null. */
cJSON *eval_acc_to_json(const eval_acc *a, const char *const *classes, int64_t dataset_id,
                        const char *split);

#endif
