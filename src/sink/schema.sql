-- schema.sql — the oplog2pg schema: the checkpoint table. Run at every start; every statement is idempotent.
--
-- One row per service (the [replication] service name). ts_sec/ts_inc/term are the oplog position of the last entry
-- whose effects are committed; NULL until the first commit. The row is written in the same transaction as the data it
-- covers, so `SELECT * FROM oplog2pg.checkpoint` always names a consistent resume point. `owner` fences the row to
-- the one daemon that currently holds the service.
CREATE SCHEMA IF NOT EXISTS oplog2pg;

CREATE TABLE IF NOT EXISTS oplog2pg.checkpoint (
    service    text PRIMARY KEY,
    ts_sec     bigint,
    ts_inc     bigint,
    term       bigint,
    applied_at timestamptz,
    owner      uuid
);

COMMENT ON TABLE oplog2pg.checkpoint IS
    'oplog2pg resume points: the last MongoDB oplog entry (timestamp seconds:increment, term) committed per service';

-- Moves a service's checkpoint, in the caller's transaction, only for the daemon holding the row's owner token.
-- Any other caller gets SQLSTATE O2FEN and its whole transaction (data included) rolls back.
CREATE OR REPLACE FUNCTION oplog2pg.advance_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
                                                       p_term bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE oplog2pg.checkpoint
       SET ts_sec = p_sec, ts_inc = p_inc, term = p_term, applied_at = now()
     WHERE service = p_service AND owner = p_owner;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the checkpoint of service "%" is held by another oplog2pg', p_service
            USING ERRCODE = 'O2FEN';
    END IF;
END
$$;

-- The initial copy (source/copy.c): one row per service while a copy runs or after it finished. start_* is the
-- newest oplog entry noted before the first document was read: the daemon tails from there once the copy is done.
-- finished_at stays NULL until every collection is copied, so an unfinished row means "resume the copy".
CREATE TABLE IF NOT EXISTS oplog2pg.copy_state (
    service     text PRIMARY KEY,
    start_sec   bigint NOT NULL,
    start_inc   bigint NOT NULL,
    start_term  bigint NOT NULL, -- -1 when the entry has no term (pv0)
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

COMMENT ON TABLE oplog2pg.copy_state IS
    'oplog2pg initial copies: the oplog position noted before the copy began, and when it finished (NULL = running)';

-- One row per collection of a copy. last_id is the BSON document {_id: v} of the last document committed (its exact
-- BSON type kept, so a resumed copy continues after it in MongoDB's order); it is updated in the same transaction as
-- the rows it covers. copied counts the documents committed so far; total_estimate is the count taken at start.
CREATE TABLE IF NOT EXISTS oplog2pg.copy_progress (
    service        text NOT NULL REFERENCES oplog2pg.copy_state (service) ON DELETE CASCADE,
    db             text NOT NULL,
    coll           text NOT NULL,
    last_id        bytea,
    copied         bigint NOT NULL DEFAULT 0,
    total_estimate bigint NOT NULL DEFAULT 0,
    done           boolean NOT NULL DEFAULT false,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service, db, coll)
);

COMMENT ON TABLE oplog2pg.copy_progress IS
    'oplog2pg initial copy progress per collection: last _id committed (BSON), documents copied, done';
