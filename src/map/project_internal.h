/*
 * project_internal.h — what project.c (rows) and plan.c (update plans) share.
 */
#ifndef OPLOG2PG_MAP_PROJECT_INTERNAL_H
#define OPLOG2PG_MAP_PROJECT_INTERNAL_H

#include "map/convert.h"
#include "map/project.h"

size_t project_table_number(const map_collection *m, const map_table *t);
/* The field number of a table's first column (2 for a child table: parent key and position come first). */
size_t project_first_column(const map_table *t);
bool project_lookup(const uint8_t *data, size_t len, char *const *parts, size_t n, bson_value_t *out);
map_on_type_error project_on_type_error(const map_table *t, const map_column *c);
/* Appends the binary array of v (an array) for array type t, its elements the type cannot take as NULL elements
 * (counted in nulled): on_type_error = null for an array column. CONVERT_TYPE_ERROR when v is not an array. */
convert_status project_array_lenient(strbuf *out, const map_type *t, const bson_value_t *v, uint64_t *nulled);
project_status project_field(const map_table *t, const map_column *c, const bson_value_t *v, strbuf *out,
                             uint64_t *nulled, char *why, size_t whylen);
/* Whether a column or child path of t goes through field key below prefix[0..depth): *leaf when one ends there,
 * *inner when one goes on below it. */
void project_path_role(const map_table *t, char *const *prefix, size_t depth, const char *key, bool *leaf,
                       bool *inner);
/* The document (data, len) at prefix[0..depth) without the fields columns and child tables take (bson_init'd into
 * out; prefix needs room for 65 entries). */
project_status project_strip(const map_table *t, const uint8_t *data, size_t len, char **prefix, size_t depth,
                             bson_t *out);
/* The record of one row of t for the document (data, len) (NULL: an element that is null: every column NULL), and
 * its child tables' rows. key is the parent key as a framed field; pos the position for a child row. */
project_status project_row(const map_collection *m, const map_table *t, const uint8_t *data, size_t len,
                           const uint8_t *key, size_t key_len, int64_t pos, map_rows *out, uint64_t *nulled,
                           char *why, size_t whylen);
/* The rows of child table ch for the array arr, from position `from` on. */
project_status project_child_rows(const map_collection *m, const map_child *ch, const bson_value_t *arr,
                                  uint32_t from, const uint8_t *key, size_t key_len, map_rows *out, uint64_t *nulled,
                                  char *why, size_t whylen);
/* The row of child table ch for one element. */
project_status project_element(const map_collection *m, const map_child *ch, const bson_iter_t *el, uint32_t pos,
                               const uint8_t *key, size_t key_len, map_rows *out, uint64_t *nulled, char *why,
                               size_t whylen);

#endif
