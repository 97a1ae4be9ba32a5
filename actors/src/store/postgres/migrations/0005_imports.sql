-- One-machine stores copied in by `flytod migrate --from-sled`: each
-- once, keyed by where it was (host and state directory).

CREATE TABLE flyto_imports (
    source       text PRIMARY KEY,
    imported_at  timestamptz NOT NULL DEFAULT now(),
    plans        integer NOT NULL
);
