/* jobs/scheduler.c: queued jobs -> `kiln worker` processes (contract in scheduler.h).
 *
 * One thread does everything: it starts queued jobs (in the queue's order,
 * store_queue_list: higher priority first, then oldest; CPU jobs
 * at most max_cpu_jobs at a time; a GPU job when every GPU it needs is free,
 * as each GPU runs one job at a time; a job asking for any N GPUs gets the
 * lowest free ones, passed to its worker as --gpus 0,1) and supervises the
 * running ones, in a poll loop over
 * the workers' stdout pipes and a self-pipe that sched_wake/sched_cancel/
 * sched_stop write to. It also looks at the queue every QUEUE_POLL_MS, so a job
 * queued by another process (or whose job.json appeared late) still starts.
 *
 * Guarantees:
 * - A queued job starts only once its jobs/<id>/job.json exists (jobspec
 *   writes it right after inserting the row). One still without it after
 *   JOBJSON_WAIT_S fails with that reason.
 * - Every worker is reaped with waitpid(pid, WNOHANG) on its own pid (never
 *   -1: other children of the server are not ours), after its pipe reached
 *   end-of-file; no call here blocks without a bound.
 * - Every job that starts ends with exactly one final status in the store and
 *   one final "status" event, after which its hub stream is finished:
 *     done       the worker reported {"t":"done"} and exited 0 (after
 *                {"t":"stopped_early"} when early stopping ended it: stored
 *                with the job, store_job_set_stopped_early);
 *     cancelled  sched_cancel asked for it, or the worker reported cancelled;
 *     failed     anything else, with the worker's reported error, or its exit
 *                status / signal and the last lines of its log.
 *   Jobs interrupted by sched_stop (the server shutting down) go back to
 *   "queued" instead, and run again at the next start.
 * - Cancel: a queued job is cancelled at once; a running one gets SIGTERM (the
 *   worker stops after its step, saves a checkpoint and exits), and SIGKILL
 *   when it is still there after the grace period.
 * - At start, jobs left "running" by a server that died are requeued. The
 *   worker resumes each from its latest checkpoint (jobs/runner.c); the
 *   metrics recorded after that checkpoint's step are dropped when it starts.
 *
 * - The job folder's lock (jobs/joblock.h): a job starts only when its
 *   jobs/<id>/lock can be taken. The scheduler takes it (without waiting)
 *   before preparing the start, and the worker inherits the locked file
 *   (--lock-fd 3) and holds it until it exits. A job whose folder is still
 *   locked, by a worker that a server killed with -9 left behind, stays
 *   queued until that worker has died or finished (logged once), so two
 *   workers never write one folder; it is looked at again with the queue.
 * - What starts is decided by one function, decide(): start_queued acts on
 *   it, sched_queue_view (GET /api/v1/queue) asks it the same question
 *   without starting anything and reports what each waiting item waits for.
 *   The devices a worker gets are stored with its job or evaluation
 *   (store_set_devices) as it starts.
 *
 * Two kinds of work share the queue, the devices and this loop: training
 * jobs (`kiln worker --job-dir`) and evaluations (`kiln evaluate --eval-dir`,
 * jobs/evaluation.h). A worker carries its kind; what differs between the
 * kinds (where its folder is, its status in the store, what its reports and
 * its end mean) is one row of work_kinds below. Both start in order from
 * one list (store_queue_list; an evaluation has priority 0), an evaluation on the CPU taking one of the
 * max_cpu_jobs slots and one on a GPU taking that GPU, as a job would. An
 * evaluation ends "done" when its worker reported done, exited 0 and left a
 * readable result.json (stored with it); an evaluation interrupted by a
 * restart runs again from its start (it writes nothing until its end).
 *
 * Where a job's worker runs is the dispatcher's (jobs/dispatch.h; the
 * dispatchers table): local (posix_spawn here, reports on a pipe, reaped
 * with waitpid, cancel by signals) or slurm (one sbatch, reports tailed from
 * DIR/reports.jsonl, the end noticed by slurm_check from squeue and the exit
 * record, cancel by scancel; such a worker has no pid and takes none of this
 * machine's GPUs or CPU slots). Reports (on_line), the final status
 * (finish_worker), the queue order and cancel are one code for both.
 */
#define _GNU_SOURCE           /* pipe2, strptime, posix_spawn_file_actions_addclosefrom_np */
#include "jobs/scheduler.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <dirent.h>

#include "base/err.h"
#include "engine/checkpoint.h"   /* ckpt_latest */
#include "engine/net.h"          /* engine_devices: how many GPUs */
#include "base/layout.h"    /* layout_job_dir, LAYOUT_JOB_JSON */
#include "engine/fileio.h"  /* fio_read_file: an evaluation's result.json */
#include "jobs/evaluation.h" /* eval_spec_load: a queued evaluation's devices */
#include "jobs/jobcfg.h"    /* jobcfg_load: a queued job's devices */
#include "jobs/joblock.h"   /* joblock_take: a job folder's lock */
#include "db/event_store.h" /* store_event_trim: a resumed job's stored events */
#include "db/slurm_store.h" /* a Slurm job's id, state and reports offset */
#include "jobs/slurm.h"     /* slurm_submit, slurm_poll, slurm_cancel: the Slurm dispatcher */

extern char **environ;

#define QUEUE_POLL_MS 2000
#define REAP_POLL_MS 100          /* while a worker's pipe is closed but it is not reaped */
#define DEFAULT_GRACE_MS 10000
#define STOP_EXTRA_MS 5000        /* after SIGKILL, how long sched_stop still waits */
#define LINE_MAX_BYTES 65536      /* a report line longer than this is dropped */
#define JOBJSON_WAIT_S 60
#define LOG_TAIL_BYTES 4096
#define LOG_TAIL_LINES 8
#define LOG_EVENT_BYTES 4096      /* a log line is sent as events of up to this many bytes */
#define LOG_READ_ROUNDS 16        /* 16 KiB reads of a worker's log per look, at most */
#define LOCK_CHILD_FD 3           /* the worker's descriptor of its folder's lock (--lock-fd) */
#define ROOM_STARTING_MAX 64      /* items about to start that a queue view names */
#define SLURM_POLL_MS 2000        /* squeue, by default */
#define REPORTS_POLL_MS 200       /* a Slurm job's reports file is read this often */
#define SLURM_ABSENT_POLLS 2      /* looks in a row that Slurm does not know a job: it ended */

typedef struct worker {
    store_work kind;              /* a job or an evaluation (work_kinds) */
    int64_t id;                   /* the job's or the evaluation's */
    pid_t pid;
    int fd;                       /* read end of the worker's stdout; -1 after EOF */
    char *line;                   /* partial report line, LINE_MAX_BYTES */
    size_t len;
    bool overlong;                /* dropping the rest of a too-long line */
    bool reported_done, reported_cancelled;
    bool stopped_early;           /* reported stopped_early: its progress stays where it stopped */
    char *reported_error;
    bool cancel_requested;        /* by sched_cancel */
    bool shutdown;                /* stopped by sched_stop: requeue */
    double kill_at;               /* monotonic time for SIGKILL; 0 = none */
    bool killed;
    uint64_t gpus;                /* bit i: GPU i, which it has to itself; 0: a CPU job */
    int lock_fd;                  /* its folder's lock until the spawn hands it over; -1 */
    int log_fd;                   /* a job's log, read from where this run began (log events); -1 */
    char log_line[LOG_EVENT_BYTES];   /* the log's partial last line */
    size_t log_len;
    char dir[PATH_MAX];
    /* The Slurm dispatcher's (slurm_id > 0; pid is 0 and fd -1 then): */
    int64_t slurm_id;             /* Slurm's job id */
    int rep_fd;                   /* its reports file, read from rep_off; -1 until it exists */
    int64_t rep_off, rep_saved;   /* bytes of it read; the offset last stored */
    bool slurm_running;           /* "running" in kiln: Slurm ran it (or it reported) */
    bool scancel_sent;
    int absent;                   /* looks in a row at which Slurm did not know it */
    slurm_job seen;               /* what Slurm said last */
    struct worker *next;
} worker;

/* What the scheduler keeps of a queued job or evaluation between looks at
 * the queue: the devices it asks for, read from its job.json (eval.json)
 * once. */
typedef struct queued_job {
    store_work kind;
    int64_t id;
    jobcfg_devices devices;
    bool lock_logged;             /* "its folder is locked" was logged */
    struct queued_job *next;
} queued_job;

struct sched {
    store *st;
    hub *h;
    char data_dir[PATH_MAX];
    char *worker_exe;
    char **worker_env;            /* environ, plus OMP_NUM_THREADS when jobs share the CPU */
    char *omp_threads;            /* the "OMP_NUM_THREADS=N" string in worker_env, or NULL */
    int max_jobs;                 /* CPU jobs at once */
    int ngpus;                    /* GPUs to share out (at most 64) */
    int grace_ms;

    pthread_t thread;
    pthread_mutex_t mu;           /* everything below */
    int wake_r, wake_w;           /* self-pipe */
    bool stopping, stop_sent;
    double stop_deadline;
    worker *workers;
    int nworkers;
    queued_job *queue;                /* queued jobs whose job.json was read */
    uint64_t gpu_busy;            /* bit i: GPU i runs a job */
    int ncpu_workers;             /* workers of CPU jobs */
    bool queue_dirty;
    double last_queue_check;

    dispatch_kind dispatcher;     /* where jobs run; evaluations run here either way */
    slurm_options slurm;          /* its strings are slurm_strs' */
    char *slurm_strs[5];
    double last_slurm_poll;
};


static double now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void wake_thread(sched *s)
{
    char b = 1;
    ssize_t k = write(s->wake_w, &b, 1);   /* full pipe (EAGAIN): a wake is pending anyway */
    (void)k;
}

/* ---- events --------------------------------------------------------------- */

static void publish_status(sched *s, int64_t job_id, const char *status, const char *error)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "status", status);
    if (error)
        cJSON_AddStringToObject(o, "error", error);
    else
        cJSON_AddNullToObject(o, "error");
    char *text = cJSON_PrintUnformatted(o);
    if (text)
        hub_publish(s->h, job_id, "status", text);
    cJSON_free(text);
    cJSON_Delete(o);
}

/* ---- queued jobs ---------------------------------------------------------- */

static queued_job **queued_at(sched *s, store_work kind, int64_t id)
{
    queued_job **pp = &s->queue;
    while (*pp && ((*pp)->kind != kind || (*pp)->id != id))
        pp = &(*pp)->next;
    return pp;
}

/* Forgets what was kept of a job (started, ended, or no longer queued). */
static void queued_drop(sched *s, store_work kind, int64_t id)
{
    queued_job **pp = queued_at(s, kind, id);
    queued_job *q = *pp;
    if (q) {
        *pp = q->next;
        free(q);
    }
}

static void queued_free_all(sched *s)
{
    for (queued_job *q = s->queue, *next; q; q = next) {
        next = q->next;
        free(q);
    }
    s->queue = NULL;
}

/* A job's devices: its job.json's (jobcfg_load: the checks every job.json gets). */
static int job_devices(const char *dir, jobcfg_devices *out, char *err, size_t errlen)
{
    jobcfg c;
    api_error e;
    if (jobcfg_load(dir, &c, &e) != 0)
        return set_err(err, errlen, "%s", e.message);
    *out = c.devices;
    jobcfg_free(&c);
    return 0;
}

/* An evaluation's devices: its eval.json's (eval_spec_load). */
static int eval_devices(const char *dir, jobcfg_devices *out, char *err, size_t errlen)
{
    eval_spec sp;
    api_error e;
    if (eval_spec_load(dir, &sp, &e) != 0)
        return set_err(err, errlen, "%s", e.message);
    *out = sp.devices;
    return 0;
}

/* What differs between a job and an evaluation: one row each of work_kinds
 * (after the functions it names). */
typedef struct work_ops {
    const char *noun;                  /* "job", "evaluation": for the log */
    const char *command, *dir_flag;    /* the worker: kiln COMMAND DIR_FLAG <dir> */
    const char *config;                /* the file in its folder that must exist first */
    const char *log;                   /* the worker's stderr, in its folder */
    bool lock;                         /* its folder has a lock (jobs/joblock.h) */
    int (*dir)(char *buf, size_t n, const char *data, int64_t id);
    int (*devices)(const char *dir, jobcfg_devices *out, char *err, size_t errlen);
    /* Its status ("queued", ...) into status and its age in seconds; 0,
     * STORE_NOT_FOUND or -1 (a store error). */
    int (*peek)(store *st, int64_t id, char *status, size_t n, double *age);
    int (*ids_with_status)(store *st, const char *status, int64_t **ids, size_t *n);
    int (*set_status)(store *st, int64_t id, const char *status, const char *error);
    /* Before its worker is spawned (jobs: metrics past the checkpoint go). */
    void (*prepare)(sched *s, int64_t id, const char *dir);
    /* Its worker was spawned on GPUs gpus (0: the CPU): status running, and
     * the devices recorded. */
    void (*started)(sched *s, int64_t id, uint64_t gpus);
    void (*on_metric)(sched *s, worker *w, const cJSON *r);      /* NULL: not a report of it */
    void (*on_progress)(sched *s, worker *w, const cJSON *r);
    /* Its worker reported done and exited 0. */
    void (*done)(sched *s, worker *w);
    /* A final status other than done (failed, cancelled) with its reason. */
    void (*end)(sched *s, int64_t id, const char *status, const char *error);
    /* Back to the queue: its worker was stopped by sched_stop. */
    void (*requeue)(sched *s, int64_t id);
} work_ops;

static const work_ops *ops_of(store_work kind);

/* Stores a final status and tells the job's readers, ending its stream. */
static void end_job(sched *s, int64_t job_id, const char *status, const char *error)
{
    queued_drop(s, STORE_WORK_JOB, job_id);
    if (store_job_set_status(s->st, job_id, status, error) != 0)
        fprintf(stderr, "kiln: scheduler: job %lld: could not store status %s\n", (long long)job_id,
                status);
    hub_open(s->h, job_id);          /* no-op when open; lets SSE readers of a queued job end */
    publish_status(s, job_id, status, error);
    hub_finish(s->h, job_id);
}

/* Stores an evaluation's end: failed or cancelled with its reason (done
 * goes through eval_done, with the result). */
static void end_eval(sched *s, int64_t id, const char *status, const char *error)
{
    queued_drop(s, STORE_WORK_EVAL, id);
    if (store_eval_finish(s->st, id, status, NULL, error) != 0)
        fprintf(stderr, "kiln: scheduler: evaluation %lld: could not store status %s\n", (long long)id,
                status);
}

/* ---- reports from a worker ------------------------------------------------ */

static double num(const cJSON *o, const char *k, double def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void on_metric(sched *s, worker *w, const cJSON *r)
{
    const cJSON *tag = cJSON_GetObjectItemCaseSensitive(r, "tag");
    if (!cJSON_IsString(tag) || !tag->valuestring[0])
        return;
    store_metric m;
    memset(&m, 0, sizeof m);
    m.step = (int64_t)num(r, "step", 0);
    m.epoch = num(r, "epoch", 0);
    snprintf(m.tag, sizeof m.tag, "%s", tag->valuestring);
    m.value = num(r, "value", NAN);          /* null (a NaN loss) stays NaN */
    m.wall_time = num(r, "wall_time", 0);
    if (store_metric_insert(s->st, w->id, &m) != 0)
        fprintf(stderr, "kiln: scheduler: job %lld: could not store metric %s\n",
                (long long)w->id, m.tag);

    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "step", (double)m.step);
    cJSON_AddNumberToObject(o, "epoch", m.epoch);
    cJSON_AddStringToObject(o, "tag", m.tag);
    cJSON_AddNumberToObject(o, "value", m.value);      /* cJSON writes NaN as null */
    cJSON_AddNumberToObject(o, "wall_time", m.wall_time);
    char *text = cJSON_PrintUnformatted(o);
    if (text)
        hub_publish_step(s->h, w->id, "metric", m.step, text);
    cJSON_free(text);
    cJSON_Delete(o);
}

static void on_progress(sched *s, worker *w, const cJSON *r)
{
    int epoch = (int)num(r, "epoch", 0), epochs = (int)num(r, "epochs", 0);
    int64_t step = (int64_t)num(r, "step", 0), steps = (int64_t)num(r, "steps", 0);
    double ips = num(r, "images_per_sec", 0), eta = num(r, "eta", -1);
    store_job_set_progress(s->st, w->id, epoch, step, steps, ips, eta);

    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "epoch", epoch);
    cJSON_AddNumberToObject(o, "epochs", epochs);
    cJSON_AddNumberToObject(o, "step", (double)step);
    cJSON_AddNumberToObject(o, "steps", (double)steps);
    cJSON_AddNumberToObject(o, "images_per_sec", ips);
    cJSON_AddNumberToObject(o, "eta", eta);
    char *text = cJSON_PrintUnformatted(o);
    if (text)
        hub_set_progress(s->h, w->id, text);   /* a snapshot, not a stored event */
    cJSON_free(text);
    cJSON_Delete(o);
}

/* {"t":"stopped_early","epoch","best_epoch","message"}: early stopping ended
 * the run ("done" follows); kept with the job, and its progress is left at
 * the epoch it stopped after. */
static void on_stopped_early(sched *s, worker *w, const cJSON *r)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "message");
    double epoch = num(r, "epoch", 0), best = num(r, "best_epoch", 0);
    if (!(epoch >= 1 && epoch <= INT_MAX) || !(best >= 0 && best <= epoch) || !cJSON_IsString(m)) {
        fprintf(stderr, "kiln: scheduler: job %lld: ignoring a malformed stopped_early report\n",
                (long long)w->id);
        return;
    }
    w->stopped_early = true;
    if (store_job_set_stopped_early(s->st, w->id, (int)epoch, (int)best, m->valuestring) != 0)
        fprintf(stderr, "kiln: scheduler: job %lld: could not store its early stop\n",
                (long long)w->id);
}

/* An evaluation's {"t":"progress","done":N,"total":T}: images done of all. */
static void eval_progress(sched *s, worker *w, const cJSON *r)
{
    double done = num(r, "done", 0), total = num(r, "total", 0);
    if (total > 0)
        store_eval_set_progress(s->st, w->id, done / total);
}

static void on_line(sched *s, worker *w, const char *line, size_t len)
{
    while (len && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (!len)
        return;
    cJSON *r = cJSON_ParseWithLengthOpts(line, len, NULL, 0);
    const cJSON *t = r ? cJSON_GetObjectItemCaseSensitive(r, "t") : NULL;
    if (!cJSON_IsString(t)) {
        fprintf(stderr, "kiln: scheduler: %s %lld: ignoring a line that is not a report: %.*s\n",
                ops_of(w->kind)->noun, (long long)w->id, (int)(len > 200 ? 200 : len), line);
        goto out;
    }
    const char *kind = t->valuestring;
    const work_ops *ops = ops_of(w->kind);
    if (!strcmp(kind, "metric")) {
        if (ops->on_metric)
            ops->on_metric(s, w, r);
    } else if (!strcmp(kind, "progress")) {
        ops->on_progress(s, w, r);
    } else if (!strcmp(kind, "status")) {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(r, "status");
        if (cJSON_IsString(st) && !strcmp(st->valuestring, "cancelled"))
            w->reported_cancelled = true;
        /* "running": the job has been running since its spawn (see start_job). */
    } else if (!strcmp(kind, "stopped_early") && w->kind == STORE_WORK_JOB) {
        on_stopped_early(s, w, r);
    } else if (!strcmp(kind, "done")) {
        w->reported_done = true;
    } else if (!strcmp(kind, "error")) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "message");
        free(w->reported_error);
        w->reported_error = strdup(cJSON_IsString(m) && m->valuestring[0] ? m->valuestring
                                                                          : "the worker reported an error");
    }
    /* "snapshot" lines need nothing here: the files are in the job folder. */
out:
    cJSON_Delete(r);
}

/* Handles k bytes of a worker's reports: each complete line, the rest kept
 * in w->line for the next bytes (from a pipe or a reports file alike). */
static void feed_reports(sched *s, worker *w, const char *buf, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        char c = buf[i];
        if (c == '\n') {
            if (!w->overlong)
                on_line(s, w, w->line, w->len);
            w->len = 0;
            w->overlong = false;
        } else if (w->len < LINE_MAX_BYTES) {
            w->line[w->len++] = c;
        } else if (!w->overlong) {
            fprintf(stderr, "kiln: scheduler: %s %lld: dropping a report line over %d bytes\n",
                    ops_of(w->kind)->noun, (long long)w->id, LINE_MAX_BYTES);
            w->overlong = true;
        }
    }
}

/* Reads what the worker wrote; closes fd at end-of-file or on an error. */
static void read_worker(sched *s, worker *w)
{
    char buf[16384];
    for (int rounds = 0; rounds < 64; rounds++) {     /* bounded: others get their turn */
        ssize_t k = read(w->fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (k <= 0) {
            if (w->len && !w->overlong)
                on_line(s, w, w->line, w->len);       /* a last line without newline */
            w->len = 0;
            close(w->fd);
            w->fd = -1;
            return;
        }
        feed_reports(s, w, buf, (size_t)k);
    }
}

/* ---- the worker's log as events ------------------------------------------ */

/* Publishes one log line (or a piece of one) as {"line": "..."}. */
static void publish_log_line(sched *s, worker *w, const char *line, size_t len)
{
    char *text = malloc(len + 1);
    cJSON *o = text ? cJSON_CreateObject() : NULL;
    if (o) {
        memcpy(text, line, len);
        text[len] = 0;
        char *json = cJSON_AddStringToObject(o, "line", text) ? cJSON_PrintUnformatted(o) : NULL;
        if (json)
            hub_publish(s->h, w->id, "log", json);
        cJSON_free(json);
    }
    cJSON_Delete(o);
    free(text);
}

/* Reads what a job's worker has added to its log and publishes each complete
 * line (a line over LOG_EVENT_BYTES in pieces); at_end: the worker is gone,
 * so a last line without a newline goes too. Lock held. */
static void tail_log(sched *s, worker *w, bool at_end)
{
    if (w->log_fd < 0)
        return;
    char buf[16384];
    for (int rounds = 0; rounds < LOG_READ_ROUNDS || at_end; rounds++) {
        ssize_t k = read(w->log_fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        for (ssize_t i = 0; i < k; i++) {
            if (buf[i] == '\n') {
                publish_log_line(s, w, w->log_line, w->log_len);
                w->log_len = 0;
                continue;
            }
            if (w->log_len == sizeof w->log_line) {
                publish_log_line(s, w, w->log_line, w->log_len);
                w->log_len = 0;
            }
            w->log_line[w->log_len++] = buf[i];
        }
    }
    if (at_end && w->log_len) {
        publish_log_line(s, w, w->log_line, w->log_len);
        w->log_len = 0;
    }
}

/* Opens a job's log for tail_log at its current end (this run's first byte).
 * A log that cannot be read leaves the stream without log events. */
static void open_log_tail(worker *w, const char *logpath)
{
    w->log_fd = open(logpath, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (w->log_fd >= 0 && lseek(w->log_fd, 0, SEEK_END) < 0) {
        close(w->log_fd);
        w->log_fd = -1;
    }
    if (w->log_fd < 0)
        fprintf(stderr, "kiln: scheduler: job %lld: its log is not streamed: %s\n", (long long)w->id,
                strerror(errno));
}

/* ---- ending a worker ------------------------------------------------------ */

/* The last lines of <dir>/<log>, appended to buf after a header line. */
static void append_log_tail(const char *dir, const char *log, char *buf, size_t n)
{
    char path[PATH_MAX + 8], tail[LOG_TAIL_BYTES + 1];
    layout_file(path, sizeof path, dir, log);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0;
    ssize_t k = size > 0 ? pread(fd, tail, (size_t)(size - from), from) : 0;
    close(fd);
    if (k <= 0)
        return;
    tail[k] = '\0';
    while (k > 0 && (tail[k - 1] == '\n' || tail[k - 1] == '\r'))
        tail[--k] = '\0';
    const char *start = tail;
    int lines = 0;
    for (ssize_t i = k - 1; i >= 0; i--) {
        if (tail[i] == '\n' && ++lines == LOG_TAIL_LINES) {
            start = tail + i + 1;
            break;
        }
    }
    if (from > 0 && start == tail) {       /* drop the cut-off first line */
        const char *nl = strchr(tail, '\n');
        if (nl)
            start = nl + 1;
    }
    if (*start) {
        size_t used = strlen(buf);
        snprintf(buf + used, n - used, "\nlast lines of the log:\n%s", start);
    }
}

#define WSTATUS_LOST (-1)         /* the worker was reaped by someone else */

static void describe_exit(int wstatus, char *buf, size_t n)
{
    if (wstatus == WSTATUS_LOST)
        snprintf(buf, n, "the worker ended, but its exit status was lost");
    else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        snprintf(buf, n, "the worker exited before finishing the job, without an error report");
    else if (WIFEXITED(wstatus))
        snprintf(buf, n, "worker exited with status %d", WEXITSTATUS(wstatus));
    else if (WIFSIGNALED(wstatus))
        snprintf(buf, n, "worker killed by signal %d (%s)", WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
    else
        snprintf(buf, n, "worker ended with wait status 0x%x", (unsigned)wstatus);
}

/* A job whose worker reported done and exited 0. */
static void job_done(sched *s, worker *w)
{
    /* The job shows complete even if the last progress line was missed. */
    store_job j;
    if (store_job_get(s->st, w->id, &j) == 0) {
        if (!w->stopped_early && (j.step < j.steps || j.epoch < j.epochs))
            store_job_set_progress(s->st, w->id, j.epochs, j.steps, j.steps, j.images_per_sec, 0);
        store_job_clear(&j);
    }
    end_job(s, w->id, "done", NULL);
}

static void job_requeue(sched *s, int64_t id)
{
    store_job_set_status(s->st, id, "queued", NULL);
    publish_status(s, id, "queued", NULL);
    hub_finish(s->h, id);
}

/* An evaluation whose worker reported done and exited 0: its result.json
 * goes into the store with it, or it fails when that cannot be read. */
static void eval_done(sched *s, worker *w)
{
    char path[PATH_MAX + 32], err[512];
    size_t len = 0;
    layout_file(path, sizeof path, w->dir, LAYOUT_EVAL_RESULT);
    char *text = fio_read_file(path, EVAL_RESULT_MAX, &len, err, sizeof err);
    cJSON *doc = text ? cJSON_ParseWithLength(text, len) : NULL;
    queued_drop(s, STORE_WORK_EVAL, w->id);
    if (!doc) {
        char reason[700];
        snprintf(reason, sizeof reason, "the evaluation ended without a readable %s: %s",
                 LAYOUT_EVAL_RESULT, text ? "it is not JSON" : err);
        end_eval(s, w->id, "failed", reason);
    } else if (store_eval_finish(s->st, w->id, "done", text, NULL) != 0) {
        fprintf(stderr, "kiln: scheduler: evaluation %lld: could not store its result\n", (long long)w->id);
    }
    cJSON_Delete(doc);
    free(text);
}

static void eval_requeue(sched *s, int64_t id)
{
    store_eval_set_status(s->st, id, "queued", NULL);
}

/* Decides and records the end of a job or an evaluation once its worker is
 * reaped (or Slurm says it ended): the one rule, for every dispatcher.
 * wstatus: a wait status (W_EXITCODE from a Slurm job's exit record) or
 * WSTATUS_LOST. slurm_why: Slurm ended the job itself (a time limit, a
 * failed node, a cancel from outside kiln), in words; NULL otherwise. */
static void finish_worker(sched *s, worker *w, int wstatus, const char *slurm_why)
{
    const work_ops *ops = ops_of(w->kind);
    bool exit0 = wstatus != WSTATUS_LOST && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    char reason[LOG_TAIL_BYTES + 1024];

    tail_log(s, w, true);             /* its last log lines come before its status */
    if (w->reported_done && exit0) {
        ops->done(s, w);
    } else if (w->shutdown && !w->cancel_requested) {
        /* The server is stopping: it runs again at the next start. */
        ops->requeue(s, w->id);
    } else if (w->cancel_requested) {
        ops->end(s, w->id, "cancelled", NULL);
    } else if (slurm_why) {
        /* A worker that Slurm stopped (SIGTERM at a time limit) reports
         * cancelled; the job still failed, for Slurm's reason. */
        ops->end(s, w->id, "failed", slurm_why);
    } else if (w->reported_cancelled) {
        ops->end(s, w->id, "cancelled", NULL);
    } else {
        if (w->reported_error) {
            snprintf(reason, sizeof reason, "%s", w->reported_error);
        } else {
            describe_exit(wstatus, reason, sizeof reason);
            append_log_tail(w->dir, ops->log, reason, sizeof reason);
        }
        ops->end(s, w->id, "failed", reason);
    }
    describe_exit(wstatus, reason, sizeof reason);
    if (w->slurm_id)
        fprintf(stderr, "kiln: %s %lld: Slurm job %lld ended %s: %s\n", ops->noun, (long long)w->id,
                (long long)w->slurm_id, w->seen.state, slurm_why ? slurm_why : exit0 ? "exit status 0" : reason);
    else
        fprintf(stderr, "kiln: %s %lld: worker %d ended: %s\n", ops->noun, (long long)w->id, (int)w->pid,
                exit0 ? "exit status 0" : reason);
}

static void worker_free(worker *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    if (w->lock_fd >= 0)
        close(w->lock_fd);
    if (w->log_fd >= 0)
        close(w->log_fd);
    if (w->rep_fd >= 0)
        close(w->rep_fd);
    free(w->line);
    free(w->reported_error);
    free(w);
}

/* ---- starting a worker ---------------------------------------------------- */

static bool file_exists(const char *dir, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Seconds since a job or an evaluation was created, from its RFC 3339 created_at. */
static double job_age(const char *created_at)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!created_at || !strptime(created_at, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return 0;
    return difftime(time(NULL), timegm(&tm));
}

/* Removes the TensorBoard files of an earlier run (before its worker starts). */
static void remove_event_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

static int spawn_worker(sched *s, worker *w, char *err, size_t errlen)
{
    int pipefd[2] = { -1, -1 }, logfd = -1, ret = -1;
    bool fa_init = false, at_init = false;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    char logpath[PATH_MAX + 8];

    layout_file(logpath, sizeof logpath, w->dir, ops_of(w->kind)->log);
    logfd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logfd < 0) {
        set_err(err, errlen, "cannot open %s: %s", logpath, strerror(errno));
        goto out;
    }
    if (w->kind == STORE_WORK_JOB)
        open_log_tail(w, logpath);
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    int rc = posix_spawn_file_actions_init(&fa);
    fa_init = rc == 0;
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, logfd, STDERR_FILENO);
    if (!rc) rc = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    /* The folder's lock goes to the worker as fd 3 (w->lock_fd is > 3: a real dup). */
    if (!rc && w->lock_fd >= 0) rc = posix_spawn_file_actions_adddup2(&fa, w->lock_fd, LOCK_CHILD_FD);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* Everything we open is O_CLOEXEC; this also covers fds a library left open. */
    if (!rc) rc = posix_spawn_file_actions_addclosefrom_np(&fa, w->lock_fd >= 0 ? LOCK_CHILD_FD + 1
                                                                                : STDERR_FILENO + 1);
#endif
    if (rc) {
        set_err(err, errlen, "posix_spawn file actions: %s", strerror(rc));
        goto out;
    }

    /* The worker starts with no signal blocked and default dispositions: the
     * server ignores SIGPIPE, but a worker whose server is gone must die of it. */
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    static const int reset[] = { SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2,
                                 SIGALRM };
    for (size_t i = 0; i < sizeof reset / sizeof reset[0]; i++)
        sigaddset(&defaults, reset[i]);
    rc = posix_spawnattr_init(&at);
    at_init = rc == 0;
    if (!rc) rc = posix_spawnattr_setsigmask(&at, &none);
    if (!rc) rc = posix_spawnattr_setsigdefault(&at, &defaults);
    if (!rc) rc = posix_spawnattr_setpgroup(&at, 0);     /* its own group: no terminal ^C */
    if (!rc) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                POSIX_SPAWN_SETPGROUP);
    if (rc) {
        set_err(err, errlen, "posix_spawn attributes: %s", strerror(rc));
        goto out;
    }

    char gpus[64 * 3] = "";
    for (int i = 0, len = 0; i < 64; i++)
        if (w->gpus & (1ULL << i))
            len += snprintf(gpus + len, sizeof gpus - (size_t)len, "%s%d", len ? "," : "", i);
    const work_ops *ops = ops_of(w->kind);
    char lockfd[16];
    snprintf(lockfd, sizeof lockfd, "%d", LOCK_CHILD_FD);
    char *argv[8] = { s->worker_exe, (char *)ops->command, (char *)ops->dir_flag, w->dir };
    int argc = 4;
    if (w->gpus) {
        argv[argc++] = "--gpus";
        argv[argc++] = gpus;
    }
    if (w->lock_fd >= 0) {
        argv[argc++] = "--lock-fd";
        argv[argc++] = lockfd;
    }
    argv[argc] = NULL;
    rc = posix_spawn(&w->pid, s->worker_exe, &fa, &at, argv, s->worker_env);
    if (rc) {
        set_err(err, errlen, "cannot start %s: %s", s->worker_exe, strerror(rc));
        goto out;
    }
    w->fd = pipefd[0];
    pipefd[0] = -1;
    fcntl(w->fd, F_SETFL, fcntl(w->fd, F_GETFL) | O_NONBLOCK);
    ret = 0;
out:
    if (w->lock_fd >= 0) {           /* the worker has it now (or the start failed) */
        close(w->lock_fd);
        w->lock_fd = -1;
    }
    if (fa_init)
        posix_spawn_file_actions_destroy(&fa);
    if (at_init)
        posix_spawnattr_destroy(&at);
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (logfd >= 0)
        close(logfd);
    return ret;
}

static worker *find_worker(sched *s, store_work kind, int64_t id)
{
    for (worker *w = s->workers; w; w = w->next)
        if (w->kind == kind && w->id == id)
            return w;
    return NULL;
}

/* The devices free for the next queued item, as a look at the queue goes
 * down it (start_queued, sched_queue_view). */
typedef struct room {
    uint64_t gpu_busy;            /* GPUs that workers run on (and, in a view, items about to start) */
    uint64_t held;                /* GPUs that older waiting items wait for */
    int ncpu;                     /* CPU slots in use */
    /* sched_queue_view only: items that would start at this look, named in
     * later items' reasons like workers */
    struct { store_work kind; int64_t id; uint64_t gpus; } starting[ROOM_STARTING_MAX];
    int nstarting;
} room;

static room room_now(const sched *s)
{
    room r;
    memset(&r, 0, sizeof r);
    r.gpu_busy = s->gpu_busy;
    r.ncpu = s->ncpu_workers;
    return r;
}

/* Appends to buf ("" first) the work on the CPU (gpu < 0) or on GPU gpu:
 * "job 4", "jobs 4, 5", "job 4, evaluation 2". */
static void name_users(const sched *s, const room *r, int gpu, char *buf, size_t n)
{
    store_work kinds[64];
    int64_t ids[64];
    int k = 0;
    for (const worker *w = s->workers; w && k < 64; w = w->next)
        if (gpu < 0 ? !w->gpus : (w->gpus >> gpu) & 1) {
            kinds[k] = w->kind;
            ids[k++] = w->id;
        }
    for (int i = 0; i < r->nstarting && k < 64; i++)
        if (gpu < 0 ? !r->starting[i].gpus : (r->starting[i].gpus >> gpu) & 1) {
            kinds[k] = r->starting[i].kind;
            ids[k++] = r->starting[i].id;
        }
    bool all_jobs = true;
    for (int i = 0; i < k; i++)
        all_jobs &= kinds[i] == STORE_WORK_JOB;
    size_t used = strlen(buf);
    for (int i = 0; i < k && used < n; i++) {
        const char *noun = all_jobs ? (i ? "" : k > 1 ? "jobs " : "job ")
                                    : kinds[i] == STORE_WORK_JOB ? "job " : "evaluation ";
        int w = snprintf(buf + used, n - used, "%s%s%lld", i ? ", " : "", noun, (long long)ids[i]);
        used += w > 0 ? (size_t)w : 0;
    }
}

/* Why a GPU is not free: "used by job 7", "kept for an item ahead in the queue". */
static void gpu_why(const sched *s, const room *r, int gpu, char *buf, size_t n)
{
    size_t used = strlen(buf);
    if ((r->gpu_busy >> gpu) & 1) {
        snprintf(buf + used, n - used, "used by ");
        name_users(s, r, gpu, buf, n);
    } else {
        snprintf(buf + used, n - used, "waited for by a job ahead in the queue");
    }
}

/* What a waiting item asking for d waits for, into why: "a free CPU slot
 * (2 of 2 in use by jobs 4, 5)", "GPU 1 (used by job 7)", "2 GPUs (1 free)". */
static void describe_wait(const sched *s, const room *r, const jobcfg_devices *d, uint64_t taken,
                          char *why, size_t n)
{
    if (d->kind != BACKEND_CUDA || d->count == 0) {
        snprintf(why, n, "a free CPU slot (%d of %d in use by ", r->ncpu, s->max_jobs);
        name_users(s, r, -1, why, n);
        size_t used = strlen(why);
        snprintf(why + used, n - used, ")");
        return;
    }
    if (!d->listed) {
        uint64_t all = s->ngpus >= 64 ? ~0ULL : (1ULL << s->ngpus) - 1;
        snprintf(why, n, "%d GPU%s (%d free)", d->count, d->count == 1 ? "" : "s",
                 __builtin_popcountll(all & ~taken));
        return;
    }
    snprintf(why, n, "GPU%s ", d->count == 1 ? "" : "s");
    for (int k = 0; k < d->count; k++) {
        size_t used = strlen(why);
        snprintf(why + used, n - used, "%s%d", k ? ", " : "", d->ids[k]);
    }
    const char *sep = " (";
    for (int k = 0; k < d->count; k++) {
        if (!((taken >> d->ids[k]) & 1))
            continue;
        size_t used = strlen(why);
        if (d->count == 1)
            snprintf(why + used, n - used, "%s", sep);
        else
            snprintf(why + used, n - used, "%sGPU %d ", sep, d->ids[k]);
        gpu_why(s, r, d->ids[k], why, n);
        sep = "; ";
    }
    size_t used = strlen(why);
    snprintf(why + used, n - used, ")");
}

/* The one rule of what starts: whether an item asking for devices d starts
 * now in room r, and on which GPUs (*mask; 0 for the CPU): the ones it
 * names, or the lowest free ones; a CPU item when fewer than max_cpu_jobs
 * CPU items run. Older items still waiting hold GPUs in r->held: the ones
 * they name, or all of them when any will do, so that a job needing several
 * is not passed over for ever by later ones needing fewer. Returns 1: it
 * starts; 0: it waits (its GPUs join r->held; why, when not NULL, says what
 * for); -1: it can never run here (err). The caller moves r on after a start
 * (room_take). */
static int decide(const sched *s, const jobcfg_devices *d, room *r, uint64_t *mask, char *why,
                  size_t whylen, char *err, size_t errlen)
{
    int want = d->kind == BACKEND_CUDA ? d->count : 0;
    bool listed = d->listed;
    const int *ids = d->ids;
    *mask = 0;
    if (want == 0) {
        if (r->ncpu < s->max_jobs)
            return 1;
        if (why)
            describe_wait(s, r, d, 0, why, whylen);
        return 0;
    }
    if (want > s->ngpus) {
        set_err(err, errlen, "the job asks for %d GPUs, but this machine has %d", want, s->ngpus);
        return -1;
    }
    uint64_t need = 0;
    for (int k = 0; listed && k < want; k++) {
        if (ids[k] < 0 || ids[k] >= s->ngpus) {
            set_err(err, errlen, "the job asks for GPU %d, but this machine has %d", ids[k],
                    s->ngpus);
            return -1;
        }
        need |= 1ULL << ids[k];
    }
    uint64_t all = s->ngpus >= 64 ? ~0ULL : (1ULL << s->ngpus) - 1;
    uint64_t taken = r->gpu_busy | r->held;
    if (!listed)
        for (int i = 0, got = 0; i < s->ngpus && got < want; i++)
            if (!(taken & (1ULL << i))) {
                need |= 1ULL << i;
                got++;
            }
    if (__builtin_popcountll(need) == want && !(need & taken)) {
        *mask = need;
        return 1;
    }
    if (why)
        describe_wait(s, r, d, taken, why, whylen);
    r->held |= listed ? need : all;
    return 0;
}

/* An item started on GPUs gpus (0: the CPU): r counts its devices as used. */
static void room_take(room *r, uint64_t gpus)
{
    r->gpu_busy |= gpus;
    r->ncpu += !gpus;
}

/* A job's status and age, for work_ops.peek. */
static int job_peek(store *st, int64_t id, char *status, size_t n, double *age)
{
    store_job j;
    int rc = store_job_get(st, id, &j);
    if (rc != 0)
        return rc;
    snprintf(status, n, "%s", j.status);
    *age = job_age(j.created_at);
    store_job_clear(&j);
    return 0;
}

static int eval_peek(store *st, int64_t id, char *status, size_t n, double *age)
{
    store_eval e;
    int rc = store_eval_get(st, id, &e);
    if (rc != 0)
        return rc;
    snprintf(status, n, "%s", e.status);
    *age = job_age(e.created_at);
    store_eval_clear(&e);
    return 0;
}

/* Before a job's worker starts. It resumes from the job's latest checkpoint
 * (jobs/runner.c): metrics up to its step stay, later ones go. Without one
 * it runs from its start: what an earlier, interrupted run recorded goes
 * (before the spawn: the new worker writes a new event file at once). Its
 * stream opens. */
static void job_prepare(sched *s, int64_t id, const char *dir)
{
    char ckdir[PATH_MAX + 16], ckpath[PATH_MAX + 64], ckerr[256];
    ckpt_info ck;
    layout_file(ckdir, sizeof ckdir, dir, LAYOUT_CHECKPOINTS);
    if (ckpt_latest(ckdir, ckpath, sizeof ckpath, &ck, ckerr, sizeof ckerr) == 1) {
        store_metric_delete(s->st, id, ck.step);
        store_event_trim(s->st, id, ck.step);
    } else {
        store_metric_delete(s->st, id, -1);
        store_event_trim(s->st, id, -1);
        remove_event_files(dir);
    }
    hub_open(s->h, id);
}

/* Before an evaluation's worker starts: a result of an interrupted run goes. */
static void eval_prepare(sched *s, int64_t id, const char *dir)
{
    (void)s;
    (void)id;
    char path[PATH_MAX + 32];
    if (layout_file(path, sizeof path, dir, LAYOUT_EVAL_RESULT) == 0)
        unlink(path);
}

/* The devices of a worker on GPUs gpus (0: the CPU) as the store keeps them:
 * ["cpu"] or ["cuda:0","cuda:2"]. */
static void devices_json(uint64_t gpus, char *buf, size_t n)
{
    if (!gpus) {
        snprintf(buf, n, "[\"cpu\"]");
        return;
    }
    size_t used = 0;
    buf[used++] = '[';
    for (int i = 0; i < 64 && used < n; i++)
        if ((gpus >> i) & 1) {
            int k = snprintf(buf + used, n - used, "%s\"cuda:%d\"", used > 1 ? "," : "", i);
            used += k > 0 ? (size_t)k : 0;
        }
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

static void record_devices(sched *s, store_work kind, int64_t id, uint64_t gpus)
{
    char json[64 * 12 + 4];
    devices_json(gpus, json, sizeof json);
    if (store_set_devices(s->st, kind, id, json) != 0)
        fprintf(stderr, "kiln: scheduler: %s %lld: could not store its devices\n",
                ops_of(kind)->noun, (long long)id);
}

static void job_started(sched *s, int64_t id, uint64_t gpus)
{
    store_job j;
    if (store_job_get(s->st, id, &j) == 0) {
        store_job_set_progress(s->st, id, 0, 0, j.steps, 0, -1);
        store_job_clear(&j);
    }
    store_job_set_status(s->st, id, "running", NULL);
    record_devices(s, STORE_WORK_JOB, id, gpus);
    publish_status(s, id, "running", NULL);
}

static void eval_started(sched *s, int64_t id, uint64_t gpus)
{
    store_eval_set_status(s->st, id, "running", NULL);
    record_devices(s, STORE_WORK_EVAL, id, gpus);
}

static const work_ops work_kinds[] = {
    [STORE_WORK_JOB] = {
        .noun = "job", .command = "worker", .dir_flag = "--job-dir", .config = LAYOUT_JOB_JSON, .log = LAYOUT_JOB_LOG,
        .lock = true,
        .dir = layout_job_dir, .devices = job_devices, .peek = job_peek,
        .ids_with_status = store_job_ids_with_status, .set_status = store_job_set_status,
        .prepare = job_prepare, .started = job_started, .on_metric = on_metric,
        .on_progress = on_progress, .done = job_done, .end = end_job, .requeue = job_requeue,
    },
    [STORE_WORK_EVAL] = {
        .noun = "evaluation", .command = "evaluate", .dir_flag = "--eval-dir", .config = LAYOUT_EVAL_JSON,
        .log = LAYOUT_EVAL_LOG,
        .dir = layout_eval_dir, .devices = eval_devices, .peek = eval_peek,
        .ids_with_status = store_eval_ids_with_status, .set_status = store_eval_set_status,
        .prepare = eval_prepare, .started = eval_started, .on_metric = NULL,
        .on_progress = eval_progress, .done = eval_done, .end = end_eval, .requeue = eval_requeue,
    },
};

static const work_ops *ops_of(store_work kind)
{
    return &work_kinds[kind == STORE_WORK_EVAL ? STORE_WORK_EVAL : STORE_WORK_JOB];
}

static int queued_devices(sched *s, store_work kind, int64_t id, const char *dir,
                          jobcfg_devices *out, char *err, size_t errlen)
{
    queued_job *q = *queued_at(s, kind, id);
    if (!q) {
        jobcfg_devices d;
        if (ops_of(kind)->devices(dir, &d, err, errlen) != 0)
            return -1;
        q = calloc(1, sizeof *q);
        if (!q)
            return set_err(err, errlen, "out of memory");
        q->kind = kind;
        q->id = id;
        q->devices = d;
        q->next = s->queue;
        s->queue = q;
    }
    *out = q->devices;
    return 0;
}

/* Takes the folder's lock of a job about to start (jobs/joblock.h), as a
 * descriptor above LOCK_CHILD_FD for spawn_worker to hand over. Returns 0
 * with *fd; JOBLOCK_BUSY when another process (a worker an earlier server
 * left) holds it, logged once per job; -1 with err. Lock held. */
static int lock_folder(sched *s, store_work kind, int64_t id, const char *dir, int *fd, char *err,
                       size_t errlen)
{
    pid_t holder = 0;
    int rc = joblock_take(dir, 0, fd, &holder, err, errlen);
    if (rc == JOBLOCK_BUSY) {
        queued_job *q = *queued_at(s, kind, id);
        if (q && !q->lock_logged) {
            q->lock_logged = true;
            fprintf(stderr, "kiln: job %lld: its folder is locked by another process (pid %ld), "
                    "a worker of an earlier server; it starts once that one has exited\n",
                    (long long)id, (long)holder);
        }
        return JOBLOCK_BUSY;
    }
    if (rc != 0)
        return -1;
    if (*fd <= LOCK_CHILD_FD) {
        int high = fcntl(*fd, F_DUPFD_CLOEXEC, LOCK_CHILD_FD + 1);
        close(*fd);
        *fd = high;
        if (high < 0)
            return set_err(err, errlen, "cannot keep the lock of %s: %s", dir, strerror(errno));
    }
    return 0;
}

/* ---- the Slurm dispatcher ------------------------------------------------- */

/* Workers that are processes of this server (not Slurm jobs). */
static int local_workers(const sched *s)
{
    int n = 0;
    for (const worker *w = s->workers; w; w = w->next)
        n += !w->slurm_id;
    return n;
}

/* A job's nodes and tasks per node (jobcfg: the checks every job.json
 * gets; the worker reads the same). 1 each when job.json cannot be read:
 * the worker then fails with the reason. */
static void job_ranks(const char *dir, int *nodes, int *tasks)
{
    jobcfg c;
    api_error e;
    *nodes = *tasks = 1;
    if (jobcfg_load(dir, &c, &e) != 0)
        return;
    *nodes = c.nodes;
    *tasks = c.tasks_per_node;
    jobcfg_free(&c);
}

/* Removes DIR/name (a file of an earlier run); a missing one is fine. */
static void remove_file(const char *dir, const char *name)
{
    char path[PATH_MAX + 32];
    if (layout_file(path, sizeof path, dir, name) == 0)
        unlink(path);
}

/* Follows a job's log from its end (created first: srun appends to it). */
static void follow_log(worker *w)
{
    char logpath[PATH_MAX + 8];
    layout_file(logpath, sizeof logpath, w->dir, LAYOUT_JOB_LOG);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    open_log_tail(w, logpath);
}

/* The Slurm dispatcher's start: one sbatch (run with the scheduler's lock
 * held, bounded by SLURM_CMD_TIMEOUT_MS, as scancel is). The job stays
 * "queued" until Slurm runs it (slurm_check). */
static int slurm_start(sched *s, worker *w, const jobcfg_devices *want, char *err, size_t errlen)
{
    slurm_request req = { .kiln_job_id = w->id, .gpus = want->kind == BACKEND_CUDA ? want->count : 0 };
    job_ranks(w->dir, &req.nodes, &req.tasks_per_node);
    /* A GPU job on several nodes runs one rank a GPU (issue 18's contract);
     * on one node its worker drives all its GPUs itself, as today. */
    if (req.gpus > 0 && req.nodes > 1)
        req.tasks_per_node = req.gpus;
    remove_file(w->dir, SLURM_REPORTS);      /* this run's reports start at byte 0 */
    remove_file(w->dir, SLURM_EXIT);
    follow_log(w);
    if (slurm_submit(&s->slurm, s->worker_exe, w->dir, &req, &w->slurm_id, err, errlen) != 0) {
        w->slurm_id = 0;
        return -1;
    }
    if (store_slurm_submitted(s->st, w->id, w->slurm_id) != 0)
        fprintf(stderr, "kiln: job %lld: could not store its Slurm job id %lld\n", (long long)w->id,
                (long long)w->slurm_id);
    snprintf(w->seen.state, sizeof w->seen.state, "PENDING");
    fprintf(stderr, "kiln: job %lld: submitted to Slurm as job %lld (%d node%s, %d task%s per node, "
            "%d GPU%s per node)\n", (long long)w->id, (long long)w->slurm_id, req.nodes,
            req.nodes == 1 ? "" : "s", req.tasks_per_node, req.tasks_per_node == 1 ? "" : "s",
            req.gpus, req.gpus == 1 ? "" : "s");
    return 0;
}

/* The Slurm dispatcher's stop: scancel at the next look (slurm_check). */
static void slurm_stop(sched *s, worker *w)
{
    (void)w;
    wake_thread(s);
}

/* The job turns "running" in kiln (once): Slurm runs it, or it reported. */
static void slurm_mark_running(sched *s, worker *w)
{
    if (w->slurm_running)
        return;
    w->slurm_running = true;
    jobcfg_devices d;
    memset(&d, 0, sizeof d);
    char err[256];
    int gpus = job_devices(w->dir, &d, err, sizeof err) == 0 && d.kind == BACKEND_CUDA ? d.count : 0;
    /* Its devices as Slurm numbers them on each node (CUDA_VISIBLE_DEVICES). */
    job_started(s, w->id, gpus >= 64 ? ~0ULL : (1ULL << gpus) - 1);
}

/* Reads what rank 0 has appended to DIR/reports.jsonl since rep_off and
 * handles each complete line; stores the offset of the first unhandled byte
 * (a partial last line is read again after a restart). */
static void tail_reports(sched *s, worker *w)
{
    if (w->rep_fd < 0) {
        char path[PATH_MAX + 32];
        layout_file(path, sizeof path, w->dir, SLURM_REPORTS);
        w->rep_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (w->rep_fd < 0)
            return;                          /* not yet written */
        if (lseek(w->rep_fd, (off_t)w->rep_off, SEEK_SET) < 0) {
            close(w->rep_fd);
            w->rep_fd = -1;
            return;
        }
    }
    char buf[16384];
    for (int rounds = 0; rounds < 64; rounds++) {
        ssize_t k = read(w->rep_fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        slurm_mark_running(s, w);
        w->rep_off += k;
        feed_reports(s, w, buf, (size_t)k);
    }
    int64_t done = w->rep_off - (int64_t)w->len;
    if (done != w->rep_saved && store_slurm_set_offset(s->st, w->id, done) == 0)
        w->rep_saved = done;
}

/* Slurm's own end of a job in words, for finish_worker; NULL when the job's
 * worker and its exit decide (COMPLETED, FAILED: the worker's reports and
 * exit status say more than Slurm). */
static const char *slurm_why(const worker *w, char *buf, size_t n)
{
    const char *st = w->seen.state;
    if (!strcmp(st, "COMPLETED") || !strcmp(st, "FAILED"))
        return NULL;
    if (!strcmp(st, "TIMEOUT"))
        snprintf(buf, n, "Slurm stopped job %lld at its time limit (TIMEOUT)", (long long)w->slurm_id);
    else if (!strcmp(st, "NODE_FAIL"))
        snprintf(buf, n, "Slurm job %lld lost its node%s%s (NODE_FAIL)", (long long)w->slurm_id,
                 w->seen.nodes[0] ? " " : "", w->seen.nodes);
    else if (!strcmp(st, "CANCELLED"))
        snprintf(buf, n, "Slurm job %lld was cancelled outside kiln (CANCELLED: scancel or an "
                 "administrator)", (long long)w->slurm_id);
    else if (!strcmp(st, "OUT_OF_MEMORY"))
        snprintf(buf, n, "Slurm job %lld ran out of memory (OUT_OF_MEMORY)", (long long)w->slurm_id);
    else if (st[0] && strcmp(st, "UNKNOWN"))
        snprintf(buf, n, "Slurm ended job %lld: %s%s%s%s", (long long)w->slurm_id, st,
                 w->seen.reason[0] && strcmp(w->seen.reason, "None") ? " (" : "",
                 w->seen.reason[0] && strcmp(w->seen.reason, "None") ? w->seen.reason : "",
                 w->seen.reason[0] && strcmp(w->seen.reason, "None") ? ")" : "");
    else
        snprintf(buf, n, "Slurm no longer knows job %lld, and it left no exit record (%s)",
                 (long long)w->slurm_id, SLURM_EXIT);
    return buf;
}

/* A Slurm job has ended: its last reports, its exit record and Slurm's
 * state decide (finish_worker), and the worker goes. Lock held. */
static void slurm_finish(sched *s, worker **pp)
{
    worker *w = *pp;
    char err[256], why[512];
    tail_reports(s, w);
    if (w->len && !w->overlong)
        on_line(s, w, w->line, w->len);      /* a last line without its newline */
    w->len = 0;
    slurm_exit ex;
    int rc = slurm_exit_read(w->dir, &ex, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "kiln: job %lld: %s\n", (long long)w->id, err);
    bool have_exit = rc == 0 && ex.slurm_job_id == w->slurm_id;
    if (w->absent >= SLURM_ABSENT_POLLS) {
        /* Slurm has forgotten it (MinJobAge): the last state seen is stale;
         * its exit record says how it ended, as Slurm would have. */
        snprintf(w->seen.state, sizeof w->seen.state, "%s", !have_exit ? "UNKNOWN"
                 : !ex.exit_code && !ex.signal ? "COMPLETED" : "FAILED");
        w->seen.reason[0] = 0;
        store_slurm_set_state(s->st, w->id, w->seen.state, "", w->seen.nodes);
    }
    int wstatus = !have_exit ? WSTATUS_LOST : ex.signal ? W_EXITCODE(0, ex.signal & 0x7f)
                                                         : W_EXITCODE(ex.exit_code & 0xff, 0);
    const char *sw = slurm_why(w, why, sizeof why);
    if (!sw && !have_exit) {
        snprintf(why, sizeof why, "Slurm job %lld ended %s, but its batch script left no exit "
                 "record (%s)", (long long)w->slurm_id, w->seen.state, SLURM_EXIT);
        sw = w->reported_error ? NULL : why;
    }
    if (have_exit || w->rep_off > 0)
        slurm_mark_running(s, w);            /* it ran: started_at, devices */
    *pp = w->next;
    s->nworkers--;
    finish_worker(s, w, wstatus, sw);
    if (store_slurm_ended(s->st, w->id) != 0)
        fprintf(stderr, "kiln: job %lld: could not store the end of its Slurm job\n", (long long)w->id);
    worker_free(w);
    s->queue_dirty = true;
}

/* What Slurm says of w now (found: in squeue's list; else NULL): its state is
 * stored when it changed; RUNNING makes the job "running". Returns whether
 * the job has ended. */
static bool slurm_update(sched *s, worker *w, const slurm_job *now)
{
    if (!now) {
        slurm_job shown;
        char err[256];
        int rc = slurm_show(&s->slurm, w->slurm_id, &shown, err, sizeof err);
        if (rc == 0)
            now = &shown;
        else if (rc < 0)
            fprintf(stderr, "kiln: job %lld: %s\n", (long long)w->id, err);
        if (!now)
            return ++w->absent >= SLURM_ABSENT_POLLS;
        w->absent = 0;
        return slurm_update(s, w, now);
    }
    w->absent = 0;
    if (strcmp(now->state, w->seen.state) || strcmp(now->reason, w->seen.reason) ||
        strcmp(now->nodes, w->seen.nodes)) {
        const char *keep_nodes = now->nodes[0] ? now->nodes : w->seen.nodes;
        store_slurm_set_state(s->st, w->id, now->state, now->reason, keep_nodes);
        char nodes[sizeof w->seen.nodes];
        snprintf(nodes, sizeof nodes, "%s", keep_nodes);
        w->seen = *now;
        snprintf(w->seen.nodes, sizeof w->seen.nodes, "%s", nodes);
    }
    if (!strcmp(now->state, "RUNNING"))
        slurm_mark_running(s, w);
    return slurm_state_final(now->state);
}

/* Every look: scancel for cancels asked, the reports and logs of Slurm
 * jobs; every poll_ms, squeue --json (run without the lock: only this
 * thread adds or removes workers) and the end of the jobs that ended.
 * Lock held. */
static void slurm_check(sched *s, double now)
{
    char err[512];
    for (worker *w = s->workers; w; w = w->next) {
        if (!w->slurm_id)
            continue;
        if (w->cancel_requested && !w->scancel_sent) {
            w->scancel_sent = true;
            if (slurm_cancel(&s->slurm, w->slurm_id, err, sizeof err) != 0)
                fprintf(stderr, "kiln: job %lld: %s\n", (long long)w->id, err);
            else
                fprintf(stderr, "kiln: job %lld: cancel: scancel %lld\n", (long long)w->id,
                        (long long)w->slurm_id);
            s->last_slurm_poll = 0;          /* look again soon */
        }
        tail_reports(s, w);
    }
    int poll_ms = s->slurm.poll_ms > 0 ? s->slurm.poll_ms : SLURM_POLL_MS;
    bool any = false;
    for (worker *w = s->workers; w && !any; w = w->next)
        any = w->slurm_id != 0;
    if (!any || (now - s->last_slurm_poll) * 1000 < poll_ms)
        return;
    s->last_slurm_poll = now;
    slurm_job *jobs = NULL;
    size_t n = 0;
    pthread_mutex_unlock(&s->mu);
    int rc = slurm_poll(&s->slurm, &jobs, &n, err, sizeof err);
    pthread_mutex_lock(&s->mu);
    if (rc != 0) {
        fprintf(stderr, "kiln: scheduler: %s\n", err);
        return;
    }
    worker **pp = &s->workers;
    while (*pp) {
        worker *w = *pp;
        const slurm_job *found = NULL;
        for (size_t i = 0; w->slurm_id && i < n && !found; i++)
            if (jobs[i].id == w->slurm_id)
                found = &jobs[i];
        if (w->slurm_id && slurm_update(s, w, found)) {
            slurm_finish(s, pp);
            continue;
        }
        pp = &w->next;
    }
    free(jobs);
}

/* At start (the Slurm dispatcher): the jobs a previous server submitted that
 * have not ended in kiln are followed again, from where their reports were
 * read. Their ids go to *adopted (malloc'ed) so that they are not requeued. */
static int slurm_adopt(sched *s, int64_t **adopted, size_t *n)
{
    if (store_slurm_active(s->st, adopted, n) != 0)
        return -1;
    for (size_t i = 0; i < *n; i++) {
        int64_t id = (*adopted)[i];
        store_slurm sl;
        store_job j;
        worker *w = calloc(1, sizeof *w);
        char *line = malloc(LINE_MAX_BYTES);
        if (!w || !line || store_slurm_get(s->st, id, &sl) != 0 || store_job_get(s->st, id, &j) != 0) {
            free(w);
            free(line);
            return -1;
        }
        w->kind = STORE_WORK_JOB;
        w->id = id;
        w->fd = w->lock_fd = w->log_fd = w->rep_fd = -1;
        w->line = line;
        w->slurm_id = sl.slurm_job_id;
        w->rep_off = w->rep_saved = sl.report_offset;
        w->slurm_running = !strcmp(j.status, "running");
        snprintf(w->seen.state, sizeof w->seen.state, "%s", sl.state);
        snprintf(w->seen.reason, sizeof w->seen.reason, "%s", sl.reason);
        snprintf(w->seen.nodes, sizeof w->seen.nodes, "%s", sl.nodes);
        store_job_clear(&j);
        layout_job_dir(w->dir, sizeof w->dir, s->data_dir, id);
        follow_log(w);
        hub_open(s->h, id);
        w->next = s->workers;
        s->workers = w;
        s->nworkers++;
        fprintf(stderr, "kiln: job %lld runs in Slurm as job %lld; following it again from byte %lld "
                "of its reports\n", (long long)id, (long long)w->slurm_id, (long long)w->rep_off);
    }
    return 0;
}

/* The local dispatcher's start: a `kiln worker` child on w->gpus. */
static int local_start(sched *s, worker *w, const jobcfg_devices *want, char *err, size_t errlen)
{
    (void)want;
    if (spawn_worker(s, w, err, errlen) != 0)
        return -1;
    ops_of(w->kind)->started(s, w->id, w->gpus);
    fprintf(stderr, "kiln: %s %lld: started worker %d\n", ops_of(w->kind)->noun, (long long)w->id,
            (int)w->pid);
    return 0;
}

/* The local dispatcher's stop (a cancel): SIGTERM now, SIGKILL after the grace. */
static void local_stop(sched *s, worker *w)
{
    assert(w->pid > 0 && !w->slurm_id);     /* never kill(0, ...): the server's own group */
    kill(w->pid, SIGTERM);
    w->kill_at = now_mono() + s->grace_ms / 1000.0;
    fprintf(stderr, "kiln: %s %lld: cancel: SIGTERM to worker %d\n", ops_of(w->kind)->noun,
            (long long)w->id, (int)w->pid);
}

/* The dispatcher seam (jobs/dispatch.h): what differs between running a
 * worker here and in Slurm. Everything else (the queue, reports, the final
 * status: finish_worker) is shared. */
typedef struct dispatcher {
    const char *name;
    bool places;            /* it decides where work runs (Slurm): no decide(), no folder lock here */
    /* Starts w (kind, id, dir, gpus set); 0, or -1 with err (the job fails). */
    int (*start)(sched *s, worker *w, const jobcfg_devices *want, char *err, size_t errlen);
    /* Asks w to stop after sched_cancel (w->cancel_requested is set). */
    void (*stop)(sched *s, worker *w);
} dispatcher;

static const dispatcher dispatchers[] = {
    [DISPATCH_LOCAL] = { .name = "local", .places = false, .start = local_start, .stop = local_stop },
    [DISPATCH_SLURM] = { .name = "slurm", .places = true, .start = slurm_start, .stop = slurm_stop },
};

/* Where work of this kind runs: jobs by the server's dispatcher, evaluations here. */
static const dispatcher *dispatcher_of(const sched *s, store_work kind)
{
    return &dispatchers[kind == STORE_WORK_JOB && s->dispatcher == DISPATCH_SLURM ? DISPATCH_SLURM
                                                                                  : DISPATCH_LOCAL];
}

/* Starts one queued job or evaluation, if its devices are free in r
 * (decide; under Slurm, at once: Slurm places it). Returns true when a
 * worker (or a Slurm job) now runs it. Lock held. */
static bool start_work(sched *s, store_work kind, int64_t id, room *r)
{
    const work_ops *ops = ops_of(kind);
    char dir[PATH_MAX], err[512], status[16];
    double age = 0;
    if (ops->dir(dir, sizeof dir, s->data_dir, id) != 0)
        return false;
    int rc = ops->peek(s->st, id, status, sizeof status, &age);
    if (rc != 0 || strcmp(status, "queued")) {
        if (rc != -1)
            queued_drop(s, kind, id);        /* deleted, or no longer queued */
        return false;
    }
    if (!file_exists(dir, ops->config)) {
        if (age > JOBJSON_WAIT_S) {
            snprintf(err, sizeof err, "the %s's %s was never written; create it again", ops->noun,
                     ops->config);
            ops->end(s, id, "failed", err);
        }
        return false;                        /* its creator is still writing it */
    }

    uint64_t gpus = 0;
    jobcfg_devices want;
    const dispatcher *d = dispatcher_of(s, kind);
    int pick = queued_devices(s, kind, id, dir, &want, err, sizeof err) != 0 ? -1
               : d->places ? 1 : decide(s, &want, r, &gpus, NULL, 0, err, sizeof err);
    if (pick < 0) {
        ops->end(s, id, "failed", err);
        return false;
    }
    if (pick == 0)
        return false;                        /* its GPUs or the CPU are busy: it waits */
    int lock_fd = -1;
    if (ops->lock && !d->places) {
        int lk = lock_folder(s, kind, id, dir, &lock_fd, err, sizeof err);
        if (lk < 0)
            ops->end(s, id, "failed", err);
        if (lk != 0)
            return false;                    /* an earlier worker still writes its folder: it waits */
    }
    worker *w = calloc(1, sizeof *w);
    char *line = malloc(LINE_MAX_BYTES);
    if (!w || !line) {
        free(w);
        free(line);
        if (lock_fd >= 0)
            close(lock_fd);
        return false;                        /* try again at the next look at the queue */
    }
    w->kind = kind;
    w->id = id;
    w->gpus = gpus;
    w->fd = -1;
    w->lock_fd = lock_fd;
    w->log_fd = -1;
    w->rep_fd = -1;
    w->line = line;
    snprintf(w->dir, sizeof w->dir, "%s", dir);

    ops->prepare(s, id, dir);
    if (d->start(s, w, &want, err, sizeof err) != 0) {
        fprintf(stderr, "kiln: %s %lld: %s\n", ops->noun, (long long)id, err);
        ops->end(s, id, "failed", err);
        worker_free(w);
        return false;
    }

    queued_drop(s, kind, id);
    if (!d->places) {                        /* a Slurm job uses none of this machine's room */
        s->gpu_busy |= w->gpus;
        s->ncpu_workers += !w->gpus;
        room_take(r, w->gpus);
    }
    w->next = s->workers;
    s->workers = w;
    s->nworkers++;
    return true;
}

/* Starts queued jobs and evaluations in the queue's order (store_queue_list:
 * priority, then oldest, across both), while there is room. Every queued job's stream is open, so that an SSE reader of a job
 * still waiting waits with it (instead of being told the job is not live).
 * Lock held. */
static void start_queued(sched *s)
{
    store_queued *q = NULL;
    size_t n = 0;
    if (store_queue_list(s->st, &q, &n) != 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (q[i].kind == STORE_WORK_JOB)
            hub_open(s->h, q[i].id);
    room r = room_now(s);
    for (size_t i = 0; i < n; i++)
        if (!find_worker(s, q[i].kind, q[i].id))
            start_work(s, q[i].kind, q[i].id, &r);
    free(q);
}

/* ---- the loop ------------------------------------------------------------- */

/* Sends SIGKILL past deadlines; reaps workers whose pipe is closed. Lock held. */
static void check_workers(sched *s, double now)
{
    worker **pp = &s->workers;
    while (*pp) {
        worker *w = *pp;
        if (w->slurm_id) {                   /* slurm_check's */
            pp = &w->next;
            continue;
        }
        if (w->kill_at > 0 && now >= w->kill_at && !w->killed) {
            fprintf(stderr, "kiln: %s %lld: worker %d still running %d ms after SIGTERM; SIGKILL\n",
                    ops_of(w->kind)->noun, (long long)w->id, (int)w->pid, s->grace_ms);
            kill(w->pid, SIGKILL);
            w->killed = true;
        }
        int wstatus = 0;
        pid_t r = w->fd < 0 ? waitpid(w->pid, &wstatus, WNOHANG) : 0;
        if (r == w->pid || (r < 0 && errno == ECHILD)) {
            if (r < 0)   /* someone else reaped it (SIGCHLD ignored, a waitpid(-1)) */
                wstatus = WSTATUS_LOST;
            *pp = w->next;
            s->nworkers--;
            s->gpu_busy &= ~w->gpus;                    /* its GPUs are free for the next job */
            s->ncpu_workers -= !w->gpus;
            finish_worker(s, w, wstatus, NULL);
            worker_free(w);
            s->queue_dirty = true;
            continue;
        }
        pp = &w->next;
    }
}

static int poll_timeout_ms(sched *s, double now)
{
    double t = QUEUE_POLL_MS / 1000.0;
    for (worker *w = s->workers; w; w = w->next) {
        if (w->slurm_id && t > REPORTS_POLL_MS / 1000.0)
            t = REPORTS_POLL_MS / 1000.0;
        if (!w->slurm_id && w->fd < 0 && t > REAP_POLL_MS / 1000.0)
            t = REAP_POLL_MS / 1000.0;
        if (w->kill_at > 0 && !w->killed && w->kill_at - now < t)
            t = w->kill_at - now;
    }
    if (s->stopping && s->stop_deadline - now < t)
        t = s->stop_deadline - now;
    return t <= 0 ? 0 : (int)(t * 1000) + 1;
}

static void *sched_thread(void *arg)
{
    sched *s = arg;
    struct pollfd *fds = NULL;
    size_t fds_cap = 0;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        double now = now_mono();
        if (s->stopping && !s->stop_sent) {
            for (worker *w = s->workers; w; w = w->next) {
                if (w->slurm_id)
                    continue;                /* it keeps running in Slurm */
                w->shutdown = true;
                kill(w->pid, SIGTERM);
                if (!w->kill_at || w->kill_at > now + s->grace_ms / 1000.0)
                    w->kill_at = now + s->grace_ms / 1000.0;
            }
            s->stop_sent = true;
            s->stop_deadline = now + (s->grace_ms + STOP_EXTRA_MS) / 1000.0;
        }
        if (s->stopping && (!local_workers(s) || now >= s->stop_deadline))
            break;
        if (!s->stopping && (s->queue_dirty || now - s->last_queue_check >= QUEUE_POLL_MS / 1000.0)) {
            s->queue_dirty = false;
            s->last_queue_check = now;
            start_queued(s);
        }

        size_t need = 1 + (size_t)s->nworkers;
        if (need > fds_cap) {
            struct pollfd *nf = realloc(fds, need * sizeof *nf);
            if (nf) {
                fds = nf;
                fds_cap = need;
            }
        }
        size_t nfds = 0;
        if (fds_cap >= 1)
            fds[nfds++] = (struct pollfd){ .fd = s->wake_r, .events = POLLIN };
        for (worker *w = s->workers; w && nfds < fds_cap; w = w->next)
            if (w->fd >= 0)
                fds[nfds++] = (struct pollfd){ .fd = w->fd, .events = POLLIN };
        int timeout = poll_timeout_ms(s, now);
        pthread_mutex_unlock(&s->mu);

        int pr = nfds ? poll(fds, nfds, timeout) : (usleep(100000), 0);

        pthread_mutex_lock(&s->mu);
        if (pr > 0) {
            for (size_t i = 0; i < nfds; i++) {
                if (!fds[i].revents)
                    continue;
                if (fds[i].fd == s->wake_r) {
                    char drain[64];
                    while (read(s->wake_r, drain, sizeof drain) > 0)
                        ;
                    s->queue_dirty = true;
                    continue;
                }
                for (worker *w = s->workers; w; w = w->next)
                    if (w->fd == fds[i].fd)
                        read_worker(s, w);
            }
        }
        for (worker *w = s->workers; w; w = w->next)
            tail_log(s, w, false);
        check_workers(s, now_mono());
        if (s->dispatcher == DISPATCH_SLURM && !s->stopping)
            slurm_check(s, now_mono());
    }
    if (local_workers(s))
        fprintf(stderr, "kiln: scheduler: %d worker(s) did not exit in time\n", local_workers(s));
    pthread_mutex_unlock(&s->mu);
    free(fds);
    return NULL;
}

/* ---- the public functions ------------------------------------------------- */

/* Workers inherit the server's environment. When several jobs may train at
 * once and the user has not set OMP_NUM_THREADS, each worker gets an equal
 * share of the cores: OpenMP threads that spin-wait collapse when two workers
 * each start one per core (LeNet fell from about 10,000 to 258 images/s here). */
static int make_worker_env(sched *s)
{
    size_t n = 0;
    while (environ[n])
        n++;
    s->worker_env = calloc(n + 2, sizeof *s->worker_env);
    if (!s->worker_env)
        return -1;
    memcpy(s->worker_env, environ, n * sizeof *environ);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (s->max_jobs > 1 && !getenv("OMP_NUM_THREADS") && cores > 0) {
        long share = cores / s->max_jobs > 0 ? cores / s->max_jobs : 1;
        if (asprintf(&s->omp_threads, "OMP_NUM_THREADS=%ld", share) < 0) {
            s->omp_threads = NULL;
            return -1;
        }
        s->worker_env[n] = s->omp_threads;
    }
    return 0;
}

/* At start: says when the worker a dead server left still holds a requeued
 * job's folder (it keeps the job queued until it exits: start_work). */
static void note_orphan(sched *s, const work_ops *ops, int64_t id)
{
    char dir[PATH_MAX], err[256];
    int fd = -1;
    pid_t holder = 0;
    if (ops->dir(dir, sizeof dir, s->data_dir, id) != 0)
        return;
    if (joblock_take(dir, 0, &fd, &holder, err, sizeof err) == JOBLOCK_BUSY)
        fprintf(stderr, "kiln: %s %lld: its worker from the previous server (pid %ld) is still "
                "running and holds its folder; the job starts again once that worker has exited\n",
                ops->noun, (long long)id, (long)holder);
    if (fd >= 0)
        close(fd);
}

/* The dispatcher and a copy of its Slurm settings (cfg's strings may go). */
static int copy_slurm_options(sched *s, const sched_config *cfg)
{
    s->dispatcher = cfg->dispatcher;
    const char *from[5] = { cfg->slurm.bin_dir, cfg->slurm.partition, cfg->slurm.account,
                            cfg->slurm.time_limit, cfg->slurm.sbatch_options };
    for (int i = 0; i < 5; i++)
        if (!(s->slurm_strs[i] = strdup(from[i] ? from[i] : "")))
            return -1;
    s->slurm = (slurm_options){ .bin_dir = s->slurm_strs[0], .partition = s->slurm_strs[1],
                                .account = s->slurm_strs[2], .time_limit = s->slurm_strs[3],
                                .sbatch_options = s->slurm_strs[4], .poll_ms = cfg->slurm.poll_ms };
    return 0;
}

sched *sched_start(store *st, hub *h, const sched_config *cfg, char *err, size_t errlen)
{
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        set_err(err, errlen, "out of memory");
        return NULL;
    }
    s->st = st;
    s->h = h;
    s->wake_r = s->wake_w = -1;
    s->max_jobs = cfg->max_cpu_jobs > 0 ? cfg->max_cpu_jobs : 1;
    if (cfg->gpus > 0) {
        s->ngpus = cfg->gpus;
    } else {
        engine_device d[65];
        s->ngpus = engine_devices(d, 65) - 1;
    }
    if (s->ngpus > 64)
        s->ngpus = 64;
    s->grace_ms = cfg->kill_grace_ms > 0 ? cfg->kill_grace_ms : DEFAULT_GRACE_MS;
    pthread_mutex_init(&s->mu, NULL);
    if (!realpath(cfg->data_dir, s->data_dir)) {
        set_err(err, errlen, "data directory %s: %s", cfg->data_dir, strerror(errno));
        goto fail;
    }
    s->worker_exe = strdup(cfg->worker_exe);
    if (!s->worker_exe || make_worker_env(s) != 0) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    s->wake_r = p[0];
    s->wake_w = p[1];
    if (copy_slurm_options(s, cfg) != 0) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }

    /* Jobs a previous server submitted to Slurm are followed again (the
     * Slurm dispatcher) or left alone (the local one: they run in Slurm). */
    int64_t *in_slurm = NULL;
    size_t nslurm = 0;
    if ((s->dispatcher == DISPATCH_SLURM ? slurm_adopt(s, &in_slurm, &nslurm)
                                         : store_slurm_active(st, &in_slurm, &nslurm)) != 0) {
        set_err(err, errlen, "reading the jobs in Slurm from the database failed");
        goto fail;
    }
    for (size_t i = 0; s->dispatcher != DISPATCH_SLURM && i < nslurm; i++)
        fprintf(stderr, "kiln: job %lld was submitted to Slurm by a server with --dispatcher slurm; "
                "it is left as it is (start kiln serve --dispatcher slurm to follow it)\n",
                (long long)in_slurm[i]);

    /* Jobs and evaluations a previous server left running go back to the
     * queue (a job resumes from its checkpoint, an evaluation starts over). */
    for (store_work k = STORE_WORK_JOB; k <= STORE_WORK_EVAL; k++) {
        const work_ops *ops = ops_of(k);
        int64_t *ids = NULL;
        size_t n = 0;
        if (ops->ids_with_status(st, "running", &ids, &n) != 0) {
            set_err(err, errlen, "reading running %ss from the database failed", ops->noun);
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            bool runs_in_slurm = false;
            for (size_t k2 = 0; k == STORE_WORK_JOB && k2 < nslurm; k2++)
                runs_in_slurm |= in_slurm[k2] == ids[i];
            if (runs_in_slurm)
                continue;                    /* it runs in Slurm, not here */
            fprintf(stderr, "kiln: %s %lld was running when the server stopped; queued again\n",
                    ops->noun, (long long)ids[i]);
            ops->set_status(st, ids[i], "queued", NULL);
            if (ops->lock)
                note_orphan(s, ops, ids[i]);
        }
        free(ids);
    }
    free(in_slurm);

    /* The thread takes no process signals: they stay with the server's main thread. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    sigaddset(&block, SIGQUIT);
    sigaddset(&block, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    s->queue_dirty = true;
    int rc = pthread_create(&s->thread, NULL, sched_thread, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        set_err(err, errlen, "cannot start the scheduler thread: %s", strerror(rc));
        goto fail;
    }
    return s;
fail:
    for (worker *w = s->workers, *next; w; w = next) {
        next = w->next;
        worker_free(w);
    }
    for (int i = 0; i < 5; i++)
        free(s->slurm_strs[i]);
    if (s->wake_r >= 0)
        close(s->wake_r);
    if (s->wake_w >= 0)
        close(s->wake_w);
    free(s->worker_exe);
    free(s->worker_env);
    free(s->omp_threads);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return NULL;
}

/* What queued item q waits for in room r, as start_work would decide it
 * (without starting it), into why; r moves on as if it had started when it
 * would. Lock held. */
static void view_wait(sched *s, const store_queued *q, room *r, char *why, size_t n)
{
    const work_ops *ops = ops_of(q->kind);
    char dir[PATH_MAX], err[512];
    jobcfg_devices want;
    uint64_t gpus = 0;
    if (ops->dir(dir, sizeof dir, s->data_dir, q->id) != 0 || !file_exists(dir, ops->config)) {
        snprintf(why, n, "its %s to be written", ops->config);
        return;
    }
    if (queued_devices(s, q->kind, q->id, dir, &want, err, sizeof err) != 0) {
        snprintf(why, n, "nothing: it cannot start (%.180s)", err);
        return;
    }
    int rc = decide(s, &want, r, &gpus, why, n, err, sizeof err);
    if (rc < 0) {
        snprintf(why, n, "nothing: it cannot run here (%.180s)", err);
        return;
    }
    if (rc == 0)
        return;
    const queued_job *qj = *queued_at(s, q->kind, q->id);
    if (qj && qj->lock_logged) {
        snprintf(why, n, "a worker of an earlier server to release its folder");
        return;
    }
    snprintf(why, n, "nothing: its devices are free, it starts now");
    if (r->nstarting < ROOM_STARTING_MAX) {
        r->starting[r->nstarting].kind = q->kind;
        r->starting[r->nstarting].id = q->id;
        r->starting[r->nstarting++].gpus = gpus;
    }
    room_take(r, gpus);
}

int sched_queue_view(sched *s, sched_queue_item **out, size_t *n)
{
    store_queued *q = NULL;
    size_t nq = 0;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&s->mu);
    int ret = -1;
    if (store_queue_list(s->st, &q, &nq) != 0)
        goto out;
    size_t cap = (size_t)s->nworkers + nq;
    sched_queue_item *items = cap ? calloc(cap, sizeof *items) : NULL;
    if (cap && !items)
        goto out;
    size_t k = (size_t)s->nworkers;
    for (const worker *w = s->workers; w; w = w->next) {   /* newest first: filled from the end */
        sched_queue_item *it = &items[--k];
        it->kind = w->kind;
        it->id = w->id;
        it->running = !w->slurm_id || w->slurm_running;
        it->gpus = w->gpus;
        it->slurm_job_id = w->slurm_id;
        if (!it->running)
            snprintf(it->why, sizeof it->why, "Slurm to start it: Slurm job %lld is %s (%s)",
                     (long long)w->slurm_id, w->seen.state[0] ? w->seen.state : "PENDING",
                     w->seen.reason[0] ? w->seen.reason : "not yet looked at");
    }
    k = (size_t)s->nworkers;
    room r = room_now(s);
    for (size_t i = 0; i < nq; i++) {
        if (find_worker(s, q[i].kind, q[i].id))
            continue;                        /* started since the store said queued */
        sched_queue_item *it = &items[k++];
        it->kind = q[i].kind;
        it->id = q[i].id;
        view_wait(s, &q[i], &r, it->why, sizeof it->why);
    }
    *out = items;
    *n = k;
    ret = 0;
out:
    pthread_mutex_unlock(&s->mu);
    free(q);
    return ret;
}

void sched_wake(sched *s)
{
    if (s)
        wake_thread(s);
}

/* Cancels a queued or running job or evaluation (sched_cancel's contract). */
static int cancel_work(sched *s, store_work kind, int64_t id)
{
    const work_ops *ops = ops_of(kind);
    pthread_mutex_lock(&s->mu);
    worker *w = find_worker(s, kind, id);
    if (w) {
        if (!w->cancel_requested) {
            w->cancel_requested = true;
            dispatchers[w->slurm_id ? DISPATCH_SLURM : DISPATCH_LOCAL].stop(s, w);
        }
        pthread_mutex_unlock(&s->mu);
        wake_thread(s);                      /* recompute the poll timeout */
        return 0;
    }
    char status[16];
    double age;
    int ret = ops->peek(s->st, id, status, sizeof status, &age);
    if (ret == 0) {
        if (!strcmp(status, "queued") || !strcmp(status, "running")) {
            /* "running" without a worker here: left by another process; end it. */
            ops->end(s, id, "cancelled", NULL);
        } else {
            ret = SCHED_ALREADY_ENDED;       /* done, failed or cancelled already */
        }
    } else if (ret != STORE_NOT_FOUND) {
        ret = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return ret;
}

int sched_cancel(sched *s, int64_t job_id)
{
    return cancel_work(s, STORE_WORK_JOB, job_id);
}

int sched_cancel_eval(sched *s, int64_t eval_id)
{
    return cancel_work(s, STORE_WORK_EVAL, eval_id);
}

int sched_gpu_work(sched *s, store_work *kind_out, int64_t *id_out, int n)
{
    for (int i = 0; i < n; i++) {
        kind_out[i] = STORE_WORK_JOB;
        id_out[i] = 0;
    }
    pthread_mutex_lock(&s->mu);
    for (const worker *w = s->workers; w; w = w->next)
        for (int i = 0; i < n && i < 64; i++)
            if (w->gpus & (1ULL << i)) {
                kind_out[i] = w->kind;
                id_out[i] = w->id;
            }
    int ngpus = s->ngpus;
    pthread_mutex_unlock(&s->mu);
    return ngpus;
}

void sched_stop(sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    wake_thread(s);
    pthread_join(s->thread, NULL);
    for (worker *w = s->workers, *next; w; w = next) {   /* only those that would not die */
        next = w->next;
        worker_free(w);
    }
    queued_free_all(s);
    for (int i = 0; i < 5; i++)
        free(s->slurm_strs[i]);
    close(s->wake_r);
    close(s->wake_w);
    free(s->worker_exe);
    free(s->worker_env);
    free(s->omp_threads);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
