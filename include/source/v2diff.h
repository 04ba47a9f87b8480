/*
 * v2diff.h — checks the structure of a `$v:2` update diff before the decoder accepts the update.
 *
 * MongoDB 5.0 and later log an update that does not replace the whole document as o = {$v: 2, diff: D}: the changes
 * to the document, not the operators that made them. The decoder (source/decode.h) hands D here; PostgreSQL applies
 * it later (src/map/update_functions.sql).
 *
 * The format. D, an object diff, holds sections, each a sub-document, in this order and each at most once:
 *   d   fields deleted                          {name: false, ...}
 *   u   fields given a new value in place       {name: value, ...}
 *   i   fields added at the end of the document {name: value, ...}
 *   b   binary fields changed in part (8.x)     {name: {o: offset, d: BinData}, ...}
 * then any number of sub-diffs `s<name>`, one per field of the document that changed inside (a sub-document or an
 * array); once the first sub-diff has come, only sub-diffs may follow. A sub-diff is itself an object diff, or an
 * array diff when its first field is `a`:
 *   {a: true, l: <int32 new length, optional, right after `a`>, u<index>: value, s<index>: <sub-diff>, ...}
 * with every index in decimal. The top level is always an object diff (a leading `a` there is an unknown section).
 * A field name may appear only once per level of an object diff, counting d, u, i, b and the sub-diff names
 * together. Example: {$set: {"x.0": 5}, $unset: {y: 1}} on {x: [1], y: 2} is logged as
 * {d: {y: false}, sx: {a: true, u0: 5}}.
 *
 * The checks and their error codes are the server's: DocumentDiffReader and ArrayDiffReader in mongodb/mongo
 * src/mongo/db/update/document_diff_serialization.cpp, and the applier's duplicate-name check (4728000) in
 * src/mongo/db/update/document_diff_applier.cpp. The codes, by check:
 *   4770500 an empty diff at any level          4770505 a section with an empty name
 *   4770503 an unknown, repeated or misplaced section (also `a` at the top)
 *   4770507 a section that is not a document, or an `l` that is not an int32
 *   4770514 a section other than s<name> after the sub-diffs began
 *   470510  a later s<name> that is not a document (the server's code really has six digits)
 *   4728000 a field name twice in one level
 *   4770504 an array diff whose first field is not `a`; 4770519 `a` not a bool; 4770520 `a` false
 *   4770521 an array diff field shorter than two characters; 4770512 an index that is not a decimal number
 *   4770502 an array diff field that is neither u<index> nor s<index>; 4770501 an s<index> that is not a document
 * The first fault found is the one reported. This walk checks one level's sections and names (duplicates
 * included) before it enters that level's sub-diffs, while the server reads the first level of each sub-diff as it
 * meets it; so when a diff has several faults, the code reported may differ from the server's.
 *
 * Limits:
 * - Structure only: values are never looked at (a `d` entry's value, what `u` and `i` set), and no document is at
 *   hand, so whether the diff fits the document it will be applied to (a sub-diff on a field that is not a
 *   sub-document, an index past the end) is for the applier to find out.
 * - A `b` entry must be {o: int32 or int64, d: BinData}; the server's codes for that are not known here, so such a
 *   fault has code 0.
 * - Also code 0, as the server has no such check: sub-diffs nested deeper than V2DIFF_MAX_DEPTH levels (the bound
 *   on this walk's recursion) and a section that is not valid BSON.
 * - Memory running out (a level with more than 32 field names keeps their list on the heap while it is checked) is
 *   not a fault of the diff: code V2DIFF_NOMEM, so the caller retries instead of refusing the entry.
 * - An array index must fit in 32 bits; a larger one is refused with 4770512, where the server's parser would take
 *   any 64-bit value.
 */
#ifndef OPLOG2PG_SOURCE_V2DIFF_H
#define OPLOG2PG_SOURCE_V2DIFF_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sub-diffs nested deeper than this are refused (code 0). */
#define V2DIFF_MAX_DEPTH 200
/* The code when the check itself ran out of memory (the diff may be fine). */
#define V2DIFF_NOMEM (-1)

/* Checks diff, the value of o.diff. True when its structure is sound (and *code is then 0). Otherwise false: *code
 * gets the server's error code for the failed check (0 when it has none, see above) and err a one-line reason that
 * names the code and where in the diff the fault is, as "invalid $v:2 diff [4770503] at diff.sa: unexpected
 * section 'x'" (without the bracket when the code is 0). code and err may be NULL. */
bool v2diff_validate(const bson_t *diff, int32_t *code, char *err, size_t errlen);

#endif
