/* jobs/summary_cli.c: `kiln summary NAME|SPEC.json [OPTIONS]`, the model
 * summary of a built-in network or a spec file: per-layer shapes, parameters,
 * activation bytes and FLOPs, and the training memory for a batch size and an
 * optimizer (engine/summary.h states what the figures count).
 */
#include "jobs/summary_cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "engine/net.h"         /* net_builtin */
#include "engine/summary.h"     /* summary_build, summary_print */
#include "jobs/cli_args.h"      /* cli_int, cli_shape, cli_spec */

#define DEFAULT_CLASSES 10      /* a spec file's class count when --classes is absent */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln summary NAME|SPEC.json [OPTIONS]\n"
            "\n"
            "Prints a network's model summary: per layer the output shape, parameters,\n"
            "activation bytes and forward FLOPs per image; the totals; the memory that\n"
            "training takes for a batch size, optimizer and precision; and, for each device\n"
            "(the CPU's memory, each GPU's), whether it fits and the largest batch that does.\n"
            "Nothing is allocated or trained.\n"
            "\n"
            "Training memory (seeds/002): weights, gradients and optimizer states in FP32\n"
            "(sgd with momentum one state, adam and adamw two), 16-bit copies of the\n"
            "convolution and dense weights under mixed precision, plus the batch size times\n"
            "the input and every layer's output and its gradient (2 bytes an element where\n"
            "mixed precision stores it in 16 bits, else 4) and dropout masks. Workspaces and\n"
            "the runtime's own memory are left out: it is a lower bound. Warnings flag\n"
            "filters, input channels, units and batch sizes that are not multiples of 8.\n"
            "\n"
            "  NAME|SPEC.json       a built-in network (lenet, cifar10-cnn, alexnet, resnet20,\n"
            "                       resnet18, resnet50) or a spec file\n"
            "  --input C,H,W        the input shape (default: the built-in's, or the spec's\n"
            "                       \"input\"; lenet 1,28,28, the CIFAR nets 3,32,32)\n"
            "  --classes N          (built-ins: 10, resnet18 and resnet50 1000; a file: 10)\n"
            "  --batch N            (64)\n"
            "  --solver sgd|adam|adamw  (sgd)\n"
            "  --momentum X         sgd's momentum (0.9); 0 means no momentum buffer\n"
            "  --precision P        fp32, amp-bf16 or amp-fp16 (fp32)\n"
            "  --json               print one JSON object instead of the table\n"
            "  --help               this text\n");
}

typedef struct opts {
    const char *network;
    net_shape in;               /* {0,0,0}: not given */
    int classes;                /* 0: not given */
    int batch;
    solver_type solver;
    double momentum;
    precision_mode prec;
    bool json;
} opts;

/* Returns 0, 1 for --help (printed), or 2 after a usage message. */
static int parse_args(int argc, char **argv, opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        } else if (!strcmp(a, "--input")) {
            ok = cli_shape(v, &o->in);
        } else if (!strcmp(a, "--classes")) {
            ok = cli_int(v, 1, 1 << 20, &o->classes);
        } else if (!strcmp(a, "--batch")) {
            ok = cli_int(v, 1, 1 << 20, &o->batch);
        } else if (!strcmp(a, "--solver")) {
            ok = v && solver_type_parse(v, &o->solver) == 0;
        } else if (!strcmp(a, "--precision")) {
            ok = v && precision_parse(v, &o->prec) == 0;
        } else if (!strcmp(a, "--momentum")) {
            char *end;
            o->momentum = v ? strtod(v, &end) : -1;
            ok = v && end != v && !*end && o->momentum >= 0 && o->momentum < 1;
        } else if (a[0] == '-' || o->network) {
            fprintf(stderr, "kiln summary: unexpected argument \"%s\"\n\n", a);
            usage(stderr);
            return 2;
        } else {
            o->network = a;
            continue;
        }
        if (!ok) {
            fprintf(stderr, "kiln summary: bad or missing value for %s%s%s\n", a,
                    v ? ": " : "", v ? v : "");
            return 2;
        }
        i++;
    }
    if (!o->network) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int summary_main(int argc, char **argv)
{
    opts o = { .batch = 64, .solver = SOLVER_SGD, .momentum = 0.9, .prec = PREC_FP32 };
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    rc = 1;
    summary s = { 0 };
    cJSON *out = NULL;
    cJSON *spec = cli_spec("summary", o.network);
    if (!spec)
        goto out;
    net_shape in = { 0, 0, 0 };
    int classes = DEFAULT_CLASSES;
    if (net_builtin(o.network))
        summary_builtin_defaults(o.network, &in, &classes);
    if (o.in.c)
        in = o.in;
    if (o.classes)
        classes = o.classes;
    char err[512];
    if (summary_build(spec, in, classes, o.batch, o.solver, o.momentum > 0, o.prec, &s, err,
                      sizeof err) < 0) {
        fprintf(stderr, "kiln summary: %s: %s\n", o.network, err);
        goto out;
    }
    if (o.json) {
        out = summary_to_json(&s);
        char *text = out ? cJSON_PrintUnformatted(out) : NULL;
        if (!text) {
            fprintf(stderr, "kiln summary: out of memory\n");
            goto out;
        }
        printf("%s\n", text);
        cJSON_free(text);
    } else if (summary_print(stdout, &s) < 0) {
        fprintf(stderr, "kiln summary: cannot write the summary\n");
        goto out;
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    cJSON_Delete(out);
    cJSON_Delete(spec);
    summary_free(&s);
    return rc;
}
