-- Channels on the shared store: the room's records (bindings, cursors,
-- the inbound journal with its dedup keys, chats, the outbox, pairing
-- requests, admitted users) as one key space, the same keys the sled tree
-- `channels` uses; the lease through which one node at a time polls a
-- binding and sends its outbox; and the sequence that numbers outbox
-- chunks across nodes. Every write of a binding's poller, sender and chat
-- workers presents the lease's fencing token (from flyto_fencing).

CREATE TABLE flyto_channel_records (
    key    bytea PRIMARY KEY,
    value  bytea NOT NULL
);

CREATE TABLE flyto_channel_leases (
    binding  text PRIMARY KEY,
    node     text NOT NULL,
    token    bigint NOT NULL,
    until    timestamptz NOT NULL
);

CREATE SEQUENCE flyto_channel_out_seq;
