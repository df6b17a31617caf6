/* server/snapshots_view.h: GET /api/v1/jobs/{id}/snapshots.
 *
 * A job's saved epochs (jobs/snapshots.h, snap_list_load: snapshots.json,
 * or for a job from before it the checkpoint files), for a running job as
 * for a finished one:
 *   {"metric": "val/accuracy", "best": 9 or null,
 *    "items": [{"epoch", "step", "best": bool, "metrics": {"val/loss", ...},
 *               "downloads": {"tar": "/api/v1/jobs/ID/model?format=tar&epoch=N",
 *                             "onnx": "/api/v1/jobs/ID/model?format=onnx&epoch=N"}}, ...]}
 * oldest first. "metric" is the job's checkpoint_metric. Errors: 404
 * job_not_found; 500 when the job folder's snapshots.json cannot be read.
 */
#ifndef KILN_SERVER_SNAPSHOTS_VIEW_H
#define KILN_SERVER_SNAPSHOTS_VIEW_H

#include "server/http.h"

int snapshots_handle(request *r);

#endif
