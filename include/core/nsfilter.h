/*
 * nsfilter.h — which MongoDB namespaces oplog2pg replicates.
 *
 * A filter is compiled once from the [replication] include and exclude pattern lists and then asked about every op
 * on the hot path, so matching never allocates. A pattern is "DB.COLL" where each part is an exact name or a glob
 * with `*` (any run of characters, possibly empty) and `?` (exactly one character). The database part never holds a
 * dot, so a pattern splits at its first dot: "shop.a.b" is database "shop", collection "a.b", and a `*` in the
 * collection part also matches dots. A namespace is replicated when it matches some include pattern and no exclude
 * pattern. Names are compared byte for byte (MongoDB names are case-sensitive).
 */
#ifndef OPLOG2PG_CORE_NSFILTER_H
#define OPLOG2PG_CORE_NSFILTER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/op.h"

typedef struct nsfilter nsfilter;

/* Compile the patterns. Both lists are NULL-terminated arrays of patterns; NULL means an empty list. An empty
 * include list matches nothing. Returns NULL with a message in err (naming the pattern) when a pattern is malformed
 * (no dot, an empty part, a space or control character) or memory runs out. */
nsfilter *nsfilter_new(const char *const *include, const char *const *exclude, char *err, size_t errlen);

/* Checks one pattern as nsfilter_new would (used by the configuration to reject a bad pattern at its line). */
bool nsfilter_check_pattern(const char *pattern, char *err, size_t errlen);

/* True when namespace db.coll is replicated. db and coll are NUL-terminated; no allocation, no side effect. The
 * temporary collection of a rename across databases ("tmp" + 5 characters + ".renameCollection") is replicated
 * whenever a collection of its database may be (nsfilter_match_db). */
bool nsfilter_match(const nsfilter *f, const char *db, const char *coll);

/* The same for a whole namespace "db.coll" (split at its first dot; a namespace without a dot never matches). */
bool nsfilter_match_ns(const nsfilter *f, const char *ns);

/* True when a collection of db may be replicated: some include pattern's database part matches db and no exclude
 * pattern takes the whole database (db.*). */
bool nsfilter_match_db(const nsfilter *f, const char *db);

/* The namespaces oplog2pg never replicates, whatever the patterns: the admin, local and config databases and
 * collections named system.* (coll may be NULL: the database alone). The one place that says so. */
bool ns_is_internal(const char *db, size_t dblen, const char *coll, size_t colllen);

/* Turns the ops of a decoded entry whose namespace the filter rejects into OP_NOOP (keeping pos and index), so the
 * checkpoint still moves past them and an excluded namespace gets no DDL at all. dropDatabase is kept when some
 * include pattern can match the database (it drops only the tables this service made there). A rename between two
 * replicated namespaces is kept; one out of the filter becomes an OP_DROP of its source (reason says why); one into
 * the filter cannot be applied from the oplog: false, with a sentence naming both and the remedy in err. A rename's
 * temporary collection ("tmpXXXXX.renameCollection", see nsfilter_match) is replicated wherever its database may be.
 * f NULL keeps everything. */
bool nsfilter_filter_entry(const nsfilter *f, op_entry *e, char *err, size_t errlen);

/* The databases the include patterns name, when every include pattern names its database exactly (no `*` or `?` in
 * its database part): calls fn once per include pattern with that database (a database may come more than once) and
 * returns true. False, without a call, when some include pattern's database part is a glob, or f is NULL (everything
 * is replicated). For a source that can ask its server for those databases only (a change stream's $match); the
 * filter itself still decides every op. */
bool nsfilter_each_exact_db(const nsfilter *f, void (*fn)(const char *db, size_t len, void *arg), void *arg);

void nsfilter_free(nsfilter *f);

#endif
