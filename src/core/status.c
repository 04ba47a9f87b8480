/*
 * status.c — names of the apply statuses (see status.h).
 */
#include "core/status.h"

const char *apply_status_name(apply_status st)
{
    switch (st) {
    case APPLY_OK:
        return "ok";
    case APPLY_RETRY:
        return "retry";
    case APPLY_DATA:
        return "data";
    case APPLY_NOMEM:
        return "out of memory";
    case APPLY_CONFIG:
        return "needs a person";
    case APPLY_FENCED:
        return "fenced";
    case APPLY_UNRECORDABLE:
        return "unrecordable";
    case APPLY_REWIND:
        return "rewind";
    }
    return "?";
}
