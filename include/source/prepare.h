/*
 * prepare.h — what every source does to a decoded entry before it hands it on, written once for the oplog reader
 * (source/oplog/reader.h) and the change-stream reader (source/stream/stream.h): the namespace filter turns the ops of
 * namespaces not replicated into noops (core/nsfilter.h), the notices of the decoder are logged, the PostgreSQL text
 * is rendered on the reading thread (typed maps, map/project.h; then Extended JSON, map/ejson.h), and a payload
 * borrowed from the raw entry (DECODE_BORROW_PAYLOAD) is dropped, so the raw entry may go.
 */
#ifndef OPLOG2PG_SOURCE_PREPARE_H
#define OPLOG2PG_SOURCE_PREPARE_H

#include <stddef.h>

#include "core/nsfilter.h"
#include "core/op.h"
#include "map/map.h"

typedef enum source_prepare_status {
    SOURCE_PREPARE_OK = 0,
    SOURCE_PREPARE_REFUSED, /* the filter cannot apply the entry (a rename into the filter): err says why */
    SOURCE_PREPARE_NOMEM,   /* memory ran out rendering it */
} source_prepare_status;

/* Filters, logs the notices of, renders and drops the borrowed payload of e (see above). On a failure e is left as
 * it was partly done: the caller frees it. f and maps may be NULL. */
source_prepare_status source_prepare_entry(op_entry *e, const nsfilter *f, const map_set *maps, char *err,
                                           size_t errlen);

#endif
