/* jobs/model_onnx.c: a model's ONNX file with its metadata (model_onnx.h). */
#include "jobs/model_onnx.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/onnx.h"          /* onnx_export */

int model_onnx(const model_onnx_src *src, const char *kiln_version, uint8_t **out, size_t *len,
               char *err, size_t errlen)
{
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(src->spec, "name");
    const char *network = cJSON_IsString(nm) && nm->valuestring[0] ? nm->valuestring
                          : src->network ? src->network : "";
    cJSON *prep = model_prep_to_json(src->prep);
    char *prep_text = prep ? cJSON_PrintUnformatted(prep) : NULL;
    cJSON_Delete(prep);
    *out = NULL;
    *len = 0;
    if (!prep_text)
        return set_err(err, errlen, "out of memory");
    const char *props[] = { "preprocess", prep_text, "kiln_version", kiln_version,
                            "network", network, NULL };
    onnx_meta meta = { .scale = src->prep->scale, .labels = (const char *const *)src->labels,
                       .producer_version = kiln_version, .props = props };
    memcpy(meta.mean, src->prep->mean, sizeof meta.mean);
    int rc = onnx_export(src->spec, src->input, src->nclasses, src->weights, &meta, out, len,
                         err, errlen);
    free(prep_text);
    return rc;
}

int model_bundle_onnx(const model_bundle *b, const char *kiln_version, uint8_t **out,
                      size_t *len, char *err, size_t errlen)
{
    model_onnx_src src = { .spec = b->spec, .input = b->input, .nclasses = b->nclasses,
                           .labels = b->labels, .prep = &b->prep, .network = b->network_name,
                           .weights = b->weights };
    return model_onnx(&src, kiln_version, out, len, err, errlen);
}
