/* server/upload.h: POST /api/v1/datasets, a multipart archive upload (a JSON
 * body, files on the server, is handed to server/dataset_source.h).
 *
 * The form (multipart/form-data) has the fields name (required), archive (a
 * file, required), and optionally the import's options (val_percent, width
 * and height together, channels: jobs/import.h's table, with the limits GET
 * /api/v1/schema publishes as "dataset"); any other field is 400
 * unknown_field. The archive streams through MHD's post processor straight to
 * a temporary file under <data>/uploads (never held whole in memory), capped
 * at the upload-bytes limit (server/limits.h; 413, at once when Content-Length declares more).
 *
 * An upload holds one of its user's uploads-per-user slots (keyed by
 * r->user_id, or the client address when it is 0) from its first call until
 * its archive is removed; past the limit it is answered 429 at once. A
 * chunked body past upload-bytes is answered 413 as it arrives, and the
 * connection closed after a short linger (upload.c, refuse_mid_body).
 *
 * When the body is complete the connection is suspended and the import
 * starts on its own thread (jobs/import_job.h, import_job_start): it checks
 * the archive (import_probe, opening it as the importer does, bounded by
 * check-bytes and check-seconds, one of the server's `checks` slots held,
 * stopped by the shutdown: "not an archive" and "no images" are answered 400
 * and a bound reached 413 at once; with the whole archive read and the size
 * given, a prepared size over dataset-bytes or the free disk is 413 too), inserts the dataset
 * (status importing), lets the connection resume (202 with the dataset) and
 * goes on to import it into <data>/datasets/<id>/ as `kiln import` does,
 * reporting progress to the store and finishing the dataset ready or failed.
 * The upload file is removed in every case.
 */
#ifndef KILN_SERVER_UPLOAD_H
#define KILN_SERVER_UPLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jobs/import.h"     /* import_opts */
#include "server/http.h"

#define DATASET_NAME_MAX 200

/* A dataset's name: non-empty UTF-8 of at most DATASET_NAME_MAX bytes without
 * control characters (uploads and JSON sources). */
bool dataset_name_ok(const char *s);

/* First call of an upload route: checks Content-Type and the declared length
 * (UINT64_MAX when unknown) and sets up the post processor; for
 * application/json only the length is checked, and the body is read as any
 * JSON route's. */
enum MHD_Result upload_begin(request *r, bool has_body, uint64_t declared);
/* A chunk of the body. */
enum MHD_Result upload_data(request *r, const char *data, size_t size);
/* The route handler: validates, then suspends until the archive is checked;
 * a JSON body goes to dataset_source_create. */
int upload_finish(request *r);
/* Frees the upload state (from the completion callback); removes a temporary
 * file no import thread has taken over. NULL-safe on r->up. */
void upload_free(request *r);

/* Sets the import's limits in o from the server's (dataset-bytes,
 * image-pixels, import-pixels): every import the server starts. */
void upload_import_limits(const server *srv, import_opts *o);

/* Waits until no upload connection is suspended on its archive check (for the
 * shutdown sequence, before MHD_stop_daemon). */
void upload_wait_probes(server *srv);
/* Waits up to timeout_ms for background imports; returns how many still run. */
int upload_wait_imports(server *srv, int timeout_ms);

#endif
