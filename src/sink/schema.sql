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

-- Moves a service's checkpoint forward, in the caller's transaction, only for the daemon holding the row's owner
-- token. Any other caller gets SQLSTATE O2FEN, and a position before the committed one SQLSTATE O2BAK (the
-- checkpoint never moves backwards on its own); either way the whole transaction, data included, rolls back.
CREATE OR REPLACE FUNCTION oplog2pg.advance_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
                                                       p_term bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_sec bigint;
    v_inc bigint;
BEGIN
    SELECT ts_sec, ts_inc INTO v_sec, v_inc FROM oplog2pg.checkpoint
     WHERE service = p_service AND owner = p_owner FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the checkpoint of service "%" is held by another oplog2pg', p_service
            USING ERRCODE = 'O2FEN';
    END IF;
    IF v_sec IS NOT NULL AND (v_sec, v_inc) > (p_sec, p_inc) THEN
        RAISE EXCEPTION 'the checkpoint of service "%" would move backwards, from %:% to %:%', p_service, v_sec,
            v_inc, p_sec, p_inc USING ERRCODE = 'O2BAK';
    END IF;
    UPDATE oplog2pg.checkpoint SET ts_sec = p_sec, ts_inc = p_inc, term = p_term, applied_at = now()
     WHERE service = p_service;
END
$$;

-- Puts a service's checkpoint at a given position, forward or back (--tail-from, --skip-import), fenced like
-- advance_checkpoint. NULL position: no checkpoint (--reimport).
CREATE OR REPLACE FUNCTION oplog2pg.set_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
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

-- Dead letters ([replication] on_error = dead-letter): an op (a write or DDL) PostgreSQL refused, set aside in
-- the same transaction that moves the checkpoint past it, so it is neither lost nor applied twice. op_bson is the
-- op's payload exactly as the oplog holds it (the document, the update, the delete's key, the command); doc_id is
-- the key text of its _id (what the table's _id column would hold) and op_json the op as relaxed Extended JSON,
-- when they could be made. db and coll are the namespace, with bytes that are not UTF-8 written as \xHH. Inspect
-- with SQL; delete rows once dealt with.
CREATE TABLE IF NOT EXISTS oplog2pg.dead_letter (
    id          bigserial PRIMARY KEY,
    service     text NOT NULL,
    ts_sec      bigint NOT NULL,
    ts_inc      bigint NOT NULL,
    term        bigint,
    op_index    integer NOT NULL, -- position inside an applyOps (transaction) entry; 0 for a plain entry
    db          text NOT NULL,
    coll        text NOT NULL,
    op          char(1) NOT NULL, -- 'i' insert, 'u' update, 'd' delete, 'c' DDL (create, drop, rename, ...)
    doc_id      text,
    op_bson     bytea,
    op_json     text,  -- relaxed Extended JSON (text: jsonb cannot hold every string a document can)
    error       text NOT NULL,
    sqlstate    text,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Before 0.2 doc_id was jsonb; the key text is what a row's _id holds now.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.dead_letter'::regclass
                AND attname = 'doc_id' AND atttypid = 'jsonb'::regtype AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.dead_letter ALTER COLUMN doc_id TYPE text USING doc_id::text;
    END IF;
END
$$;

CREATE INDEX IF NOT EXISTS dead_letter_service_ts ON oplog2pg.dead_letter (service, ts_sec, ts_inc);

COMMENT ON TABLE oplog2pg.dead_letter IS
    'oplog2pg dead letters: inserts, updates and deletes PostgreSQL refused, with the op and the error, per service';

-- Records one dead letter (called by the daemon inside the group's transaction). Every text argument arrives as
-- valid UTF-8 without U+0000 (the daemon makes it so), so recording cannot fail on the text it keeps.
CREATE OR REPLACE FUNCTION oplog2pg.record_dead_letter(p_service text, p_sec bigint, p_inc bigint, p_term bigint,
                                                       p_index integer, p_db text, p_coll text, p_op text,
                                                       p_id text, p_bson bytea, p_json text, p_error text,
                                                       p_sqlstate text)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO oplog2pg.dead_letter (service, ts_sec, ts_inc, term, op_index, db, coll, op, doc_id, op_bson, op_json,
                                      error, sqlstate)
    VALUES (p_service, p_sec, p_inc, p_term, p_index, p_db, p_coll, p_op, p_id, p_bson, p_json, p_error, p_sqlstate);
$$;
