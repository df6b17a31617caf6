/* base/layout.c: paths of the data directory (contract in layout.h). */
#include "base/layout.h"

#include <stdio.h>

static int fits(int k, size_t n)
{
    return k >= 0 && (size_t)k < n ? 0 : -1;
}

int layout_subdir(char *buf, size_t n, const char *data, const char *sub)
{
    return fits(snprintf(buf, n, "%s/%s", data, sub), n);
}

int layout_dataset_dir(char *buf, size_t n, const char *data, int64_t id)
{
    return fits(snprintf(buf, n, "%s/" LAYOUT_DATASETS "/%lld", data, (long long)id), n);
}

int layout_job_dir(char *buf, size_t n, const char *data, int64_t id)
{
    return fits(snprintf(buf, n, "%s/" LAYOUT_JOBS "/%lld", data, (long long)id), n);
}

int layout_eval_dir(char *buf, size_t n, const char *data, int64_t id)
{
    return fits(snprintf(buf, n, "%s/" LAYOUT_EVALUATIONS "/%lld", data, (long long)id), n);
}

int layout_file(char *buf, size_t n, const char *dir, const char *name)
{
    return fits(snprintf(buf, n, "%s/%s", dir, name), n);
}
