-- update_functions.sql — apply MongoDB oplog update entries to jsonb documents inside PostgreSQL.
--
-- oplog2pg keeps each document as relaxed Extended JSON (its own writer, src/map/ejson.c) in a jsonb column and
-- applies updates from the oplog entry's `o` field alone, never by refetching from MongoDB:
--
--     UPDATE "db"."coll" SET doc = oplog2pg.apply_update(doc, $2::jsonb) WHERE _id = $1
--
-- where $1 is the key text of the document's _id (the table's `_id text` column, see map/ejson.h).
--
-- The daemon runs this whole script at every start, so it must stay idempotent (CREATE OR REPLACE, DROP IF EXISTS).
--
-- NOTES
-- * Classification of `o` (mongodb/mongo src/mongo/db/update/update_oplog_entry_serialization.cpp): `$v` 2 is a delta
--   ({"$v": 2, "diff": D}), `$v` 1 is modifier style ($set/$unset), no `$v` plus a `$`-prefixed key is modifier
--   style (pre-3.6 entries; top-level `$` field names were forbidden in stored documents then), anything else is a
--   full replacement document.
-- * Delta application follows the server's DiffApplier (mongodb/mongo src/mongo/db/update/document_diff_applier.cpp):
--   deletes dropped, updates replace in place or are appended, inserts always go to the end, sub-diffs recurse only
--   when the pre-image value has the matching type (object <-> object diff, array <-> array diff) and write null on a
--   mismatch, a sub-diff on an absent field does nothing. Array diffs resize with `l` and pad with null.
-- * jsonb keeps neither key order nor duplicate keys. Key order is only observable in arrays, which jsonb keeps, so
--   `(doc - deletes) || updates || inserts` gives exactly the server's result. Duplicate keys and section order,
--   however, are gone by the time a diff is jsonb, so apply_update(jsonb, jsonb) can detect only the malformations
--   that survive the conversion (empty diffs, unknown sections, a field named in two sections, bad array diffs).
--   The daemon checks every diff's structure on the BSON, where both are still there, before it ever reaches this
--   script (source/v2diff.h). The tests' strict twin, apply_update_checked(jsonb, json), lives with the tests
--   (tests/integration/update_checked.sql): only what the daemon calls is installed here.
-- * In relaxed EJSON a BSON scalar such as an ObjectId, a Date or a Decimal128 is a JSON object with `$` keys
--   ({"$oid": ...}). MongoDB does not see an object there, so every "is it a document" test goes through
--   oplog2pg.is_document(), which excludes those wrappers (oplog2pg.is_ejson_scalar()).
-- * Malformed entries raise SQLSTATE 22023 (invalid_parameter_value) with the MongoDB error code in the message
--   ("MongoDB error 4770503: ..."), so the daemon can tell a bad entry from a database failure.
-- * $v:1 `$set` paths that go through a scalar (or a non-numeric component into an array) were refused by the
--   server when the update ran, so they cannot appear in a real oplog; they raise 22023 rather than guess.
-- * Typed (column-mapped) tables (docs/mapping.md) do not keep one jsonb document: the daemon splits each update by
--   path into pieces, one per mapped column plus the jsonb column of unmapped fields, and applies each piece there.
--   oplog2pg.apply_edits(doc, edits) applies a piece to a jsonb column as a list of primitive edits whose paths are
--   JSON arrays of components (a component may contain dots): ["set", path, v] ($set semantics), ["unset", path]
--   ($unset semantics) and ["resize", path, n] (a $v:2 array diff's `l`). Unlike set_path, a path through a scalar
--   leaves the document unchanged instead of raising (see apply_edits). oplog2pg.resize_array(a, n) and
--   oplog2pg.set_element(a, i, v) do the same for PostgreSQL array columns (1-based, lower bound always 1).

CREATE SCHEMA IF NOT EXISTS oplog2pg;

-- The error every malformed entry raises. `code` is the MongoDB error code the server would have raised (NULL when
-- the server has none for the case, e.g. a $set path through a scalar, which it refuses before logging).
-- VOLATILE so that the planner never folds a call with constant arguments (and raises) ahead of time.
CREATE OR REPLACE FUNCTION oplog2pg.update_error(code integer, msg text) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $fn$
BEGIN
    IF code IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'oplog2pg: invalid update entry: ' || msg;
    END IF;
    RAISE EXCEPTION USING ERRCODE = '22023',
        MESSAGE = format('oplog2pg: invalid update entry (MongoDB error %s): %s', code, msg);
END
$fn$;

-- True when v is the relaxed-EJSON rendering of a BSON value that is not a document: every key is one of the
-- wrapper keywords libbson emits ($oid, $date, $numberDecimal, $binary, ...). A DBRef ({"$ref", "$id"}) is a real
-- document and stays one.
CREATE OR REPLACE FUNCTION oplog2pg.is_ejson_scalar(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT jsonb_typeof(v) = 'object'
       AND v ?| '{$oid,$date,$numberDecimal,$numberLong,$numberDouble,$numberInt,$binary,$regularExpression,$timestamp,$minKey,$maxKey,$undefined,$symbol,$code,$dbPointer}'::text[]
       AND (v - '{$oid,$date,$numberDecimal,$numberLong,$numberDouble,$numberInt,$binary,$regularExpression,$timestamp,$minKey,$maxKey,$undefined,$symbol,$code,$scope,$dbPointer}'::text[]) = '{}'::jsonb
$fn$;

-- True when v is a BSON document (a JSON object that is not an EJSON scalar wrapper).
CREATE OR REPLACE FUNCTION oplog2pg.is_document(v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
    SELECT jsonb_typeof(v) = 'object' AND NOT oplog2pg.is_ejson_scalar(v)
$fn$;

-- The integer value of a relaxed-EJSON number (bare JSON number, or {"$numberInt"|"$numberLong"|"$numberDouble": s}),
-- NULL when v is not an integral number.
CREATE OR REPLACE FUNCTION oplog2pg.ejson_integer(v jsonb) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    n numeric;
    s text;
BEGIN
    IF jsonb_typeof(v) = 'number' THEN
        n := v::numeric;
    ELSIF jsonb_typeof(v) = 'object' THEN
        s := coalesce(v ->> '$numberInt', v ->> '$numberLong', v ->> '$numberDouble');
        IF s IS NULL OR s !~ '^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$' THEN
            RETURN NULL;
        END IF;
        n := s::numeric;
    ELSE
        RETURN NULL;
    END IF;
    IF n <> trunc(n) THEN
        RETURN NULL;
    END IF;
    RETURN n;
END
$fn$;

-- A jsonb array of k nulls (k >= 0), used to pad arrays.
CREATE OR REPLACE FUNCTION oplog2pg.null_array(k integer) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
    SELECT coalesce((SELECT jsonb_agg(NULL::jsonb) FROM generate_series(1, k)), '[]'::jsonb)
$fn$;

-- A `b` (binary) section entry, MongoDB 8.x: {o: offset, d: BinData}; the new value is old[0:o] || d and keeps the
-- old subtype. Only called when old is a BinData wrapper.
CREATE OR REPLACE FUNCTION oplog2pg.apply_binary_diff(old jsonb, spec jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    off numeric := oplog2pg.ejson_integer(spec -> 'o');
    tail text := spec #>> '{d,$binary,base64}';
    bytes bytea;
BEGIN
    IF jsonb_typeof(spec) <> 'object' OR off IS NULL OR off < 0 OR tail IS NULL THEN
        PERFORM oplog2pg.update_error(NULL, 'binary diff entry must be {o: int, d: BinData}, got ' || spec::text);
    END IF;
    bytes := substring(decode(old #>> '{$binary,base64}', 'base64') FROM 1 FOR least(off, 2147483647)::integer)
             || decode(tail, 'base64');
    -- PostgreSQL's base64 wraps lines at 76 characters; EJSON has none.
    RETURN jsonb_build_object('$binary', jsonb_build_object(
        'base64', translate(encode(bytes, 'base64'), E'\n', ''),
        'subType', old #> '{$binary,subType}'));
END
$fn$;

-- Apply a sub-diff (object diff or array diff: only `a` marks an array diff) to the pre-image value it names.
-- A type mismatch yields null, as in the server: a later entry rewrites the value.
CREATE OR REPLACE FUNCTION oplog2pg.apply_subdiff(val jsonb, sub jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    IF sub ? 'a' THEN
        IF jsonb_typeof(val) = 'array' THEN
            RETURN oplog2pg.apply_array_diff(val, sub);
        END IF;
    ELSIF oplog2pg.is_document(val) THEN
        RETURN oplog2pg.apply_diff(val, sub);
    END IF;
    RETURN 'null'::jsonb;
END
$fn$;

-- Apply an object diff D to the document doc (see NOTES). Validates D's sections as the server's
-- DocumentDiffReader does, as far as jsonb still shows them. Written for speed: a diff of d/u/i sections runs
-- no query except listing the deleted names; only `s` sub-diffs and malformed keys take the loop.
CREATE OR REPLACE FUNCTION oplog2pg.apply_diff(doc jsonb, diff jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    del jsonb := diff -> 'd';
    upd jsonb := diff -> 'u';
    ins jsonb := diff -> 'i';
    bin jsonb := diff -> 'b';
    rest jsonb := diff - '{d,u,i,b}'::text[];
    subs text[];
    merged jsonb;
    k text;
    v jsonb;
    c text;
    f text;
    cur jsonb;
    res jsonb;
BEGIN
    IF jsonb_typeof(diff) <> 'object' THEN
        PERFORM oplog2pg.update_error(470510, 'diff must be an object, got ' || diff::text);
    END IF;
    IF diff = '{}'::jsonb THEN
        PERFORM oplog2pg.update_error(4770500, 'Expected diff to be non-empty');
    END IF;

    -- Keys other than d/u/i/b: sub-diffs `s<field>`, or malformed. The server keys sections on their first
    -- character and wants each at most once, in the order d, u, i, b, s...; jsonb lost the order, but a second key
    -- naming the same section is still visible.
    IF rest <> '{}'::jsonb THEN
        subs := '{}';
        FOR k, v IN SELECT e.key, e.value FROM jsonb_each(rest) e LOOP
            c := left(k, 1);
            IF c = 's' THEN
                IF jsonb_typeof(v) <> 'object' THEN
                    PERFORM oplog2pg.update_error(4770507, format('Expected s section to be type object, got %s', v));
                ELSIF v = '{}'::jsonb THEN
                    PERFORM oplog2pg.update_error(4770500, 'Expected diff to be non-empty (sub-diff ' || k || ')');
                END IF;
                subs := subs || k;
            ELSIF c = '' THEN
                PERFORM oplog2pg.update_error(4770505, 'Expected sections field names in diff to be non-empty');
            ELSIF c = 'd' AND del IS NULL THEN
                del := v;
            ELSIF c = 'u' AND upd IS NULL THEN
                upd := v;
            ELSIF c = 'i' AND ins IS NULL THEN
                ins := v;
            ELSIF c = 'b' AND bin IS NULL THEN
                bin := v;
            ELSE
                PERFORM oplog2pg.update_error(4770503, format('Unexpected section: %s in document diff', c));
            END IF;
        END LOOP;
    END IF;
    IF jsonb_typeof(del) <> 'object' OR jsonb_typeof(upd) <> 'object' OR jsonb_typeof(ins) <> 'object'
       OR jsonb_typeof(bin) <> 'object' THEN
        PERFORM oplog2pg.update_error(4770507, 'Expected d/u/i/b sections to be objects, got ' || diff::text);
    END IF;

    -- A field may be named by one section only (each section's own keys are already unique in jsonb): with two
    -- or more sections, their union must have as many keys as they have together.
    IF (del IS NOT NULL)::integer + (upd IS NOT NULL)::integer + (ins IS NOT NULL)::integer
       + (bin IS NOT NULL)::integer + coalesce(cardinality(subs), 0) > 1 THEN
        merged := coalesce(del, '{}') || coalesce(upd, '{}') || coalesce(ins, '{}') || coalesce(bin, '{}');
        -- (lax `$[*].*` lists the members of every section; the json nulls of absent sections add nothing.)
        IF jsonb_array_length(jsonb_path_query_array(merged, 'strict $.*'))
           <> jsonb_array_length(jsonb_path_query_array(jsonb_build_array(del, upd, ins, bin), 'lax $[*].*')) THEN
            SELECT n INTO f FROM (
                SELECT jsonb_object_keys(del) AS n UNION ALL SELECT jsonb_object_keys(upd)
                UNION ALL SELECT jsonb_object_keys(ins) UNION ALL SELECT jsonb_object_keys(bin)
            ) names GROUP BY n HAVING count(*) > 1 LIMIT 1;
            PERFORM oplog2pg.update_error(4728000, 'duplicate field name in diff: ' || f);
        END IF;
        IF subs IS NOT NULL THEN
            FOREACH k IN ARRAY subs LOOP
                IF merged ? substr(k, 2) THEN
                    PERFORM oplog2pg.update_error(4728000, 'duplicate field name in diff: ' || substr(k, 2));
                END IF;
            END LOOP;
        END IF;
    END IF;

    -- Deletes vanish; updates replace in place or append; inserts are (re)placed at the end. With jsonb, whose
    -- objects have no order, that is exactly (doc - deletes) || updates || inserts.
    res := doc;
    IF del IS NOT NULL THEN
        res := res - ARRAY(SELECT jsonb_object_keys(del));
    END IF;
    IF upd IS NOT NULL THEN
        res := res || upd;
    END IF;
    IF ins IS NOT NULL THEN
        res := res || ins;
    END IF;

    -- Binary diffs (8.x) patch a BinData in place; on an absent field they do nothing, on another type they write
    -- null like any type mismatch.
    IF bin IS NOT NULL THEN
        FOR f, v IN SELECT e.key, e.value FROM jsonb_each(bin) e LOOP
            cur := res -> f;
            CONTINUE WHEN cur IS NULL;
            IF jsonb_typeof(cur) = 'object' AND cur ? '$binary' AND oplog2pg.is_ejson_scalar(cur) THEN
                res := jsonb_set(res, ARRAY[f], oplog2pg.apply_binary_diff(cur, v));
            ELSE
                res := jsonb_set(res, ARRAY[f], 'null'::jsonb);
            END IF;
        END LOOP;
    END IF;

    -- Sub-diffs recurse into the value they name only when its type matches (only `a` marks an array diff);
    -- a mismatch writes null (a later entry rewrites the value), an absent field is left alone.
    IF subs IS NOT NULL THEN
        FOREACH k IN ARRAY subs LOOP
            f := substr(k, 2);
            cur := res -> f;
            CONTINUE WHEN cur IS NULL;
            v := rest -> k;
            IF v ? 'a' THEN
                IF jsonb_typeof(cur) = 'array' THEN
                    res := jsonb_set(res, ARRAY[f], oplog2pg.apply_array_diff(cur, v));
                    CONTINUE;
                END IF;
            ELSIF oplog2pg.is_document(cur) THEN
                res := jsonb_set(res, ARRAY[f], oplog2pg.apply_diff(cur, v));
                CONTINUE;
            END IF;
            res := jsonb_set(res, ARRAY[f], 'null'::jsonb);
        END LOOP;
    END IF;
    RETURN res;
END
$fn$;

-- Apply an array diff {a: true, [l: newLength], u<idx>: value | s<idx>: subdiff ...} to the array arr, following
-- the server's applyDiffToArray: the first min(len, l) elements come from the pre-image, modified ones replaced or
-- sub-diffed; modifications past that point pad with null (a sub-diff there writes null); `l` pads with null.
CREATE OR REPLACE FUNCTION oplog2pg.apply_array_diff(arr jsonb, diff jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    hdr jsonb := diff -> 'a';
    n integer := jsonb_array_length(arr);
    newlen numeric;
    keep integer;
    curlen integer;
    k text;
    v jsonb;
    idx integer;
    prev integer := -1;
    res jsonb := arr;
BEGIN
    IF jsonb_typeof(hdr) IS DISTINCT FROM 'boolean' THEN
        PERFORM oplog2pg.update_error(4770519, 'Expected array header to be bool but got ' || coalesce(hdr::text, 'nothing'));
    ELSIF hdr <> 'true'::jsonb THEN
        PERFORM oplog2pg.update_error(4770520, 'Expected array header to be value true but got ' || hdr::text);
    END IF;
    IF diff ? 'l' THEN
        newlen := oplog2pg.ejson_integer(diff -> 'l');
        -- The server reads `l` as an int32 and uses it as a size_t: a negative one cannot be valid.
        IF newlen IS NULL OR newlen < 0 OR newlen > 2147483647 THEN
            PERFORM oplog2pg.update_error(4770507, 'Expected l section to be type int, got ' || (diff -> 'l')::text);
        END IF;
    END IF;
    keep := CASE WHEN newlen IS NULL OR newlen >= n THEN n ELSE newlen::integer END;
    IF keep < n THEN
        res := jsonb_path_query_array(arr, '$[0 to $last]', jsonb_build_object('last', keep - 1));
    END IF;
    curlen := keep;

    -- Modifications in ascending index order (jsonb sorts keys by length, then bytes, not numerically).
    FOR k, v, idx IN
        SELECT e.key, e.value,
               CASE WHEN substr(e.key, 2) ~ '^[0-9]{1,9}$' THEN substr(e.key, 2)::integer END
          FROM jsonb_each(diff) e
         WHERE e.key NOT IN ('a', 'l')
         ORDER BY 3 NULLS FIRST
    LOOP
        IF length(k) < 2 THEN
            PERFORM oplog2pg.update_error(4770521, 'expected field name to be at least two characters long, but found: ' || k);
        ELSIF idx IS NULL THEN
            IF substr(k, 2) ~ '^[0-9]+$' THEN
                PERFORM oplog2pg.update_error(NULL, 'array diff index too large: ' || k);
            END IF;
            PERFORM oplog2pg.update_error(4770512, 'Expected integer but got ' || substr(k, 2));
        ELSIF left(k, 1) NOT IN ('u', 's') THEN
            PERFORM oplog2pg.update_error(4770502, format('Expected either ''u'' (update) or ''s'' (sub diff) at index %s but got %s', idx, k));
        ELSIF left(k, 1) = 's' AND jsonb_typeof(v) <> 'object' THEN
            PERFORM oplog2pg.update_error(4770501, format('expected sub diff at index %s but got %s', idx, v));
        ELSIF idx = prev THEN
            PERFORM oplog2pg.update_error(NULL, format('array diff modifies index %s twice', idx));
        END IF;
        prev := idx;

        IF idx < keep THEN
            IF left(k, 1) = 's' THEN
                v := oplog2pg.apply_subdiff(res -> idx, v);
            END IF;
            res := jsonb_set(res, ARRAY[idx::text], v);
        ELSE
            IF idx > curlen THEN
                res := res || oplog2pg.null_array(idx - curlen);
            END IF;
            -- Past the pre-image there is nothing to sub-diff: null, as in the server.
            res := res || jsonb_build_array(CASE WHEN left(k, 1) = 'u' THEN v ELSE 'null'::jsonb END);
            curlen := idx + 1;
        END IF;
    END LOOP;

    IF newlen IS NOT NULL AND curlen < newlen THEN
        res := res || oplog2pg.null_array(newlen::integer - curlen);
    END IF;
    RETURN res;
END
$fn$;

-- $v:1 `$set` of one dotted path: numeric components index arrays (padding with null) and name fields in
-- objects; missing intermediate levels are created as objects.
CREATE OR REPLACE FUNCTION oplog2pg.set_path(doc jsonb, path text, val jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    parts text[] := string_to_array(path, '.');
    np integer := cardinality(parts);
    cur jsonb := doc;
    newv jsonb;
    c text;
    idx integer;
    len integer;
BEGIN
    IF np = 0 OR '' = ANY (parts) THEN
        PERFORM oplog2pg.update_error(NULL, format('$set path %L has an empty component', path));
    END IF;
    FOR lvl IN 1 .. np LOOP
        c := parts[lvl];
        IF oplog2pg.is_document(cur) THEN
            IF lvl < np AND cur ? c THEN
                cur := cur -> c;
                CONTINUE;
            END IF;
            -- Last component, or the first missing one: build the rest of the path as nested objects.
            newv := val;
            FOR j IN REVERSE np .. lvl + 1 LOOP
                newv := jsonb_build_object(parts[j], newv);
            END LOOP;
            RETURN jsonb_set(doc, parts[1:lvl], newv, true);
        ELSIF jsonb_typeof(cur) = 'array' THEN
            IF c !~ '^[0-9]{1,9}$' THEN
                PERFORM oplog2pg.update_error(NULL, format('$set path %L: cannot create field %L in an array', path, c));
            END IF;
            idx := c::integer;
            len := jsonb_array_length(cur);
            IF idx < len AND lvl < np THEN
                cur := cur -> idx;
                CONTINUE;
            END IF;
            -- The server refuses to pad an array by more than 1500000 elements.
            IF idx - len > 1500000 THEN
                PERFORM oplog2pg.update_error(NULL, format('$set path %L pads an array by too many elements', path));
            END IF;
            newv := val;
            FOR j IN REVERSE np .. lvl + 1 LOOP
                newv := jsonb_build_object(parts[j], newv);
            END LOOP;
            IF idx < len THEN
                RETURN jsonb_set(doc, parts[1:lvl], newv);
            END IF;
            RETURN jsonb_set(doc, parts[1:lvl - 1],
                             cur || oplog2pg.null_array(idx - len) || jsonb_build_array(newv));
        ELSE
            PERFORM oplog2pg.update_error(NULL, format('$set path %L goes through a non-document value %s at %L',
                                                       path, cur, c));
        END IF;
    END LOOP;
    RETURN doc; -- not reached
END
$fn$;

-- $v:1 `$unset` of one dotted path: removes an object field, writes null into an array element, and does nothing
-- when the path does not exist.
CREATE OR REPLACE FUNCTION oplog2pg.unset_path(doc jsonb, path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    parts text[] := string_to_array(path, '.');
    np integer := cardinality(parts);
    cur jsonb := doc;
    c text;
BEGIN
    FOR lvl IN 1 .. np LOOP
        c := parts[lvl];
        IF oplog2pg.is_document(cur) THEN
            IF NOT cur ? c THEN
                RETURN doc;
            ELSIF lvl < np THEN
                cur := cur -> c;
                CONTINUE;
            END IF;
            RETURN doc #- parts;
        ELSIF jsonb_typeof(cur) = 'array' AND c ~ '^[0-9]{1,9}$' AND c::integer < jsonb_array_length(cur) THEN
            IF lvl < np THEN
                cur := cur -> c::integer;
                CONTINUE;
            END IF;
            RETURN jsonb_set(doc, parts, 'null'::jsonb);
        ELSE
            RETURN doc;
        END IF;
    END LOOP;
    RETURN doc;
END
$fn$;

-- Apply a modifier-style ($v:1, or pre-3.6 with no $v) update: only $set and $unset occur in the oplog.
-- Paths cannot conflict (the server refused such updates), so the order of application does not matter; fields
-- are still set in lexicographic path order, the order in which the server adds new fields.
CREATE OR REPLACE FUNCTION oplog2pg.apply_modifier(doc jsonb, o jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    k text;
    v jsonb;
    p text;
    pv jsonb;
    res jsonb := doc;
BEGIN
    FOR k, v IN SELECT e.key, e.value FROM jsonb_each(o) e ORDER BY e.key LOOP
        CONTINUE WHEN k = '$v';
        IF k NOT IN ('$set', '$unset') THEN
            PERFORM oplog2pg.update_error(NULL, format('unsupported modifier %L in a modifier-style update', k));
        ELSIF jsonb_typeof(v) <> 'object' THEN
            PERFORM oplog2pg.update_error(NULL, format('%s must be an object, got %s', k, v));
        END IF;
        FOR p, pv IN SELECT e.key, e.value FROM jsonb_each(v) e ORDER BY e.key COLLATE "C" LOOP
            IF k = '$set' THEN
                res := oplog2pg.set_path(res, p, pv);
            ELSE
                res := oplog2pg.unset_path(res, p);
            END IF;
        END LOOP;
    END LOOP;
    RETURN res;
END
$fn$;

-- Entry point: apply one oplog update `o` (relaxed EJSON) to the stored document. Not STRICT on purpose: a NULL
-- `o` (a caller bug) must fail loudly instead of setting the document to NULL.
CREATE OR REPLACE FUNCTION oplog2pg.apply_update(doc jsonb, o jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    ver jsonb := o -> '$v';
    vn numeric;
BEGIN
    IF jsonb_typeof(o) IS DISTINCT FROM 'object' THEN
        PERFORM oplog2pg.update_error(NULL, 'update must be an object, got ' || coalesce(o::text, 'NULL'));
    END IF;
    IF doc IS NULL THEN
        RETURN CASE WHEN ver IS NULL AND o ? '_id' THEN o END;
    END IF;
    IF ver IS NOT NULL THEN
        vn := oplog2pg.ejson_integer(ver);
        IF vn = 2 THEN
            IF jsonb_typeof(o -> 'diff') IS DISTINCT FROM 'object' THEN
                PERFORM oplog2pg.update_error(NULL, '$v:2 update without a diff object: ' || o::text);
            END IF;
            RETURN oplog2pg.apply_diff(doc, o -> 'diff');
        ELSIF vn = 1 THEN
            RETURN oplog2pg.apply_modifier(doc, o);
        END IF;
        PERFORM oplog2pg.update_error(NULL, 'unsupported update version $v: ' || ver::text);
    END IF;
    -- A replacement document always has _id, which an update object never has: skip the key scan for it.
    IF NOT o ? '_id' AND EXISTS (SELECT 1 FROM jsonb_object_keys(o) k WHERE left(k, 1) = '$') THEN
        RETURN oplog2pg.apply_modifier(doc, o);
    END IF;
    RETURN o; -- replacement: the whole new document, _id included
END
$fn$;

-- Apply, in order, a JSON array of primitive edits to doc (a NULL doc, e.g. a NULL jsonb column of unmapped fields,
-- counts as {}) and return the new document. Used by typed (column-mapped) tables, which split an update by path
-- (docs/mapping.md):
--   ["set", PATH, VALUE]  as $set: numeric components index existing arrays (padding with null), name fields
--                         everywhere else; missing intermediate levels are created as documents.
--   ["unset", PATH]       as $unset: removes a field, writes null into an array element, nothing on a missing path.
--   ["resize", PATH, N]   truncates or null-pads the array at PATH to N elements (a $v:2 array diff's `l`);
--                         anything else there, or nothing, is left alone.
--   ["sset", PATH, VALUE] a set inside a $v:2 sub-diff: as "set", but a missing intermediate level leaves the document
--                         unchanged (the server's applier does nothing for a sub-diff of an absent field).
--   ["sub", PATH, K]      a $v:2 sub-diff enters PATH (K "o": an object diff, "a": an array diff): a value there of
--                         the other kind becomes null, as the server's applier writes it; nothing when PATH is missing.
--   ["binary", PATH, B]   a MongoDB 8.x binary diff entry B = {o, d}: the BinData at PATH becomes its first o bytes
--                         followed by d; any other value there becomes null; nothing when PATH is missing.
-- PATH is a non-empty JSON array of strings, the path's components (no dotted-string ambiguity: a component may
-- contain dots, or be empty), N a non-negative integer. Malformed edits raise 22023 via update_error; so does a NULL
-- edits list (a caller bug), which is why the function is not STRICT.
-- A path that goes through a scalar (including an EJSON wrapper such as {"$oid": ...}), or that names a field inside
-- an array, leaves the document unchanged. set_path raises there, because a $v:1 entry with such a path cannot
-- exist; here the caller derived the edits from an update the server accepted, with paths it already knows, so
-- such a path can only mean that this pre-image lacks what the caller assumed (the field lives in a typed column,
-- or the document was rewritten since): guessing a shape, or failing the whole batch, would be worse than leaving
-- the value to the next edit or full image. Padding an array by more than the server's limit (1500000 elements)
-- counts the same.
-- Cost: each edit walks down the levels on its path only (`->` copies a sub-value without re-encoding it) and then
-- rebuilds the document once, with one jsonb_set / #- on the full path; every jsonb modification re-encodes the
-- whole value, so rebuilding level by level would cost more. The walk is inlined in the loop rather than a function
-- of its own: a PL/pgSQL call per edit costs about as much again as the jsonb_set it wraps on large documents.
CREATE OR REPLACE FUNCTION oplog2pg.apply_edits(doc jsonb, edits jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    res jsonb := coalesce(doc, '{}'::jsonb);
    e jsonb;
    kind text;
    path jsonb;
    parts text[];
    np integer;
    arg jsonb;
    nn numeric;
    n integer;
    cur jsonb;
    newv jsonb;
    c text;
    idx integer;
    len integer;
BEGIN
    IF jsonb_typeof(edits) IS DISTINCT FROM 'array' THEN
        PERFORM oplog2pg.update_error(NULL, 'edits must be a JSON array, got ' || coalesce(edits::text, 'NULL'));
    END IF;
    FOR ei IN 0 .. jsonb_array_length(edits) - 1 LOOP
        e := edits -> ei;

        -- Validate the edit: kind and arity, path, resize length.
        kind := NULL;
        IF jsonb_typeof(e) = 'array' AND jsonb_typeof(e -> 0) = 'string' THEN
            kind := e ->> 0;
            IF jsonb_array_length(e) <> (CASE kind WHEN 'unset' THEN 2 ELSE 3 END) THEN
                kind := NULL;
            END IF;
        END IF;
        IF kind IS NULL OR kind NOT IN ('set', 'sset', 'unset', 'resize', 'sub', 'binary') THEN
            PERFORM oplog2pg.update_error(NULL, 'edit must be ["set", path, value], ["sset", path, value], '
                                                || '["unset", path], ["resize", path, n], ["sub", path, "o"|"a"] '
                                                || 'or ["binary", path, {o, d}], got ' || e::text);
        END IF;
        path := e -> 1;
        np := CASE WHEN jsonb_typeof(path) = 'array' THEN jsonb_array_length(path) ELSE 0 END;
        IF np = 0 THEN
            PERFORM oplog2pg.update_error(NULL, 'edit path must be a non-empty array of strings, got ' || e::text);
        END IF;
        parts := '{}';
        FOR k IN 0 .. np - 1 LOOP
            IF jsonb_typeof(path -> k) <> 'string' THEN
                PERFORM oplog2pg.update_error(NULL, 'edit path must be a non-empty array of strings, got ' || e::text);
            END IF;
            parts := parts || (path ->> k);
        END LOOP;
        arg := e -> 2;
        IF kind = 'resize' THEN
            nn := oplog2pg.ejson_integer(arg);
            IF nn IS NULL OR nn < 0 OR nn > 2147483647 THEN
                PERFORM oplog2pg.update_error(NULL, 'resize length must be a non-negative integer, got ' || e::text);
            END IF;
            n := nn::integer;
        ELSIF kind = 'sub' AND arg NOT IN ('"o"'::jsonb, '"a"'::jsonb) THEN
            PERFORM oplog2pg.update_error(NULL, 'sub kind must be "o" or "a", got ' || e::text);
        END IF;

        -- Walk down. Every branch that is done with this edit leaves the loop (EXIT walk) with res updated or not;
        -- only a resize whose whole path exists falls out of it normally, with cur the value at the path.
        cur := res;
        <<walk>>
        FOR lvl IN 1 .. np LOOP
            c := parts[lvl];
            IF oplog2pg.is_document(cur) THEN
                IF cur ? c THEN
                    IF lvl < np THEN
                        cur := cur -> c;
                        CONTINUE walk;
                    ELSIF kind IN ('set', 'sset') THEN
                        res := jsonb_set(res, parts, arg);
                        EXIT walk;
                    ELSIF kind = 'unset' THEN
                        res := res #- parts;
                        EXIT walk;
                    END IF;
                    cur := cur -> c; -- resize, sub, binary: the value is looked at below
                ELSIF kind = 'set' OR (kind = 'sset' AND lvl = np) THEN
                    -- First missing component: build the rest of the path as nested documents (a numeric
                    -- component names a field here, as in MongoDB).
                    newv := arg;
                    FOR j IN REVERSE np .. lvl + 1 LOOP
                        newv := jsonb_build_object(parts[j], newv);
                    END LOOP;
                    res := jsonb_set(res, parts[1:lvl], newv, true);
                    EXIT walk;
                ELSE
                    EXIT walk; -- unset / resize of a missing path
                END IF;
            ELSIF jsonb_typeof(cur) = 'array' AND c ~ '^[0-9]{1,9}$' THEN
                idx := c::integer;
                len := jsonb_array_length(cur);
                IF idx < len THEN
                    IF lvl < np THEN
                        cur := cur -> idx;
                        CONTINUE walk;
                    ELSIF kind IN ('set', 'sset') THEN
                        res := jsonb_set(res, parts, arg);
                        EXIT walk;
                    ELSIF kind = 'unset' THEN
                        res := jsonb_set(res, parts, 'null'::jsonb);
                        EXIT walk;
                    END IF;
                    cur := cur -> idx;
                ELSIF (kind = 'set' OR (kind = 'sset' AND lvl = np)) AND idx - len <= 1500000 THEN
                    -- Past the end: pad with null, then append the value (wrapped in the rest of the path).
                    newv := arg;
                    FOR j IN REVERSE np .. lvl + 1 LOOP
                        newv := jsonb_build_object(parts[j], newv);
                    END LOOP;
                    newv := cur || oplog2pg.null_array(idx - len) || jsonb_build_array(newv);
                    -- (lvl = 1 only if the document itself were an array, which a document never is.)
                    res := CASE WHEN lvl = 1 THEN newv ELSE jsonb_set(res, parts[1:lvl - 1], newv) END;
                    EXIT walk;
                ELSE
                    EXIT walk; -- unset / resize past the end, or a pad beyond the server's limit
                END IF;
            ELSE
                EXIT walk; -- through a scalar, or a field name into an array: see above
            END IF;

            -- Only a resize, sub or binary edit whose last component exists gets here.
            IF kind = 'sub' THEN
                -- A sub-diff recurses into a value of its kind only; over any other value it writes null.
                IF (arg = '"a"'::jsonb AND jsonb_typeof(cur) <> 'array')
                   OR (arg = '"o"'::jsonb AND NOT oplog2pg.is_document(cur)) THEN
                    res := jsonb_set(res, parts, 'null'::jsonb);
                END IF;
            ELSIF kind = 'binary' THEN
                IF jsonb_typeof(cur) = 'object' AND cur ? '$binary' AND oplog2pg.is_ejson_scalar(cur) THEN
                    res := jsonb_set(res, parts, oplog2pg.apply_binary_diff(cur, arg));
                ELSE
                    res := jsonb_set(res, parts, 'null'::jsonb);
                END IF;
            ELSIF jsonb_typeof(cur) = 'array' THEN
                len := jsonb_array_length(cur);
                IF n > len THEN
                    res := jsonb_set(res, parts, cur || oplog2pg.null_array(n - len));
                ELSIF n = 0 THEN
                    res := jsonb_set(res, parts, '[]'::jsonb);
                ELSIF n < len THEN
                    res := jsonb_set(res, parts,
                                     jsonb_path_query_array(cur, '$[0 to $last]', jsonb_build_object('last', n - 1)));
                END IF;
            END IF;
        END LOOP;
    END LOOP;
    RETURN res;
END
$fn$;

-- A one-dimensional PostgreSQL array (a typed array column) truncated to n elements or padded with NULL up to n,
-- with lower bound 1 (the array column counterpart of a "resize" edit). NULL stays NULL: there is no array to resize.
CREATE OR REPLACE FUNCTION oplog2pg.resize_array(a anyarray, n integer) RETURNS anyarray
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    lb integer;
    len integer;
BEGIN
    IF n IS NULL OR n < 0 THEN
        PERFORM oplog2pg.update_error(NULL, 'array length must be a non-negative integer, got '
                                            || coalesce(n::text, 'NULL'));
    END IF;
    IF a IS NULL THEN
        RETURN NULL;
    ELSIF array_ndims(a) > 1 THEN
        PERFORM oplog2pg.update_error(NULL, 'cannot resize a multidimensional array');
    END IF;
    lb := coalesce(array_lower(a, 1), 1);
    len := coalesce(array_length(a, 1), 0);
    IF n < len OR lb <> 1 THEN
        a := a[lb : lb + least(n, len) - 1]; -- a slice always has lower bound 1; an empty one is '{}'
    END IF;
    IF n > len THEN
        -- a[NULL] is a NULL of the element type, which array_fill needs.
        a := a || array_fill(a[NULL::integer], ARRAY[n - len]);
    END IF;
    RETURN a;
END
$fn$;

-- a with the element at 0-based index i set to v (the array column counterpart of a "set" edit on an element):
-- pads with NULL up to i, creates the array when a is NULL; the lower bound is always 1 (a plain `a[i + 1] := v`
-- on a NULL or empty array would give an array starting at i + 1).
CREATE OR REPLACE FUNCTION oplog2pg.set_element(a anyarray, i integer, v anyelement) RETURNS anyarray
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    IF i IS NULL OR i < 0 THEN
        PERFORM oplog2pg.update_error(NULL, 'array index must be a non-negative integer, got '
                                            || coalesce(i::text, 'NULL'));
    END IF;
    IF a IS NULL OR array_lower(a, 1) IS DISTINCT FROM 1 THEN
        -- NULL, empty, or another lower bound: rebuild with lower bound 1 and room for element i.
        a := oplog2pg.resize_array(coalesce(a, array_fill(v, ARRAY[0])),
                                   greatest(coalesce(array_length(a, 1), 0), i + 1));
    ELSIF array_ndims(a) > 1 THEN
        PERFORM oplog2pg.update_error(NULL, 'cannot set an element of a multidimensional array');
    END IF;
    a[i + 1] := v; -- past the end of a non-empty array, PostgreSQL pads with NULL
    RETURN a;
END
$fn$;

-- Functions earlier versions installed here and this one no longer does: apply_update_checked and the check_*
-- functions it called, which only the tests use (tests/integration/update_checked.sql). They are oplog2pg's own, in
-- its own schema, so an upgrade removes them. A view or function of the user's that depends on one keeps it: that
-- drop is skipped (its dependency kept intact), never the start.
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['oplog2pg.apply_update_checked(jsonb, json)', 'oplog2pg.check_diff(json)',
                             'oplog2pg.check_array_diff(json)', 'oplog2pg.check_subdiff_header(json)',
                             'oplog2pg.check_array_diff_header(json)', 'oplog2pg.check_diff_level(json)'] LOOP
        BEGIN
            EXECUTE 'DROP FUNCTION IF EXISTS ' || f;
        EXCEPTION WHEN dependent_objects_still_exist THEN
            NULL;
        END;
    END LOOP;
END
$$;
