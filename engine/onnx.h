/* engine/onnx.h: a trained network as an ONNX model that computes what
 * kiln's inference computes.
 *
 * The model (IR version ONNX_IR_VERSION, default-domain opset ONNX_OPSET):
 *   input  "pixels"         float32 [batch, C, H, W], raw pixel values
 *                           (0..255) of images already decoded, resized and
 *                           cropped to the network's input as the job's
 *                           dataset was (the "preprocess" metadata says how)
 *   output "probabilities"  float32 [batch, classes], softmax of the logits
 * Inside: Sub(mean per channel) and Mul(scale), as kiln's loader normalises,
 * then one node (or two) per layer of the spec: conv2d Conv, maxpool
 * MaxPool, avgpool AveragePool (count_include_pad 0: kiln's averages leave
 * padding out), global_avgpool GlobalAveragePool, flatten Flatten, dense
 * (Flatten and) Gemm with transB, relu Relu, leaky_relu LeakyRelu, sigmoid
 * Sigmoid, tanh Tanh, dropout nothing (inference), batchnorm
 * BatchNormalization on the running statistics, add Add (Sum for 3+ inputs),
 * concat Concat on the channels; then Softmax. Initializers are the weights
 * under their net_save names ("conv1.weight", "bn1.running_var"), FP32 as
 * stored (a model trained with mixed precision keeps FP32 master weights).
 * metadata_props: "labels" (a JSON array of the class names, when given)
 * and the caller's key/value pairs ("preprocess", "kiln_version", "network").
 *
 * This module knows specs and weight files only (no jobs, no HTTP).
 */
#ifndef KILN_ENGINE_ONNX_H
#define KILN_ENGINE_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/net.h"          /* net_shape */

#define ONNX_IR_VERSION 8        /* ONNX 1.10+; Debian 12's python3-onnx accepts up to 8 */
#define ONNX_OPSET 13
#define ONNX_INPUT_NAME "pixels"
#define ONNX_OUTPUT_NAME "probabilities"

typedef struct onnx_meta {
    float mean[4];               /* per channel, in pixel units: x = (pixel - mean[c]) * scale */
    float scale;
    const char *const *labels;   /* classes names, or NULL for no "labels" entry */
    const char *producer_version;/* NULL: none */
    /* NULL, or a NULL-terminated list key, value, key, value, ... added to
     * metadata_props as given (a key may not be "labels") */
    const char *const *props;
} onnx_meta;

/* Builds the ONNX model of the network `spec` (parsed with spec_parse for
 * input `in`, `classes` classes) with the weights in weights_path (a
 * net_save file or a training checkpoint: only the tensors net_load reads are
 * used). On success *out is a new buffer owned by the caller (free) holding
 * *outlen bytes of a serialized ModelProto, and 0 is returned; otherwise -1
 * with err set: the spec's error, or the weight file's ("weights.safetensors
 * has no tensor \"fc1.bias\"", a shape or dtype this network does not take). */
int onnx_export(const cJSON *spec, net_shape in, int classes, const char *weights_path,
                const onnx_meta *meta, uint8_t **out, size_t *outlen, char *err, size_t errlen);

#endif
