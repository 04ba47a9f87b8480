/*
 * status.h — what became of an attempt to apply something: the one vocabulary the batcher, the sink and the daemon
 * share (the sink builds on it; the daemon turns it into retries, dead letters or exit codes).
 *
 * The rule it encodes: only APPLY_DATA — PostgreSQL refusing the op's own data — may ever set an op aside as a dead
 * letter. Everything a retry could cure (a lost connection, a lock or statement timeout, a deadlock, a full disk,
 * memory running out on either side) is APPLY_RETRY or APPLY_NOMEM: the session ends without committing and the next
 * one resumes from the committed checkpoint. What a person must fix stops the process with a documented exit code.
 */
#ifndef OPLOG2PG_CORE_STATUS_H
#define OPLOG2PG_CORE_STATUS_H

typedef enum apply_status {
    APPLY_OK = 0,
    APPLY_RETRY,        /* a passing fault: end the session uncommitted, back off, resume from the checkpoint */
    APPLY_DATA,         /* PostgreSQL refuses this op's data (or oplog2pg cannot render it): find it, then set it
                         * aside, or stop before it ([replication] on_error) */
    APPLY_NOMEM,        /* an allocation of oplog2pg's own failed: like APPLY_RETRY, never a dead letter */
    APPLY_CONFIG,       /* a person must act on PostgreSQL (login, privileges, a table oplog2pg does not own): exit 3 */
    APPLY_FENCED,       /* another oplog2pg holds this service: exit 6 */
    APPLY_UNRECORDABLE, /* an op was refused and could not even be recorded as a dead letter: exit 5 */
    APPLY_REWIND,       /* not a fault: the group must be applied again from the checkpoint, at once (a COPY met a
                         * duplicate _id after it had let go of its rows, or a plain insert met one; sink/pg.h,
                         * sink_stream_let_go and sink_keep_rows_until) */
} apply_status;

/* "ok", "retry", "data", "out of memory", "needs a person", "fenced", "unrecordable", "rewind". */
const char *apply_status_name(apply_status st);

#endif
