-- Sessions on the shared store: the record, the append-only messages and
-- the memory extractions of every session, and the lease through which
-- one node at a time runs (or changes) a session. Every write of a
-- leased session presents its fencing token (from flyto_fencing).

CREATE SEQUENCE flyto_session_ids;

CREATE TABLE flyto_sessions (
    id           bigint PRIMARY KEY,
    name         text,
    record       bytea NOT NULL,
    -- the record's next message index: a write outside a claim must
    -- find it unchanged (nobody appended since the writer read it)
    next_idx     bigint NOT NULL DEFAULT 0,
    lease_node   text,
    lease_token  bigint,
    lease_until  timestamptz
);
CREATE UNIQUE INDEX flyto_sessions_name ON flyto_sessions (name) WHERE name IS NOT NULL;

CREATE TABLE flyto_session_messages (
    session  bigint NOT NULL,
    idx      bigint NOT NULL,
    record   bytea NOT NULL,
    PRIMARY KEY (session, idx)
);

CREATE TABLE flyto_session_extractions (
    session  bigint NOT NULL,
    to_idx   bigint NOT NULL,
    record   bytea NOT NULL,
    PRIMARY KEY (session, to_idx)
);
