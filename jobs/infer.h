/* jobs/infer.h: classifying images with a trained model (engine + a
 * model_bundle), for POST /api/v1/jobs/{id}/infer (through the inference
 * process, jobs/infer_server.h) and `kiln infer` (jobs/infer_cli.c). Both
 * use these functions, so an image gets the same probabilities from either.
 *
 * Preprocessing is the job's dataset import followed by its validation
 * loader, step for step (jobs/import.c imp_add_image, engine/dataset.c):
 *   1. decode to prep.c channels (img_decode, a JPEG at the smallest of
 *      libjpeg's scales that still covers prep.w x prep.h, as the importer);
 *   2. img_resize_chw to prep.w x prep.h by prep.resize. The bands that
 *      "fill" and "half_crop" pad with are noise drawn from INFER_NOISE_SEED
 *      (the importer draws each image's from the import's seed and the
 *      image's position, which a new image does not have), so those two modes
 *      agree with the dataset everywhere but in the bands;
 *   3. the centre crop_w x crop_h window, at ((h - crop_h) / 2, (w - crop_w) / 2)
 *      as the validation loader takes it;
 *   4. x = (pixel - mean[c]) * scale, the loader's float expression.
 * For a dataset stored raw or as PNG the tensor equals, bit for bit, what the
 * loader hands the network for the same image (tests/unit/test_infer.c); a
 * JPEG-stored dataset's images went through a lossy encoding that a new
 * image does not.
 *
 * Every limit of a classification request lives in infer_limits (INFER_LIMITS):
 * the API, the inference process and the CLI read it.
 */
#ifndef KILN_JOBS_INFER_H
#define KILN_JOBS_INFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/err.h"           /* api_error */
#include "engine/image.h"       /* img_decoder */
#include "engine/net.h"         /* net, net_predict */
#include "jobs/model_bundle.h"  /* model_bundle, model_prep */

#define INFER_NOISE_SEED 1ull   /* the noise of fill / half_crop bands */

typedef struct infer_limits {
    int top_k_default;          /* predictions per image when the request names none */
    int max_items;              /* images in one request: files and archive entries together */
    uint64_t max_image_bytes;   /* one image file as sent (encoded) */
    uint64_t max_total_bytes;   /* a request's body; an archive's entries, uncompressed */
    int max_name_bytes;         /* an item's name (a file name, an archive entry's path) */
    int batch_max;              /* images through the network at once (infer_batch_size) */
    uint64_t batch_floats;      /* ... and at most this many input floats a batch */
    uint64_t replica_bytes;     /* memory the per-thread copies of one model may take (infer_model_open) */
    int cached_models;          /* models the inference process keeps loaded */
    int idle_seconds;           /* the inference process exits after this long without a request */
} infer_limits;

extern const infer_limits INFER_LIMITS;

/* The batch the network is built for and images go through at once: as many
 * as INFER_LIMITS allows for inputs of this shape (at least 1). */
int infer_batch_size(net_shape in);

/* ---- one image to the network's input ------------------------------------------ */

/* A thread's decoder and buffers, reused from image to image. */
typedef struct infer_worker {
    img_decoder *dec;
    uint8_t *chw;               /* prep.c x prep.h x prep.w */
    size_t chw_cap;
    uint8_t *scratch;           /* img_resize_chw's */
    size_t scratch_cap;
} infer_worker;

void infer_worker_init(infer_worker *w);
void infer_worker_free(infer_worker *w);   /* what w holds; w itself is the caller's */

/* Decodes buf[0..len) and writes the network's input for it to x
 * (p->c * p->crop_h * p->crop_w floats, CHW). Returns 0; 1 when the bytes
 * are no usable image (why: not a PNG or JPEG, undecodable, too many
 * pixels); -1 when out of memory (why set). */
int infer_prepare(infer_worker *w, const model_prep *p, const uint8_t *buf, size_t len, float *x,
                  char *why, size_t whylen);

/* ---- a request's images ---------------------------------------------------------- */

typedef struct infer_pred {
    int index;
    float probability;
} infer_pred;

typedef struct infer_item {
    char *name;                 /* owned */
    uint8_t *data;              /* the encoded image (owned); NULL once classified or failed */
    size_t len;
    char err_code[32];          /* "" until the item fails: "invalid_image", "image_too_large" */
    char err[256];
    int npred;                  /* predictions once classified (top_k, best first) */
    infer_pred *pred;           /* owned */
} infer_item;

typedef struct infer_set {
    infer_item *items;
    int n, cap;
    uint64_t bytes;             /* the items' bytes together */
} infer_set;

void infer_set_init(infer_set *s);
void infer_set_free(infer_set *s);         /* NULL-safe; leaves *s empty */

/* Adds an item whose bytes are data[0..len), taken over (freed here on
 * failure too). An empty name becomes "image-<n>". Returns 0, or -1 with e:
 * 413 too_many_images / request_too_large past INFER_LIMITS, 500 out of memory. */
int infer_set_add(infer_set *s, const char *name, uint8_t *data, size_t len, api_error *e);
/* Adds an item that failed before it was read (code and message as an
 * item's error). Returns 0, or -1 with e as infer_set_add. */
int infer_set_add_failed(infer_set *s, const char *name, const char *code, const char *msg, api_error *e);
/* Reads the file at path as an item named name: a file over
 * INFER_LIMITS.max_image_bytes becomes a failed item (image_too_large).
 * Returns 0, or -1 with e (as infer_set_add; 500 when the file cannot be
 * read). */
int infer_set_add_file(infer_set *s, const char *name, const char *path, api_error *e);
/* Adds every regular file of an archive (tar, zip, 7z, plain or compressed:
 * the importer's formats and path rules, jobs/import.h import_archive_files)
 * as an item named by its path in the archive, within INFER_LIMITS. Returns
 * 0, or -1 with e: 400 invalid_archive, 413 archive_too_large / too_many_images. */
int infer_set_add_archive(infer_set *s, const char *path, api_error *e);

/* Checks top_k against the model: 1..nclasses. 0, or -1 with e (400 invalid_field). */
int infer_check_top_k(int top_k, int nclasses, api_error *e);

/* ---- a model ready to classify --------------------------------------------------- */

/* A model loaded for classifying: one net, or one per thread. A request of
 * many small images runs fastest with each thread taking whole batches
 * through a net of its own (no barrier between one layer and the next, and
 * a thread whose core another process holds only delays its own batch); a
 * large network runs a batch on all threads together. */
typedef struct infer_model {
    net **nets;                 /* count nets of b's network and weights, for infer_batch_size images */
    int count;
} infer_model;

/* How many nets infer_model_open builds for b with `threads` threads: as
 * many as the threads when that many copies (weights, and the activations
 * of a batch: engine/summary.h's arithmetic) fit in INFER_LIMITS.replica_bytes,
 * fewer when they do not, at least 1. */
int infer_replicas(const model_bundle *b, int threads);

/* Builds `nets` nets (>= 1) and loads b's weights into each: the callers
 * pass infer_replicas(b, omp_get_max_threads()). 0, or -1 with err set (and
 * *m empty). */
int infer_model_open(infer_model *m, const model_bundle *b, int nets, char *err, size_t errlen);
void infer_model_free(infer_model *m);     /* NULL-safe; leaves *m empty */

/* Classifies every item not yet failed with m: decodes and prepares the
 * images, a batch at a time, runs each batch through net_predict and keeps
 * each image's top_k predictions (ties to the lower index). With one net, or
 * one batch, the batch's images are prepared in parallel (OpenMP, a worker
 * per thread) and the net uses every thread; with several nets and batches,
 * each thread takes the next batch, prepares it and runs it through its own
 * net. Either way a batch holds the same images. Images that are no usable
 * image become failed items. Returns 0, or -1 with err set (the network
 * failed, out of memory). */
int infer_run(const infer_model *m, const model_bundle *b, infer_set *s, int top_k, char *err, size_t errlen);

/* The answer for a classified set, as the API gives it and `kiln infer
 * --json` prints it:
 *   {"epoch": N, "items": [{"name", "predictions": [{"label", "index", "probability"}]}
 *                          or {"name", "error": {"code", "message"}}]}
 * with *status 200 when some item was classified; else 422 and the object
 * also holds "error": {"code": "no_valid_images", "message" naming each
 * item's problem}. Returns the JSON text (malloc'ed, NUL-terminated, *len
 * its length when len is not NULL), or NULL when out of memory. */
char *infer_answer(const model_bundle *b, const infer_set *s, int *status, size_t *len);

#endif
