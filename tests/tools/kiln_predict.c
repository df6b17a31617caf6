/* tests/tools/kiln_predict.c: kiln's own probabilities for raw pixels, the
 * reference the ONNX tests (tests/integration/onnx.test.mjs) compare ONNX
 * Runtime's with. It does what inference does, with the engine's public
 * calls only: build the network from its spec on the CPU in FP32, net_load
 * the weights (a net_save file or a checkpoint), x = (pixel - mean[c]) *
 * scale, net_predict.
 *
 *   kiln_predict NETWORK C,H,W CLASSES WEIGHTS MEAN[,MEAN...] SCALE IN.f32 OUT.f32
 *
 * NETWORK is a built-in name or a spec file; IN.f32 holds N*C*H*W float32
 * pixel values (NCHW, host order), OUT.f32 gets N*CLASSES probabilities.
 * Exit status 0, 1 on a failure, 2 on a usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fileio.h"     /* fio_read_file, fio_write_atomic */
#include "engine/net.h"        /* net_create, net_load, net_predict */
#include "jobs/cli_args.h"     /* cli_spec, cli_shape, cli_int */

#define MAX_BATCH 10           /* images per net_predict call: ResNet-50 at 224 takes ~0.3 GB each */
#define MAX_INPUT_BYTES ((size_t)1 << 31)

static int parse_mean(const char *s, int c, float *mean)
{
    char *end;
    for (int i = 0; i < c; i++) {
        mean[i] = strtof(s, &end);
        if (end == s || (i + 1 < c && *end != ','))
            return -1;
        s = end + 1;
    }
    return *end == '\0' ? 0 : -1;
}

int main(int argc, char **argv)
{
    net_shape in;
    int classes, status = 1;
    float mean[4], scale;
    char err[1024], *end;
    if (argc != 9 || !cli_shape(argv[2], &in) || in.c > 4 || !cli_int(argv[3], 1, 1 << 20, &classes) ||
        parse_mean(argv[5], in.c, mean) != 0 || !((scale = strtof(argv[6], &end)) > 0) || *end) {
        fprintf(stderr, "usage: kiln_predict NETWORK C,H,W CLASSES WEIGHTS MEAN[,MEAN...] SCALE "
                "IN.f32 OUT.f32\n");
        return 2;
    }
    cJSON *spec = cli_spec("kiln_predict", argv[1]);
    net *n = NULL;
    size_t bytes = 0;
    float *x = NULL, *probs = NULL;
    if (!spec)
        goto out;
    if (!(x = (float *)fio_read_file(argv[7], MAX_INPUT_BYTES, &bytes, err, sizeof err))) {
        fprintf(stderr, "kiln_predict: %s\n", err);
        goto out;
    }
    size_t image = (size_t)in.c * in.h * in.w;
    if (bytes % (image * sizeof *x)) {
        fprintf(stderr, "kiln_predict: %s holds %zu bytes, not a whole number of %dx%dx%d images\n",
                argv[7], bytes, in.c, in.h, in.w);
        goto out;
    }
    int count = (int)(bytes / (image * sizeof *x));
    for (size_t i = 0; i < (size_t)count * image; i++)
        x[i] = (x[i] - mean[(i / ((size_t)in.h * in.w)) % (size_t)in.c]) * scale;
    if (!(probs = malloc((size_t)count * classes * sizeof *probs + 1))) {
        fprintf(stderr, "kiln_predict: out of memory\n");
        goto out;
    }
    if (!(n = net_create(spec, in, classes, MAX_BATCH, NULL, NULL, 1, err, sizeof err)) ||
        net_load(n, argv[4], err, sizeof err) != 0 ||
        net_predict(n, x, count, probs, err, sizeof err) != 0 ||
        fio_write_atomic(argv[8], probs, (size_t)count * classes * sizeof *probs, err,
                         sizeof err) != 0) {
        fprintf(stderr, "kiln_predict: %s\n", err);
        goto out;
    }
    status = 0;
out:
    net_free(n);
    cJSON_Delete(spec);
    free(x);
    free(probs);
    return status;
}
