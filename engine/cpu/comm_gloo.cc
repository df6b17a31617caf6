/* engine/cpu/comm_gloo.cc: engine/cpu/comm_gloo.h over Gloo's C++ API.
 *
 * Gloo reports failures as exceptions (a timeout, a peer's closed socket, a
 * store that cannot be read); none leaves this file: each entry point
 * catches them and returns -1 with the message. */
#include "engine/cpu/comm_gloo.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <chrono>
#include <exception>
#include <memory>
#include <new>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

struct gloo_comm {
    int rank, size;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::vector<float> scratch;         /* the reduce-scatter's slices of every rank */
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* The offset of slice q of count elements cut into size slices (engine/cpu/comm.c's cut). */
static size_t slice_lo(size_t count, int q, int size)
{
    return count * (size_t)q / (size_t)size;
}

extern "C" int gloo_comm_create(int rank, int size, const char *dir, const char *host,
                                int timeout_ms, gloo_comm **out, char *err, size_t errlen)
{
    *out = nullptr;
    if (size < 2 || rank < 0 || rank >= size)
        return fail(err, errlen, "gloo: rank %d of %d", rank, size);
    if (timeout_ms < 1)
        return fail(err, errlen, "gloo: a timeout of %d ms", timeout_ms);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail(err, errlen, "gloo: cannot make the rendezvous folder %s: %s", dir,
                    strerror(errno));
    gloo_comm *g = new (std::nothrow) gloo_comm;
    if (!g)
        return fail(err, errlen, "gloo: out of memory");
    g->rank = rank;
    g->size = size;
    try {
        gloo::transport::tcp::attr attr(host);
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir);
        g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
        g->ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
        g->ctx->connectFullMesh(store, dev);
    } catch (const std::exception &e) {
        delete g;
        return fail(err, errlen, "gloo: rank %d of %d could not connect to the others through "
                    "%s within %d s: %s", rank, size, dir, (timeout_ms + 999) / 1000, e.what());
    }
    *out = g;
    return 0;
}

extern "C" void gloo_comm_free(gloo_comm *g)
{
    delete g;
}

extern "C" int gloo_comm_sum(gloo_comm *g, float *buf, size_t count, char *err, size_t errlen)
{
    const int W = g->size, r = g->rank;
    const size_t lo = slice_lo(count, r, W), mine = slice_lo(count, r + 1, W) - lo;
    if (count == 0)
        return 0;
    try {
        std::vector<int64_t> send(W), recv(W, (int64_t)mine);
        std::vector<size_t> parts(W);
        for (int q = 0; q < W; q++)
            parts[q] = slice_lo(count, q + 1, W) - slice_lo(count, q, W);
        for (int q = 0; q < W; q++)
            send[q] = (int64_t)parts[q];
        g->scratch.resize((size_t)W * mine + 1);
        float *s = g->scratch.data();
        /* reduce-scatter: slice r of every rank's buffer, rank q's at s + q * mine */
        gloo::AlltoallvOptions a2a(g->ctx);
        a2a.setInput(buf, send);
        a2a.setOutput(s, recv);
        gloo::alltoallv(a2a);
        for (size_t e = 0; e < mine; e++) {
            float sum = s[e];
            for (int q = 1; q < W; q++)
                sum += s[(size_t)q * mine + e];
            s[e] = sum;
        }
        /* all-gather: every rank's summed slice into its place in buf */
        gloo::AllgathervOptions ag(g->ctx);
        ag.setInput(s, mine);
        ag.setOutput(buf, parts);
        gloo::allgatherv(ag);
    } catch (const std::exception &e) {
        return fail(err, errlen, "gloo: rank %d of %d: the allreduce failed (another rank failed "
                    "or is gone): %s", r, W, e.what());
    }
    return 0;
}

extern "C" int gloo_comm_allgather(gloo_comm *g, const void *in, size_t bytes, void *out,
                                   char *err, size_t errlen)
{
    try {
        gloo::AllgathervOptions ag(g->ctx);
        ag.setInput(const_cast<char *>(static_cast<const char *>(in)), bytes);
        ag.setOutput(static_cast<char *>(out), std::vector<size_t>((size_t)g->size, bytes));
        gloo::allgatherv(ag);
    } catch (const std::exception &e) {
        return fail(err, errlen, "gloo: rank %d of %d: a gather failed (another rank failed or "
                    "is gone): %s", g->rank, g->size, e.what());
    }
    return 0;
}
