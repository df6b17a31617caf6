/* jobs/slurm.c: the Slurm client (contract in slurm.h).
 *
 * Each command is run by command_run (jobs/command.h): Slurm's binary from
 * the configured folder, else PATH, killed past SLURM_CMD_TIMEOUT_MS, its
 * stdout capped at SLURM_OUT_MAX bytes.
 */
#include "jobs/slurm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/layout.h"     /* layout_file, LAYOUT_JOB_LOG */
#include "jobs/command.h"    /* command_run */

#define SLURM_OUT_MAX (64 << 20)    /* squeue --json of a busy cluster: megabytes */
#define SLURM_ERR_MAX 4096
#define SLURM_MAX_ARGS 96

/* The path of Slurm's command name into buf: bin_dir/name, or name (PATH). */
static void command_path(const slurm_options *o, const char *name, char *buf, size_t n)
{
    if (o->bin_dir && o->bin_dir[0])
        snprintf(buf, n, "%s/%s", o->bin_dir, name);
    else
        snprintf(buf, n, "%s", name);
}

/* Runs Slurm's command `name` with args (NULL-terminated, without argv[0]).
 * *out: its stdout (malloc'ed, NUL-terminated; free it). Returns 0 when it
 * exited 0; else -1 with err naming the command and its stderr. */
static int run(const slurm_options *o, const char *name, char *const *args, char **out,
               char *err, size_t errlen)
{
    char path[PATH_MAX];
    char *argv[SLURM_MAX_ARGS + 2];
    *out = NULL;
    command_path(o, name, path, sizeof path);
    argv[0] = path;
    size_t argc = 1;
    for (; args[argc - 1] && argc <= SLURM_MAX_ARGS; argc++)
        argv[argc] = args[argc - 1];
    argv[argc] = NULL;
    command_spec spec = { .path = path, .argv = argv, .name = name, .timeout_ms = SLURM_CMD_TIMEOUT_MS,
                          .out_max = SLURM_OUT_MAX, .err_max = SLURM_ERR_MAX };
    command_result r;
    int rc = command_run(&spec, &r, err, errlen);
    if (rc == 0) {
        *out = r.out;
        r.out = NULL;
    }
    command_result_free(&r);
    return rc;
}

/* ---- the batch script ---------------------------------------------------- */

/* s in single quotes for sh ('it'\''s'), appended to f. */
static void sh_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

/* Writes DIR/slurm.sh (temporary name, fsync, rename, mode 0755). */
static int write_script(const slurm_options *o, const char *worker_exe, const char *dir, char *path,
                        size_t pathlen, char *err, size_t errlen)
{
    char tmp[PATH_MAX + 16], srun[PATH_MAX];
    if (layout_file(path, pathlen, dir, SLURM_SCRIPT) != 0)
        return set_err(err, errlen, "the job folder's path is too long");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    command_path(o, "srun", srun, sizeof srun);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return set_err(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "#!/bin/sh\n"
            "# Written by kiln serve (--dispatcher slurm, jobs/slurm.c); submitted with sbatch.\n"
            "# Every task runs the job's worker; rank 0 appends its reports to " SLURM_REPORTS ".\n"
            "# When srun returns, its end goes to " SLURM_EXIT " for the server.\n"
            "dir=");
    sh_quote(f, dir);
    fputs("\nexe=", f);
    sh_quote(f, worker_exe);
    fputs("\nsrun=", f);
    sh_quote(f, srun);
    fputs("\n"
          "\"$srun\" --label /bin/sh -c 'echo \"kiln: rank ${SLURM_PROCID:-0} of ${SLURM_NTASKS:-1} on "
          "$(hostname), Slurm job ${SLURM_JOB_ID:-?}, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}\" >&2; "
          "exec \"$@\"' kiln-task \"$exe\" worker --job-dir \"$dir\" --report-file \"$dir/" SLURM_REPORTS "\"\n"
          "rc=$?\n"
          "code=$rc; sig=0\n"
          "if [ \"$rc\" -gt 128 ]; then code=0; sig=$((rc - 128)); fi\n"
          "printf '{\"slurm_job_id\": %s, \"exit_code\": %d, \"signal\": %d}\\n' \"${SLURM_JOB_ID:-0}\" "
          "\"$code\" \"$sig\" > \"$dir/" SLURM_EXIT ".tmp\" && mv -f \"$dir/" SLURM_EXIT ".tmp\" \"$dir/"
          SLURM_EXIT "\"\n"
          "exit $rc\n", f);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || chmod(tmp, 0755) != 0 || rename(tmp, path) != 0) {
        set_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- sbatch, scancel ------------------------------------------------------ */

/* argv for sbatch into args (strings in store, which must outlive args). */
typedef struct sbatch_args {
    char *args[SLURM_MAX_ARGS + 1];
    int n;
    char store[12][PATH_MAX + 32];
    int nstore;
    char *extra;                  /* a copy of sbatch_options, cut at white space */
} sbatch_args;

static void arg_add(sbatch_args *a, const char *s)
{
    if (a->n < SLURM_MAX_ARGS)
        a->args[a->n++] = (char *)s;
    a->args[a->n] = NULL;
}

/* "--opt=<s>" (arg_str) or "--opt=<v>" (arg_num), kept in a->store. */
static void arg_str(sbatch_args *a, const char *opt, const char *str)
{
    if (a->nstore == 12)
        return;
    char *buf = a->store[a->nstore++];
    snprintf(buf, PATH_MAX + 32, "%s=%s", opt, str);
    arg_add(a, buf);
}

static void arg_num(sbatch_args *a, const char *opt, const char *prefix, long long v)
{
    if (a->nstore == 12)
        return;
    char *buf = a->store[a->nstore++];
    snprintf(buf, PATH_MAX + 32, "%s=%s%lld", opt, prefix, v);
    arg_add(a, buf);
}

static int sbatch_argv(const slurm_options *o, const char *dir, const slurm_request *req,
                       const char *script, sbatch_args *a, char *err, size_t errlen)
{
    char log[PATH_MAX + 8];
    layout_file(log, sizeof log, dir, LAYOUT_JOB_LOG);
    arg_add(a, "--parsable");
    /* Slurm would requeue a job whose node failed and run its worker again
     * behind kiln's back (its metrics past the checkpoint twice); kiln fails
     * it with NODE_FAIL instead, and POST .../resume runs it again properly. */
    arg_add(a, "--no-requeue");
    arg_num(a, "--job-name", "kiln-", (long long)req->kiln_job_id);
    arg_str(a, "--output", log);
    arg_str(a, "--error", log);
    arg_add(a, "--open-mode=append");
    arg_str(a, "--chdir", dir);
    arg_num(a, "--nodes", "", req->nodes);
    arg_num(a, "--ntasks-per-node", "", req->tasks_per_node);
    if (req->gpus > 0)
        arg_num(a, "--gres", "gpu:", req->gpus);
    if (o->partition && o->partition[0])
        arg_str(a, "--partition", o->partition);
    if (o->account && o->account[0])
        arg_str(a, "--account", o->account);
    if (o->time_limit && o->time_limit[0])
        arg_str(a, "--time", o->time_limit);
    if (o->sbatch_options && o->sbatch_options[0]) {
        a->extra = strdup(o->sbatch_options);
        if (!a->extra)
            return set_err(err, errlen, "out of memory");
        char *save = NULL;
        for (char *t = strtok_r(a->extra, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save))
            arg_add(a, t);
    }
    arg_add(a, script);
    if (a->n == SLURM_MAX_ARGS)
        return set_err(err, errlen, "too many sbatch options (at most %d)", SLURM_MAX_ARGS - 20);
    return 0;
}

int slurm_submit(const slurm_options *o, const char *worker_exe, const char *dir,
                 const slurm_request *req, int64_t *slurm_id, char *err, size_t errlen)
{
    char script[PATH_MAX], *out = NULL;
    sbatch_args *a = calloc(1, sizeof *a);
    int ret = -1;
    if (!a)
        return set_err(err, errlen, "out of memory");
    if (write_script(o, worker_exe, dir, script, sizeof script, err, errlen) != 0 ||
        sbatch_argv(o, dir, req, script, a, err, errlen) != 0 ||
        run(o, "sbatch", a->args, &out, err, errlen) != 0)
        goto out;
    /* --parsable: "<id>" or "<id>;<cluster>" */
    char *end;
    long long id = strtoll(out, &end, 10);
    if (end == out || id <= 0 || (*end && *end != ';' && *end != '\n')) {
        set_err(err, errlen, "sbatch printed no job id: %.100s", out);
        goto out;
    }
    *slurm_id = id;
    ret = 0;
out:
    free(out);
    free(a->extra);
    free(a);
    return ret;
}

int slurm_cancel(const slurm_options *o, int64_t slurm_id, char *err, size_t errlen)
{
    char id[24], *out = NULL;
    snprintf(id, sizeof id, "%lld", (long long)slurm_id);
    char *args[] = { id, NULL };
    int rc = run(o, "scancel", args, &out, err, errlen);
    free(out);
    return rc;
}

/* ---- squeue --json, scontrol show job ------------------------------------- */

bool slurm_state_final(const char *s)
{
    static const char *const final[] = { "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                                          "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
                                          "REVOKED", "SPECIAL_EXIT" };
    for (size_t i = 0; i < sizeof final / sizeof final[0]; i++)
        if (!strcmp(s, final[i]))
            return true;
    return false;
}

/* A string field, or the first string of an array field (later data
 * parsers give job_state as a list of flags), into buf. */
static void str_field(const cJSON *o, const char *key, char *buf, size_t n)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsArray(v))
        v = cJSON_GetArrayItem(v, 0);
    snprintf(buf, n, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

int slurm_parse_squeue(const char *text, size_t len, slurm_job **jobs, size_t *n, char *err,
                       size_t errlen)
{
    *jobs = NULL;
    *n = 0;
    cJSON *doc = cJSON_ParseWithLengthOpts(text, len, NULL, 0);
    const cJSON *list = doc ? cJSON_GetObjectItemCaseSensitive(doc, "jobs") : NULL;
    if (!cJSON_IsArray(list)) {
        cJSON_Delete(doc);
        return set_err(err, errlen, "squeue --json printed no \"jobs\" list");
    }
    int count = cJSON_GetArraySize(list);
    slurm_job *out = count ? calloc((size_t)count, sizeof *out) : NULL;
    if (count && !out) {
        cJSON_Delete(doc);
        return set_err(err, errlen, "out of memory");
    }
    size_t k = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "job_id");
        if (!cJSON_IsNumber(id) || id->valuedouble <= 0)
            continue;
        out[k].id = (int64_t)id->valuedouble;
        str_field(j, "job_state", out[k].state, sizeof out[k].state);
        str_field(j, "state_reason", out[k].reason, sizeof out[k].reason);
        str_field(j, "nodes", out[k].nodes, sizeof out[k].nodes);
        k++;
    }
    cJSON_Delete(doc);
    *jobs = out;
    *n = k;
    return 0;
}

int slurm_poll(const slurm_options *o, slurm_job **jobs, size_t *n, char *err, size_t errlen)
{
    char *out = NULL, *args[] = { "--json", NULL };
    *jobs = NULL;
    *n = 0;
    if (run(o, "squeue", args, &out, err, errlen) != 0)
        return -1;
    int rc = slurm_parse_squeue(out, strlen(out), jobs, n, err, errlen);
    free(out);
    return rc;
}

/* The value of " key=" in line (up to the next space) into buf; 0 or -1. */
static int kv(const char *line, const char *key, char *buf, size_t n)
{
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += kl) {
        if ((p != line && p[-1] != ' ') || p[kl] != '=')
            continue;
        const char *v = p + kl + 1;
        size_t vl = strcspn(v, " \n");
        snprintf(buf, n, "%.*s", (int)vl, v);
        return 0;
    }
    return -1;
}

int slurm_parse_scontrol(const char *line, slurm_job *out)
{
    char id[32] = "";
    memset(out, 0, sizeof *out);
    if (kv(line, "JobState", out->state, sizeof out->state) != 0)
        return -1;
    kv(line, "Reason", out->reason, sizeof out->reason);
    kv(line, "NodeList", out->nodes, sizeof out->nodes);
    if (!strcmp(out->nodes, "(null)"))
        out->nodes[0] = 0;
    if (kv(line, "JobId", id, sizeof id) == 0)
        out->id = strtoll(id, NULL, 10);
    return 0;
}

int slurm_show(const slurm_options *o, int64_t slurm_id, slurm_job *out, char *err, size_t errlen)
{
    char id[24], *text = NULL;
    snprintf(id, sizeof id, "%lld", (long long)slurm_id);
    char *args[] = { "show", "job", "-o", id, NULL };
    if (run(o, "scontrol", args, &text, err, errlen) != 0)
        return strstr(err, "Invalid job id") ? 1 : -1;
    int rc = slurm_parse_scontrol(text, out);
    free(text);
    if (rc != 0)
        return set_err(err, errlen, "scontrol show job %s printed no JobState", id);
    return 0;
}

/* ---- the exit record ------------------------------------------------------ */

int slurm_exit_read(const char *dir, slurm_exit *out, char *err, size_t errlen)
{
    char path[PATH_MAX + 32], text[512];
    memset(out, 0, sizeof *out);
    layout_file(path, sizeof path, dir, SLURM_EXIT);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 1 : set_err(err, errlen, "%s: %s", path, strerror(errno));
    size_t k = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[k] = 0;
    cJSON *doc = cJSON_ParseWithLength(text, k);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "slurm_job_id");
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(doc, "exit_code");
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(doc, "signal");
    int ret = -1;
    if (cJSON_IsNumber(id) && cJSON_IsNumber(code) && cJSON_IsNumber(sig)) {
        out->slurm_job_id = (int64_t)id->valuedouble;
        out->exit_code = code->valueint;
        out->signal = sig->valueint;
        ret = 0;
    } else {
        set_err(err, errlen, "%s is not an exit record", path);
    }
    cJSON_Delete(doc);
    return ret;
}
