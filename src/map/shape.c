/*
 * shape.c — the CREATE statements of a replicated collection's table (see shape.h).
 */
#include "map/shape.h"

#include <stdio.h>
#include <stdlib.h>

char *shape_schema_sql(const char *qschema)
{
    char *sql = NULL;
    if (asprintf(&sql, "CREATE SCHEMA IF NOT EXISTS %s", qschema) < 0)
        return NULL;
    return sql;
}

char *shape_table_sql(const char *qtable)
{
    char *sql = NULL;
    if (asprintf(&sql, "CREATE TABLE IF NOT EXISTS %s (_id text COLLATE \"C\" PRIMARY KEY, doc jsonb NOT NULL)",
                 qtable) < 0)
        return NULL;
    return sql;
}
