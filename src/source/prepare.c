/*
 * prepare.c — see prepare.h.
 */
#include "source/prepare.h"

#include "map/ejson.h"
#include "map/project.h"
#include "source/decode.h"

source_prepare_status source_prepare_entry(op_entry *e, const nsfilter *f, const map_set *maps, char *err,
                                           size_t errlen)
{
    if (!nsfilter_filter_entry(f, e, err, errlen))
        return SOURCE_PREPARE_REFUSED;
    decode_log_notices(e);
    /* Render the PostgreSQL text here, on the reading thread, so the apply loop overlaps with PostgreSQL instead of
     * converting while PostgreSQL waits. An op whose text cannot be made carries the reason (op.refusal). */
    if (!map_prepare_entry(e, maps) || !ejson_prepare_entry(e))
        return SOURCE_PREPARE_NOMEM;
    op_entry_drop_payload(e); /* a borrowed payload lives in the raw entry, which goes soon */
    return SOURCE_PREPARE_OK;
}
