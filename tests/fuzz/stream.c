/*
 * stream.c — fuzz target: a batch of change-stream events (BSON documents one after another) through the pure part
 * of the change-stream reader (source/stream/event.h), in the reader's order: the event's header
 * (stream_event_info_read), its resume token (stream_token_decode), the fragments of a split event
 * (stream_frag_add), the event as an oplog-form op (stream_event_to_op_ex, with and without updateLookup), the ops
 * of one clusterTime grouped (stream_group_add) and built into an entry by the oplog decoder (stream_group_build),
 * and the text PostgreSQL receives (ejson_prepare_entry).
 */
#include <stdlib.h>
#include <string.h>

#include "core/op.h"
#include "fuzz.h"
#include "map/ejson.h"
#include "source/decode.h"
#include "source/stream/event.h"

#define MAX_EVENTS 64

static void build(stream_group *g, bool last)
{
    op_entry e;
    bson_t raw;
    char err[1536];
    op_entry_init(&e);
    stream_build_status bs = stream_group_build(g, last, DECODE_BORROW_PAYLOAD, &e, &raw, err, sizeof err);
    if (bs == STREAM_BUILD_OK) {
        FUZZ_CHECK(ejson_prepare_entry(&e));
        op_entry_drop_payload(&e);
    }
    bson_destroy(&raw);
    op_entry_clear(&e);
}

static void take(stream_group *g, const bson_t *ev, const stream_event_info *info, unsigned n)
{
    char err[1536];
    if (!info->has_time)
        return;
    if (g->open && (info->secs != g->secs || info->inc != g->inc)) {
        build(g, true);
        stream_group_clear(g);
    }
    bson_t one = BSON_INITIALIZER;
    stream_ev_status st = stream_event_to_op_ex(ev, &one, (n & 1) != 0, err, sizeof err);
    if (st == STREAM_EV_OK) {
        /* An op made from a valid event is valid (from an invalid one, the decoder finds out). */
        FUZZ_CHECK(!fuzz_doc_sound(ev) || fuzz_doc_sound(&one));
        FUZZ_CHECK(stream_group_add(g, info->secs, info->inc, &one, info->token, info->token_len, info->has_txn));
        if (stream_group_full(g))
            build(g, false);
    }
    bson_destroy(&one);
}

int fuzz_stream(const uint8_t *data, size_t size)
{
    stream_frag frag;
    stream_group group;
    stream_frag_init(&frag);
    stream_group_init(&group);
    for (unsigned n = 0; n < MAX_EVENTS; n++) {
        uint8_t *buf;
        bson_t ev;
        if (!fuzz_next_doc(&data, &size, &buf, &ev)) {
            free(buf);
            break;
        }
        stream_event_info info;
        if (stream_event_info_read(&ev, &info)) {
            if (info.token != NULL) {
                stream_token t;
                if (stream_token_decode(info.token, info.token_len, &t) && t.keystring) {
                    FUZZ_CHECK(stream_token_cmp(&t, &t) == 0);
                    (void)stream_group_closes(&group, &t);
                }
            }
            if (info.split || frag.active) {
                bool done = false;
                char err[512];
                stream_ev_status st = stream_frag_add(&frag, &ev, &info, &done, err, sizeof err);
                if (st == STREAM_EV_OK && done) {
                    stream_event_info whole;
                    if (stream_event_info_read(&frag.merged, &whole))
                        take(&group, &frag.merged, &whole, n);
                    stream_frag_clear(&frag);
                } else if (st != STREAM_EV_OK) {
                    stream_frag_clear(&frag);
                }
            } else {
                take(&group, &ev, &info, n);
            }
        }
        free(buf);
    }
    if (group.open)
        build(&group, true);
    stream_group_clear(&group);
    stream_frag_clear(&frag);
    return 0;
}
