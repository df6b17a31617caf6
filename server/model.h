/* server/model.h: GET /api/v1/jobs/{id}/model?format=tar|onnx[&epoch=N|best|final].
 *
 * A POSIX (ustar) tarball, written with libarchive to an unnamed temporary
 * file under <data>/uploads and sent from it:
 *   network.json         the job's network spec (job.json's "network")
 *   weights.safetensors  the weights snap_resolve (jobs/snapshots.h) picks:
 *                        model.safetensors, or checkpoints/epoch-N.safetensors
 *                        with epoch=N, the best snapshot by the job's
 *                        checkpoint_metric with epoch=best (without epoch and
 *                        before the job has finished, a cancelled one too:
 *                        its latest snapshot)
 *   labels.txt           one class per line, in label order
 *   preprocess.json      {"channels","height","width","mean":[per channel],
 *                         "scale":1/255, "layout":"NCHW", ...}: x = (pixel - mean[c]) * scale
 *   info.json            {"job","dataset","network","epoch","epochs","metrics",...}
 *   model.onnx           the same weights as ONNX (jobs/model_onnx.h); left out,
 *                        with info.json's "onnx_error" saying why, when the
 *                        export fails (a model past protobuf's 2 GB limit)
 * format=onnx answers model.onnx alone (application/octet-stream,
 * kiln-job-ID[-epoch-N].onnx), built in memory: input "pixels" float32
 * [batch, C, H, W] raw 0..255 pixels as preprocess.json describes them (the
 * graph subtracts the mean and scales), output "probabilities" [batch,
 * classes], labels and preprocess.json in its metadata (engine/onnx.h).
 * Errors: 404 no job / snapshot_not_found (naming the epochs kept), 409
 * no_weights (nothing saved yet) or no_best_snapshot (epoch=best of a job
 * whose snapshots have no metrics), 400 a format other than tar or onnx
 * (unsupported_format) or an epoch that is not 1..1000000, best or final;
 * 500 when the weights file does not fit the job's network.
 */
#ifndef KILN_SERVER_MODEL_H
#define KILN_SERVER_MODEL_H

#include "server/http.h"

int model_handle(request *r);

#endif
