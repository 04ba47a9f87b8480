/*
 * reader.h — the reader thread: tails local.oplog.rs with libmongoc and feeds decoded entries to a queue.
 *
 * Its libmongoc client is used by that thread alone (the caller must have called mongoc_init once). It starts at a
 * position already applied (the committed checkpoint: the daemon makes sure there is one before a reader starts),
 * checks that it is still there (the first entry at or after it must be that entry, with the same term), skips it,
 * decodes every later entry, turns ops on namespaces the nsfilter rejects into OP_NOOP, renders their PostgreSQL
 * text (map/ejson.h), and pushes QUEUE_ENTRY items, a QUEUE_IDLE item whenever it has drained the oplog, and a
 * QUEUE_END item when it must stop for good:
 * - QUEUE_END_RESUME_LOST: the start position or the last position pushed is no longer in the oplog, or it was
 *   rolled back (same ts, another term);
 * - QUEUE_END_UNSUPPORTED: an entry the decoder rejects (malformed or unsupported), or a first entry without a ts
 *   Timestamp; nothing after it is pushed;
 * - QUEUE_END_REFUSED: authentication/authorisation refused;
 * - QUEUE_END_NOMEM: memory ran out;
 * - QUEUE_END_RETRY: a passing fault while the parts of a transaction were being read (some were pushed already).
 * Transactions written over several entries (source/txn.h) are pushed at their commit point as parts of one logical
 * entry (op_entry.more), read by point lookups along their prevOpTime chain; a chain whose first entry has left the
 * oplog ends the reader with QUEUE_END_RESUME_LOST.
 * For the merge of several sources (core/merge.h) the entries of prepared transactions are tagged (op_entry.txn_role
 * and txn_key, source/txn.h txn_key_hash): the prepare entry (pushed as a noop) OP_TXN_PREPARE, every part of its
 * commitTransaction OP_TXN_COMMIT, an abortTransaction entry OP_TXN_ABORT. Other entries keep OP_TXN_NONE.
 * What each means for the process is the daemon's choice. Network errors, dead cursors and replica-set state
 * changes are retried (backoff 100 ms doubling to 5 s) by re-opening the cursor at the last position pushed and
 * checking it again, so nothing is lost or repeated.
 *
 * reader_stop sets a flag, wakes the thread (also from a blocked queue push, via queue_wake_pushers) and joins it:
 * this takes about one await_ms at most (a getMore in flight), or the connect timeout while MongoDB is unreachable,
 * or, should the network go silent during a getMore, the socket timeout (await_ms + 30 s unless the URI sets
 * socketTimeoutMS).
 * It does not stop the queue; that is the caller's choice. When the thread ends by itself (fatal item pushed, or the
 * queue stopped) reader_finished turns true.
 */
#ifndef OPLOG2PG_SOURCE_READER_H
#define OPLOG2PG_SOURCE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nsfilter.h"
#include "core/op.h"
#include "core/queue.h"
#include "map/map.h"

#define READER_DEFAULT_AWAIT_MS   1000
#define READER_DEFAULT_BATCH_SIZE 10000
/* What one getMore reply should weigh: the tailing cursor asks for as many entries as about this many bytes hold (at
 * most batch_size), judging by the entries of the batch before. A reply is held twice while it arrives (libmongoc's
 * receive buffer and the reply it copies), so a server's 16 MB replies cost 32 MB; 4 MB ones cost 8 and, at one
 * round trip per 4 MB, no measurable speed. */
#define READER_REPLY_BYTES (4 * 1024 * 1024)
/* The maxTimeMS of a getMore that follows a batch as large as asked: the oplog may have run dry exactly at its end,
 * and only a getMore that comes back under-full tells (QUEUE_IDLE). */
#define READER_PROBE_MS 5

typedef struct reader_config {
    const char *uri;        /* MongoDB connection string (copied); appname=oplog2pg is added unless it has one,
                             * retryReads is turned off, socketTimeoutMS is await_ms + 30 s unless it has one */
    op_pos start;           /* the last applied position, the committed checkpoint (term -1 when unknown) */
    int32_t await_ms;       /* maxTimeMS of each getMore; <= 0 means READER_DEFAULT_AWAIT_MS */
    int32_t batch_size;     /* batchSize of find and getMore; <= 0 means READER_DEFAULT_BATCH_SIZE */
    const nsfilter *filter; /* NULL = replicate everything; must outlive the reader */
    const map_set *maps;    /* typed maps (map/map.h): their ops are projected on the reader thread; NULL = none */
    unsigned decode_flags;  /* passed to decode_entry_ex (DECODE_KEEP_SYSTEM, DECODE_BORROW_PAYLOAD: then the raw
                             * payload is dropped once rendered, and only the text reaches the queue) */
    bool majority;          /* find with readConcern {level: "majority"}: only majority-committed entries are read
                             * (and none can be rolled back); false = "local", the primary's newest */
    bool has_hold;          /* the checkpoint's hold (op_entry.hold): the first entry of the oldest transaction that
                             * was open at `start`; the reader re-reads the chain heads from there to `start` so its */
    op_pos hold;            /* book of open transactions (source/txn.h) is complete from the first entry on */
    /* ---- several sources (a sharded cluster: one reader per shard, merged by core/merge.h) ---- */
    uint16_t source;      /* stamped on every entry pushed (op_entry.source): the shard's index; 0 = one replica set */
    bool start_after;     /* start at the first entry after `start` without requiring `start` itself to be in the
                           * oplog, and without its term check: a shard with no checkpoint of its own yet, started
                           * at a cluster time. Once an entry is pushed the reader resumes from it as usual (checked).
                           * An oplog that begins after `start` is read from its first entry (a warning says so:
                           * right for a shard whose oplog began later; the caller checks the window otherwise) */
    bool report_prepares; /* when the book is rebuilt (has_hold), push one note_only OP_TXN_PREPARE entry (a noop at
                           * the prepare's position, before anything else) per prepared transaction still open at
                           * `start`, so the merge counts its participant; a failed re-read is then retried (it is
                           * best effort otherwise) */
} reader_config;

/* Counters, safe to read from any thread (each field is read atomically; together they are a near snapshot). */
typedef struct reader_stats {
    uint64_t entries;    /* oplog entries pushed (the start entry, applied already, is skipped, not pushed) */
    bool have_last;      /* last holds something */
    op_pos last;         /* position of the last entry pushed (or the start position before that) */
    uint64_t reconnects; /* cursor re-opens after an error or a dead cursor */
    uint64_t idles;      /* QUEUE_IDLE items pushed */
    /* Transactions written over several entries seen open (their commit not read yet; source/txn.h): how many, the
     * oplog bytes of their entries read so far, and the first entry of the oldest (when txn_open > 0). */
    uint64_t txn_open, txn_bytes;
    op_pos txn_oldest;
} reader_stats;

typedef struct reader reader;

/* Defaults: start 0:0, await 1000 ms, batch 10000, no filter. */
void reader_config_init(reader_config *cfg);

/* Parses the URI, creates the client and starts the thread. NULL with a message in err on a bad URI or a thread
 * failure. q must outlive the reader. */
reader *reader_start(const reader_config *cfg, queue *q, char *err, size_t errlen);

/* Asks the thread to end and joins it (idempotent). Items already pushed stay in the queue. */
void reader_stop(reader *r);
/* Asks the thread to end without waiting for it: a getMore under way still runs to its end (up to await_ms), and
 * the thread may push nothing more. reader_stop or reader_free joins it later; q must live until then. */
void reader_ask_stop(reader *r);

/* reader_stop, then frees. NULL is fine. */
void reader_free(reader *r);

/* True once the thread has ended (by itself or through reader_stop). */
bool reader_finished(const reader *r);

void reader_get_stats(const reader *r, reader_stats *out);

#endif
