/* jobs/joblock.h: the lock on a job's folder, so that only one process ever
 * writes it (issue 15, finding 9).
 *
 * jobs/<id>/lock is flock(2)ed exclusively by whoever writes the folder:
 * - a worker (`kiln worker`, and `kiln train` on its folder) from before its
 *   first write until it exits; the kernel releases the lock when the process
 *   ends, kill -9 included, so a lock is never left behind by a dead process;
 * - kiln serve's scheduler while it prepares a job's start (the metrics past
 *   the checkpoint, the old event files), and it hands the locked file to the
 *   worker it spawns (an inherited descriptor, `kiln worker --lock-fd 3`), so
 *   there is no moment between the two when another process could take it.
 * So after a kill -9 of the server, the orphaned worker keeps the lock until
 * it dies (at its next report, on the closed pipe) or finishes, and the new
 * server's scheduler leaves the requeued job queued until then.
 *
 * The file holds the holder's pid as text, for messages only: the lock, not
 * the file's existence or its content, is what counts. The file is never
 * deleted while the job exists (deleting it would let a second process lock a
 * new file of the same name).
 */
#ifndef KILN_JOBS_JOBLOCK_H
#define KILN_JOBS_JOBLOCK_H

#include <stddef.h>
#include <sys/types.h>

#define JOBLOCK_FILE "lock"          /* in a job's folder */
#define JOBLOCK_BUSY 1               /* another process holds it */
#define JOBLOCK_WAIT_DEFAULT_S 10    /* kiln worker --lock-wait: how long a hand-started worker waits */

/* Takes dir/lock (creating it), waiting up to wait_ms milliseconds for a
 * holder to let go (0: one try). Returns 0 with *fd the locked descriptor
 * (O_CLOEXEC; closing it, or exiting, releases the lock) and this process's
 * pid written in the file; JOBLOCK_BUSY with *holder the holder's pid (0 when
 * the file does not say); or -1 with err set (the folder or the file cannot
 * be opened). */
int joblock_take(const char *dir, int wait_ms, int *fd, pid_t *holder, char *err, size_t errlen);

/* A worker given the lock by its parent (`--lock-fd N`): checks that fd is
 * dir/lock and holds the lock (flock on the same open file succeeds, any
 * other process's lock would make it fail), and writes this pid in it.
 * Returns 0, or -1 with err set. */
int joblock_adopt(const char *dir, int fd, char *err, size_t errlen);

/* The pid written in dir/lock (0: none or unreadable). */
pid_t joblock_holder(const char *dir);

#endif
