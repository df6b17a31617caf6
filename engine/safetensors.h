/* engine/safetensors.h: reading and writing safetensors files.
 *
 * The format (huggingface/safetensors): an 8-byte little-endian u64 N, then N
 * bytes of JSON header, then the data. The header maps each tensor name to
 * {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (byte offsets
 * into the data, which the tensors cover with no gaps or overlaps), plus an
 * optional "__metadata__" object of string values. We pad the header with
 * spaces to a multiple of 8 bytes so that the data starts aligned. Tensors are
 * little-endian, row-major.
 *
 * Files are written atomically: "<path>.tmp", fsync, rename, fsync of the
 * directory; a reader never sees half a file under the final name.
 */
#ifndef KILN_ENGINE_SAFETENSORS_H
#define KILN_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20)    /* header size readers accept, as the reference does */

typedef enum st_dtype {
    ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL,
} st_dtype;

/* "F32" ... and the size of one element in bytes. */
const char *st_dtype_name(st_dtype t);
size_t st_dtype_size(st_dtype t);

typedef struct st_tensor {
    const char *name;
    st_dtype dtype;
    int ndim;                       /* 0..ST_MAX_DIMS; 0 is a scalar */
    int64_t shape[ST_MAX_DIMS];
    const void *data;               /* elements in host byte order */
    size_t bytes;                   /* product(shape) * dtype size */
} st_tensor;

/* Writes count tensors (in that order) to path atomically. meta, when not
 * NULL, is a NULL-terminated list of key, value, key, value, ... strings for
 * "__metadata__". Each tensor's bytes must equal its shape's size.
 * Returns 0, or -1 with err set (and nothing left under path or path.tmp). */
int st_write(const char *path, const st_tensor *tensors, int count, const char *const *meta,
             char *err, size_t errlen);

typedef struct st_file st_file;

/* Reads and checks a whole file: header syntax, known dtypes, offsets that
 * match the shapes and tile the data exactly. Returns a new st_file owned by
 * the caller, or NULL with err set. */
st_file *st_open(const char *path, char *err, size_t errlen);
void st_close(st_file *f);                       /* NULL is a no-op */

int st_count(const st_file *f);
/* The i-th tensor in file order (by data offset); valid until st_close. */
const st_tensor *st_get(const st_file *f, int i);
/* The tensor by that name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *st_meta(const st_file *f, const char *key);

#endif
