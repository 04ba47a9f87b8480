/*
 * projection.h — find projections as a MongoDB 7.0 server parses and applies them: inclusion, exclusion, and the
 * find-only $slice (n or [skip, limit]), with the server's error codes for invalid projections. Valid forms that
 * mongosim does not execute ($elemMatch, $meta, positional `a.$`, aggregation expressions and literals) are refused
 * with 2 BadValue. See projection.c for the rules and their sources.
 */
#ifndef MONGOSIM_PROJECTION_H
#define MONGOSIM_PROJECTION_H

#include <bson/bson.h>
#include <stdbool.h>

typedef struct sim_projection sim_projection;

/* A parse error: the server's code (its codeName from projection_code_name or sim_code_name) and message. */
typedef struct {
    int code;
    char message[1024];
} sim_proj_error;

/* Parses a find command's `projection`. An empty spec is no projection: *out is NULL and the call succeeds. On
 * error, returns false with err filled and *out NULL. */
bool projection_parse(const bson_t *spec, sim_projection **out, sim_proj_error *err);
/* Writes the projection of doc into out, which must be an initialized empty bson_t. */
void projection_apply(const sim_projection *p, const bson_t *doc, bson_t *out);
void projection_free(sim_projection *p);
/* "Location<code>" for the codes without a name that the parser returns; NULL for any other code. */
const char *projection_code_name(int code);

#endif
