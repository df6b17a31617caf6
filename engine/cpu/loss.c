/* engine/cpu/loss.c: softmax cross-entropy on the CPU.
 *
 * Rows run in parallel (ew_softmax_xent_row from engine/elementwise.h, the
 * same arithmetic the CUDA kernel runs); their losses are then added in row
 * order in double, so the result does not depend on the thread count. */
#include "engine/cpu/cpu.h"

#include <stdlib.h>

#include "engine/elementwise.h"
#include "base/err.h"

int cpu_xent_plan(be_ctx *ctx, const be_xent_desc *d, be_plan **out, char *err, size_t errlen)
{
    *out = NULL;
    if (d->n < 1 || d->classes < 1)
        return set_err(err, errlen, "cpu backend: softmax cross-entropy needs n, classes > 0");
    be_plan *p = cpu_plan_new(CPU_PLAN_XENT, err, errlen);
    if (!p)
        return -1;
    p->n = d->n;
    p->classes = d->classes;
    p->row_loss = malloc((size_t)d->n * sizeof *p->row_loss);
    p->row_hit = malloc((size_t)d->n * sizeof *p->row_hit);
    if (!p->row_loss || !p->row_hit) {
        cpu_backend.plan_free(ctx, p);
        return set_err(err, errlen, "cpu backend: out of memory");
    }
    *out = p;
    return 0;
}

int cpu_xent(be_ctx *ctx, be_plan *p, const be_buf *logits, const be_buf *labels,
             float eps, float grad_scale, be_buf *dlogits, be_buf *probs, double *loss_sum, int *correct,
             char *err, size_t errlen)
{
    const int n = p->n, classes = p->classes;
    const float *z = logits->p;
    const int32_t *lab = labels ? labels->p : NULL;
    float *dz = dlogits ? dlogits->p : NULL;
    float *pr = probs ? probs->p : NULL;
    float *row_loss = p->row_loss;
    int *row_hit = p->row_hit;

#pragma omp parallel for schedule(static) if ((long)n * classes > 16384)
    for (int i = 0; i < n; i++) {
        size_t off = (size_t)i * (size_t)classes;
        int label = lab ? lab[i] : -1, top = 0;
        row_loss[i] = ew_softmax_xent_row(z + off, classes, label, eps, grad_scale,
                                          pr ? pr + off : NULL, dz ? dz + off : NULL, &top);
        row_hit[i] = label >= 0 && top == label;
    }
    double sum = 0.0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        sum += row_loss[i];
        hits += row_hit[i];
    }
    if (loss_sum)
        *loss_sum = sum;
    if (correct)
        *correct = hits;
    return 0;
}
