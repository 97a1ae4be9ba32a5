-- Plans as several daemons share them: ids from one sequence; each step
-- row carries its place in the plan, its dependencies and the outcome of
-- its last attempt, so a plan's view is its submitted record joined with
-- its steps' rows (no daemon rewrites another's record).

CREATE SEQUENCE flyto_plan_ids;

ALTER TABLE flyto_plans
    ADD COLUMN reason      text,
    ADD COLUMN started_at  timestamptz,
    ADD COLUMN revision    bigint NOT NULL DEFAULT 1;

-- Step states: waiting (for its dependencies), ready, running, succeeded,
-- failed, skipped (a dependency did not succeed), cancelled.
ALTER TABLE flyto_steps
    ADD COLUMN position     integer NOT NULL DEFAULT 0,
    ADD COLUMN deps         text[] NOT NULL DEFAULT '{}',
    ADD COLUMN exit_code    integer,
    ADD COLUMN stderr       text,
    ADD COLUMN started_at   timestamptz,
    ADD COLUMN finished_at  timestamptz;

CREATE INDEX flyto_plans_name ON flyto_plans (name, id) WHERE name IS NOT NULL;
