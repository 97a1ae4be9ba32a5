-- The shared store's first schema: nodes and their heartbeats, plans and
-- their steps with leases, the attempts every claim records under its
-- fencing token, and job fires keyed by (job, instant).

CREATE TABLE flyto_nodes (
    id            text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

-- Every claim takes a fresh token; a write that presents an older one for
-- the same step is refused.
CREATE SEQUENCE flyto_fencing;

CREATE TABLE flyto_plans (
    id               bigint PRIMARY KEY,
    state            text NOT NULL,
    record           bytea NOT NULL,
    idempotency_key  text UNIQUE,
    name             text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX flyto_plans_state ON flyto_plans (state, id);

CREATE TABLE flyto_steps (
    plan                 bigint NOT NULL,
    step                 text NOT NULL,
    -- waiting (for its dependencies), ready, running, succeeded, failed
    state                text NOT NULL,
    attempts             integer NOT NULL DEFAULT 0,
    max_attempts         integer NOT NULL DEFAULT 1,
    retry_on_lease_loss  boolean NOT NULL DEFAULT false,
    lease_node           text,
    lease_token          bigint,
    lease_until          timestamptz,
    output               text,
    error                text,
    PRIMARY KEY (plan, step)
);
CREATE INDEX flyto_steps_ready ON flyto_steps (plan, step) WHERE state = 'ready';
CREATE INDEX flyto_steps_leases ON flyto_steps (lease_until) WHERE state = 'running';
CREATE UNIQUE INDEX flyto_steps_token ON flyto_steps (lease_token) WHERE lease_token IS NOT NULL;

CREATE TABLE flyto_attempts (
    token        bigint PRIMARY KEY,
    plan         bigint NOT NULL,
    step         text NOT NULL,
    node         text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    -- succeeded, failed: <why>, lease lost; null while it runs
    outcome      text
);
CREATE INDEX flyto_attempts_step ON flyto_attempts (plan, step);

CREATE TABLE flyto_job_fires (
    job         bigint NOT NULL,
    instant_ms  bigint NOT NULL,
    manual      boolean NOT NULL,
    attempt     integer NOT NULL,
    node        text NOT NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, instant_ms, manual, attempt)
);
