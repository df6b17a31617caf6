/* engine/cpu/comm_gloo.h: collectives between processes on the CPU, over
 * Gloo (Debian's libgloo), behind a C interface (engine/cpu/comm_gloo.cc is
 * the only C++ in kiln).
 *
 * The ranks meet through a folder they all see (Gloo's FileStore: each rank
 * writes its TCP address there and reads the others'), then talk over TCP,
 * every rank to every other. Every collective is blocking and every rank
 * calls the same ones in the same order. A collective waits at most the
 * timeout for another rank (also while connecting); a rank whose process is
 * gone fails the others' next collective at once (its sockets close). After
 * a failure the communicator is of no further use.
 */
#ifndef KILN_ENGINE_CPU_COMM_GLOO_H
#define KILN_ENGINE_CPU_COMM_GLOO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gloo_comm gloo_comm;

/* Connects rank `rank` of `size` (2 or more) through the folder dir (made
 * when missing, its parent must exist; fresh for each run: an address left
 * there by an earlier run would be read as this one's), listening on host
 * (an address or name the other ranks reach this process by). Waits up to
 * timeout_ms for the others. Returns 0 with *out set, or -1 with err set. */
int gloo_comm_create(int rank, int size, const char *dir, const char *host, int timeout_ms,
                     gloo_comm **out, char *err, size_t errlen);
void gloo_comm_free(gloo_comm *g);      /* NULL is a no-op; closes the connections */

/* Sums count floats of buf over the ranks, in place, with the bits of
 * engine/cpu/comm.c's in-process sum: element e adds the ranks' values in
 * rank order (rank 0's + rank 1's + ...). A reduce-scatter (alltoallv: rank
 * r gets slice r of every rank's buffer, slices as comm.c cuts them) and an
 * all-gather (allgatherv) of the summed slices. 0, or -1 with err set. */
int gloo_comm_sum(gloo_comm *g, float *buf, size_t count, char *err, size_t errlen);

/* Every rank's `bytes` bytes of in, into out (size * bytes) in rank order.
 * 0, or -1 with err set. */
int gloo_comm_allgather(gloo_comm *g, const void *in, size_t bytes, void *out, char *err,
                        size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
