-- update_checked.sql — a strict twin of oplog2pg.apply_update for the tests (tests/integration/test_update_sql.c).
--
-- oplog2pg.apply_update_checked(doc jsonb, o json) takes `o` as json text, which keeps the key order and duplicate
-- keys that jsonb drops, walks a $v:2 diff in order rejecting everything the server's DocumentDiffReader /
-- ArrayDiffReader / DiffApplier reject (SQLSTATE 22023, the server's code in the message), then applies it with
-- oplog2pg.apply_update. The tests use it to hold the server's rejection vectors (tests/vectors/
-- diff_v2_must_reject.jsonl) against SQL; the daemon never calls it, so it is not installed in users' databases
-- (the daemon checks diffs on the BSON: source/v2diff.h). Needs src/map/update_functions.sql installed first.
-- Embedded in the integration tests by the Makefile (scripts/embed-sql.sh); idempotent (CREATE OR REPLACE only).

-- Strict validation of a diff as text (json keeps key order and duplicate keys): rejects everything the server's
-- DocumentDiffReader / ArrayDiffReader / DiffApplier reject, in the same order of checks at each level:
-- this level's sections, then the headers of its sub-diffs, then duplicate names, then the sub-diffs in depth.
-- Returns the names the object diff touches (used for the duplicate check).
CREATE OR REPLACE FUNCTION oplog2pg.check_diff_level(diff json) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    k text;
    v json;
    c text;
    ord integer;
    prev integer := 0;
    in_subdiffs boolean := false;
    any_field boolean := false;
    names text[] := '{}';
BEGIN
    IF json_typeof(diff) <> 'object' THEN
        PERFORM oplog2pg.update_error(470510, 'diff must be an object, got ' || diff::text);
    END IF;
    FOR k, v IN SELECT e.key, e.value FROM json_each(diff) e LOOP
        any_field := true;
        IF in_subdiffs THEN
            IF left(k, 1) IS DISTINCT FROM 's' OR k = '' THEN
                PERFORM oplog2pg.update_error(4770514, 'Did not expect more sections in diff but found one: ' || k);
            ELSIF json_typeof(v) <> 'object' THEN
                PERFORM oplog2pg.update_error(470510, format('Subdiffs should be objects, got %s: %s', k, v));
            END IF;
            names := names || substr(k, 2);
            CONTINUE;
        END IF;
        IF k = '' THEN
            PERFORM oplog2pg.update_error(4770505, 'Expected sections field names in diff to be non-empty');
        END IF;
        c := left(k, 1);
        ord := strpos('duibs', c);
        IF ord = 0 OR ord <= prev THEN
            PERFORM oplog2pg.update_error(4770503, format('Unexpected section: %s in document diff', c));
        ELSIF json_typeof(v) <> 'object' THEN
            PERFORM oplog2pg.update_error(4770507, format('Expected %s section to be type object, got %s', c, v));
        END IF;
        IF c = 's' THEN
            in_subdiffs := true;
            names := names || substr(k, 2);
        ELSE
            names := names || ARRAY(SELECT json_object_keys(v));
        END IF;
        prev := ord;
    END LOOP;
    IF NOT any_field THEN
        PERFORM oplog2pg.update_error(4770500, 'Expected diff to be non-empty');
    END IF;
    RETURN names;
END
$fn$;

-- Array diff header checks (ArrayDiffReader constructor): `a: true` first, then an optional int `l`.
CREATE OR REPLACE FUNCTION oplog2pg.check_array_diff_header(diff json) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    k text;
    v json;
    pos integer := 0;
    l numeric;
BEGIN
    FOR k, v IN SELECT e.key, e.value FROM json_each(diff) e LOOP
        pos := pos + 1;
        IF pos = 1 THEN
            IF k <> 'a' THEN
                PERFORM oplog2pg.update_error(4770504, 'Expected first field to be array header a but found ' || k);
            ELSIF json_typeof(v) <> 'boolean' THEN
                PERFORM oplog2pg.update_error(4770519, 'Expected array header to be bool but got ' || v::text);
            ELSIF v::text <> 'true' THEN
                PERFORM oplog2pg.update_error(4770520, 'Expected array header to be value true but got ' || v::text);
            END IF;
        ELSE
            IF k = 'l' THEN
                l := oplog2pg.ejson_integer(v::jsonb);
                IF l IS NULL OR l < 0 OR l > 2147483647 THEN
                    PERFORM oplog2pg.update_error(4770507, 'Expected l section to be type int, got ' || v::text);
                END IF;
            END IF;
            EXIT;
        END IF;
    END LOOP;
    IF pos = 0 THEN
        PERFORM oplog2pg.update_error(4770500, 'Expected diff to be non-empty');
    END IF;
END
$fn$;

-- Header check of a sub-diff of either kind (what the server's getReader() does when it meets one).
CREATE OR REPLACE FUNCTION oplog2pg.check_subdiff_header(sub json) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
BEGIN
    IF (SELECT e.key FROM json_each(sub) e LIMIT 1) IS NOT DISTINCT FROM 'a' THEN
        PERFORM oplog2pg.check_array_diff_header(sub);
        RETURN true;
    END IF;
    PERFORM oplog2pg.check_diff_level(sub);
    RETURN false;
END
$fn$;

CREATE OR REPLACE FUNCTION oplog2pg.check_array_diff(diff json) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    k text;
    v json;
    idx numeric;
    prev numeric := -1;
    pos integer := 0;
    subs json[] := '{}';
    sub json;
BEGIN
    PERFORM oplog2pg.check_array_diff_header(diff);
    FOR k, v IN SELECT e.key, e.value FROM json_each(diff) e LOOP
        pos := pos + 1;
        CONTINUE WHEN pos = 1 OR (pos = 2 AND k = 'l');
        IF length(k) < 2 THEN
            PERFORM oplog2pg.update_error(4770521, 'expected field name to be at least two characters long, but found: ' || k);
        ELSIF substr(k, 2) !~ '^[0-9]+$' THEN
            PERFORM oplog2pg.update_error(4770512, 'Expected integer but got ' || substr(k, 2));
        END IF;
        idx := substr(k, 2)::numeric;
        IF left(k, 1) = 's' THEN
            IF json_typeof(v) <> 'object' THEN
                PERFORM oplog2pg.update_error(4770501, format('expected sub diff at index %s but got %s', idx, v));
            END IF;
            PERFORM oplog2pg.check_subdiff_header(v);
            subs := subs || v;
        ELSIF left(k, 1) <> 'u' THEN
            PERFORM oplog2pg.update_error(4770502, format('Expected either ''u'' (update) or ''s'' (sub diff) at index %s but got %s', idx, k));
        END IF;
        -- The server assumes ascending indexes and misbehaves otherwise; refuse.
        IF idx <= prev THEN
            PERFORM oplog2pg.update_error(NULL, format('array diff indexes not ascending at %s', k));
        END IF;
        prev := idx;
    END LOOP;
    FOREACH sub IN ARRAY subs LOOP
        PERFORM oplog2pg.check_diff(sub);
    END LOOP;
END
$fn$;

-- Full strict validation of an object diff or array diff given as json text.
CREATE OR REPLACE FUNCTION oplog2pg.check_diff(diff json) RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $fn$
DECLARE
    names text[];
    dup text;
    k text;
    v json;
    past_sections boolean := false;
    subs json[] := '{}';
    sub json;
BEGIN
    IF json_typeof(diff) = 'object' AND (SELECT e.key FROM json_each(diff) e LIMIT 1) IS NOT DISTINCT FROM 'a' THEN
        -- Only reachable for nested diffs; a top-level `a` fails check_diff_level as an unexpected section.
        PERFORM oplog2pg.check_array_diff(diff);
        RETURN;
    END IF;
    names := oplog2pg.check_diff_level(diff);
    FOR k, v IN SELECT e.key, e.value FROM json_each(diff) e LOOP
        past_sections := past_sections OR left(k, 1) = 's';
        IF past_sections THEN
            PERFORM oplog2pg.check_subdiff_header(v);
            subs := subs || v;
        END IF;
    END LOOP;
    SELECT n INTO dup FROM unnest(names) n GROUP BY n HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        PERFORM oplog2pg.update_error(4728000, 'duplicate field name in diff: ' || dup);
    END IF;
    FOREACH sub IN ARRAY subs LOOP
        PERFORM oplog2pg.check_diff(sub);
    END LOOP;
END
$fn$;

-- Like apply_update, but takes `o` as json text, which keeps the key order and duplicate keys that jsonb drops,
-- so a $v:2 diff is validated exactly as the server would before it is applied. Costs a second walk of the diff.
CREATE OR REPLACE FUNCTION oplog2pg.apply_update_checked(doc jsonb, o json) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    oj jsonb := o::jsonb;
BEGIN
    IF jsonb_typeof(oj) = 'object' AND oplog2pg.ejson_integer(oj -> '$v') = 2 AND (o -> 'diff') IS NOT NULL THEN
        -- Top level: an array diff is not allowed there (the server reads it as a document diff).
        PERFORM oplog2pg.check_diff_level(o -> 'diff');
        PERFORM oplog2pg.check_diff(o -> 'diff');
    END IF;
    RETURN oplog2pg.apply_update(doc, oj);
END
$fn$;
