/* jobs/import_pool.h: decoding and resizing an import's images on worker
 * threads, with the results handed back in the order the files were given.
 *
 * The importer's reading (libarchive's decompression, a folder's reads) stays
 * on its own thread; each file is decoded (a JPEG at the smallest scale that
 * still covers the target, engine/image.h) and resized to the dataset's
 * shape on one of the pool's threads, each with its own decoder. Results
 * come back strictly in submission order, and nothing in them depends on
 * which thread did the work or when (the noise of fill and half_crop is
 * seeded by the file's position), so an import is the same with any number
 * of threads.
 */
#ifndef KILN_JOBS_IMPORT_POOL_H
#define KILN_JOBS_IMPORT_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct import_pool import_pool;

/* What every image becomes: c x h x w CHW, by img_resize mode, with the
 * noise of file k seeded from (seed, k). */
typedef struct pool_target {
    int c, h, w;
    int resize;              /* an img_resize */
    uint64_t seed;
} pool_target;

/* A finished file, in submission order: result 0 with chw (c*h*w bytes,
 * valid during the call), or 1 (unreadable) with why. tag is what was
 * submitted with it (the callback owns it from now). Returns 0, or -1 with
 * err set to stop the import. */
typedef int (*pool_done_fn)(void *arg, void *tag, int result, const uint8_t *chw, const char *why,
                            char *err, size_t errlen);

/* A pool of `threads` threads (1 or more). Returns NULL with err set. */
import_pool *import_pool_new(const pool_target *t, int threads, pool_done_fn done, void *arg,
                             char *err, size_t errlen);

/* The threads worth starting here: the cores online, at most 8. */
int import_pool_threads(void);

/* Queues file k (the pool counts them from 0) of len bytes; the pool takes
 * buf (malloc'ed) over. When every slot is busy it first waits for the
 * oldest and hands it to done. Returns 0, or -1 with err set (done said
 * stop, or out of memory); buf is freed either way. */
int import_pool_submit(import_pool *p, uint8_t *buf, size_t len, void *tag, char *err, size_t errlen);

/* Hands every remaining file to done, in order. Returns 0 or -1 (done's
 * error, in err). */
int import_pool_drain(import_pool *p, char *err, size_t errlen);

/* Stops the threads and frees the pool; files not yet handed to done are
 * dropped with their tags given to drop_tag (may be NULL). NULL is a no-op. */
void import_pool_free(import_pool *p, void (*drop_tag)(void *tag));

#endif
