/* jobs/model_onnx.h: a trained model's ONNX form (engine/onnx.h) with what
 * a user of the file needs in its metadata_props: "labels" (the class names
 * as a JSON array), "preprocess" (preprocess.json's text: how to turn an
 * image into the graph's input, jobs/model_bundle.h), "kiln_version" and
 * "network". One place for `kiln export`, GET .../model?format=onnx and the
 * tarball's model.onnx, so that the three files are the same. */
#ifndef KILN_JOBS_MODEL_ONNX_H
#define KILN_JOBS_MODEL_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/net.h"          /* net_shape */
#include "jobs/model_bundle.h"   /* model_bundle, model_prep */

typedef struct model_onnx_src {
    const cJSON *spec;           /* the network spec */
    net_shape input;             /* the network's input (prep's crop) */
    int nclasses;
    char *const *labels;         /* nclasses names */
    const model_prep *prep;      /* mean and scale go into the graph */
    const char *network;         /* the name when the spec has none ("" or NULL: none) */
    const char *weights;         /* a net_save file or a checkpoint */
} model_onnx_src;

/* The ONNX bytes of src: *out (free it) and *len; 0, or -1 with err set
 * (the weights' or the spec's problem, engine/onnx.h). */
int model_onnx(const model_onnx_src *src, const char *kiln_version, uint8_t **out, size_t *len,
               char *err, size_t errlen);
/* The same for an opened model. */
int model_bundle_onnx(const model_bundle *b, const char *kiln_version, uint8_t **out,
                      size_t *len, char *err, size_t errlen);

#endif
