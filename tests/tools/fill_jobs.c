/* tests/tools/fill_jobs.c: kiln_fill_jobs DB COUNT [OWNER]
 *
 * Adds three ready dataset rows ("digits", "cifar", "letters") and COUNT
 * ended jobs to the store at DB through the store's own functions (db/store.h),
 * for the jobs list's tests and benchmark (bench/jobs_list.mjs) without
 * training thousands of jobs. Job i (1-based, in insertion order) is made by
 * the rules below, so a test can compute what any filter should match:
 *   dataset   digits, cifar, letters by i % 3 (0, 1, 2)
 *   network   lenet, resnet20, cifar10-cnn, alexnet by i % 4
 *   precision fp32, amp-bf16, amp-fp16 by i % 3... shifted: (i / 3) % 3
 *   name      "run-<i, 5 digits>", none when i % 7 == 0
 *   epochs    1 + i % 20; steps 100 * epochs
 *   status    done, failed, cancelled by i % 5: 0,1,2 done, 3 failed, 4 cancelled
 *   step      steps when done, else (i * 37) % steps
 *   tags      ["sweep"] when i % 3 == 0, plus "baseline" when i % 5 == 0
 *   notes     "note <i>" when i % 11 == 0
 *   owner     OWNER (a user id) when given, else none
 * Prints {"datasets":[d1,d2,d3],"first":id,"last":id}; exits 1 on an error.
 * No folders are made: the jobs have nothing but their rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"

/* A LeNet job's resolved config (a real job.json, its dataset_dir made up):
 * the precision and the name (",\"name\":...", or "") go in. */
#define CONFIG_FMT \
    "{\"id\":0,\"dataset_id\":1,\"dataset_dir\":\"/nonexistent/datasets/1\"," \
    "\"network_name\":\"lenet\",\"network\":{\"name\":\"lenet\"," \
    "\"description\":\"LeNet for 28x28 digits, as in Caffe's MNIST example\"," \
    "\"layers\":[{\"type\":\"conv2d\",\"name\":\"conv1\",\"filters\":20,\"kernel\":5}," \
    "{\"type\":\"maxpool\",\"name\":\"pool1\",\"kernel\":2,\"stride\":2},{\"type\":\"conv2d\"," \
    "\"name\":\"conv2\",\"filters\":50,\"kernel\":5},{\"type\":\"maxpool\",\"name\":\"pool2\"," \
    "\"kernel\":2,\"stride\":2},{\"type\":\"flatten\",\"name\":\"flatten\"},{\"type\":\"dense\"," \
    "\"name\":\"fc1\",\"units\":500},{\"type\":\"relu\",\"name\":\"relu1\"},{\"type\":\"dense\"," \
    "\"name\":\"fc2\",\"units\":\"classes\"}]},\"input\":[1,28,28],\"classes\":[\"0\",\"1\",\"2\",\"3\"," \
    "\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"],\"epochs\":10,\"batch_size\":64,\"seed\":1," \
    "\"snapshot_interval\":1,\"checkpoint_metric\":\"val/accuracy\"," \
    "\"keep_checkpoints\":null,\"loader_threads\":0,\"precision\":\"%s\"," \
    "\"loss_scaling\":\"off\",\"backend\":\"cpu\",\"solver\":{\"type\":\"sgd\",\"lr\":0.01," \
    "\"momentum\":0.9,\"nesterov\":false,\"weight_decay\":0,\"decay_bias\":false," \
    "\"clip_norm\":0,\"label_smoothing\":0},\"augmentation\":{\"crop\":0,\"pad\":0," \
    "\"mirror\":false},\"lr_policy\":{\"type\":\"fixed\",\"warmup_steps\":0}%s}"

static const char *const networks[] = { "lenet", "resnet20", "cifar10-cnn", "alexnet" };
static const char *const precisions[] = { "fp32", "amp-bf16", "amp-fp16" };
static const char *const statuses[] = { "done", "done", "done", "failed", "cancelled" };

static int add_job(store *st, const int64_t *ds, long long i, int64_t owner, int64_t *id)
{
    char cfg[sizeof CONFIG_FMT + 64], name[32] = "", tags[64], notes[32];
    if (i % 7 != 0)
        snprintf(name, sizeof name, "run-%05lld", i);
    char named[48] = "";
    if (name[0])
        snprintf(named, sizeof named, ",\"name\":\"%s\"", name);
    snprintf(cfg, sizeof cfg, CONFIG_FMT, precisions[(i / 3) % 3], named);
    int epochs = 1 + (int)(i % 20);
    int64_t steps = 100 * (int64_t)epochs;
    const char *status = statuses[i % 5];
    int64_t step = !strcmp(status, "done") ? steps : (i * 37) % steps;
    snprintf(tags, sizeof tags, "[%s%s%s]", i % 3 == 0 ? "\"sweep\"" : "",
             i % 3 == 0 && i % 5 == 0 ? "," : "", i % 5 == 0 ? "\"baseline\"" : "");
    snprintf(notes, sizeof notes, "note %lld", i);
    char err[256] = "";
    if (store_job_insert(st, ds[i % 3], networks[i % 4], cfg, epochs, id, err, sizeof err) != 0) {
        fprintf(stderr, "kiln_fill_jobs: job %lld: %s\n", i, err);
        return -1;
    }
    if (store_job_set_status(st, *id, "running", NULL) != 0 ||
        store_job_set_progress(st, *id, (int)(step * epochs / steps), step, steps, 100.0, -1) != 0 ||
        store_job_set_status(st, *id, status, !strcmp(status, "failed") ? "it failed" : NULL) != 0 ||
        store_job_set_meta(st, *id, NULL, tags, i % 11 == 0 ? notes : NULL) != 0 ||
        (owner > 0 && store_set_owner(st, STORE_OWNED_JOB, *id, owner) != 0)) {
        fprintf(stderr, "kiln_fill_jobs: job %lld: the store failed\n", i);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: kiln_fill_jobs DB COUNT [OWNER]\n");
        return 2;
    }
    long long count = strtoll(argv[2], NULL, 10);
    int64_t owner = argc > 3 ? strtoll(argv[3], NULL, 10) : 0;
    char err[512];
    store *st = store_open(argv[1], err, sizeof err);
    if (!st) {
        fprintf(stderr, "kiln_fill_jobs: %s\n", err);
        return 1;
    }
    static const char *const dsnames[] = { "digits", "cifar", "letters" };
    int64_t ds[3], first = 0, id = 0;
    for (int k = 0; k < 3; k++)
        if (store_dataset_insert(st, dsnames[k], &ds[k], err, sizeof err) != 0 ||
            store_dataset_finish(st, ds[k], "ready", "{}", NULL) != 0 ||
            (owner > 0 && store_set_owner(st, STORE_OWNED_DATASET, ds[k], owner) != 0)) {
            fprintf(stderr, "kiln_fill_jobs: making dataset %s failed: %s\n", dsnames[k], err);
            store_close(st);
            return 1;
        }
    for (long long i = 1; i <= count; i++) {
        if (add_job(st, ds, i, owner, &id) != 0) {
            store_close(st);
            return 1;
        }
        if (i == 1)
            first = id;
    }
    printf("{\"datasets\":[%lld,%lld,%lld],\"first\":%lld,\"last\":%lld}\n", (long long)ds[0],
           (long long)ds[1], (long long)ds[2], (long long)first, (long long)id);
    store_close(st);
    return 0;
}
