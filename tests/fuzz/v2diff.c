/*
 * v2diff.c — fuzz target: a `$v:2` update diff (the value of an oplog entry's o.diff), optionally followed by the
 * document it applies to (the next BSON document of the input). It goes through everything on the C side that an
 * update's diff meets before PostgreSQL:
 *   - the structure check (v2diff_validate, source/v2diff.h);
 *   - the update entry {op: "u", o: {$v: 2, diff}} through the decoder and the text sent to PostgreSQL's
 *     oplog2pg.apply_diff (ejson_prepare_entry), for a plain table (shop.plain) and a typed one (shop.orders: the
 *     statement map_plan_update builds from the diff, map/project.h);
 *   - the diff applied in C to the document (bucket_apply_diff_ex, both modes, as the time-series sink applies a
 *     bucket's diff), which must give valid BSON when both inputs were.
 * PostgreSQL's own application of the text (src/map/update_functions.sql) is tested against the vectors by
 * tests/integration/test_update_sql.c; it is not fuzzed here.
 */
#include <stdlib.h>
#include <string.h>

#include "core/op.h"
#include "daemon/config.h"
#include "fuzz.h"
#include "map/bucket.h"
#include "map/ejson.h"
#include "map/project.h"
#include "source/decode.h"
#include "source/v2diff.h"

static const char MAP_CONFIG[] = "[mongodb]\n"
                                 "uri = mongodb://127.0.0.1:27017/?replicaSet=rs0\n"
                                 "[postgres]\n"
                                 "conninfo = host=127.0.0.1 dbname=app user=oplog2pg\n"
                                 "[replication]\n"
                                 "include = shop.*\n"
                                 "[map shop.orders]\n"
                                 "table         = sales.orders\n"
                                 "rest          = extra\n"
                                 "column.total  = numeric from amount.total\n"
                                 "column.n      = integer from n\n"
                                 "column.placed = timestamptz from placed_at on_type_error=null\n"
                                 "column.tags   = text[]\n"
                                 "column.nums   = bigint[] from a.nums\n"
                                 "column.blob   = bytea from b\n"
                                 "column.meta   = jsonb from m\n"
                                 "child.items   = order_items\n"
                                 "[child sales.order_items]\n"
                                 "parent_key    = order_id\n"
                                 "position      = pos\n"
                                 "column.sku    = text\n"
                                 "column.qty    = integer\n";

static config *maps_config(void)
{
    static config c;
    static bool loaded;
    if (!loaded) {
        char err[1024];
        if (!config_load_string("fuzz-v2diff", MAP_CONFIG, &c, err, sizeof err)) {
            fprintf(stderr, "fuzz v2diff: the map configuration does not load: %s\n", err);
            abort();
        }
        loaded = true;
    }
    return &c;
}

static void as_update(const bson_t *diff, const char *ns, const map_set *maps)
{
    bson_t entry, o, o2;
    bson_init(&entry);
    BSON_APPEND_TIMESTAMP(&entry, "ts", 1700000000, 1);
    BSON_APPEND_INT64(&entry, "t", 1);
    BSON_APPEND_INT32(&entry, "v", 2);
    BSON_APPEND_UTF8(&entry, "op", "u");
    BSON_APPEND_UTF8(&entry, "ns", ns);
    BSON_APPEND_DOCUMENT_BEGIN(&entry, "o", &o);
    BSON_APPEND_INT32(&o, "$v", 2);
    BSON_APPEND_DOCUMENT(&o, "diff", diff);
    bson_append_document_end(&entry, &o);
    BSON_APPEND_DOCUMENT_BEGIN(&entry, "o2", &o2);
    BSON_APPEND_INT32(&o2, "_id", 7);
    bson_append_document_end(&entry, &o2);

    op_entry e;
    char err[1024];
    if (decode_entry_ex(&entry, 0, &e, err, sizeof err) == DECODE_OK) {
        FUZZ_CHECK(ejson_prepare_entry(&e));
        if (maps != NULL)
            FUZZ_CHECK(map_prepare_entry(&e, maps));
    }
    op_entry_clear(&e);
    bson_destroy(&entry);
}

int fuzz_v2diff(const uint8_t *data, size_t size)
{
    uint8_t *dbuf = NULL, *pbuf = NULL;
    bson_t diff, pre;
    if (!fuzz_next_doc(&data, &size, &dbuf, &diff))
        goto out;
    int32_t code = 0;
    char err[512];
    bool valid = v2diff_validate(&diff, &code, err, sizeof err);
    FUZZ_CHECK(!valid || code == 0);
    FUZZ_CHECK(valid || strlen(err) > 0);
    as_update(&diff, "shop.plain", NULL);
    as_update(&diff, "shop.orders", &maps_config()->maps);
    if (!fuzz_next_doc(&data, &size, &pbuf, &pre))
        goto out;
    bool inputs_valid = fuzz_doc_sound(&diff) && fuzz_doc_sound(&pre);
    for (int mode = 0; mode < 2; mode++) {
        bson_t after;
        if (bucket_apply_diff_ex(bson_get_data(&pre), pre.len, bson_get_data(&diff), diff.len,
                                 mode == 0 ? BUCKET_DIFF_STRICT : BUCKET_DIFF_IDEMPOTENT, &after, err, sizeof err))
            FUZZ_CHECK(!inputs_valid || fuzz_doc_sound(&after));
        bson_destroy(&after);
    }
out:
    free(dbuf);
    free(pbuf);
    return 0;
}
