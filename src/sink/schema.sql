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
