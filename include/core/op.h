/*
 * op.h — one decoded oplog change, the unit the reader hands to the batcher and the PostgreSQL sink.
 *
 * The decoder (source/decode.h) turns one raw `local.oplog.rs` entry into an op_entry: its position plus one op, or
 * several for an applyOps. Everything an op points at lives in memory the op owns (one buffer per op), so the raw
 * entry may be freed as soon as decoding returns; the one exception is a payload borrowed with
 * DECODE_BORROW_PAYLOAD (doc_borrowed), which lives in the raw entry until op_entry_drop_payload.
 *
 * NOTES
 * - Allocation: decoding an entry costs one calloc for the op array and, per op, one malloc for its buffer
 *   (namespace strings and copies of `o`/`o2`) unless that fits the op's inline buffer (buf_inline). Decoding keeps
 *   nothing else; checking a $v:2 diff with more than 32 field names on one level allocates a temporary list, freed
 *   before decoding returns. The PostgreSQL-side text rendered afterwards, on the reader thread (json, id_key,
 *   refusal, mapped), is allocated apart (a short id_key lives in key_inline) and freed with the op.
 * - Documents are kept as (pointer, length) into that buffer rather than as bson_t members: libbson here is built
 *   with BSON_EXTRA_ALIGN, which makes bson_t 128-byte aligned and 128 bytes long, so two of them would triple the
 *   size of an op and require aligned allocation. Iterate with bson_iter_init_from_data(&it, op->doc, op->doc_len)
 *   or get a read-only bson_t view with op_doc_view()/op_key_view().
 * - `id` is a bson_value_t whose data pointers (strings, documents, binary) point into the op's buffer (into the
 *   borrowed payload for an insert decoded with DECODE_BORROW_PAYLOAD): it is valid while the op lives (while the
 *   payload does) and must NOT be passed to bson_value_destroy(). Use bson_value_copy() to keep it longer.
 * - Positions order by (secs, inc) only; the term is carried for rollback detection, not for ordering.
 */
#ifndef OPLOG2PG_CORE_OP_H
#define OPLOG2PG_CORE_OP_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An oplog position: the entry's `ts` Timestamp (seconds, increment) and its `t` term (-1 when absent, pv0). */
typedef struct op_pos {
    uint32_t secs;
    uint32_t inc;
    int64_t term;
} op_pos;

/* Enough for "4294967295:4294967295" and the NUL. */
#define OP_POS_STRLEN 24

/* <0, 0, >0 as a is before, at, after b, comparing (secs, inc); the term is ignored. */
int op_pos_cmp(const op_pos *a, const op_pos *b);

/* Writes "secs:inc" into buf (at least OP_POS_STRLEN bytes is always enough) and returns buf. */
const char *op_pos_format(const op_pos *p, char *buf, size_t len);

typedef enum op_kind {
    OP_NOOP = 0,      /* nothing to apply; only advances the checkpoint (reason says why) */
    OP_INSERT,        /* doc = the full document (o); key = o2 when present (8.0+: _id + shard key) */
    OP_UPDATE,        /* doc = o as logged (see form); key = o2 (the document key, _id + shard key) */
    OP_DELETE,        /* doc = key = o (the document key) */
    OP_CREATE,        /* coll created; doc = the whole command `o` (options: capped, validator, collation, ...) */
    OP_DROP,          /* coll dropped */
    OP_RENAME,        /* db.coll renamed to to_db.to_coll; drop_target when an existing target was dropped */
    OP_DROP_DATABASE, /* every collection of db dropped (4.4+ logs one OP_DROP per collection before it) */
    OP_TRUNCATE,      /* all documents of coll removed, collection kept (the legacy emptycapped command) */
} op_kind;

/* How an OP_UPDATE's `o` is written: the decoder tells the forms apart by `$v` and the first field name (see
 * classify_update in source/decode.c). */
typedef enum op_update_form {
    OP_FORM_NONE = 0, /* not an update */
    OP_FORM_REPLACE,  /* o is the full new document */
    OP_FORM_MODIFIER, /* o is {$set: {...}, $unset: {...}} ($v:1, or no $v and $-keys) */
    OP_FORM_DIFF,     /* o is {$v: 2, diff: D}; D has been validated structurally */
} op_update_form;

typedef struct op {
    op_kind kind;
    op_update_form form; /* OP_UPDATE only */
    op_pos pos;          /* the entry's position (shared by every op of an applyOps) */
    uint32_t index;      /* index inside the entry's applyOps array; 0 for a plain entry */
    bool upsert;         /* OP_UPDATE with `b: true` (applyOps alwaysUpsert) */
    bool drop_target;    /* OP_RENAME: an existing target collection was dropped first */
    bool notice;         /* OP_NOOP: an entry a user should hear of once (a view, a time-series collection) */
    bool bucket;         /* a time-series collection's bucket op (source/decode.h, DECODE_KEEP_SYSTEM): db.coll is the
                          * collection (the view's name), doc the bucket document, its change or the create command;
                          * the sink turns it into rows of measurements (sink/tseries.c) */
    const char *reason;  /* OP_NOOP: a static string saying why (never NULL for a NOOP); OP_DROP: set when the drop
                          * stands for a rename out of the filter (core/nsfilter.h), to_db/to_coll then kept */

    /* Namespace, NUL-terminated, in the op's buffer. NULL when the kind has none (NOOP, DROP_DATABASE has db only). */
    const char *db;
    const char *coll;
    const char *to_db; /* OP_RENAME only */
    const char *to_coll;

    bson_value_t id; /* data ops: the document's _id (a view into buf or the borrowed doc; see NOTES);
                      * BSON_TYPE_EOD otherwise */

    const uint8_t *doc; /* payload document (see op_kind), NULL when none */
    uint32_t doc_len;
    const uint8_t *key; /* document key (o2 for updates/8.0 inserts, o for deletes), NULL when none */
    uint32_t key_len;

    uint8_t *buf; /* owns everything above, except a borrowed doc; points at buf_inline when that holds it all */
    uint32_t buf_len;
    bool doc_borrowed; /* doc points into the raw entry it was decoded from (DECODE_BORROW_PAYLOAD) */

    /* The PostgreSQL-side text, prepared on the thread that read the entry (map/ejson.h) so the apply loop only moves
     * it on: INSERT: json = the document as relaxed Extended JSON; UPDATE: json = o; INSERT, UPDATE, DELETE: id_key =
     * the key text of the _id. NULL when not prepared (the sink then makes them itself). refusal, when set, says why
     * the op cannot be written at all (a string that is not UTF-8, a document nested too deep): PostgreSQL is never
     * asked, and the op is refused as data with that reason (a dead letter; with on_error = stop, exit 1 with
     * everything before it committed). All malloc'd, and freed by op_clear and op_entry_clear. */
    char *json;
    uint32_t json_len;
    char *id_key; /* points at key_inline when the key text is short */
    uint32_t id_key_len;
    char *refusal;

    /* An op of a collection with a typed map (map/map.h): its rows or its update plan (a map_plan, map/project.h),
     * prepared on the thread that read the entry, as json is for the others (json and id_key stay NULL then).
     * `map` is the collection's map; `mapped` is owned and freed with mapped_free; mapped_bytes is what it holds in
     * memory, mapped_len what of it goes to PostgreSQL (its rows and values: what batch_bytes counts). */
    const void *map;
    void *mapped;
    void (*mapped_free)(void *mapped);
    uint32_t mapped_bytes;
    uint32_t mapped_len;

    /* Storage for a short id_key and a small buf (the namespace of an insert whose payload is borrowed), so that the
     * common op costs no allocation for them: an op is made on the reader thread and freed on the apply loop, and
     * each such allocation is memory crossing threads. Pointers into these stay valid as long as the op does not
     * move (ops live in their entry's array, which is never copied). */
    char key_inline[48];
    uint8_t buf_inline[48];
} op;

/* One decoded oplog entry. ops[i].index == i for an entry of its own; for a part of a larger logical entry (more, or
 * a last part) the indexes number the ops across all its parts. For a plain entry n == 1.
 *
 * Parts: a logical entry too large to be held at once (a MongoDB transaction written over several oplog entries,
 * source/txn.h) reaches the batcher as several op_entry items with the same pos, each but the last with `more` set.
 * The batcher never commits after a part with `more` (core/batcher.h), so the whole logical entry commits, with its
 * position, in one PostgreSQL transaction; the queue holds at most a few parts at a time.
 *
 * hold: the oldest position a restart from this entry would still have to read (the first entry of the oldest
 * transaction still open after this entry), when has_hold; it travels with the checkpoint (core/batcher.h).
 *
 * Several sources (the shards of a sharded cluster) are read by one reader each and merged into one stream
 * (core/merge.h); the fields after `hold` serve that merge and are all zero for a replica set:
 * - source: the index of the source that read the entry (0 for a replica set), the batcher's key for per-source
 *   positions (batcher_source_pos);
 * - no_commit: set by the merge when a transaction across sources is partly handed on: the stream must not commit
 *   right after this entry (the batcher treats it as `more` for commits, and for nothing else);
 * - txn_role, txn_key: what the entry is to a prepared transaction (op_txn_role), set by the reader on a prepare
 *   entry (pushed as a noop), on every part of a prepared transaction's commit (the last part has no `more`) and on
 *   an abortTransaction entry; txn_key identifies the transaction (a hash of its lsid.id and txnNumber), the same
 *   on every participant;
 * - note_only: an OP_TXN_PREPARE entry at or before the source's checkpoint, pushed on a restart only to tell the
 *   merge of a prepared transaction still open there: the merge counts it and never hands it on. */
typedef enum op_txn_role {
    OP_TXN_NONE = 0,
    OP_TXN_PREPARE, /* a participant prepared the transaction (a noop for the apply) */
    OP_TXN_COMMIT,  /* a part of a prepared transaction's commit (its ops); the part without `more` ends it */
    OP_TXN_ABORT,   /* a participant aborted the prepared transaction */
} op_txn_role;

typedef struct op_entry {
    op_pos pos;
    op *ops;
    size_t n;
    bool atomic; /* the ops must be applied in one PostgreSQL transaction (see source/decode.h) */
    bool more;   /* a part, and more parts of the same logical entry follow: no commit after it */
    bool has_hold;
    op_pos hold;
    uint16_t source;  /* the source that read it (a shard's index; 0 for a replica set) */
    bool no_commit;   /* set by the merge: no commit right after this entry (a cross-source transaction is open) */
    bool note_only;   /* an OP_TXN_PREPARE note for the merge only, never applied (see above) */
    uint8_t txn_role; /* op_txn_role */
    uint64_t txn_key; /* the prepared transaction's identity when txn_role != OP_TXN_NONE */
    /* A change stream's resume point after this entry (source/stream/): the raw BSON of the resume token (the last
     * event's `_id`, or a post-batch resume token), malloc'd and owned by the entry (op_entry_clear frees it); NULL
     * for the oplog. core/ carries it to the commit (batcher_sink.set_token) without reading it. */
    uint8_t *token;
    uint32_t token_len;
} op_entry;

/* Sets an entry to empty (no ops, term -1, source 0, no txn_role, every flag false) without freeing anything: for a
 * new entry; op_entry_clear frees. */
void op_entry_init(op_entry *e);

/* Allocates n zeroed ops (n >= 1) for a new entry at pos; index and pos are set on each. False on OOM. */
bool op_entry_alloc(op_entry *e, const op_pos *pos, size_t n);

/* Frees what every op owns (as op_clear), the op array and the token, and leaves the entry empty (as op_entry_init).
 * Safe on an empty entry, and on NULL. */
void op_entry_clear(op_entry *e);

/* op_entry_clear, then free(e) itself (for heap-allocated entries). NULL is fine. */
void op_entry_free(op_entry *e);

/* The bytes an entry holds in memory: its ops, their buffers (raw BSON and names) and their rendered text. */
size_t op_entry_bytes(const op_entry *e);
/* The entry changes nothing: every op a noop (a periodic noop, an oplog note, a migration's copy, a transaction's
 * partial entry), and it plays no part in a transaction (no txn_role, not one of several parts). */
bool op_entry_changes_nothing(const op_entry *e);

/* Forgets every borrowed payload (DECODE_BORROW_PAYLOAD), once the text is rendered and before the raw entry goes:
 * doc becomes NULL, and an insert's id (a view into it) becomes BSON_TYPE_EOD; the rendered text stays. */
void op_entry_drop_payload(op_entry *e);

/* Frees everything one op owns (buffer, json, id_key, refusal) and zeroes it except pos/index (id becomes
 * BSON_TYPE_EOD). */
void op_clear(op *o);

/* Read-only bson_t views on the op's documents (bson_init_static: no allocation, valid while the op lives, no
 * bson_destroy needed). False when the op has no such document. */
bool op_doc_view(const op *o, bson_t *view);
bool op_key_view(const op *o, bson_t *view);

/* Short names for logs: "insert", "update", ...; "replace", "modifier", "diff". */
const char *op_kind_name(op_kind k);
const char *op_form_name(op_update_form f);

#endif
