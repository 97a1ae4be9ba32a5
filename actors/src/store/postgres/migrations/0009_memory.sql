-- Memory on the shared store: each scope's files (entries, the MEMORY.md
-- index, tombstones under .trash/) as rows, replaced together under a
-- compare-and-set of the scope's generation, so a node's change is made
-- against the memory it read or not at all; and the dream lease of each
-- project, so one node at a time consolidates it.

CREATE TABLE flyto_memory_scopes (
    scope       text PRIMARY KEY,
    generation  bigint NOT NULL
);

CREATE TABLE flyto_memory_files (
    scope    text NOT NULL,
    path     text NOT NULL,
    content  bytea NOT NULL,
    PRIMARY KEY (scope, path)
);

CREATE TABLE flyto_dream_leases (
    project  text PRIMARY KEY,
    node     text NOT NULL,
    run      text NOT NULL,
    until    timestamptz NOT NULL
);
