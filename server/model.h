/* server/model.h: GET /api/v1/jobs/{id}/model?format=tar[&epoch=N].
 *
 * A POSIX (ustar) tarball, written with libarchive to an unnamed temporary
 * file under <data>/uploads and sent from it:
 *   network.json         the job's network spec (job.json's "network")
 *   weights.safetensors  model.safetensors, or checkpoints/epoch-N.safetensors
 *                        with epoch=N (without epoch and before the job has
 *                        finished: its latest epoch checkpoint)
 *   labels.txt           one class per line, in label order
 *   preprocess.json      {"channels","height","width","mean":[per channel],
 *                         "scale":1/255, "layout":"NCHW", ...}: x = (pixel - mean[c]) * scale
 *   info.json            {"job","dataset","network","epoch","epochs","metrics",...}
 * Errors: 404 no job / no such snapshot, 409 no weights yet, 400 a format
 * other than tar (ONNX comes with its own issue) or a bad epoch.
 */
#ifndef KILN_SERVER_MODEL_H
#define KILN_SERVER_MODEL_H

#include "server/http.h"

int model_handle(request *r);

#endif
