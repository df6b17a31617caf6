/* db/migrations.c: kiln's schema, as forward migrations (see migrations.h).
 *
 * Times are RFC 3339 UTC text ("2026-11-22T08:00:00Z"), written by store.c.
 * Metric values may be NULL: SQLite stores a NaN as NULL, and a diverging job's
 * NaN loss is still a data point (store.c reads it back as NaN).
 */
#include "db/migrations.h"

const store_migration store_migrations[] = {
    {
        .version = 1,
        .what = "datasets, jobs and metrics",
        .sql =
            "CREATE TABLE datasets ("
            "  id          INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  name        TEXT NOT NULL,"
            "  status      TEXT NOT NULL DEFAULT 'importing'"
            "              CHECK (status IN ('importing', 'ready', 'failed')),"
            "  progress    REAL NOT NULL DEFAULT 0,"
            "  info_json   TEXT,"
            "  error       TEXT,"
            "  created_at  TEXT NOT NULL"
            ");"
            "CREATE INDEX datasets_by_name ON datasets (name);"
            /* A dataset that jobs use cannot be deleted (RESTRICT): delete the jobs first. */
            "CREATE TABLE jobs ("
            "  id              INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  dataset_id      INTEGER NOT NULL REFERENCES datasets (id) ON DELETE RESTRICT,"
            "  status          TEXT NOT NULL DEFAULT 'queued'"
            "                  CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),"
            "  network         TEXT NOT NULL,"
            "  config_json     TEXT NOT NULL,"
            "  error           TEXT,"
            "  epoch           INTEGER NOT NULL DEFAULT 0,"
            "  epochs          INTEGER NOT NULL,"
            "  step            INTEGER NOT NULL DEFAULT 0,"
            "  steps           INTEGER NOT NULL DEFAULT 0,"
            "  images_per_sec  REAL NOT NULL DEFAULT 0,"
            "  eta_seconds     REAL NOT NULL DEFAULT -1,"
            "  created_at      TEXT NOT NULL,"
            "  started_at      TEXT,"
            "  finished_at     TEXT"
            ");"
            "CREATE INDEX jobs_by_status ON jobs (status, id);"
            "CREATE INDEX jobs_by_dataset ON jobs (dataset_id);"
            "CREATE TABLE metrics ("
            "  id         INTEGER PRIMARY KEY,"
            "  job_id     INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,"
            "  step       INTEGER NOT NULL,"
            "  epoch      REAL NOT NULL,"
            "  tag        TEXT NOT NULL,"
            "  value      REAL,"
            "  wall_time  REAL NOT NULL"
            ");"
            "CREATE INDEX metrics_by_job_step ON metrics (job_id, step);",
    },
    {
        .version = 2,
        .what = "an importing dataset's ETA",
        .sql = "ALTER TABLE datasets ADD COLUMN eta_seconds REAL NOT NULL DEFAULT -1;",
    },
    {
        .version = 3,
        .what = "a job's early stop (epoch, best epoch, reason)",
        .sql = "ALTER TABLE jobs ADD COLUMN stopped_epoch INTEGER;"
               "ALTER TABLE jobs ADD COLUMN stopped_best_epoch INTEGER;"
               "ALTER TABLE jobs ADD COLUMN stopped_message TEXT;",
    },
    {
        /* An evaluation of a job's model on a dataset split (jobs/evaluation.h).
         * It goes with its job (CASCADE); a dataset that evaluations use cannot
         * be deleted (RESTRICT), as with jobs. result_json holds the finished
         * result (result.json's text). */
        .version = 4,
        .what = "evaluations",
        .sql =
            "CREATE TABLE evaluations ("
            "  id           INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  job_id       INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,"
            "  dataset_id   INTEGER NOT NULL REFERENCES datasets (id) ON DELETE RESTRICT,"
            "  split        TEXT NOT NULL CHECK (split IN ('train', 'val', 'test')),"
            "  epoch        INTEGER NOT NULL DEFAULT 0,"
            "  selection    TEXT NOT NULL,"
            "  status       TEXT NOT NULL DEFAULT 'queued'"
            "               CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),"
            "  progress     REAL NOT NULL DEFAULT 0,"
            "  result_json  TEXT,"
            "  error        TEXT,"
            "  created_at   TEXT NOT NULL,"
            "  started_at   TEXT,"
            "  finished_at  TEXT"
            ");"
            "CREATE INDEX evaluations_by_job ON evaluations (job_id, id);"
            "CREATE INDEX evaluations_by_status ON evaluations (status, id);"
            "CREATE INDEX evaluations_by_dataset ON evaluations (dataset_id);",
    },
    {
        /* The SSE replay reads a job's metrics a page at a time in insertion
         * order (store_metric_page): without this index each page would scan
         * and sort all of the job's metrics. */
        .version = 5,
        .what = "metrics by job and row id",
        .sql = "CREATE INDEX IF NOT EXISTS metrics_by_job_id ON metrics (job_id, id);",
    },
    {
        /* Users and their tokens (db/users.h), and who owns what (issue 15).
         * A token row holds only a hash of its secret; kind "session" is a
         * dashboard sign-in (the kiln_session cookie), "api" a bearer token.
         * owner_id NULL: made before users existed, in open mode, or by a
         * user since removed (SET NULL); only admins see those. A shared
         * dataset is readable by every user. */
        .version = 6,
        .what = "users, tokens and owners",
        .sql =
            "CREATE TABLE users ("
            "  id             INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  name           TEXT NOT NULL UNIQUE COLLATE NOCASE,"
            "  password_hash  TEXT NOT NULL,"
            "  admin          INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),"
            "  created_at     TEXT NOT NULL"
            ");"
            "CREATE TABLE tokens ("
            "  id            INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  user_id       INTEGER NOT NULL REFERENCES users (id) ON DELETE CASCADE,"
            "  kind          TEXT NOT NULL CHECK (kind IN ('api', 'session')),"
            "  name          TEXT NOT NULL DEFAULT '',"
            "  hash          TEXT NOT NULL UNIQUE,"
            "  created_at    TEXT NOT NULL,"
            "  expires_at    TEXT,"
            "  last_used_at  TEXT,"
            "  revoked_at    TEXT"
            ");"
            "CREATE INDEX tokens_by_user ON tokens (user_id, id);"
            "ALTER TABLE datasets ADD COLUMN owner_id INTEGER REFERENCES users (id) ON DELETE SET NULL;"
            "ALTER TABLE datasets ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE jobs ADD COLUMN owner_id INTEGER REFERENCES users (id) ON DELETE SET NULL;"
            "ALTER TABLE evaluations ADD COLUMN owner_id INTEGER REFERENCES users (id) ON DELETE SET NULL;"
            "CREATE INDEX datasets_by_owner ON datasets (owner_id);"
            "CREATE INDEX jobs_by_owner ON jobs (owner_id);"
            "CREATE INDEX evaluations_by_owner ON evaluations (owner_id);",
    },
    {
        /* The jobs table (issue 16): a job's name (initialised from its
         * config's "name" at insert, then the user's: PATCH renames it here,
         * job.json keeps what the job was created with), the user's tags (a
         * JSON array of strings) and notes, its precision (from the config),
         * and its progress as a generated column so that it can be indexed.
         * Each sort key has an index ending in id (the keyset), which SQLite
         * gives every index: (key, rowid); status and dataset_id have theirs. */
        .version = 7,
        .what = "job names, tags, notes, precision; list indexes",
        .sql =
            "ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';"
            "ALTER TABLE jobs ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';"
            "ALTER TABLE jobs ADD COLUMN notes TEXT NOT NULL DEFAULT '';"
            "ALTER TABLE jobs ADD COLUMN precision TEXT NOT NULL DEFAULT 'fp32';"
            "ALTER TABLE jobs ADD COLUMN progress REAL GENERATED ALWAYS AS ("
            "  CASE WHEN status = 'done' THEN 1.0 WHEN steps <= 0 THEN 0.0"
            "       ELSE MIN(MAX(CAST(step AS REAL) / steps, 0.0), 1.0) END) VIRTUAL;"
            "UPDATE jobs SET name = COALESCE(json_extract(config_json, '$.name'), ''),"
            "  precision = COALESCE(json_extract(config_json, '$.precision'), 'fp32')"
            "  WHERE json_valid(config_json);"
            "CREATE INDEX jobs_by_name ON jobs (name COLLATE NOCASE);"
            "CREATE INDEX jobs_by_network ON jobs (network);"
            "CREATE INDEX jobs_by_epochs ON jobs (epochs);"
            "CREATE INDEX jobs_by_progress ON jobs (progress);"
            /* the tag filter and the search scan this instead of the rows (db/job_list.c) */
            "CREATE INDEX jobs_text ON jobs (name, network, tags, notes);",
    },
    {
        /* Hyper-parameter sweeps (issue 16; jobs/sweep.h, db/sweep_store.h).
         * spec_json is the normalized sweep request; a trial row per trial
         * made (trial = its number in the sweep), linked to its job; a job
         * knows its sweep (jobs.sweep_id). Deleting a sweep deletes its trial
         * rows; the jobs stay, as ordinary jobs (SET NULL); a deleted job
         * leaves its trial row with no job. */
        .version = 8,
        .what = "sweeps and their trials",
        .sql =
            "CREATE TABLE sweeps ("
            "  id           INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  name         TEXT NOT NULL DEFAULT '',"
            "  method       TEXT NOT NULL CHECK (method IN ('grid', 'random', 'asha')),"
            "  status       TEXT NOT NULL DEFAULT 'running'"
            "               CHECK (status IN ('running', 'done', 'cancelled', 'failed')),"
            "  spec_json    TEXT NOT NULL,"
            "  best_trial   INTEGER,"
            "  best_metric  REAL,"
            "  error        TEXT,"
            "  created_at   TEXT NOT NULL,"
            "  finished_at  TEXT,"
            "  owner_id     INTEGER REFERENCES users (id) ON DELETE SET NULL"
            ");"
            "CREATE INDEX sweeps_by_status ON sweeps (status, id);"
            "CREATE INDEX sweeps_by_owner ON sweeps (owner_id);"
            "CREATE TABLE sweep_trials ("
            "  sweep_id      INTEGER NOT NULL REFERENCES sweeps (id) ON DELETE CASCADE,"
            "  trial         INTEGER NOT NULL,"
            "  job_id        INTEGER REFERENCES jobs (id) ON DELETE SET NULL,"
            "  params_json   TEXT NOT NULL,"
            "  rung          INTEGER NOT NULL DEFAULT 0,"
            "  state         TEXT NOT NULL"
            "                CHECK (state IN ('running', 'waiting', 'done', 'stopped', 'failed', 'cancelled')),"
            "  metrics_json  TEXT NOT NULL DEFAULT '[]',"
            "  message       TEXT,"
            "  PRIMARY KEY (sweep_id, trial)"
            ");"
            "CREATE INDEX sweep_trials_by_job ON sweep_trials (job_id);"
            "ALTER TABLE jobs ADD COLUMN sweep_id INTEGER REFERENCES sweeps (id) ON DELETE SET NULL;"
            "CREATE INDEX jobs_by_sweep ON jobs (sweep_id);",
    },
    {
        /* The visible queue (issue 17): a job's priority (higher starts
         * first, then the oldest; its range is jobcfg's rule, JOBCFG_PRIORITY_*)
         * and the devices the scheduler gave a job's or an evaluation's worker,
         * a JSON array of strings (["cpu"], ["cuda:0", "cuda:1"]); NULL until
         * it starts, cleared when it goes back to the queue. */
        .version = 9,
        .what = "job priority; the devices a job or evaluation runs on",
        .sql =
            "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE jobs ADD COLUMN devices TEXT;"
            "ALTER TABLE evaluations ADD COLUMN devices TEXT;"
            "CREATE INDEX jobs_by_queue ON jobs (status, priority DESC, created_at, id);",
    },
    {
        /* A job's event stream, stored (issue 17; db/event_store.h): every
         * event that carries an SSE id (metric, status, log) has its row, seq
         * 1, 2, ... per job, taken from jobs.event_seq, which never goes back
         * (a resumed job's trimmed events leave their ids unused). step: a
         * metric's, for trimming on resume; NULL otherwise. The backfill
         * gives an older job the ids its replay had: metrics 1..n in row
         * order, then a finished job's status as n + 1. */
        .version = 10,
        .what = "stored job events",
        .sql =
            "CREATE TABLE job_events ("
            "  job_id  INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,"
            "  seq     INTEGER NOT NULL,"
            "  type    TEXT NOT NULL,"
            "  step    INTEGER,"
            "  data    TEXT NOT NULL,"
            "  PRIMARY KEY (job_id, seq)"
            ") WITHOUT ROWID;"
            "ALTER TABLE jobs ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;"
            "INSERT INTO job_events (job_id, seq, type, step, data)"
            "  SELECT job_id, ROW_NUMBER() OVER (PARTITION BY job_id ORDER BY id), 'metric', step,"
            "         json_object('step', step, 'epoch', epoch, 'tag', tag, 'value', value,"
            "                     'wall_time', wall_time)"
            "  FROM metrics;"
            "INSERT INTO job_events (job_id, seq, type, step, data)"
            "  SELECT id, (SELECT COUNT(*) FROM metrics WHERE metrics.job_id = jobs.id) + 1, 'status', NULL,"
            "         json_object('status', status, 'error', error)"
            "  FROM jobs WHERE status IN ('done', 'failed', 'cancelled');"
            "UPDATE jobs SET event_seq = COALESCE((SELECT MAX(seq) FROM job_events"
            "                                      WHERE job_events.job_id = jobs.id), 0);",
    },
    {
        /* The Slurm dispatcher (issue 18; db/slurm_store.h): a job's Slurm
         * job id, the state, reason and nodes squeue last gave, how far its
         * reports file was read, and whether it is active (submitted, not yet
         * ended in kiln: a restarted server picks it up again). */
        .version = 11,
        .what = "a job's Slurm job id, state, reason, nodes and reports offset",
        .sql =
            "ALTER TABLE jobs ADD COLUMN slurm_job_id INTEGER;"
            "ALTER TABLE jobs ADD COLUMN slurm_state TEXT;"
            "ALTER TABLE jobs ADD COLUMN slurm_reason TEXT;"
            "ALTER TABLE jobs ADD COLUMN slurm_nodes TEXT;"
            "ALTER TABLE jobs ADD COLUMN slurm_offset INTEGER NOT NULL DEFAULT 0;"
            "ALTER TABLE jobs ADD COLUMN slurm_active INTEGER NOT NULL DEFAULT 0;",
    },
};

const size_t store_migration_count = sizeof store_migrations / sizeof store_migrations[0];
