/* jobs/cli_args.c: shared argument parsing of the network tools (cli_args.h). */
#include "jobs/cli_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fileio.h"      /* fio_read_file */

bool cli_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

bool cli_shape(const char *s, net_shape *out)
{
    int c, h, w, used = 0;
    if (!s || sscanf(s, "%d,%d,%d%n", &c, &h, &w, &used) != 3 || s[used] || c < 1 || h < 1 ||
        w < 1)
        return false;
    *out = (net_shape){ c, h, w };
    return true;
}

cJSON *cli_spec(const char *tool, const char *arg)
{
    const char *builtin = net_builtin(arg);
    if (builtin)
        return cJSON_Parse(builtin);
    char err[512];
    size_t len = 0;
    char *text = fio_read_file(arg, CLI_SPEC_MAX, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "kiln %s: %s is neither a built-in network nor a readable spec file "
                "(%s)\n", tool, arg, err);
        return NULL;
    }
    cJSON *spec = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(spec)) {
        fprintf(stderr, "kiln %s: %s is not a JSON object (a network spec)\n", tool, arg);
        cJSON_Delete(spec);
        return NULL;
    }
    return spec;
}
