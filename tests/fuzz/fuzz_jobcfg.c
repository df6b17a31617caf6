/* tests/fuzz/fuzz_jobcfg.c: a job request (jobs/jobcfg.c), the JSON that
 * POST /api/v1/jobs takes, and job.json as the worker reads it back.
 *
 * The input is JSON text, read in each of jobcfg_from_json's forms. What a
 * form accepts must survive its own round trip: jobcfg_to_json of it reads
 * back as the resolved form and writes the same text again (jobcfg.h's
 * promise); a difference aborts. An accepted learning-rate policy is
 * evaluated over a run (engine/lr.c), as the worker does.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/lr.h"        /* lr_from_json, lr_at */
#include "jobs/jobcfg.h"      /* jobcfg_from_json, jobcfg_to_json */
#include "fuzz_util.h"

static char *print(const jobcfg *c)
{
    cJSON *j = jobcfg_to_json(c);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    return text;
}

static void check_round_trip(const jobcfg *c)
{
    char *first = print(c);
    if (!first)
        return;                                  /* out of memory */
    cJSON *j = cJSON_Parse(first);
    jobcfg back;
    api_error e = { 0 };
    if (jobcfg_from_json(j, JOBCFG_RESOLVED, &back, &e) != 0) {
        fprintf(stderr, "jobcfg_to_json wrote what jobcfg_from_json refuses: %s\n%s\n", e.message, first);
        abort();
    }
    char *second = print(&back);
    if (second && strcmp(first, second) != 0) {
        fprintf(stderr, "round trip differs:\n%s\n%s\n", first, second);
        abort();
    }
    free(second);
    jobcfg_free(&back);
    cJSON_Delete(j);
    free(first);
}

static void use(const jobcfg *c)
{
    (void)jobcfg_net_input(c);
    (void)jobcfg_ds_augment(c);
    (void)jobcfg_net_solver(c);
    (void)jobcfg_net_devices(c);
    int64_t steps = jobcfg_steps(c, 1000);
    lr_policy lp;
    char err[256];
    if (lr_from_json(c->lr_policy, c->solver.lr, steps, steps / (c->epochs > 0 ? c->epochs : 1) + 1, &lp,
                     NULL, err, sizeof err) == 0) {
        for (int64_t t = 0; t < steps && t < 64; t++)
            (void)lr_at(&lp, t);
        (void)lr_at(&lp, steps);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (!j)
        return 0;
    static const jobcfg_form forms[] = { JOBCFG_REQUEST, JOBCFG_LOCAL_REQUEST, JOBCFG_RESOLVED };
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        jobcfg c;
        api_error e = { 0 };
        int rc = jobcfg_from_json(j, forms[f], &c, &e);
        fuzz_note("jobcfg_from_json", rc, e.message);
        if (rc != 0)
            continue;
        use(&c);
        if (forms[f] == JOBCFG_RESOLVED)
            check_round_trip(&c);
        jobcfg_free(&c);
    }
    cJSON_Delete(j);
    return 0;
}
