/* jobs/idx.h: reading MNIST's IDX files (a pure reader: no dataset is written).
 *
 * A source is a folder holding the four standard files, each plain or gzipped
 * (name + ".gz"), named as LeCun's site has them or with a dot:
 *
 *   train-images-idx3-ubyte   train-images.idx3-ubyte    required
 *   train-labels-idx1-ubyte   train-labels.idx1-ubyte    required
 *   t10k-images-idx3-ubyte    t10k-images.idx3-ubyte     optional: the test split
 *   t10k-labels-idx1-ubyte    t10k-labels.idx1-ubyte     optional, with the images
 *
 * Where several of a file's names exist, the first in that order is read, plain
 * before gzipped. A symbolic link in a file's place is refused (the caller
 * checks the folder against the import roots; a link could lead out). Images files must have magic 0x00000803 (unsigned bytes, 3
 * dimensions: count, rows, cols with rows and cols in 1..IDX_MAX_SIDE), labels
 * files 0x00000801 (unsigned bytes, 1 dimension); a labels file holds as many
 * labels as its images file holds images, both splits have the same rows and
 * cols, and each file is exactly its header and its data long (uncompressed).
 *
 * idx_open checks all of that before any image is read, reading each file
 * through once (labels in full, images only where gzipped: a plain file's
 * length is its size), so that every error about the files comes from it.
 * idx_read then streams the images: memory stays a few hundred KiB whatever
 * the count. Every error message names the file and the problem
 * ("t10k-labels-idx1-ubyte: 9,999 labels for 10,000 images").
 */
#ifndef KILN_JOBS_IDX_H
#define KILN_JOBS_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "jobs/readers.h"   /* reader_split */

#define IDX_MAX_SIDE 4096

typedef struct idx_source idx_source;

/* Opens and checks the IDX files in the folder dir (see above). Returns a
 * source owned by the caller (idx_close), or NULL with err set: the folder
 * missing or not a folder, a required file missing, a t10k file without its
 * partner, a file that is a symbolic link, unreadable or fails a check
 * (named in err). */
idx_source *idx_open(const char *dir, char *err, size_t errlen);
void idx_close(idx_source *s);                      /* NULL is a no-op */

/* Images per split (0 for READER_TEST when there are no t10k files). */
size_t idx_count(const idx_source *s, reader_split split);
/* The images' width (cols) and height (rows), the same in both splits. */
void idx_shape(const idx_source *s, int *w, int *h);
/* Classes: the largest label in either split plus one (0..256; 0 only when
 * there are no images), named "0", "1", ... in order. idx_class_name returns NULL for i out of range; the
 * string lives as long as s. */
int idx_nclasses(const idx_source *s);
const char *idx_class_name(const idx_source *s, int i);

/* One image, valid only during the callback. */
typedef struct idx_image {
    reader_split split;
    size_t index;               /* 0-based within its split, in file order */
    int label;                  /* 0 .. idx_nclasses - 1 */
    int w, h;
    const uint8_t *pixels;      /* h rows of w grey bytes, packed */
} idx_image;

/* Called once per image. Returns 0 to go on, or -1 with err filled (the
 * reader's own err, errlen) to stop: idx_read then returns -1 with that err. */
typedef int (*idx_image_fn)(void *arg, const idx_image *im, char *err, size_t errlen);

/* Streams every image to fn: the train split first, then the test split,
 * each in file order. Returns 0, or -1 with err set when fn stopped it or a
 * file could not be read as idx_open found it (changed since, or an I/O
 * error); fn may have been called for some images before such an error. May
 * be called again to read the images again. */
int idx_read(idx_source *s, idx_image_fn fn, void *arg, char *err, size_t errlen);

#endif
