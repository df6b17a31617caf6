/* jobs/infer_cli.c: `kiln infer MODEL.tar|JOB_DIR IMAGE...` (contract in
 * infer_cli.h). The model is opened with model_bundle_open (a job folder
 * takes --epoch; a tarball holds one set of weights), the images are read as
 * the inference process reads the API's (infer_set_add_file), classified by
 * infer_run and answered by infer_answer: --json prints exactly the body
 * POST /api/v1/jobs/{id}/infer answers, the default a table for people.
 */
#include "jobs/infer_cli.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jobs/cli_args.h"      /* cli_int */
#include "jobs/infer.h"         /* infer_set, infer_model, infer_run, infer_answer, INFER_LIMITS */
#include "jobs/model_bundle.h"  /* model_bundle_open */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kiln infer MODEL.tar|JOB_DIR IMAGE... [--epoch N|best] [--top-k K] [--json]\n"
            "\n"
            "Classifies PNG or JPEG images with a trained model: a model tarball (GET\n"
            "/api/v1/jobs/{id}/model) or a job's folder (<data>/jobs/<id>, or kiln train's\n"
            "--out). Each image gets the preprocessing of the job's dataset (size, resize\n"
            "mode, channels, centre crop, mean, scale) and its top-k classes.\n"
            "\n"
            "  --epoch N|best        a job folder's snapshot: epoch N, or the best by the job's\n"
            "                        checkpoint metric (default: the final model)\n"
            "  --top-k K             predictions per image, 1..classes (%d)\n"
            "  --json                print the answer of POST /api/v1/jobs/{id}/infer\n"
            "  --help                this text\n"
            "\n"
            "An image that cannot be read or decoded gets its error and the others go on;\n"
            "the exit status is 1 when no image could be classified.\n",
            INFER_LIMITS.top_k_default);
}

typedef struct infer_opts {
    const char *model;
    const char **images;
    int nimages;
    const char *epoch;
    int top_k;                  /* 0: the default */
    bool json;
} infer_opts;

/* Returns 0 (parsed), 1 (--help printed) or 2 (usage error, message printed). */
static int parse_args(int argc, char **argv, infer_opts *o)
{
    memset(o, 0, sizeof *o);
    if (!(o->images = calloc((size_t)argc, sizeof *o->images))) {
        fprintf(stderr, "kiln infer: out of memory\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--epoch")) {
            if (!v) goto missing;
            o->epoch = v;
            i++;
        } else if (!strcmp(a, "--top-k")) {
            if (!v || !cli_int(v, 1, 1 << 20, &o->top_k)) {
                fprintf(stderr, "kiln infer: --top-k takes an integer of at least 1\n");
                return 2;
            }
            i++;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "kiln infer: unknown option %s\n\n", a);
            usage(stderr);
            return 2;
        } else if (!o->model) {
            o->model = a;
        } else {
            o->images[o->nimages++] = a;
        }
        continue;
    missing:
        fprintf(stderr, "kiln infer: %s needs a value\n", a);
        return 2;
    }
    if (!o->model || o->nimages == 0) {
        usage(stderr);
        return 2;
    }
    return 0;
}

static void print_table(const cJSON *ans)
{
    const cJSON *epoch = cJSON_GetObjectItemCaseSensitive(ans, "epoch");
    printf("epoch %d\n", cJSON_IsNumber(epoch) ? epoch->valueint : 0);
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(ans, "items")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(it, "error");
        if (err) {
            printf("%s: error: %s\n", name, cJSON_GetObjectItemCaseSensitive(err, "message")->valuestring);
            continue;
        }
        printf("%s\n", name);
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(it, "predictions"))
            printf("  %9.6f  %s (%d)\n", cJSON_GetObjectItemCaseSensitive(p, "probability")->valuedouble,
                   cJSON_GetObjectItemCaseSensitive(p, "label")->valuestring,
                   cJSON_GetObjectItemCaseSensitive(p, "index")->valueint);
    }
}

/* Opens the model, classifies, prints. Returns the exit status. */
static int run(const infer_opts *o)
{
    api_error e;
    snap_select sel;
    if (snap_select_parse(o->epoch, "--epoch", &sel, &e) != 0) {
        fprintf(stderr, "kiln infer: %s\n", e.message);
        return 2;
    }
    model_bundle b;
    memset(&b, 0, sizeof b);
    if (model_bundle_open(o->model, sel, &b, &e) != 0) {
        fprintf(stderr, "kiln infer: %s: %s\n", o->model, e.message);
        return 1;
    }
    int status = 1, top_k = o->top_k ? o->top_k : INFER_LIMITS.top_k_default;
    if (!o->top_k && top_k > b.nclasses)
        top_k = b.nclasses;
    infer_set s;
    infer_set_init(&s);
    infer_model m = { 0 };
    char err[512];
    cJSON *ans = NULL;
    if (infer_check_top_k(top_k, b.nclasses, &e) != 0) {
        fprintf(stderr, "kiln infer: --top-k: %s\n", e.message);
        status = 2;
        goto out;
    }
    for (int i = 0; i < o->nimages; i++)
        if (infer_set_add_file(&s, o->images[i], o->images[i], &e) != 0) {
            fprintf(stderr, "kiln infer: %s\n", e.message);
            goto out;
        }
    if (infer_model_open(&m, &b, infer_replicas(&b, omp_get_max_threads()), err, sizeof err) != 0 ||
        infer_run(&m, &b, &s, top_k, err, sizeof err) != 0) {
        fprintf(stderr, "kiln infer: %s\n", err);
        goto out;
    }
    int http = 0;
    char *text = infer_answer(&b, &s, &http, NULL);
    if (!text || (!o->json && !(ans = cJSON_Parse(text)))) {
        free(text);
        fprintf(stderr, "kiln infer: out of memory\n");
        goto out;
    }
    if (o->json)
        printf("%s\n", text);
    else
        print_table(ans);
    free(text);
    status = http == 200 ? 0 : 1;
out:
    cJSON_Delete(ans);
    infer_model_free(&m);
    infer_set_free(&s);
    model_bundle_free(&b);
    return status;
}

int infer_main(int argc, char **argv)
{
    infer_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc == 0)
        rc = run(&o);
    else if (rc == 1)
        rc = 0;
    free(o.images);
    return rc;
}
