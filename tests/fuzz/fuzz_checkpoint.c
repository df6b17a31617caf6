/* tests/fuzz/fuzz_checkpoint.c: the checkpoint reader (engine/checkpoint.c)
 * on any file: what resuming a job, a model download and `kiln export` read
 * from a job's checkpoints/ folder.
 *
 * One small network (every kind of state: convolution, batch norm with its
 * running statistics, dense, Adam's two slots) is built once; each input is
 * written as a file and read with ckpt_read_info, restored into the network
 * with ckpt_load (all or nothing), exported with ckpt_export_weights and
 * loaded as bare weights with net_load. A restore that succeeds must give
 * back the step it read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/checkpoint.h"   /* ckpt_read_info, ckpt_load, ckpt_export_weights */
#include "engine/net.h"          /* net_create, net_load */
#include "fuzz_util.h"

static net *n;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("OMP_NUM_THREADS", "1", 1);
    cJSON *spec = cJSON_Parse(FUZZ_CKPT_SPEC);
    net_solver sv = { .type = SOLVER_ADAM, .lr = 0.01f };
    char err[512];
    n = net_create(spec, FUZZ_CKPT_SHAPE, FUZZ_CKPT_CLASSES, 2, NULL, &sv, 1, err, sizeof err);
    cJSON_Delete(spec);
    if (!n) {
        fprintf(stderr, "fuzz_checkpoint: net_create: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[PATH_MAX], out[PATH_MAX], err[512];
    fuzz_path(path, fuzz_scratch(), "epoch-1.safetensors");
    fuzz_path(out, fuzz_scratch(), "weights.safetensors");
    fuzz_write(path, data, size);

    ckpt_info info, loaded;
    int rc_info = ckpt_read_info(path, &info, err, sizeof err);
    fuzz_note("ckpt_read_info", rc_info, err);
    int rc_load = ckpt_load(n, path, &loaded, err, sizeof err);
    fuzz_note("ckpt_load", rc_load, err);
    if (rc_load == 0) {
        if (rc_info != 0 || loaded.step != info.step || loaded.epoch != info.epoch) {
            fprintf(stderr, "ckpt_load accepted what ckpt_read_info read otherwise\n");
            abort();
        }
    }
    if (ckpt_export_weights(path, out, err, sizeof err) == 0 && net_load(n, out, err, sizeof err) != 0 &&
        ckpt_load(n, path, NULL, err, sizeof err) == 0) {
        fprintf(stderr, "a checkpoint that restores exports weights that do not load: %s\n", err);
        abort();
    }
    (void)net_load(n, path, err, sizeof err);
    unlink(out);
    return 0;
}
