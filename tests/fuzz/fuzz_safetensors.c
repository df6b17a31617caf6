/* tests/fuzz/fuzz_safetensors.c: the safetensors reader (engine/safetensors.c)
 * on any file, as a model download, an evaluation or `kiln infer` would read
 * one a user brought.
 *
 * The input is the file. What st_open accepts is walked whole (every
 * tensor's bytes read, names looked up) and written back with st_write; the
 * copy must open again with the same tensors, or the harness aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/safetensors.h"   /* st_open, st_get, st_find, st_meta, st_write */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[PATH_MAX], copy[PATH_MAX], err[512];
    fuzz_path(path, fuzz_scratch(), "in.safetensors");
    fuzz_path(copy, fuzz_scratch(), "copy.safetensors");
    fuzz_write(path, data, size);
    st_file *f = st_open(path, err, sizeof err);
    fuzz_note("st_open", f ? 0 : -1, err);
    if (!f)
        return 0;
    int n = st_count(f);
    st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    if (!ts)
        abort();
    for (int i = 0; i < n; i++) {
        const st_tensor *t = st_get(f, i);
        if (st_find(f, t->name) != t)
            abort();
        fuzz_touch(t->data, t->bytes);
        ts[i] = *t;
    }
    (void)st_meta(f, "kiln_checkpoint");
    if (st_write(copy, ts, n, NULL, err, sizeof err) == 0) {
        st_file *g = st_open(copy, err, sizeof err);
        if (!g || st_count(g) != n) {
            fprintf(stderr, "st_write's copy does not read back: %s\n", g ? "count" : err);
            abort();
        }
        for (int i = 0; i < n; i++) {
            const st_tensor *a = st_find(g, ts[i].name);
            if (!a || a->dtype != ts[i].dtype || a->ndim != ts[i].ndim || a->bytes != ts[i].bytes ||
                memcmp(a->data, ts[i].data, a->bytes) != 0) {
                fprintf(stderr, "tensor %s differs after st_write\n", ts[i].name);
                abort();
            }
        }
        st_close(g);
    }
    free(ts);
    st_close(f);
    return 0;
}
