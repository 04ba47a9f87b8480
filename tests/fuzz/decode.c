/*
 * decode.c — fuzz target: one oplog entry (a BSON document, as local.oplog.rs holds it) through the decoder
 * (source/decode.h) with each of its flag sets, then what the reader does next with a decoded entry: the text
 * PostgreSQL receives (ejson_prepare_entry: documents, _id keys, $v:2 diffs) and the transaction classification
 * (source/txn.h).
 */
#include <stdlib.h>
#include <string.h>

#include "core/op.h"
#include "fuzz.h"
#include "map/ejson.h"
#include "source/decode.h"
#include "source/txn.h"

static void one(const bson_t *entry, unsigned flags)
{
    op_entry e;
    char err[512];
    decode_status st = decode_entry_ex(entry, flags, &e, err, sizeof err);
    if (st == DECODE_OK) {
        FUZZ_CHECK(ejson_prepare_entry(&e));
        op_entry_drop_payload(&e);
    } else {
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
    }
    op_entry_clear(&e);
}

int fuzz_decode(const uint8_t *data, size_t size)
{
    uint8_t *buf;
    bson_t entry;
    if (fuzz_next_doc(&data, &size, &buf, &entry)) {
        one(&entry, 0);
        one(&entry, DECODE_KEEP_SYSTEM | DECODE_TXN_PART);
        one(&entry, DECODE_BORROW_PAYLOAD);
        txn_info ti;
        (void)txn_classify(&entry, &ti);
    }
    free(buf);
    return 0;
}
