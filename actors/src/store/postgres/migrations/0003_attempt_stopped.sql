-- When a node saw the process of a revoked attempt end: a cancel answers
-- once every attempt it revoked has stopped, on whichever node it ran.

ALTER TABLE flyto_attempts ADD COLUMN stopped_at timestamptz;
