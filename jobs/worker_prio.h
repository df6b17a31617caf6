/* jobs/worker_prio.h: the CPU priority of the processes that train and
 * evaluate (`kiln worker`, `kiln evaluate`).
 *
 * They run at nice WORKER_NICE, below the server's 0: a training job keeps
 * every core busy, and at equal priority the server's request threads wait
 * behind it for their time slice (the API's and the dashboard's latency).
 * A niced worker loses nothing while the server sleeps, which is nearly
 * always; when a request comes, the kernel runs the server's thread first.
 * The OpenMP and data-loading threads inherit the value (Linux keeps a nice
 * value per thread, copied when a thread is created), so it is set before
 * any is started.
 */
#ifndef KILN_JOBS_WORKER_PRIO_H
#define KILN_JOBS_WORKER_PRIO_H

#define WORKER_NICE 10

/* Lowers the calling process to nice WORKER_NICE (never raises it: a worker
 * started at a higher nice keeps it). Call first in main, before any thread
 * is created. A failure is only logged: the work runs as well, if the server
 * answers slower while it does. */
void worker_prio_lower(const char *tool);

#endif
