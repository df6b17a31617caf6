/* jobs/export_cli.c: `kiln export MODEL.tar|JOB_DIR [--epoch N|best|final] [-o OUT]`.
 *
 * Opens the model as `kiln infer` and the download do (jobs/model_bundle.h:
 * the same weights for the same --epoch), writes its ONNX form
 * (jobs/model_onnx.h) atomically, and says what it wrote. */
#include "jobs/export_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fileio.h"     /* fio_write_atomic */
#include "jobs/model_bundle.h" /* model_bundle_open */
#include "jobs/model_onnx.h"   /* model_bundle_onnx */
#include "jobs/snapshots.h"    /* snap_select_parse */

#define EXPORT_DEFAULT_OUT "model.onnx"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln export MODEL.tar|JOB_DIR [--epoch N|best|final] [-o OUT.onnx]\n"
            "\n"
            "Writes a trained model as an ONNX file (opset 13, FP32 weights) that ONNX\n"
            "Runtime and other ONNX tools run. The graph's input \"pixels\" is float32\n"
            "[batch, C, H, W] raw pixel values (0..255) of images decoded, resized and\n"
            "cropped as the job's dataset was (the file's \"preprocess\" metadata says how);\n"
            "it subtracts the dataset's mean and scales itself, and its output\n"
            "\"probabilities\" is [batch, classes]. The class names are in the \"labels\"\n"
            "metadata.\n"
            "\n"
            "  MODEL.tar               a model downloaded from GET /api/v1/jobs/{id}/model\n"
            "  JOB_DIR                 a job's folder (<data>/jobs/N, or kiln train's --out)\n"
            "  --epoch N|best|final    a job folder's snapshot: epoch N, the best by the\n"
            "                          job's checkpoint_metric, or the final model (the\n"
            "                          default; before the end, the latest snapshot)\n"
            "  -o, --out FILE          where to write (default ./" EXPORT_DEFAULT_OUT ")\n"
            "  --help                  this text\n");
}

int export_main(int argc, char **argv, const char *version)
{
    const char *model = NULL, *out = EXPORT_DEFAULT_OUT, *epoch = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--epoch") || !strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kiln export: %s needs a value\n", a);
                goto usage;
            }
            *(!strcmp(a, "--epoch") ? &epoch : &out) = argv[++i];
            continue;
        }
        if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln export: unknown option %s\n", a);
            goto usage;
        }
        if (model) {
            fprintf(stderr, "kiln export: one model at a time (%s and %s)\n", model, a);
            goto usage;
        }
        model = a;
    }
    if (!model) {
        fprintf(stderr, "kiln export: which model? (a tarball or a job folder)\n");
        goto usage;
    }
    api_error e;
    snap_select sel;
    if (snap_select_parse(epoch, "--epoch", &sel, &e) != 0) {
        fprintf(stderr, "kiln export: %s\n", e.message);
        goto usage;
    }
    model_bundle b;
    if (model_bundle_open(model, sel, &b, &e) != 0) {
        fprintf(stderr, "kiln export: %s (%s)\n", e.message, e.code);
        return 1;
    }
    uint8_t *bytes = NULL;
    size_t len = 0;
    char err[1024];
    int status = 1;
    if (model_bundle_onnx(&b, version, &bytes, &len, err, sizeof err) != 0 ||
        fio_write_atomic(out, bytes, len, err, sizeof err) != 0) {
        fprintf(stderr, "kiln export: %s\n", err);
        goto out;
    }
    printf("wrote %s: %s, %zu bytes, input [batch, %d, %d, %d], %d classes", out,
           b.network_name[0] ? b.network_name : "network", len, b.input.c, b.input.h,
           b.input.w, b.nclasses);
    if (b.epoch > 0)
        printf(", %s epoch %d", b.final ? "final model," : "snapshot of", b.epoch);
    printf("\n");
    status = 0;
out:
    free(bytes);
    model_bundle_free(&b);
    return status;
usage:
    fprintf(stderr, "(kiln export --help lists the options)\n");
    return 2;
}
