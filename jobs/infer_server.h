/* jobs/infer_server.h: `kiln infer-server`, the inference process behind
 * POST /api/v1/jobs/{id}/infer (started by kiln serve, server/infer_proc.h;
 * not for people to run).
 *
 * It reads one request a line on stdin and writes one answer a line on
 * stdout, in order, one request at a time (JSON, no newline inside):
 *   request  {"job_dir": "/data/jobs/7", "epoch": null | "best" | "final" | N,
 *             "top_k": K | null,
 *             "spool": null | "/data/uploads/infer-...",
 *             "files": [{"name": "a.png", "offset": 0, "length": 1234}
 *                       | {"name": "b.png", "error": {"code", "message"}}, ...],
 *             "archive": null | "/data/uploads/infer-..."}
 * The spool file holds the images' bytes one after another: a file is the
 * slice [offset, offset + length) of it (one file a request, not one an
 * image).
 *   answer   {"status": 200 | 4xx | 5xx, "cache": "hit" | "miss", "bytes": N}
 *            then a line of exactly N bytes: the body
 * (the body comes as text of its own so that the server sends it as it is,
 * without parsing and printing it again). The body is the HTTP answer's
 * body as it stands: jobs/infer.h's
 * infer_answer (200, or 422 no_valid_images) or {"error": {"code","message"}}
 * (snap_resolve's 404/409, 400 top_k, 400/413 for the archive). "cache" says
 * whether the network was already loaded (absent when the model could not
 * be opened). Items are the files in order, then the archive's images in
 * archive order. The spool and the archive are only read; removing them is the caller's.
 *
 * Loaded networks stay in a small LRU (INFER_LIMITS.cached_models) keyed by
 * the weights file's path, modification time and size, so a second request
 * for a model does not build and load it again, and a snapshot rewritten in
 * place is loaded afresh. The process exits 0 when stdin closes or after
 * INFER_LIMITS.idle_seconds without a request; it decodes and classifies on
 * every core (OpenMP). A log line on stderr for each model loaded.
 */
#ifndef KILN_JOBS_INFER_SERVER_H
#define KILN_JOBS_INFER_SERVER_H

#include <stddef.h>

#define INFER_SERVER_COMMAND "infer-server"

/* Writes n bytes of p to the pipe fd, through EINTR and short writes: 0, or
 * -1 with errno when the other end is gone or the write fails. Both ends of
 * the protocol write with it (server/infer_proc.c, infer_server.c). */
int infer_write_all(int fd, const char *p, size_t n);

/* `kiln infer-server [--idle-seconds N]`. Returns a process exit status. */
int infer_server_main(int argc, char **argv);

#endif
