/* server/prom.h: GET /metrics, the Prometheus text exposition format 0.0.4.
 *
 * What it shows (every family with HELP and TYPE; label values escaped as the
 * format says: backslash, double quote and newline):
 *   kiln_jobs{status}                      gauge, jobs in the store by status
 *   kiln_queue_length                      gauge, queued jobs and evaluations
 *   kiln_job_images_per_second{job}        gauge, each running job's last report
 *   kiln_cpu_utilization_ratio, kiln_memory_{used,total}_bytes, kiln_load_average{period}
 *   kiln_gpu_{utilization_ratio,memory_used_bytes,memory_total_bytes,
 *             temperature_celsius,power_watts}{gpu,name}   from the hardware sampler
 *   kiln_http_requests_total{method,route,code}            counter
 *   kiln_http_request_duration_seconds{method,route}       histogram
 *   kiln_sse_clients                       gauge
 *   kiln_dataset_images{split}             gauge, images of the ready datasets
 *   process_resident_memory_bytes, process_threads        gauges
 *
 * Requests are labelled by their route's pattern ("/api/v1/jobs/:id"), never
 * the raw URL, so the series stay few; "static" for dashboard files and
 * "unrouted" for anything else. A request is counted when its answer is
 * queued (http_queue), with the time from its first byte to then; a scrape
 * therefore sees every request answered before it, and not itself.
 *
 * Auth: /metrics follows server/auth.h like every API route: open on a
 * loopback server without users, else it needs a bearer token (any user's:
 * Prometheus' `authorization: {credentials_file: ...}`).
 */
#ifndef KILN_SERVER_PROM_H
#define KILN_SERVER_PROM_H

#include <stddef.h>

struct request;

/* Records one answered request. pattern must outlive the process (a route
 * table pattern or a literal); method is copied. Thread-safe. */
void prom_http_observe(const char *method, const char *pattern, unsigned status, double seconds);

/* GET /metrics. */
int prom_handle(struct request *r);

#endif
