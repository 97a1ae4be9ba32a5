-- Jobs on the shared store: the definitions every node evaluates, the
-- plan whose end each job counted last, the fires (now with their record
-- and outcome) and the notifications ends owe, each with the node that
-- delivers it.

CREATE SEQUENCE flyto_job_ids;

CREATE TABLE flyto_jobs (
    id          bigint PRIMARY KEY,
    name        text,
    record      bytea NOT NULL,
    counted     text,
    changed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE UNIQUE INDEX flyto_jobs_name ON flyto_jobs (name) WHERE name IS NOT NULL;

-- firing, submitted, skipped, missed, failed
ALTER TABLE flyto_job_fires ADD COLUMN outcome text NOT NULL DEFAULT 'firing';
ALTER TABLE flyto_job_fires ADD COLUMN record bytea;
CREATE INDEX flyto_job_fires_firing ON flyto_job_fires (job) WHERE outcome = 'firing';

CREATE TABLE flyto_job_notifies (
    job     bigint NOT NULL,
    key     text NOT NULL,
    owner   text NOT NULL,
    record  bytea NOT NULL,
    PRIMARY KEY (job, key)
);
