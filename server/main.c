/* server/main.c: the one binary, `kiln`, and its subcommands.
 *
 * Only this file ends the process: each subcommand returns an exit status
 * (0 success, 1 failure, 2 a usage error) and main returns it.
 */
#include <stdio.h>
#include <string.h>

#include "jobs/bench.h"        /* bench_main */
#include "jobs/export_cli.h"   /* export_main */
#include "jobs/evaluation.h"   /* eval_main */
#include "jobs/import.h"       /* import_main */
#include "jobs/infer_cli.h"    /* infer_main */
#include "jobs/infer_server.h" /* infer_server_main: the hidden inference process */
#include "jobs/runner.h"       /* runner_main, train_main */
#include "jobs/summary_cli.h"  /* summary_main */
#include "server/server.h"     /* serve_main, serve_usage */
#include "server/user_cli.h"   /* user_main, token_main */

#ifndef KILN_VERSION
#define KILN_VERSION "0.0.0"
#endif

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln COMMAND [OPTIONS]\n"
            "\n"
            "kiln %s, a deep-learning training service.\n"
            "\n"
            "Commands:\n"
            "  serve     run the service: REST API, dashboard, job scheduler\n"
            "            kiln serve [--host ADDR] [--port N] [--data DIR] [--web-dir DIR]\n"
            "                       [--static-dir DIR] [--max-jobs N] [--import-root DIR]...\n"
            "  worker    run one training job (started by the scheduler)\n"
            "            kiln worker --job-dir DIR [--gpus N,...]\n"
            "  evaluate  run one evaluation of a job's model (started by the scheduler)\n"
            "            kiln evaluate --eval-dir DIR [--gpus N]\n"
            "  train     train from the command line, without the server\n"
            "            kiln train --dataset DIR --network NAME|SPEC.json [--epochs N]\n"
            "                       [--batch N] [--lr X] [--solver sgd|adam|adamw] ... [--out DIR]\n"
            "  summary   a network's layers, parameters, FLOPs and training memory\n"
            "            kiln summary NAME|SPEC.json [--input C,H,W] [--classes N] [--batch N]\n"
            "                         [--solver sgd|adam|adamw] [--json]\n"
            "  import    build a dataset from the command line\n"
            "            kiln import archive|folder|list|idx|cifar|mnist-json [--data DIR]\n"
            "                        [--name NAME] [--labels FILE] [--width W --height H] ... PATH\n"
            "  infer     classify images with a model tarball or a job's folder\n"
            "            kiln infer MODEL.tar|JOB_DIR IMAGE... [--epoch N|best] [--top-k K] [--json]\n"
            "  bench     measure training or inference throughput on synthetic data\n"
            "            kiln bench NETWORK|SPEC.json [--batch N] [--mode train|infer]\n"
            "                       [--steps N] [--warmup N] [--threads N] [--json]\n"
            "  export    a trained model as an ONNX file\n"
            "            kiln export MODEL.tar|JOB_DIR [--epoch N|best|final] [-o OUT.onnx]\n"
            "  user      users of kiln serve (once one exists, the API needs a sign-in)\n"
            "            kiln user add NAME [--admin] [--password-file FILE] | list | remove NAME\n"
            "  token     an API token for a user, printed once\n"
            "            kiln token add USER [--expires-days N] [--name LABEL]\n"
            "\n"
            "  kiln --help            this text\n"
            "  kiln --version         the version\n"
            "  kiln COMMAND --help    a command's options\n"
            "\n"
            "Environment: KILN_DATA (the data directory, default ./var), KILN_WEB_DIR,\n"
            "KILN_STATIC_DIR.\n",
            KILN_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
        printf("kiln %s\n", KILN_VERSION);
        return 0;
    }
    /* Each command sees argv starting at its own name. */
    if (!strcmp(cmd, "serve"))
        return serve_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker"))
        return runner_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "evaluate"))
        return eval_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "train"))
        return train_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "summary"))
        return summary_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "import"))
        return import_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "infer"))
        return infer_main(argc - 1, argv + 1);
    if (!strcmp(cmd, INFER_SERVER_COMMAND))   /* started by kiln serve; not in the usage */
        return infer_server_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return bench_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "user"))
        return user_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "token"))
        return token_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "export"))
        return export_main(argc - 1, argv + 1, KILN_VERSION);
    fprintf(stderr, "kiln: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}
