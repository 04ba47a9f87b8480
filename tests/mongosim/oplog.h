/*
 * oplog.h — mongosim's local.oplog.rs: entries stored as contiguous BSON in one growing buffer, indexed by ts.
 *
 * Every entry ever appended has a sequence number (seq), counted from 0 at start; entries removed from the front
 * (capping, truncation) keep the numbering, so a cursor holding a seq can tell that its position was deleted.
 * Timestamps are packed as uint64 (seconds << 32 | increment), which orders like the BSON Timestamp.
 */
#ifndef MONGOSIM_OPLOG_H
#define MONGOSIM_OPLOG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sim_oplog sim_oplog;

#define OPLOG_TS(secs, inc) (((uint64_t)(secs) << 32) | (uint32_t)(inc))
#define OPLOG_TS_SECS(ts)   ((uint32_t)((ts) >> 32))
#define OPLOG_TS_INC(ts)    ((uint32_t)((ts)&0xffffffffu))

sim_oplog *oplog_new(void);
void oplog_free(sim_oplog *log);

/* Live entries are [oplog_first_seq, oplog_end_seq). */
uint64_t oplog_first_seq(const sim_oplog *log);
uint64_t oplog_end_seq(const sim_oplog *log);
uint64_t oplog_count(const sim_oplog *log);
/* Raw BSON of a live entry; seq must be live. */
const uint8_t *oplog_entry(const sim_oplog *log, uint64_t seq, uint32_t *len);
uint64_t oplog_entry_ts(const sim_oplog *log, uint64_t seq);
/* ts of the newest entry ever appended (0 when none). */
uint64_t oplog_last_ts(const sim_oplog *log);
/* First live seq whose ts is >= ts (inclusive) or > ts; oplog_end_seq when none (binary search). */
uint64_t oplog_seek(const sim_oplog *log, uint64_t ts, bool inclusive);

/* Next timestamp for a new entry: Timestamp(max(now, last.secs), inc), inc restarting at 1 each new second. */
uint64_t oplog_next_ts(const sim_oplog *log, int64_t now_secs);

/* Append one complete entry (raw BSON, len bytes) whose ts field is `ts`; ts must be > oplog_last_ts. */
bool oplog_append(sim_oplog *log, const uint8_t *doc, uint32_t len, uint64_t ts, bson_error_t *err);

/* Append a document with ts, t (int64), v (int64 2) and wall (date) added at its end, in one copy. */
bool oplog_append_stamped(sim_oplog *log, const uint8_t *doc, uint32_t len, uint64_t ts, int64_t term, int64_t wall_ms,
                          bool add_t, bool add_v, bool add_wall, bson_error_t *err);

/* Remove entries with ts < ts. */
void oplog_truncate_before(sim_oplog *log, uint64_t ts);
/* Remove entries with ts > ts (a rollback); the next timestamp continues from the newest entry left. Seqs of the
 * removed entries are given to the entries appended next. */
void oplog_truncate_after(sim_oplog *log, uint64_t ts);
/* Remove the oldest entries until at most max remain (max 0 = unlimited). */
void oplog_cap(sim_oplog *log, uint64_t max);

/* Concatenated BSON of the live entries (mongodump layout); load appends verbatim, entries must have increasing ts. */
bool oplog_save_file(const sim_oplog *log, const char *path, bson_error_t *err);
bool oplog_load_file(sim_oplog *log, const char *path, bson_error_t *err);

#endif
