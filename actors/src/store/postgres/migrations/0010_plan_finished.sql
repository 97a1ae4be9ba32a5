-- plan_finished hooks: the node that sets `hooked` on a finished plan runs
-- its hooks, so they run once whichever node ended the plan.
ALTER TABLE flyto_plans ADD COLUMN hooked boolean NOT NULL DEFAULT false;
CREATE INDEX flyto_plans_unhooked ON flyto_plans (finished_at) WHERE NOT hooked AND finished_at IS NOT NULL;
