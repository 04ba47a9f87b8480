/*
 * reader_internal.h — what the two files of the reader share: reader.c (the tailing cursor, the resume check, the
 * thread) and txn_read.c (transactions over several entries: the walk back, the forward read a window of ops at a
 * time, the book of open chains). Not a public header: only src/source/oplog/reader.c and src/source/oplog/txn_read.c
 * include it.
 */
#ifndef OPLOG2PG_SOURCE_READER_INTERNAL_H
#define OPLOG2PG_SOURCE_READER_INTERNAL_H

#include <mongoc/mongoc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/queue.h"
#include "source/oplog/reader.h"
#include "source/txn.h"
#include "util/clock.h"
#include "util/napper.h"

struct reader {
    reader_config cfg;
    char *uri_str;
    mongoc_client_t *client;
    queue *q;
    pthread_t thread;
    bool joined;

    atomic_bool stop;
    atomic_bool finished;
    napper napper; /* the backoff's sleep, which reader_stop interrupts */

    atomic_uint_fast64_t entries, reconnects, idles;
    atomic_uint_fast64_t last_ts; /* secs << 32 | inc */
    atomic_int_fast64_t last_term;
    atomic_bool have_last;
    atomic_uint_fast64_t txn_open, txn_bytes, txn_oldest; /* the book, published (txn_oldest: secs << 32 | inc) */

    /* ---- thread only ---- */
    mongoc_client_session_t *cs;
    bool no_sessions; /* the server does not support sessions: run without */
    uint32_t server_id;
    int64_t cursor_id;
    op_pos pos;        /* the last position pushed (or the start position) */
    bool have_pos;     /* pos is set */
    bool idle_due;     /* entries were pushed since the last QUEUE_IDLE */
    int32_t ask;       /* the batchSize of the next getMore (READER_REPLY_BYTES) */
    bool full;         /* the last batch was as large as asked: the next getMore only probes (READER_PROBE_MS) */
    bool huge;         /* the last batch's entries were READER_REPLY_BYTES or more each: wait for the applier to be done
                        * with everything before fetching more (queue_wait_drained) */
    backoff bo;        /* between attempts (util/clock.h) */
    txn_book book;     /* transactions seen open (source/txn.h) */
    txn_list chain;    /* the OpTimes of the chain being applied */
    bool book_rebuilt; /* the chain heads between cfg.hold and cfg.start were read */
    bool after;        /* cfg.start_after and nothing pushed yet: the cursor opens after pos, unchecked */
    bool after_warned; /* the oplog began after cfg.start: said once */
    queue_pusher out;  /* entries go to the queue in groups (core/queue.h), flushed before every round trip */
    bool out_failed;   /* a flush found the queue stopped (or the reader cancelled): the reader ends */
    bool malformed;    /* a transaction lookup's reply was malformed (next_doc): not a passing fault, the reader ends */
};

/* What a step of the tailing loop asks for next. */
typedef enum { STEP_OK, STEP_RETRY, STEP_END } step;

/* What reader_next_doc found. */
typedef enum { DOC_NEXT, DOC_END, DOC_BAD } doc_next;

/* ---- reader.c ---- */

/* reader_stop was called. */
bool reader_stopping(reader *r);
/* Logs why the reader stops and pushes QUEUE_END: the thread then ends. */
void reader_fatal(reader *r, queue_end_reason reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Decides what a failed command means: auth refusals are fatal (STEP_END), everything else is retried. */
step reader_failed(reader *r, const char *what, const bson_error_t *e);
/* Reads ts and t of a raw oplog document. False when ts is missing or not a Timestamp. */
bool reader_doc_pos(const bson_t *doc, op_pos *out);
/* Runs cmd in db local with the reader's session and server, after flushing what was decoded to the queue. reply is
 * always initialised. */
bool reader_run_cmd(reader *r, const bson_t *cmd, bson_t *reply, bson_error_t *err);
/* Kills r->cursor_id (best effort) and forgets it. */
void reader_kill_cursor(reader *r);
/* Finds cursor.id and cursor.<batch_key> in a reply. */
bool reader_parse_cursor(const bson_t *reply, const char *batch_key, int64_t *id, bson_iter_t *batch);
/* Next document of a batch array into *doc (a static view); DOC_BAD (why says how) ends every caller there. */
doc_next reader_next_doc(bson_iter_t *batch, bson_t *doc, char *why, size_t whylen);
/* Decodes, filters and renders one raw entry into a new entry holding *reserved_out bytes of queue room. */
step reader_prepare_raw(reader *r, const bson_t *doc, unsigned flags, op_entry **out, size_t *reserved_out);
/* Hands a decoded entry on; `reserved` is the queue room reserved for it, or 0. */
step reader_push_entry(reader *r, op_entry *e, size_t reserved);
/* Decodes and hands on an entry that is not part of a transaction chain. */
step reader_push_plain(reader *r, const bson_t *doc);

/* ---- txn_read.c ---- */

/* One raw entry read by the cursor: chain entries are noted and skipped, commits reassembled, everything else
 * pushed as it is (reader_push_plain). */
step txn_read_entry(reader *r, const bson_t *doc);
/* Once, before the first cursor: re-reads the entries from cfg.hold to cfg.start to note the chains open there, and
 * with cfg.report_prepares pushes the note_only entries of the prepared ones. Best effort (STEP_OK, logged) unless
 * report_prepares: then a failed re-read is a step's failure (reader_failed), tried again at the next cursor. */
step txn_read_book(reader *r);

#endif
