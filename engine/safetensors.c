/* engine/safetensors.c: the safetensors reader and writer (format in
 * engine/safetensors.h). The reader checks everything a hostile or truncated
 * file could get wrong before any tensor is handed out. */
#include "engine/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/fileio.h"   /* fio_commit, fio_read_file */

static const struct {
    st_dtype t;
    const char *name;
    size_t size;
} dtypes[] = {
    { ST_F32, "F32", 4 }, { ST_F16, "F16", 2 }, { ST_BF16, "BF16", 2 }, { ST_F64, "F64", 8 },
    { ST_I64, "I64", 8 }, { ST_I32, "I32", 4 }, { ST_I16, "I16", 2 }, { ST_I8, "I8", 1 },
    { ST_U8, "U8", 1 },   { ST_BOOL, "BOOL", 1 },
};
#define NDTYPES (sizeof dtypes / sizeof dtypes[0])

const char *st_dtype_name(st_dtype t)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].t == t)
            return dtypes[i].name;
    return "?";
}

size_t st_dtype_size(st_dtype t)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (dtypes[i].t == t)
            return dtypes[i].size;
    return 0;
}

static bool dtype_parse(const char *s, st_dtype *out)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (strcmp(dtypes[i].name, s) == 0) {
            *out = dtypes[i].t;
            return true;
        }
    return false;
}

/* Bytes of a shape of elements of size esz, or false on overflow. */
static bool shape_bytes(const int64_t *shape, int ndim, size_t esz, size_t *out)
{
    size_t n = esz;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return false;
        if (shape[i] != 0 && n > SIZE_MAX / (size_t)shape[i])
            return false;
        n *= (size_t)shape[i];
    }
    *out = n;
    return true;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_HOST_BE 1
static void swap_elems(void *p, size_t bytes, size_t esz)
{
    unsigned char *b = p;
    for (size_t i = 0; i + esz <= bytes; i += esz)
        for (size_t j = 0; j < esz / 2; j++) {
            unsigned char t = b[i + j];
            b[i + j] = b[i + esz - 1 - j];
            b[i + esz - 1 - j] = t;
        }
}
#else
#define ST_HOST_BE 0
#endif

/* ---- writing --------------------------------------------------------------- */

static char *build_header(const st_tensor *t, int count, const char *const *meta,
                          size_t *len, char *err, size_t errlen)
{
    cJSON *root = cJSON_CreateObject();
    char *txt = NULL, *out = NULL;
    size_t off = 0;
    if (!root)
        goto oom;
    if (meta && meta[0]) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto oom;
        for (int i = 0; meta[i]; i += 2) {
            if (!meta[i + 1]) {
                set_err(err, errlen, "safetensors: metadata key \"%s\" has no value", meta[i]);
                goto fail;
            }
            if (!cJSON_AddStringToObject(m, meta[i], meta[i + 1]))
                goto oom;
        }
    }
    for (int i = 0; i < count; i++) {
        size_t bytes, esz = st_dtype_size(t[i].dtype);
        if (!t[i].name || !t[i].name[0] || strcmp(t[i].name, "__metadata__") == 0) {
            set_err(err, errlen, "safetensors: tensor %d has no usable name", i);
            goto fail;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, t[i].name)) {
            set_err(err, errlen, "safetensors: two tensors are named \"%s\"", t[i].name);
            goto fail;
        }
        if (esz == 0 || t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS ||
            !shape_bytes(t[i].shape, t[i].ndim, esz, &bytes) || bytes != t[i].bytes) {
            set_err(err, errlen, "safetensors: tensor \"%s\": shape and size do not agree",
                    t[i].name);
            goto fail;
        }
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype)))
            goto oom;
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        if (!sh)
            goto oom;
        for (int d = 0; d < t[i].ndim; d++) {
            cJSON *v = cJSON_CreateNumber((double)t[i].shape[d]);
            if (!v || !cJSON_AddItemToArray(sh, v)) {
                cJSON_Delete(v);
                goto oom;
            }
        }
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON *b = cJSON_CreateNumber((double)off), *en = cJSON_CreateNumber((double)(off + bytes));
        if (!o || !b || !en) {
            cJSON_Delete(b);
            cJSON_Delete(en);
            goto oom;
        }
        cJSON_AddItemToArray(o, b);
        cJSON_AddItemToArray(o, en);
        off += bytes;
    }
    if (!(txt = cJSON_PrintUnformatted(root)))
        goto oom;
    size_t n = strlen(txt), padded = (n + 7) / 8 * 8;
    if (!(out = malloc(padded + 1)))
        goto oom;
    memcpy(out, txt, n);
    memset(out + n, ' ', padded - n);
    out[padded] = '\0';
    *len = padded;
    goto done;
oom:
    set_err(err, errlen, "safetensors: out of memory building the header");
fail:
    free(out);
    out = NULL;
done:
    free(txt);
    cJSON_Delete(root);
    return out;
}

static int write_all(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int write_tensor(FILE *f, const st_tensor *t)
{
#if ST_HOST_BE
    size_t esz = st_dtype_size(t->dtype);
    unsigned char chunk[4096];
    const unsigned char *p = t->data;
    for (size_t done = 0; done < t->bytes;) {
        size_t n = t->bytes - done < sizeof chunk ? t->bytes - done : sizeof chunk;
        memcpy(chunk, p + done, n);
        swap_elems(chunk, n, esz);
        if (write_all(f, chunk, n) < 0)
            return -1;
        done += n;
    }
    return 0;
#else
    return t->bytes ? write_all(f, t->data, t->bytes) : 0;
#endif
}

int st_write(const char *path, const st_tensor *tensors, int count, const char *const *meta,
             char *err, size_t errlen)
{
    int rc = -1;
    size_t hlen = 0;
    char tmp[PATH_MAX];
    FILE *f = NULL;
    char *header = build_header(tensors, count, meta, &hlen, err, errlen);
    if (!header)
        return -1;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        set_err(err, errlen, "safetensors: path too long: %s", path);
        goto out;
    }
    if (!(f = fopen(tmp, "wb"))) {
        set_err(err, errlen, "safetensors: cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if (write_all(f, len8, 8) < 0 || write_all(f, header, hlen) < 0)
        goto io;
    for (int i = 0; i < count; i++)
        if (write_tensor(f, &tensors[i]) < 0)
            goto io;
    FILE *done = f;
    f = NULL;
    if (fio_commit(done, tmp, path) != 0)
        goto io;
    rc = 0;
    goto out;
io:
    set_err(err, errlen, "safetensors: cannot write %s: %s", tmp, strerror(errno));
out:
    if (f)
        fclose(f);
    if (rc < 0)
        unlink(tmp);
    free(header);
    return rc;
}

/* ---- reading --------------------------------------------------------------- */

struct st_file {
    unsigned char *buf;             /* the whole file */
    size_t size;
    cJSON *header;                  /* names and metadata point into it */
    int count;
    st_tensor *t;                   /* sorted by data offset */
    size_t *begin;                  /* data offset of t[i] (parallel to t) */
};

static bool json_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d != floor(d) || d > 9007199254740992.0)
        return false;
    *out = (uint64_t)d;
    return true;
}

typedef struct st_ord {
    size_t begin;
    int index;
} st_ord;

static int cmp_begin(const void *a, const void *b)
{
    const st_ord *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* One header entry into t, begin. */
static int parse_entry(const cJSON *e, size_t data_size, st_tensor *t, size_t *begin,
                       char *err, size_t errlen)
{
    const char *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t b, en;
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
        return set_err(err, errlen, "tensor \"%s\" needs dtype, shape and data_offsets", name);
    if (!dtype_parse(dt->valuestring, &t->dtype))
        return set_err(err, errlen, "tensor \"%s\" has unknown dtype \"%s\"", name,
                       dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS)
        return set_err(err, errlen, "tensor \"%s\" has %d dimensions (at most %d)", name, nd,
                       ST_MAX_DIMS);
    t->ndim = nd;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        if (!json_u64(cJSON_GetArrayItem(sh, d), &v) || v > INT64_MAX)
            return set_err(err, errlen, "tensor \"%s\" has a bad shape", name);
        t->shape[d] = (int64_t)v;
    }
    if (cJSON_GetArraySize(of) != 2 || !json_u64(cJSON_GetArrayItem(of, 0), &b) ||
        !json_u64(cJSON_GetArrayItem(of, 1), &en) || b > en || en > data_size)
        return set_err(err, errlen, "tensor \"%s\" has data_offsets outside the %zu data bytes",
                       name, data_size);
    size_t bytes;
    if (!shape_bytes(t->shape, nd, st_dtype_size(t->dtype), &bytes))
        return set_err(err, errlen, "tensor \"%s\" has a shape too large to hold", name);
    if (bytes != en - b)
        return set_err(err, errlen, "tensor \"%s\": its shape needs %zu bytes but its offsets "
                       "hold %llu", name, bytes, (unsigned long long)(en - b));
    t->name = name;
    t->bytes = bytes;
    *begin = (size_t)b;
    return 0;
}

st_file *st_open(const char *path, char *err, size_t errlen)
{
    st_file *f = calloc(1, sizeof *f);
    st_ord *order = NULL;
    st_tensor *sorted = NULL;
    size_t *sbegin = NULL;
    if (!f) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    if (!(f->buf = (unsigned char *)fio_read_file(path, SIZE_MAX, &f->size, err, errlen)))
        goto fail;
    if (f->size < 8) {
        set_err(err, errlen, "%s is not a safetensors file (%zu bytes)", path, f->size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)f->buf[i] << (8 * i);
    if (hlen > ST_MAX_HEADER || hlen > f->size - 8) {
        set_err(err, errlen, "%s is not a safetensors file (header length %llu, file %zu bytes)",
                path, (unsigned long long)hlen, f->size);
        goto fail;
    }
    const char *htxt = (const char *)f->buf + 8, *end = NULL;
    f->header = cJSON_ParseWithLengthOpts(htxt, (size_t)hlen, &end, 0);
    if (!f->header || !cJSON_IsObject(f->header)) {
        set_err(err, errlen, "%s: the safetensors header is not a JSON object", path);
        goto fail;
    }
    for (; end && end < htxt + hlen; end++)
        if (*end != ' ' && *end != '\n' && *end != '\t' && *end != '\r') {
            set_err(err, errlen, "%s: trailing bytes after the safetensors header", path);
            goto fail;
        }
    size_t data_size = f->size - 8 - (size_t)hlen;
    unsigned char *data = f->buf + 8 + hlen;
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, f->header)
        if (strcmp(e->string, "__metadata__") != 0)
            n++;
    f->t = calloc(n ? (size_t)n : 1, sizeof *f->t);
    f->begin = calloc(n ? (size_t)n : 1, sizeof *f->begin);
    order = malloc((n ? (size_t)n : 1) * sizeof *order);
    sorted = calloc(n ? (size_t)n : 1, sizeof *sorted);
    sbegin = calloc(n ? (size_t)n : 1, sizeof *sbegin);
    if (!f->t || !f->begin || !order || !sorted || !sbegin) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    int i = 0;
    cJSON_ArrayForEach(e, f->header) {
        if (strcmp(e->string, "__metadata__") == 0) {
            const cJSON *m;
            if (!cJSON_IsObject(e))
                goto badmeta;
            cJSON_ArrayForEach(m, e)
                if (!cJSON_IsString(m))
                    goto badmeta;
            continue;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(f->t[j].name, e->string) == 0) {
                set_err(err, errlen, "%s: tensor \"%s\" appears twice", path, e->string);
                goto fail;
            }
        if (parse_entry(e, data_size, &f->t[i], &f->begin[i], err, errlen) < 0) {
            set_err_prefix(err, errlen, path);
            goto fail;
        }
        order[i].begin = f->begin[i];
        order[i].index = i;
        i++;
    }
    f->count = n;
    /* The tensors must tile the data: sorted by offset, each starts where the
     * previous ended, the last ends at the end of the file. */
    qsort(order, (size_t)n, sizeof *order, cmp_begin);
    size_t pos = 0;
    for (i = 0; i < n; i++) {
        sorted[i] = f->t[order[i].index];
        sbegin[i] = order[i].begin;
        if (sbegin[i] != pos) {
            set_err(err, errlen, "%s: tensor \"%s\" starts at data byte %zu, expected %zu "
                    "(gap or overlap)", path, sorted[i].name, sbegin[i], pos);
            goto fail;
        }
        pos += sorted[i].bytes;
        sorted[i].data = data + sbegin[i];
#if ST_HOST_BE
        swap_elems(data + sbegin[i], sorted[i].bytes, st_dtype_size(sorted[i].dtype));
#endif
    }
    if (pos != data_size) {
        set_err(err, errlen, "%s: %zu data bytes after the last tensor", path, data_size - pos);
        goto fail;
    }
    free(f->t);
    free(f->begin);
    f->t = sorted;
    f->begin = sbegin;
    free(order);
    return f;
badmeta:
    set_err(err, errlen, "%s: __metadata__ must map names to strings", path);
fail:
    free(order);
    free(sorted);
    free(sbegin);
    st_close(f);
    return NULL;
}

void st_close(st_file *f)
{
    if (!f)
        return;
    cJSON_Delete(f->header);
    free(f->buf);
    free(f->t);
    free(f->begin);
    free(f);
}

int st_count(const st_file *f)
{
    return f->count;
}

const st_tensor *st_get(const st_file *f, int i)
{
    return i >= 0 && i < f->count ? &f->t[i] : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name)
{
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *st_meta(const st_file *f, const char *key)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, key) : NULL;
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
