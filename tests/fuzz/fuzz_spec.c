/* tests/fuzz/fuzz_spec.c: network specs (engine/spec.c), as POST
 * /api/v1/networks/summary and a job's "network" hand them over.
 *
 * The input is the spec's JSON text. It is parsed as the API does (cJSON)
 * and checked by spec_parse with the input shape from the spec itself and
 * with a dataset's shape, then summarised (engine/summary.c: shapes, FLOPs,
 * the memory estimate and its warnings) and the summary written as JSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "engine/spec.h"      /* spec_parse, spec_free, spec_feeds_relu */
#include "engine/summary.h"   /* summary_build, summary_to_json */
#include "fuzz_util.h"

static void parse_with(const cJSON *j, net_shape in, int classes)
{
    char err[512];
    net_spec s;
    int rc = spec_parse(j, in, classes, &s, err, sizeof err);
    fuzz_note("spec_parse", rc, err);
    if (rc == 0) {
        for (int i = 0; i < s.nlayers; i++) {
            (void)spec_feeds_relu(&s, i);
            (void)spec_layer_params(&s.layers[i]);
            (void)spec_act_shape(&s, i + 1);
        }
        spec_free(&s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    if (!j)
        return 0;
    parse_with(j, (net_shape){ 0, 0, 0 }, 10);
    parse_with(j, (net_shape){ 3, 32, 32 }, 100);
    parse_with(j, (net_shape){ 1, 28, 28 }, 2);

    char err[512];
    summary sm;
    if (summary_build(j, (net_shape){ 0, 0, 0 }, 10, 7, SOLVER_ADAM, false, PREC_AMP_FP16, &sm, err,
                      sizeof err) == 0) {
        cJSON *out = summary_to_json(&sm);
        char *text = out ? cJSON_PrintUnformatted(out) : NULL;
        free(text);
        cJSON_Delete(out);
        summary_free(&sm);
    }
    cJSON_Delete(j);
    return 0;
}
