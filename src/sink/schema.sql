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

-- txn_oldest_sec/txn_oldest_inc: the first entry of the oldest MongoDB transaction that was still open (written over
-- several oplog entries, its commit not yet read) at the checkpoint; NULL when none was. A restart reads that
-- transaction's entries again at its commit, so the oplog must still hold them: `oplog2pg status` measures the oplog
-- window from there. Written by the commit's advance_checkpoint; set_checkpoint clears it.
-- ALTER TABLE takes its table's strongest lock even when the column is there: checked first, so that a start with
-- nothing to add waits for no other service's open transaction and blocks none of their commits.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.checkpoint'::regclass
                   AND attname = 'txn_oldest_sec' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.checkpoint ADD COLUMN IF NOT EXISTS txn_oldest_sec bigint;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.checkpoint'::regclass
                   AND attname = 'txn_oldest_inc' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.checkpoint ADD COLUMN IF NOT EXISTS txn_oldest_inc bigint;
    END IF;
END
$$;

-- resume_token: where a change stream resumes after the checkpoint (the raw BSON of the resume token of the last event
-- whose effects are committed, or a post-batch resume token an idle stream committed); NULL for the oplog, and after
-- set_checkpoint. ts_sec/ts_inc are then that event's clusterTime, so the position reads the same from either source.
-- source: what the last commit read, 'oplog' or 'change_stream' (NULL: a row of an earlier version, the oplog).
-- Written by the commit's advance_checkpoint.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.checkpoint'::regclass
                   AND attname = 'resume_token' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.checkpoint ADD COLUMN IF NOT EXISTS resume_token bytea;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.checkpoint'::regclass
                   AND attname = 'source' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.checkpoint ADD COLUMN IF NOT EXISTS source text;
    END IF;
END
$$;

-- Moves a service's checkpoint forward, in the caller's transaction, only for the daemon holding the row's owner
-- token. Any other caller gets SQLSTATE O2FEN, and a position before the committed one SQLSTATE O2BAK (the
-- checkpoint never moves backwards on its own); either way the whole transaction, data included, rolls back.
-- p_txn_sec/p_txn_inc: the first entry of the oldest transaction open at that position (NULL: none).
-- p_token: a change stream's resume token at that position (NULL: the oplog); p_source: 'oplog' or 'change_stream'.
CREATE OR REPLACE FUNCTION oplog2pg.advance_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
                                                       p_term bigint, p_txn_sec bigint, p_txn_inc bigint,
                                                       p_token bytea, p_source text)
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
    UPDATE oplog2pg.checkpoint SET ts_sec = p_sec, ts_inc = p_inc, term = p_term, applied_at = now(),
           txn_oldest_sec = p_txn_sec, txn_oldest_inc = p_txn_inc, resume_token = p_token, source = p_source
     WHERE service = p_service;
END
$$;

-- The seven-argument form of earlier versions (a daemon not yet upgraded, during an upgrade): the oplog, no token.
CREATE OR REPLACE FUNCTION oplog2pg.advance_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
                                                       p_term bigint, p_txn_sec bigint, p_txn_inc bigint)
RETURNS void LANGUAGE sql AS $$
    SELECT oplog2pg.advance_checkpoint(p_service, p_owner, p_sec, p_inc, p_term, p_txn_sec, p_txn_inc, NULL::bytea,
                                       'oplog')
$$;

-- The five-argument form of earlier versions: no open transaction known. Separate overloads, not defaults, so that a
-- call with five or seven arguments is never ambiguous.
CREATE OR REPLACE FUNCTION oplog2pg.advance_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
                                                       p_term bigint)
RETURNS void LANGUAGE sql AS $$
    SELECT oplog2pg.advance_checkpoint(p_service, p_owner, p_sec, p_inc, p_term, NULL::bigint, NULL::bigint,
                                       NULL::bytea, 'oplog')
$$;

-- Puts a service's checkpoint at a given position, forward or back (--tail-from, --skip-import), fenced like
-- advance_checkpoint. NULL position: no checkpoint (--reimport), and none for any of its shards either (the rows of
-- oplog2pg.shard_checkpoint below go with it). The resume token goes (a change stream then starts at the position's
-- time); source is left as the last commit wrote it.
CREATE OR REPLACE FUNCTION oplog2pg.set_checkpoint(p_service text, p_owner uuid, p_sec bigint, p_inc bigint,
                                                   p_term bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE oplog2pg.checkpoint
       SET ts_sec = p_sec, ts_inc = p_inc, term = p_term, applied_at = now(), txn_oldest_sec = NULL,
           txn_oldest_inc = NULL, resume_token = NULL
     WHERE service = p_service AND owner = p_owner;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the checkpoint of service "%" is held by another oplog2pg', p_service
            USING ERRCODE = 'O2FEN';
    END IF;
    IF p_sec IS NULL THEN
        DELETE FROM oplog2pg.shard_checkpoint WHERE service = p_service;
    END IF;
END
$$;

-- A sharded cluster (one reader per shard, their entries merged in cluster-time order): one resume point per shard,
-- written by the same commit as the rows it covers. ts_sec/ts_inc/term are the position of the last entry of that
-- shard's oplog whose effects are committed (term NULL when the entry has none); txn_oldest_sec/txn_oldest_inc the
-- first entry of the oldest transaction open on that shard at that position (NULL: none), which that shard's oplog
-- must still hold. A shard without a row has none yet (it starts at its first entry after the cluster time). The
-- service's row in oplog2pg.checkpoint holds the owner token that fences these rows, and the merged cluster time of
-- the last entry applied (term -1).
CREATE TABLE IF NOT EXISTS oplog2pg.shard_checkpoint (
    service        text NOT NULL REFERENCES oplog2pg.checkpoint (service) ON DELETE CASCADE,
    shard          text NOT NULL, -- the shard's _id in config.shards
    ts_sec         bigint NOT NULL,
    ts_inc         bigint NOT NULL,
    term           bigint,
    txn_oldest_sec bigint,
    txn_oldest_inc bigint,
    applied_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service, shard)
);

COMMENT ON TABLE oplog2pg.shard_checkpoint IS
    'oplog2pg resume points of a sharded cluster: the last oplog entry (seconds:increment, term) committed per shard '
    'and service, with the oldest transaction still open there';

-- hosts: the shard's replica set as config.shards listed it ("rs/h1:p,h2:p"), written with the row's start point and
-- again by a session's first commit that moves the row when config.shards lists other hosts. A shard removed from the cluster (removeShard) while oplog2pg was stopped is
-- no longer in config.shards: oplog2pg reads the rest of its oplog at these hosts, then deletes its row (NULL: rows of
-- earlier versions, until their shard's next commit).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.shard_checkpoint'::regclass
                   AND attname = 'hosts' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.shard_checkpoint ADD COLUMN IF NOT EXISTS hosts text;
    END IF;
END
$$;

-- The caller's row of oplog2pg.checkpoint, locked, or O2FEN when another daemon holds the service.
CREATE OR REPLACE FUNCTION oplog2pg.fence_service(p_service text, p_owner uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM oplog2pg.checkpoint WHERE service = p_service AND owner = p_owner FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the checkpoint of service "%" is held by another oplog2pg', p_service
            USING ERRCODE = 'O2FEN';
    END IF;
END
$$;

-- Moves one shard's checkpoint forward in the caller's transaction (the commit of a group: one call per shard whose
-- position moved), fenced like advance_checkpoint: O2FEN for a caller that does not hold the service, O2BAK for a
-- position before the committed one, and the whole transaction, data included, rolls back. A shard without a row
-- gets one. p_hold_sec/p_hold_inc: the first entry of the oldest transaction open on the shard there (NULL: none).
CREATE OR REPLACE FUNCTION oplog2pg.advance_shard_checkpoint(p_service text, p_owner uuid, p_shard text,
                                                             p_sec bigint, p_inc bigint, p_term bigint,
                                                             p_hold_sec bigint, p_hold_inc bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_sec bigint;
    v_inc bigint;
BEGIN
    PERFORM oplog2pg.fence_service(p_service, p_owner);
    INSERT INTO oplog2pg.shard_checkpoint AS c (service, shard, ts_sec, ts_inc, term, txn_oldest_sec,
                                                txn_oldest_inc, applied_at)
    VALUES (p_service, p_shard, p_sec, p_inc, p_term, p_hold_sec, p_hold_inc, now())
    ON CONFLICT (service, shard) DO UPDATE
       SET ts_sec = excluded.ts_sec, ts_inc = excluded.ts_inc, term = excluded.term,
           txn_oldest_sec = excluded.txn_oldest_sec, txn_oldest_inc = excluded.txn_oldest_inc, applied_at = now()
     WHERE (c.ts_sec, c.ts_inc) <= (excluded.ts_sec, excluded.ts_inc);
    IF NOT FOUND THEN
        SELECT ts_sec, ts_inc INTO v_sec, v_inc FROM oplog2pg.shard_checkpoint
         WHERE service = p_service AND shard = p_shard;
        RAISE EXCEPTION 'the checkpoint of shard "%" of service "%" would move backwards, from %:% to %:%', p_shard,
            p_service, v_sec, v_inc, p_sec, p_inc USING ERRCODE = 'O2BAK';
    END IF;
END
$$;

-- Puts one shard's checkpoint at a given position, forward or back, in the caller's transaction, fenced the same;
-- its hold is cleared. NULL position: the shard has no checkpoint (its row is deleted).
CREATE OR REPLACE FUNCTION oplog2pg.set_shard_checkpoint(p_service text, p_owner uuid, p_shard text, p_sec bigint,
                                                         p_inc bigint, p_term bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM oplog2pg.fence_service(p_service, p_owner);
    IF p_sec IS NULL THEN
        DELETE FROM oplog2pg.shard_checkpoint WHERE service = p_service AND shard = p_shard;
        RETURN;
    END IF;
    INSERT INTO oplog2pg.shard_checkpoint (service, shard, ts_sec, ts_inc, term, applied_at)
    VALUES (p_service, p_shard, p_sec, p_inc, p_term, now())
    ON CONFLICT (service, shard) DO UPDATE
       SET ts_sec = excluded.ts_sec, ts_inc = excluded.ts_inc, term = excluded.term, txn_oldest_sec = NULL,
           txn_oldest_inc = NULL, applied_at = now();
END
$$;

-- The service's own row in sharded mode, written by every commit after its shards' rows: the merged cluster time of
-- the last entry applied, with term -1 (it is no one shard's) and no hold (each shard's row has its own). It only
-- moves forward, and an older time leaves it where it is without an error: the shards' rows are the resume points,
-- this row says how far the cluster's stream has been applied. Fenced like advance_checkpoint (O2FEN).
CREATE OR REPLACE FUNCTION oplog2pg.advance_cluster_checkpoint(p_service text, p_owner uuid, p_sec bigint,
                                                               p_inc bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE oplog2pg.checkpoint
       SET ts_sec = CASE WHEN ts_sec IS NULL OR (ts_sec, ts_inc) < (p_sec, p_inc) THEN p_sec ELSE ts_sec END,
           ts_inc = CASE WHEN ts_sec IS NULL OR (ts_sec, ts_inc) < (p_sec, p_inc) THEN p_inc ELSE ts_inc END,
           term = -1, applied_at = now(), txn_oldest_sec = NULL, txn_oldest_inc = NULL
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

-- end_sec/end_inc/end_term: the oplog's newest entry as the copy finished (NULL when unknown, and for copies of
-- earlier versions). Tailing meets rows the copy already wrote until it passes there, so the sink reads it at connect
-- and sends inserts up to it as upserts (sink_keep_rows_until), after a restart as well.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.copy_state'::regclass
                   AND attname = 'end_term' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.copy_state ADD COLUMN IF NOT EXISTS end_sec bigint,
                                        ADD COLUMN IF NOT EXISTS end_inc bigint,
                                        ADD COLUMN IF NOT EXISTS end_term bigint;
    END IF;
END
$$;

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

-- uuid: the collection's UUID as MongoDB listed it when the copy was planned (NULL for copies of earlier versions,
-- or a server that lists none). A collection renamed during the copy keeps it, so the copy follows it to its new name
-- (src/copy/worker.c); one that no longer has it anywhere was dropped.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.copy_progress'::regclass
                   AND attname = 'uuid' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.copy_progress ADD COLUMN IF NOT EXISTS uuid bytea;
    END IF;
END
$$;

-- ts_time, ts_meta: a time-series collection's time and meta fields as listed when the copy was planned (NULL for
-- other collections, and for copies of earlier versions): a copy resumed after the collection was dropped still
-- makes its table, which the replay's bucket writes before the drop need (src/copy/worker.c, mark_dropped).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.copy_progress'::regclass
                   AND attname = 'ts_time' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.copy_progress ADD COLUMN IF NOT EXISTS ts_time text,
                                           ADD COLUMN IF NOT EXISTS ts_meta text;
    END IF;
END
$$;

COMMENT ON TABLE oplog2pg.copy_progress IS
    'oplog2pg initial copy progress per collection: last _id committed (BSON), documents copied, done';

-- The initial copy of a sharded cluster (src/copy/): one row per shard that config.shards listed when the copy was
-- planned. start_* is that shard's newest oplog entry noted before the copy read anything (the shard's reader tails
-- from there once the copy is done; copy_state.start_* holds the oldest of them); end_* its newest entry as the copy
-- finished (NULL until then). Written with the copy's plan, so a copy resumed after a crash keeps the same starts.
CREATE TABLE IF NOT EXISTS oplog2pg.copy_shard_state (
    service    text NOT NULL REFERENCES oplog2pg.copy_state (service) ON DELETE CASCADE,
    shard      text NOT NULL, -- the shard's _id in config.shards
    start_sec  bigint NOT NULL,
    start_inc  bigint NOT NULL,
    start_term bigint NOT NULL, -- -1 when the entry has no term
    end_sec    bigint,
    end_inc    bigint,
    end_term   bigint,
    PRIMARY KEY (service, shard)
);

COMMENT ON TABLE oplog2pg.copy_shard_state IS
    'oplog2pg initial copy of a sharded cluster: each shard''s oplog position noted before the copy, and at its end';

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

-- CREATE INDEX locks its table against writes before it looks for the index: checked first (as above).
DO $$
BEGIN
    IF to_regclass('oplog2pg.dead_letter_service_ts') IS NULL THEN
        CREATE INDEX IF NOT EXISTS dead_letter_service_ts ON oplog2pg.dead_letter (service, ts_sec, ts_inc);
    END IF;
END
$$;

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

-- The catalog: the tables and schemas oplog2pg made, per service. Nothing else is ever written to or dropped: a
-- table that exists but is not here (or belongs to another service) stops the daemon with SQLSTATE O2FOR, naming
-- it; a MongoDB drop, rename or dropDatabase acts only on tables listed here; a schema is dropped only when
-- oplog2pg made it and it holds nothing any more. Names come from map/names.c (a namespace's schema and table).
CREATE TABLE IF NOT EXISTS oplog2pg.tables (
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    service     text NOT NULL,
    db          text NOT NULL, -- the MongoDB namespace it holds
    coll        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, table_name)
);

DO $$
BEGIN
    IF to_regclass('oplog2pg.tables_service_ns') IS NULL THEN
        CREATE INDEX IF NOT EXISTS tables_service_ns ON oplog2pg.tables (service, db, coll);
    END IF;
END
$$;

-- A table of a typed map (docs/mapping.md) that existed before and that the map adopts (adopt = true): oplog2pg writes
-- to it but never drops it; a MongoDB drop or --reimport empties it instead. (0.2 catalogs lack the column.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'oplog2pg.tables'::regclass
                   AND attname = 'adopted' AND NOT attisdropped) THEN
        ALTER TABLE oplog2pg.tables ADD COLUMN IF NOT EXISTS adopted boolean NOT NULL DEFAULT false;
    END IF;
END
$$;

COMMENT ON TABLE oplog2pg.tables IS
    'oplog2pg catalog: the tables oplog2pg made (the only ones it writes or drops), with the service and namespace';

CREATE TABLE IF NOT EXISTS oplog2pg.schemas (
    schema_name text PRIMARY KEY,
    service     text NOT NULL, -- the service that made it (any service may drop it once it is empty)
    created_at  timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE oplog2pg.schemas IS 'oplog2pg catalog: the schemas oplog2pg made (dropped only once empty)';

-- Time-series collections (docs/timeseries.md). A time-series collection's table holds its measurements, one row
-- each, keyed by the bucket that holds it and its place there. oplog2pg keeps, for each such table, the collection's
-- options (its time and meta fields, from its create or the initial copy) and the current document of each of its
-- buckets: a bucket change is applied to that document (a MongoDB 8.0 append is a binary diff of the compressed
-- columns, which means nothing without the bytes it extends), and the rows that changed are written. Both are written
-- in the same transaction as the rows, and go with the table (oplog2pg.drop_table).
CREATE TABLE IF NOT EXISTS oplog2pg.timeseries (
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    time_field  text NOT NULL,
    meta_field  text,
    PRIMARY KEY (schema_name, table_name)
);

COMMENT ON TABLE oplog2pg.timeseries IS
    'oplog2pg catalog: the tables of time-series collections, with the collection''s time and meta fields';

CREATE TABLE IF NOT EXISTS oplog2pg.timeseries_bucket (
    schema_name text NOT NULL,
    table_name  text NOT NULL,
    bucket      text COLLATE "C" NOT NULL, -- the bucket's _id (24 hex digits), as the table's bucket column
    doc         bytea NOT NULL,            -- the bucket document (BSON) as of the last commit
    PRIMARY KEY (schema_name, table_name, bucket)
);

COMMENT ON TABLE oplog2pg.timeseries_bucket IS
    'oplog2pg state: the current document of each bucket of a time-series collection, to apply its next change to';

-- Drops a schema oplog2pg made, once nothing is left in it.
CREATE OR REPLACE FUNCTION oplog2pg.drop_schema_if_empty(p_schema text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM oplog2pg.schemas WHERE schema_name = p_schema)
       AND NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = p_schema)
       AND NOT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                        WHERE n.nspname = p_schema)
       AND NOT EXISTS (SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
                        WHERE n.nspname = p_schema) THEN
        EXECUTE format('DROP SCHEMA IF EXISTS %I RESTRICT', p_schema);
        DELETE FROM oplog2pg.schemas WHERE schema_name = p_schema;
    END IF;
END
$$;

-- Makes sure the table of a namespace exists and is this service's: made (with its schema, when missing) and
-- recorded when it does not exist; O2FOR when a table of that name exists but oplog2pg did not make it for this
-- service. A table of the catalog that someone dropped by hand is made again.
CREATE OR REPLACE FUNCTION oplog2pg.ensure_table(p_service text, p_db text, p_coll text, p_schema text,
                                                 p_table text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_owner text;
BEGIN
    SELECT service INTO v_owner FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table;
    IF FOUND AND v_owner <> p_service THEN
        RAISE EXCEPTION 'table %.% belongs to oplog2pg service "%", not to "%"', quote_ident(p_schema),
            quote_ident(p_table), v_owner, p_service
            USING ERRCODE = 'O2FOR', HINT = 'give the services namespaces of their own ([replication] include)';
    END IF;
    IF EXISTS (SELECT 1 FROM oplog2pg.timeseries x WHERE x.schema_name = p_schema AND x.table_name = p_table) THEN
        RAISE EXCEPTION 'table %.% holds the measurements of time-series collection %.%, and a document of a '
                        'collection was written to that namespace', quote_ident(p_schema), quote_ident(p_table),
                        p_db, p_coll
            USING ERRCODE = 'O2TSK',
                  HINT = 'a server whose time-series buckets are not marked isTimeseries: leave the namespace out of '
                         '[replication] include';
    END IF;
    IF FOUND AND to_regclass(format('%I.%I', p_schema, p_table)) IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table
                      AND (db, coll) <> (p_db, p_coll)) THEN
            RAISE EXCEPTION 'table %.% already holds another namespace', quote_ident(p_schema), quote_ident(p_table)
                USING ERRCODE = 'O2FOR', HINT = 'two long collection names met in the 40-bit hash of their table name';
        END IF;
        RETURN;
    END IF;
    IF NOT FOUND AND to_regclass(format('%I.%I', p_schema, p_table)) IS NOT NULL THEN
        RAISE EXCEPTION 'table %.% exists and was not made by oplog2pg: it is never written to or dropped',
            quote_ident(p_schema), quote_ident(p_table)
            USING ERRCODE = 'O2FOR',
                  HINT = 'rename or move that table, or leave namespace ' || p_db || '.' || p_coll ||
                         ' out of [replication] include';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = p_schema) THEN
        EXECUTE format('CREATE SCHEMA %I', p_schema);
        INSERT INTO oplog2pg.schemas (schema_name, service) VALUES (p_schema, p_service)
            ON CONFLICT (schema_name) DO NOTHING;
    END IF;
    EXECUTE format('CREATE TABLE %I.%I (_id text COLLATE "C" PRIMARY KEY, doc jsonb NOT NULL)', p_schema, p_table);
    INSERT INTO oplog2pg.tables (schema_name, table_name, service, db, coll)
    VALUES (p_schema, p_table, p_service, p_db, p_coll)
    ON CONFLICT (schema_name, table_name) DO UPDATE SET db = excluded.db, coll = excluded.coll;
END
$$;

-- Drops the table of a namespace if this service made it (a MongoDB drop); anything else is left alone.
CREATE OR REPLACE FUNCTION oplog2pg.drop_table(p_service text, p_schema text, p_table text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table
                      AND service = p_service) THEN
        IF to_regclass(format('%I.%I', p_schema, p_table)) IS NOT NULL THEN
            RAISE WARNING 'oplog2pg: left %.% alone: oplog2pg did not make it for service "%"', quote_ident(p_schema),
                quote_ident(p_table), p_service;
        END IF;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table AND adopted) THEN
        -- not oplog2pg's to drop: only what it wrote goes
        IF to_regclass(format('%I.%I', p_schema, p_table)) IS NOT NULL THEN
            EXECUTE format('DELETE FROM %I.%I', p_schema, p_table);
        END IF;
        DELETE FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table;
        RETURN;
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %I.%I', p_schema, p_table);
    DELETE FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table;
    DELETE FROM oplog2pg.timeseries WHERE schema_name = p_schema AND table_name = p_table;
    DELETE FROM oplog2pg.timeseries_bucket WHERE schema_name = p_schema AND table_name = p_table;
    PERFORM oplog2pg.drop_schema_if_empty(p_schema);
END
$$;

-- Every table this service keeps for a namespace (a mapped collection has its child tables too): dropped, or
-- emptied when adopted.
CREATE OR REPLACE FUNCTION oplog2pg.drop_namespace(p_service text, p_db text, p_coll text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT schema_name, table_name FROM oplog2pg.tables WHERE service = p_service AND db = p_db
                AND coll = p_coll ORDER BY schema_name, table_name LOOP
        PERFORM oplog2pg.drop_table(p_service, r.schema_name, r.table_name);
    END LOOP;
END
$$;

-- The table of a typed map, or one of its child tables (docs/mapping.md): made with the map's columns when it does
-- not exist; when it does, checked against the map. p_columns lists the columns in order as
-- [{"name": ..., "type": ..., "ddl": ...}], each type spelled as format_type() spells it (ddl, when given, is what
-- CREATE TABLE says instead: a collation); p_key the primary key's columns, as a jsonb array of names.
--   - A table oplog2pg made (catalog) gets the columns the map gained (ALTER TABLE ADD COLUMN; src/sink/backfill.c
--     fills them from doc where it can, or says a re-copy will); a column the map no longer has is left in place
--     (WARNING); a column whose type differs stops the daemon (O2MAP) naming the re-copy.
--   - A table oplog2pg did not make is written to only when the map adopts it (p_adopt) and its columns and key match
--     the map (O2MAP otherwise); it is recorded as adopted. Without p_adopt it stops the daemon (O2FOR).
CREATE OR REPLACE FUNCTION oplog2pg.ensure_mapped_table(p_service text, p_db text, p_coll text, p_schema text,
                                                        p_table text, p_columns jsonb, p_key_json jsonb,
                                                        p_adopt boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_owner text;
    v_in_catalog boolean;
    v_rel regclass;
    v_type text;
    v_defs text;
    c jsonb;
    a record;
    p_key text[] := ARRAY(SELECT jsonb_array_elements_text(p_key_json));
BEGIN
    SELECT service INTO v_owner FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table;
    v_in_catalog := FOUND;
    IF v_in_catalog AND v_owner <> p_service THEN
        RAISE EXCEPTION 'table %.% belongs to oplog2pg service "%", not to "%"', quote_ident(p_schema),
            quote_ident(p_table), v_owner, p_service
            USING ERRCODE = 'O2FOR', HINT = 'give the services tables of their own';
    END IF;
    v_rel := to_regclass(format('%I.%I', p_schema, p_table));
    IF v_rel IS NULL THEN
        IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = p_schema) THEN
            EXECUTE format('CREATE SCHEMA %I', p_schema);
            INSERT INTO oplog2pg.schemas (schema_name, service) VALUES (p_schema, p_service)
                ON CONFLICT (schema_name) DO NOTHING;
        END IF;
        SELECT string_agg(format('%I %s', e->>'name', coalesce(e->>'ddl', e->>'type')), ', ' ORDER BY n) INTO v_defs
          FROM jsonb_array_elements(p_columns) WITH ORDINALITY AS x(e, n);
        EXECUTE format('CREATE TABLE %I.%I (%s, PRIMARY KEY (%s))', p_schema, p_table, v_defs,
                       (SELECT string_agg(format('%I', k), ', ') FROM unnest(p_key) AS k));
        INSERT INTO oplog2pg.tables (schema_name, table_name, service, db, coll, adopted)
        VALUES (p_schema, p_table, p_service, p_db, p_coll, false)
        ON CONFLICT (schema_name, table_name) DO UPDATE SET db = excluded.db, coll = excluded.coll, adopted = false;
        RETURN;
    END IF;
    IF NOT v_in_catalog AND NOT p_adopt THEN
        RAISE EXCEPTION 'table %.% exists and was not made by oplog2pg: it is never written to or dropped',
            quote_ident(p_schema), quote_ident(p_table)
            USING ERRCODE = 'O2FOR',
                  HINT = 'set adopt = true in the map of ' || p_db || '.' || p_coll || ' to write into it, or rename it';
    END IF;
    FOR c IN SELECT e FROM jsonb_array_elements(p_columns) AS x(e) LOOP
        SELECT format_type(t.atttypid, t.atttypmod) INTO v_type FROM pg_attribute t
         WHERE t.attrelid = v_rel AND t.attname = c->>'name' AND t.attnum > 0 AND NOT t.attisdropped;
        IF NOT FOUND THEN
            IF v_in_catalog AND NOT p_adopt THEN
                EXECUTE format('ALTER TABLE %I.%I ADD COLUMN %I %s', p_schema, p_table, c->>'name',
                               coalesce(c->>'ddl', c->>'type'));
                -- At connect the sink fills it from doc where the map keeps the whole document (src/sink/backfill.c).
                RAISE WARNING 'oplog2pg: added column % (%) to %.% for the map', quote_ident(c->>'name'), c->>'type',
                    quote_ident(p_schema), quote_ident(p_table);
                CONTINUE;
            END IF;
            RAISE EXCEPTION 'table %.% has no column % (the map of %.% declares % %)', quote_ident(p_schema),
                quote_ident(p_table), quote_ident(c->>'name'), p_db, p_coll, c->>'name', c->>'type'
                USING ERRCODE = 'O2MAP';
        END IF;
        IF v_type <> c->>'type' THEN
            RAISE EXCEPTION 'column % of %.% is %, the map of %.% says %', quote_ident(c->>'name'),
                quote_ident(p_schema), quote_ident(p_table), v_type, p_db, p_coll, c->>'type'
                USING ERRCODE = 'O2MAP',
                      HINT = CASE WHEN v_in_catalog AND NOT p_adopt
                                  THEN 'a column changes type only with a new copy: oplog2pg run --reimport'
                                  ELSE 'change the map or the table' END;
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_index i
                    WHERE i.indrelid = v_rel AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
                      AND i.indnkeyatts = cardinality(p_key)
                      AND (SELECT array_agg(t.attname::text ORDER BY t.attname) FROM pg_attribute t
                            WHERE t.attrelid = v_rel AND t.attnum = ANY (i.indkey))
                          = (SELECT array_agg(k ORDER BY k) FROM unnest(p_key) AS k)) THEN
        RAISE EXCEPTION 'table %.% has no unique index on (%), the key of the map of %.%', quote_ident(p_schema),
            quote_ident(p_table), array_to_string(p_key, ', '), p_db, p_coll
            USING ERRCODE = 'O2MAP';
    END IF;
    IF p_adopt THEN
        -- A column the map does not write must take a value of its own, or every row oplog2pg writes is refused.
        FOR a IN SELECT t.attname FROM pg_attribute t
                  WHERE t.attrelid = v_rel AND t.attnum > 0 AND NOT t.attisdropped AND t.attnotnull
                    AND NOT t.atthasdef AND t.attidentity = '' AND t.attgenerated = ''
                    AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_columns) AS x(e)
                                     WHERE e->>'name' = t.attname) LOOP
            RAISE EXCEPTION 'column % of %.% is NOT NULL without a default, and the map of %.% does not write it: '
                'every row oplog2pg writes would be refused', quote_ident(a.attname), quote_ident(p_schema),
                quote_ident(p_table), p_db, p_coll
                USING ERRCODE = 'O2MAP', HINT = 'give the column a default, let it be NULL, or map it';
        END LOOP;
        -- A key compared by a nondeterministic collation makes one row of two _ids MongoDB keeps apart ("a", "A").
        FOR a IN SELECT t.attname, l.collname FROM pg_attribute t JOIN pg_collation l ON l.oid = t.attcollation
                  WHERE t.attrelid = v_rel AND t.attname = ANY (p_key)
                    AND (to_jsonb(l)->>'collisdeterministic')::boolean IS FALSE LOOP
            RAISE EXCEPTION 'key column % of %.% has the nondeterministic collation %: two _ids MongoDB keeps apart '
                'could be one row', quote_ident(a.attname), quote_ident(p_schema), quote_ident(p_table),
                quote_ident(a.collname)
                USING ERRCODE = 'O2MAP', HINT = 'give the key column a deterministic collation';
        END LOOP;
        -- The same for the unique index on the key, whose collation may differ from its columns' (an upsert's
        -- ON CONFLICT (key) finds it whatever its collation).
        FOR a IN SELECT ic.relname, l.collname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
                   CROSS JOIN LATERAL unnest(i.indcollation::oid[]) AS u(coll) JOIN pg_collation l ON l.oid = u.coll
                  WHERE i.indrelid = v_rel AND i.indisunique
                    AND (to_jsonb(l)->>'collisdeterministic')::boolean IS FALSE
                    AND (SELECT array_agg(t.attname::text ORDER BY t.attname) FROM pg_attribute t
                          WHERE t.attrelid = v_rel AND t.attnum = ANY (i.indkey))
                        = (SELECT array_agg(k ORDER BY k) FROM unnest(p_key) AS k) LOOP
            RAISE EXCEPTION 'unique index % on the key of %.% has the nondeterministic collation %: two _ids MongoDB '
                'keeps apart could be one row', quote_ident(a.relname), quote_ident(p_schema), quote_ident(p_table),
                quote_ident(a.collname)
                USING ERRCODE = 'O2MAP', HINT = 'index the key with a deterministic collation';
        END LOOP;
        -- Row triggers run on every row oplog2pg writes; one that runs before the write may change or skip the row,
        -- which oplog2pg cannot see: said at every check.
        FOR a IN SELECT g.tgname FROM pg_trigger g
                  WHERE g.tgrelid = v_rel AND NOT g.tgisinternal AND g.tgenabled <> 'D'
                    AND (g.tgtype & 1) = 1 AND (g.tgtype & (2 | 64)) <> 0 ORDER BY g.tgname LOOP
            RAISE WARNING 'oplog2pg: adopted table %.% has the trigger % before each row written: a row it '
                'changes or skips is not what MongoDB holds', quote_ident(p_schema), quote_ident(p_table),
                quote_ident(a.tgname);
        END LOOP;
    END IF;
    FOR a IN SELECT t.attname FROM pg_attribute t
              WHERE t.attrelid = v_rel AND t.attnum > 0 AND NOT t.attisdropped
                AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_columns) AS x(e) WHERE e->>'name' = t.attname)
                AND v_in_catalog AND NOT p_adopt LOOP
        RAISE WARNING 'oplog2pg: column % of %.% is no longer in the map: left in place, new rows leave it NULL',
            quote_ident(a.attname), quote_ident(p_schema), quote_ident(p_table);
    END LOOP;
    IF NOT v_in_catalog THEN
        INSERT INTO oplog2pg.tables (schema_name, table_name, service, db, coll, adopted)
        VALUES (p_schema, p_table, p_service, p_db, p_coll, true);
    END IF;
END
$$;

-- A MongoDB dropDatabase: the tables this service made for that database, then its schema if oplog2pg made it and
-- it is empty. Other tables in the schema, and the schema itself when it is not oplog2pg's, stay.
CREATE OR REPLACE FUNCTION oplog2pg.drop_database(p_service text, p_db text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT schema_name, table_name FROM oplog2pg.tables WHERE service = p_service AND db = p_db
              ORDER BY schema_name, table_name LOOP
        PERFORM oplog2pg.drop_table(p_service, r.schema_name, r.table_name);
    END LOOP;
END
$$;

-- A MongoDB renameCollection: the source's table (if this service made it) becomes the target's, moved to the
-- target's schema and renamed; a target table of this service's is dropped first (MongoDB dropped it, or it is a
-- leftover); a target table oplog2pg did not make stops the daemon (O2FOR). A source oplog2pg never saw leaves an
-- empty target table (the collection had no replicated rows).
CREATE OR REPLACE FUNCTION oplog2pg.rename_table(p_service text, p_schema text, p_table text, p_to_db text,
                                                 p_to_coll text, p_to_schema text, p_to_table text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF (p_schema, p_table) = (p_to_schema, p_to_table) THEN
        UPDATE oplog2pg.tables SET db = p_to_db, coll = p_to_coll
         WHERE schema_name = p_schema AND table_name = p_table AND service = p_service;
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM oplog2pg.tables WHERE schema_name = p_to_schema AND table_name = p_to_table
                  AND service = p_service) THEN
        PERFORM oplog2pg.drop_table(p_service, p_to_schema, p_to_table);
    ELSIF to_regclass(format('%I.%I', p_to_schema, p_to_table)) IS NOT NULL
          OR EXISTS (SELECT 1 FROM oplog2pg.tables WHERE schema_name = p_to_schema AND table_name = p_to_table) THEN
        RAISE EXCEPTION 'renaming to %.%: that table exists and was not made by oplog2pg for service "%"',
            quote_ident(p_to_schema), quote_ident(p_to_table), p_service
            USING ERRCODE = 'O2FOR', HINT = 'rename or move that table, or leave the target namespace out of '
                                            '[replication] include';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table
                      AND service = p_service)
       OR to_regclass(format('%I.%I', p_schema, p_table)) IS NULL THEN
        DELETE FROM oplog2pg.tables WHERE schema_name = p_schema AND table_name = p_table AND service = p_service;
        PERFORM oplog2pg.ensure_table(p_service, p_to_db, p_to_coll, p_to_schema, p_to_table);
        RETURN;
    END IF;
    IF p_schema <> p_to_schema THEN
        IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = p_to_schema) THEN
            EXECUTE format('CREATE SCHEMA %I', p_to_schema);
            INSERT INTO oplog2pg.schemas (schema_name, service) VALUES (p_to_schema, p_service)
                ON CONFLICT (schema_name) DO NOTHING;
        END IF;
        EXECUTE format('ALTER TABLE %I.%I SET SCHEMA %I', p_schema, p_table, p_to_schema);
    END IF;
    IF p_table <> p_to_table THEN
        EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', p_to_schema, p_table, p_to_table);
    END IF;
    UPDATE oplog2pg.tables SET schema_name = p_to_schema, table_name = p_to_table, db = p_to_db, coll = p_to_coll
     WHERE schema_name = p_schema AND table_name = p_table;
    PERFORM oplog2pg.drop_schema_if_empty(p_schema);
END
$$;

-- The table of a time-series collection (docs/timeseries.md): made through ensure_mapped_table (which checks that
-- this service owns it) with the columns of measurements, and its options recorded. p_time is the collection's
-- timeField when the caller knows it (its create, the initial copy), NULL when it relies on what is recorded.
-- p_columns are a typed map's columns (bucket, pos and time first; sink/tseries.c), NULL for the default ones
-- (bucket, pos, time, meta, doc); p_adopt whether that map adopts the table. A table whose shape changed (a map
-- added, removed or changed so that a NOT NULL column would be missing or left unwritten) stops with O2MAP: a new
-- copy makes it again. Returns the recorded options; O2TSO when none are known.
CREATE OR REPLACE FUNCTION oplog2pg.ensure_timeseries_table(p_service text, p_db text, p_coll text, p_schema text,
                                                            p_table text, p_time text, p_meta text,
                                                            p_columns jsonb, p_adopt boolean)
RETURNS TABLE (time_field text, meta_field text) LANGUAGE plpgsql AS $$
DECLARE
    v_cols jsonb := coalesce(p_columns,
        '[{"name": "bucket", "type": "text", "ddl": "text COLLATE \"C\" NOT NULL"},
          {"name": "pos", "type": "integer", "ddl": "integer NOT NULL"},
          {"name": "time", "type": "timestamp with time zone", "ddl": "timestamptz NOT NULL"},
          {"name": "meta", "type": "jsonb"},
          {"name": "doc", "type": "jsonb", "ddl": "jsonb NOT NULL"}]'::jsonb);
    v_rel regclass := to_regclass(format('%I.%I', p_schema, p_table));
    v_col text;
BEGIN
    IF EXISTS (SELECT 1 FROM oplog2pg.tables t WHERE t.schema_name = p_schema AND t.table_name = p_table)
       AND NOT EXISTS (SELECT 1 FROM oplog2pg.timeseries x WHERE x.schema_name = p_schema AND x.table_name = p_table)
       AND v_rel IS NOT NULL THEN
        RAISE EXCEPTION 'table %.% holds the documents of collection %.%, and a time-series bucket was written to '
                        'that namespace', quote_ident(p_schema), quote_ident(p_table), p_db, p_coll
            USING ERRCODE = 'O2TSK', HINT = 'copy the collection again (--reimport)';
    END IF;
    IF v_rel IS NOT NULL AND EXISTS (SELECT 1 FROM oplog2pg.timeseries x WHERE x.schema_name = p_schema
                                        AND x.table_name = p_table) THEN
        SELECT n INTO v_col FROM (
            SELECT e->>'name' AS n FROM jsonb_array_elements(v_cols) AS x(e)
             WHERE coalesce(e->>'ddl', '') LIKE '%NOT NULL'
               AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = v_rel AND a.attname = e->>'name'
                                  AND a.attnum > 0 AND NOT a.attisdropped)
            UNION ALL
            SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = v_rel AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull AND NOT a.atthasdef
               AND a.attidentity = '' AND a.attgenerated = ''
               AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v_cols) AS x(e) WHERE e->>'name' = a.attname)
        ) AS m LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'the table %.% of time-series collection %.% was made for other columns than its map '
                            'gives it now (column %)', quote_ident(p_schema), quote_ident(p_table), p_db, p_coll,
                            quote_ident(v_col)
                USING ERRCODE = 'O2MAP', HINT = 'copy the collection again: oplog2pg run --reimport';
        END IF;
    END IF;
    IF p_time IS NOT NULL THEN
        INSERT INTO oplog2pg.timeseries AS x (schema_name, table_name, time_field, meta_field)
        VALUES (p_schema, p_table, p_time, p_meta)
        ON CONFLICT (schema_name, table_name) DO UPDATE SET time_field = excluded.time_field,
                                                            meta_field = excluded.meta_field;
    ELSIF NOT EXISTS (SELECT 1 FROM oplog2pg.timeseries x WHERE x.schema_name = p_schema
                         AND x.table_name = p_table) THEN
        RAISE EXCEPTION 'the time field of time-series collection %.% is not known: its create was not read, and no '
                        'initial copy recorded it', p_db, p_coll
            USING ERRCODE = 'O2TSO',
                  HINT = 'copy the collection (--reimport), or start from before its create';
    END IF;
    PERFORM oplog2pg.ensure_mapped_table(p_service, p_db, p_coll, p_schema, p_table, v_cols,
        '["bucket", "pos"]'::jsonb, coalesce(p_adopt, false));
    RETURN QUERY SELECT x.time_field, x.meta_field FROM oplog2pg.timeseries x
                  WHERE x.schema_name = p_schema AND x.table_name = p_table;
END
$$;

