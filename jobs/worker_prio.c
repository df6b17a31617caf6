/* jobs/worker_prio.c: see worker_prio.h. */
#include "jobs/worker_prio.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

void worker_prio_lower(const char *tool)
{
    errno = 0;
    int now = getpriority(PRIO_PROCESS, 0);
    if (now == -1 && errno)
        return;
    if (now >= WORKER_NICE)
        return;
    if (setpriority(PRIO_PROCESS, 0, WORKER_NICE) != 0)
        fprintf(stderr, "kiln %s: cannot lower its priority to nice %d: %s\n", tool, WORKER_NICE,
                strerror(errno));
}
