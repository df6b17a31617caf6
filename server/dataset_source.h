/* server/dataset_source.h: POST /api/v1/datasets with a JSON body, a dataset
 * from files on the server (an upload is multipart: server/upload.h).
 *
 *   {"name": NAME,
 *    "source": {"type": "folder"|"list"|"idx"|"cifar", "path": PATH,
 *               "labels": PATH (list only, optional)},
 *    OPTION: VALUE, ...}
 *
 * The options are jobs/import.h's table (the multipart form's fields, the
 * same names and limits, GET /api/v1/schema's "dataset"), read with
 * import_option_set_json. Any other member is 400 unknown_field; a bad type
 * or value 400 invalid_field. Paths are absolute and must resolve inside the
 * server's import roots (--import-root, jobs/import_roots.h): 403
 * path_not_allowed otherwise, 404 path_not_found, 400 path_unreadable; a
 * folder where a file is wanted (or the reverse) is 400 invalid_field.
 *
 * When the request is valid the dataset is inserted (status importing), its
 * import starts on its own thread (jobs/import_job.h, import_job_spawn,
 * serialised with uploads by srv->import_serial) and the answer is 202 with
 * the dataset. The source's files are only read, never removed.
 */
#ifndef KILN_SERVER_DATASET_SOURCE_H
#define KILN_SERVER_DATASET_SOURCE_H

#include "server/http.h"

/* The handler, once the JSON body is complete (upload_finish hands it on). */
int dataset_source_create(request *r);

#endif
