/* jobs/import_pool.c: an import's decoding threads (contract in
 * jobs/import_pool.h).
 *
 * A ring of slots, twice as many as threads plus two: the submitter fills
 * slot `tail`, the threads take slots in order from `next`, and the oldest
 * slot `head` is handed to done once finished. Every index is a running
 * count; slot i lives in slots[i % nslots].
 */
#include "jobs/import_pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"         /* set_err */
#include "engine/image.h"     /* img_decode, img_resize_chw */

#define POOL_MAX_THREADS 8

enum { SLOT_QUEUED, SLOT_BUSY, SLOT_DONE };

typedef struct pool_slot {
    uint8_t *buf;            /* the file, until decoded */
    size_t len;
    uint64_t k;              /* the file's position in the import */
    void *tag;
    int state;
    int result;              /* 0 decoded into chw, 1 unreadable (why) */
    uint8_t *chw;
    char why[256];
} pool_slot;

struct import_pool {
    pool_target t;
    size_t image_bytes;
    pool_done_fn done;
    void *arg;
    pthread_t threads[POOL_MAX_THREADS];
    int nthreads;
    pool_slot *slots;
    size_t nslots;
    uint64_t head, next, tail;   /* oldest unreported, next to decode, next to fill */
    pthread_mutex_t mu;
    pthread_cond_t work, finished;
    bool stop;
};

int import_pool_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)n;
}

/* Decodes and resizes one slot, outside the lock. */
static void decode_slot(const import_pool *p, pool_slot *s, img_decoder *dec, uint8_t **scratch, size_t *cap) {
    uint8_t *pix = NULL;
    int w = 0, h = 0;
    s->result = 1;
    if (img_decode(dec, s->buf, s->len, p->t.c, p->t.w, p->t.h, &pix, &w, &h, s->why, sizeof s->why) == 0) {
        uint64_t noise = p->t.seed ^ (s->k * 0x9E3779B97F4A7C15ull);
        if (img_resize_chw(pix, w, h, p->t.c, (img_resize)p->t.resize, noise, s->chw, p->t.w, p->t.h, p->t.c,
                           scratch, cap) == 0)
            s->result = 0;
        else
            set_err(s->why, sizeof s->why, "out of memory");
    }
    free(pix);
    free(s->buf);
    s->buf = NULL;
}

static void *pool_main(void *arg) {
    import_pool *p = arg;
    img_decoder *dec = img_decoder_new();
    uint8_t *scratch = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->next == p->tail) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        pool_slot *s = &p->slots[p->next++ % p->nslots];
        s->state = SLOT_BUSY;
        pthread_mutex_unlock(&p->mu);
        if (dec) {
            decode_slot(p, s, dec, &scratch, &cap);
        } else {
            set_err(s->why, sizeof s->why, "out of memory");
            s->result = 1;
        }
        pthread_mutex_lock(&p->mu);
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&p->finished);
    }
    pthread_mutex_unlock(&p->mu);
    img_decoder_free(dec);
    free(scratch);
    return NULL;
}

import_pool *import_pool_new(const pool_target *t, int threads, pool_done_fn done, void *arg,
                             char *err, size_t errlen) {
    import_pool *p = calloc(1, sizeof *p);
    if (!p) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    p->t = *t;
    p->done = done;
    p->arg = arg;
    p->image_bytes = (size_t)t->c * (size_t)t->h * (size_t)t->w;
    threads = threads < 1 ? 1 : threads > POOL_MAX_THREADS ? POOL_MAX_THREADS : threads;
    p->nslots = (size_t)threads * 2 + 2;
    p->slots = calloc(p->nslots, sizeof *p->slots);
    bool ok = p->slots != NULL;
    for (size_t i = 0; ok && i < p->nslots; i++) ok = (p->slots[i].chw = malloc(p->image_bytes)) != NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->finished, NULL);
    for (int i = 0; ok && i < threads; i++) {
        ok = pthread_create(&p->threads[i], NULL, pool_main, p) == 0;
        if (ok) p->nthreads++;
    }
    if (!ok) {
        set_err(err, errlen, p->slots ? "cannot start the decoding threads" : "out of memory");
        import_pool_free(p, NULL);
        return NULL;
    }
    return p;
}

/* Waits for the oldest slot and hands it to done. */
static int report_oldest(import_pool *p, char *err, size_t errlen) {
    pool_slot *s = &p->slots[p->head % p->nslots];
    pthread_mutex_lock(&p->mu);
    while (s->state != SLOT_DONE) pthread_cond_wait(&p->finished, &p->mu);
    pthread_mutex_unlock(&p->mu);
    void *tag = s->tag;
    s->tag = NULL;
    p->head++;                /* the slot is free again: only this thread fills slots */
    return p->done(p->arg, tag, s->result, s->result == 0 ? s->chw : NULL, s->why, err, errlen);
}

int import_pool_submit(import_pool *p, uint8_t *buf, size_t len, void *tag, char *err, size_t errlen) {
    if (p->tail - p->head == p->nslots && report_oldest(p, err, errlen) != 0) {
        free(buf);
        return -1;           /* tag: done owned it; this one is the caller's to drop */
    }
    pool_slot *s = &p->slots[p->tail % p->nslots];
    s->buf = buf;
    s->len = len;
    s->k = p->tail;
    s->tag = tag;
    s->why[0] = '\0';
    pthread_mutex_lock(&p->mu);
    s->state = SLOT_QUEUED;
    p->tail++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int import_pool_drain(import_pool *p, char *err, size_t errlen) {
    while (p->head < p->tail)
        if (report_oldest(p, err, errlen) != 0) return -1;
    return 0;
}

void import_pool_free(import_pool *p, void (*drop_tag)(void *tag)) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
    for (size_t i = 0; p->slots && i < p->nslots; i++) {
        free(p->slots[i].buf);
        free(p->slots[i].chw);
    }
    for (uint64_t i = p->head; p->slots && i < p->tail; i++)
        if (drop_tag && p->slots[i % p->nslots].tag) drop_tag(p->slots[i % p->nslots].tag);
    free(p->slots);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->finished);
    free(p);
}
