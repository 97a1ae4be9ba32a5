-- A step's plan depth (0: a user's plan; 1 and deeper: plans submitted by
-- steps and agents): a node keeps extra slots for child plans' steps, so
-- a step waiting for its child plan never takes the slot the child needs.

ALTER TABLE flyto_steps ADD COLUMN depth integer NOT NULL DEFAULT 0;
CREATE INDEX flyto_steps_ready_depth ON flyto_steps ((depth > 0), plan, step) WHERE state = 'ready';

-- Where the last attempt's full output is, on the node that ran it.
ALTER TABLE flyto_steps ADD COLUMN log_path text;
