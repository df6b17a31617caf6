/* server/infer.h: POST /api/v1/jobs/{id}/infer, classifying uploaded images
 * with a job's model.
 *
 * The form (multipart/form-data): one or more `image` files and/or one
 * `archive` (tar, zip or 7z, plain or compressed, of images at any depth;
 * entry paths are the item names), `top_k` (1..the model's classes; default
 * INFER_LIMITS.top_k_default, or the classes when fewer) and `epoch` (N,
 * "best" or "final"; default the final model: jobs/snapshots.h). Any other
 * field is 400 unknown_field; another Content-Type 415. Each file streams to
 * its own temporary file under <data>/uploads; the body is capped at
 * INFER_LIMITS.max_total_bytes (413, at once when Content-Length declares
 * more), one image at max_image_bytes (that item's error, image_too_large),
 * the images at max_items (413). The temporary files are removed when the
 * request ends, whatever happened.
 *
 * When the body is complete the HTTP thread checks the form and the job (404
 * job_not_found), suspends the connection and queues the request; the
 * service's own thread hands it to the inference process (server/infer_proc.h,
 * jobs/infer_server.h) and resumes the connection with its answer: 200
 * {"epoch", "items"}, 422 no_valid_images (still with the items), 404/409 as
 * snap_resolve says (no such snapshot, no best, no weights yet), 400 top_k
 * or archive, 500/503 when the inference process failed. The HTTP threads
 * never load a model or run a network. The answer carries the header
 * X-Kiln-Model-Cache: hit when the model was already loaded, miss when this
 * request loaded it.
 */
#ifndef KILN_SERVER_INFER_H
#define KILN_SERVER_INFER_H

#include "server/http.h"

#define INFER_QUEUE_MAX 64        /* requests waiting for the inference process; past it 503 */

/* The route's handler and its body reading (route_upload). */
int infer_handle(request *r);
extern const route_upload infer_upload;

/* Starts the service (its thread; the inference process comes on first use)
 * into srv->infer. Returns 0, or -1 with err set. */
int infer_service_start(server *srv, const char *exe, char *err, size_t errlen);
/* Answers every queued request 503, ends the one in progress (killing the
 * inference process) and resumes their connections; then stops the thread.
 * Call after setting srv->stopping and before MHD_stop_daemon. NULL-safe. */
void infer_service_stop(server *srv);

#endif
