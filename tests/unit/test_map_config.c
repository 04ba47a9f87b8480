/*
 * test_map_config.c — the column maps in the configuration (daemon/config_map.h, map/map_set.c): a full map read
 * field by field, the defaults (the key column oplog2pg adds among them), every error with its FILE:LINE, the `map`
 * command's text and JSON (parsed back), `config` printing the map so that it reads back the same, reload keeping
 * the running map, and the examples of conf/oplog2pg.ini and docs/mapping.md loading as written (run from the
 * repository root).
 */
#include <bson/bson.h>
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/textfile.h"
#include "daemon/config.h"
#include "daemon/config_map.h"
#include "map/map.h"

/* ---- helpers ----------------------------------------------------------------------------------------------------- */

static void write_tmp(char *path, const char *text)
{
    strcpy(path, "/tmp/oplog2pg-test-map-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "mkstemp failed");
    size_t n = strlen(text);
    ck_assert(write(fd, text, n) == (ssize_t)n);
    close(fd);
}

/* Loads text through a real file, so that messages carry a file name and line numbers. */
static bool load_text(const char *text, config *c, char *err, size_t errlen, char *path_out)
{
    char path[64];
    write_tmp(path, text);
    if (path_out != NULL)
        strcpy(path_out, path);
    bool ok = config_load(path, c, err, errlen);
    unlink(path);
    return ok;
}

static void load_ok(const char *text, config *c)
{
    char err[1024] = "";
    ck_assert_msg(load_text(text, c, err, sizeof err, NULL), "load failed: %s\n%s", err, text);
}

/* The 1-based number of the first line of text that contains marker. */
static int line_of(const char *text, const char *marker)
{
    const char *at = strstr(text, marker);
    ck_assert_msg(at != NULL, "marker \"%s\" not in the text", marker);
    int line = 1;
    for (const char *p = text; p < at; p++)
        line += *p == '\n';
    return line;
}

/* Loading text fails with "FILE:LINE: " where LINE is that of marker, and the message contains needle. */
static void expect_error(const char *text, const char *marker, const char *needle)
{
    char err[1024] = "", path[64], want[128];
    config c;
    memset(&c, 0, sizeof c);

    ck_assert_msg(!load_text(text, &c, err, sizeof err, path), "accepted:\n%s", text);
    snprintf(want, sizeof want, "%s:%d: ", path, line_of(text, marker));
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error \"%s\" does not start with \"%s\"\n%s", err, want,
                  text);
    ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" lacks \"%s\"", err, needle);
    ck_assert_msg(c.maps.n == 0 && c.service == NULL, "a failed load wrote into the output");
}

static const map_column *column(const map_table *t, const char *name)
{
    for (size_t i = 0; i < t->ncols; i++)
        if (strcmp(t->cols[i].name, name) == 0)
            return &t->cols[i];
    ck_abort_msg("no column %s in %s.%s", name, t->name.schema, t->name.table);
    return NULL;
}

static void check_column(const map_table *t, const char *name, const char *type, const char *path,
                         map_on_type_error ote, int line)
{
    char buf[64];
    const map_column *c = column(t, name);
    ck_assert_str_eq(map_type_sql(&c->type, buf, sizeof buf), type);
    ck_assert_str_eq(c->path, path);
    ck_assert_int_eq(c->on_type_error, ote);
    ck_assert_int_eq(c->line, line);
    /* parts are the path split at its dots */
    size_t n = 1;
    for (const char *p = path; *p; p++)
        n += *p == '.';
    ck_assert_uint_eq(c->nparts, n);
    char joined[256] = "";
    for (size_t i = 0; i < c->nparts; i++) {
        if (i > 0)
            strcat(joined, ".");
        strcat(joined, c->parts[i]);
    }
    ck_assert_str_eq(joined, path);
}

/* The example of the brief and of docs/mapping.md, with line markers the tests look for. */
static const char FULL[] = "[replication]\n"
                           "include = shop.*\n"
                           "\n"
                           "[map shop.orders]\n"
                           "table         = sales.orders\n"
                           "rest          = extra\n"
                           "rest_column   = extra_props\n"
                           "on_type_error = dead_letter\n"
                           "key           = order_id\n"
                           "adopt         = false\n"
                           "column.order_id = text from _id\n"
                           "column.total    = numeric from amount.total\n"
                           "column.placed   = timestamptz from placed_at on_type_error=null\n"
                           "column.tags     = text[]\n"
                           "child.items     = order_items\n"
                           "\n"
                           "[child sales.order_items]\n"
                           "parent_key    = order_id\n"
                           "position      = pos\n"
                           "rest          = drop\n"
                           "column.sku    = text\n"
                           "column.qty    = integer\n";

/* ---- loading ----------------------------------------------------------------------------------------------------- */

START_TEST(test_full_map)
{
    config c;
    load_ok(FULL, &c);

    ck_assert_uint_eq(c.maps.n, 1);
    const map_collection *mc = map_find(&c.maps, "shop", "orders");
    ck_assert_ptr_nonnull(mc);
    ck_assert_ptr_eq(mc, &c.maps.colls[0]);
    ck_assert_ptr_null(map_find(&c.maps, "shop", "customers"));
    ck_assert_ptr_null(map_find(&c.maps, "sales", "orders"));
    ck_assert_str_eq(mc->db, "shop");
    ck_assert_str_eq(mc->coll, "orders");
    ck_assert_int_eq(mc->line, line_of(FULL, "[map shop.orders]"));

    const map_table *t = &mc->table;
    ck_assert_str_eq(t->name.schema, "sales");
    ck_assert_str_eq(t->name.table, "orders");
    ck_assert_int_eq(t->line, line_of(FULL, "table         ="));
    ck_assert_int_eq(t->rest, MAP_REST_EXTRA);
    ck_assert_str_eq(t->rest_column, "extra_props");
    ck_assert_int_eq(t->on_type_error, MAP_ON_TYPE_ERROR_DEAD_LETTER);
    ck_assert(!t->adopt);
    ck_assert_ptr_null(t->parent);
    ck_assert_ptr_null(t->parent_key_column);
    ck_assert_ptr_null(t->position_column);
    ck_assert_uint_eq(t->ncols, 4);
    ck_assert_str_eq(t->cols[0].name, "order_id"); /* in file order */
    ck_assert_str_eq(t->cols[3].name, "tags");
    ck_assert_uint_eq(t->key, 0);
    check_column(t, "order_id", "text", "_id", MAP_ON_TYPE_ERROR_INHERIT, line_of(FULL, "column.order_id"));
    check_column(t, "total", "numeric", "amount.total", MAP_ON_TYPE_ERROR_INHERIT, line_of(FULL, "column.total"));
    check_column(t, "placed", "timestamptz", "placed_at", MAP_ON_TYPE_ERROR_NULL, line_of(FULL, "column.placed"));
    check_column(t, "tags", "text[]", "tags", MAP_ON_TYPE_ERROR_INHERIT, line_of(FULL, "column.tags"));

    ck_assert_uint_eq(t->nchildren, 1);
    const map_child *ch = &t->children[0];
    ck_assert_str_eq(ch->path, "items");
    ck_assert_uint_eq(ch->nparts, 1);
    ck_assert_str_eq(ch->parts[0], "items");
    ck_assert_int_eq(ch->line, line_of(FULL, "child.items"));
    const map_table *ct = ch->table;
    ck_assert_str_eq(ct->name.schema, "sales"); /* the parent's schema */
    ck_assert_str_eq(ct->name.table, "order_items");
    ck_assert_ptr_eq(ct->parent, t);
    ck_assert_str_eq(ct->parent_key_column, "order_id");
    ck_assert_str_eq(ct->position_column, "pos");
    ck_assert_int_eq(ct->rest, MAP_REST_DROP);
    ck_assert_ptr_null(ct->rest_column);
    ck_assert_int_eq(ct->on_type_error, MAP_ON_TYPE_ERROR_DEAD_LETTER); /* the parent's */
    ck_assert(!ct->adopt);
    ck_assert_uint_eq(ct->key, SIZE_MAX);
    ck_assert_int_eq(ct->line, line_of(FULL, "[child sales.order_items]"));
    ck_assert_uint_eq(ct->ncols, 2);
    check_column(ct, "sku", "text", "sku", MAP_ON_TYPE_ERROR_INHERIT, line_of(FULL, "column.sku"));
    check_column(ct, "qty", "integer", "qty", MAP_ON_TYPE_ERROR_INHERIT, line_of(FULL, "column.qty"));
    ck_assert_uint_eq(ct->nchildren, 0);
    config_free(&c);
    ck_assert_uint_eq(c.maps.n, 0);
}
END_TEST

/* What a map says when it says little: the table by map/names.h, rest = doc in "doc", dead_letter, no adopt, and a
 * key column "_id" (text) added in front when no column takes _id. */
START_TEST(test_defaults_and_added_key)
{
    static const char text[] = "[map shop.orders]\n"
                               "column.total = numeric from amount.total\n"
                               "column.Name With Space = varchar(20) from customer.name\n"
                               "column.n = double   precision  from n on_type_error=dead-letter\n"
                               "child.lines.all = lines\n"
                               "[child shop.lines]\n"
                               "rest = doc\n"
                               "on_type_error = null\n"
                               "adopt = yes\n"
                               "[map pg_data.x.y]\n"
                               "table = t.with.dots\n"
                               "column.id = uuid from _id\n"
                               "[map oplog2pg.z]\n"
                               "table = just_a_table\n"
                               "rest = drop\n"
                               "adopt = on\n";
    config c;
    load_ok(text, &c);
    ck_assert_uint_eq(c.maps.n, 3);

    const map_table *t = &map_find(&c.maps, "shop", "orders")->table;
    ck_assert_str_eq(t->name.schema, "shop");
    ck_assert_str_eq(t->name.table, "orders");
    ck_assert_int_eq(t->line, 1); /* no table line: the header */
    ck_assert_int_eq(t->rest, MAP_REST_DOC);
    ck_assert_str_eq(t->rest_column, "doc");
    ck_assert_int_eq(t->on_type_error, MAP_ON_TYPE_ERROR_DEAD_LETTER);
    ck_assert(!t->adopt);
    ck_assert_uint_eq(t->ncols, 4);
    ck_assert_uint_eq(t->key, 0);
    check_column(t, "_id", "text", "_id", MAP_ON_TYPE_ERROR_INHERIT, 0);
    ck_assert_str_eq(t->cols[1].name, "total");
    check_column(t, "Name With Space", "varchar(20)", "customer.name", MAP_ON_TYPE_ERROR_INHERIT, 3);
    check_column(t, "n", "double precision", "n", MAP_ON_TYPE_ERROR_DEAD_LETTER, 4);
    const map_table *ct = t->children[0].table;
    ck_assert_str_eq(t->children[0].path, "lines.all");
    ck_assert_uint_eq(t->children[0].nparts, 2);
    ck_assert_str_eq(ct->name.schema, "shop");
    ck_assert_str_eq(ct->name.table, "lines");
    ck_assert_str_eq(ct->parent_key_column, "parent_key");
    ck_assert_str_eq(ct->position_column, "position");
    ck_assert_int_eq(ct->rest, MAP_REST_DOC);
    ck_assert_str_eq(ct->rest_column, "doc");
    ck_assert_int_eq(ct->on_type_error, MAP_ON_TYPE_ERROR_NULL);
    ck_assert(ct->adopt);
    ck_assert_uint_eq(ct->ncols, 0);

    /* [map DB.COLL] splits at the first dot; table = S.T too (the table keeps its dots). */
    const map_collection *mc = map_find(&c.maps, "pg_data", "x.y");
    ck_assert_ptr_nonnull(mc);
    ck_assert_str_eq(mc->table.name.schema, "t");
    ck_assert_str_eq(mc->table.name.table, "with.dots");
    ck_assert_uint_eq(mc->table.ncols, 1);
    ck_assert_uint_eq(mc->table.key, 0);
    check_column(&mc->table, "id", "uuid", "_id", MAP_ON_TYPE_ERROR_INHERIT, 12);

    /* TABLE alone: the database's schema, as map/names.h makes it ($ in front of a reserved name). */
    mc = map_find(&c.maps, "oplog2pg", "z");
    ck_assert_str_eq(mc->table.name.schema, "$oplog2pg");
    ck_assert_str_eq(mc->table.name.table, "just_a_table");
    ck_assert_int_eq(mc->table.rest, MAP_REST_DROP);
    ck_assert_ptr_null(mc->table.rest_column);
    ck_assert(mc->table.adopt);
    check_column(&mc->table, "_id", "text", "_id", MAP_ON_TYPE_ERROR_INHERIT, 0);

    /* The default table of a collection is names_map's. */
    config d;
    load_ok("[map pg_x.orders]\n", &d);
    ck_assert_str_eq(d.maps.colls[0].table.name.schema, "$pg_x");
    ck_assert_str_eq(d.maps.colls[0].table.name.table, "orders");
    config_free(&d);

    /* A child section may come before its map. */
    load_ok("[child shop.items]\ncolumn.sku = text\n[map shop.orders]\nchild.items = items\n", &d);
    ck_assert_str_eq(d.maps.colls[0].table.children[0].table->cols[0].name, "sku");
    config_free(&d);

    /* No maps: nothing in the set, and map_find finds nothing. */
    load_ok("[replication]\nbatch_rows = 5\n", &d);
    ck_assert_uint_eq(d.maps.n, 0);
    ck_assert_ptr_null(map_find(&d.maps, "shop", "orders"));
    config_free(&d);
    config_free(&c);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------------------------------ */

START_TEST(test_errors_of_lines)
{
    /* unknown key (and keys of the other kind of section) */
    expect_error("[map shop.orders]\ncolumn.a = text\ncolour = red\n", "colour",
                 "[map shop.orders] colour: unknown key");
    expect_error("[map shop.orders]\nparent_key = p\n", "parent_key", "unknown key (the keys of a [map] section");
    expect_error("[map shop.orders]\nchild.items = it\n[child shop.it]\nkey = x\n", "key = x",
                 "[child shop.it] key: unknown key");
    expect_error("[map shop.orders]\ntable = a\ntable = b\n", "table = b", "table: set twice (first on line 2)");
    /* unknown type, jsonb[] among them */
    expect_error("[map shop.orders]\ncolumn.a = numbr from a\n", "column.a", "column.a: unknown type \"numbr\"");
    expect_error("[map shop.orders]\ncolumn.a = jsonb[]\n", "column.a", "unknown type \"jsonb[]\"");
    expect_error("[map shop.orders]\ncolumn.a = from a\n", "column.a", "no type");
    expect_error("[map shop.orders]\ncolumn.a = text from\n", "column.a", "\"from\" needs a path");
    expect_error("[map shop.orders]\ncolumn.a = text on_type_error=maybe\n", "column.a", "on_type_error=maybe");
    expect_error("[map shop.orders]\ncolumn.a = text on_type_error=null from a\n", "column.a", "after on_type_error=");
    /* bad paths */
    expect_error("[map shop.orders]\ncolumn.a = text from a..b\n", "column.a", "bad path \"a..b\"");
    expect_error("[map shop.orders]\ncolumn.a = text from .a\n", "column.a", "bad path");
    expect_error("[map shop.orders]\ncolumn.a = text from a.$b\n", "column.a", "cannot start with $");
    expect_error("[map shop.orders]\ncolumn.$a = text\n", "column.$a", "the path is the column's name");
    expect_error("[map shop.orders]\nchild.a. = t\n", "child.a.", "bad path");
    /* names */
    expect_error("[map shop.orders]\ncolumn.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa = text\n",
                 "column.", "1 to 63 bytes");
    expect_error("[map shop.orders]\ntable = x.\n", "table", "the table name");
    expect_error("[map shop.orders]\nrest_column =\n", "rest_column", "1 to 63 bytes");
    /* duplicate columns: by name, and with the rest, parent key and position columns */
    expect_error("[map shop.orders]\ncolumn.a = text\ncolumn.a = integer from b\n", "integer",
                 "duplicate column \"a\" (first declared on line 2)");
    expect_error("[map shop.orders]\ncolumn.doc = jsonb from d\n", "column.doc",
                 "duplicate column \"doc\": it is also the name of the rest column");
    expect_error("[map shop.orders]\nrest = extra\nrest_column = a\ncolumn.a = text\n", "column.a",
                 "duplicate column \"a\"");
    expect_error("[map shop.orders]\nchild.items = it\n[child shop.it]\ncolumn.position = integer\n", "column.position",
                 "the position column (position)");
    expect_error("[map shop.orders]\nchild.items = it\n[child shop.it]\nparent_key = p\nposition = p\n",
                 "[child shop.it]", "are both named \"p\"");
    expect_error("[map shop.orders]\ncolumn._id = text from legacy_id\n", "column._id",
                 "oplog2pg adds the key column \"_id\"");
    /* keys */
    expect_error("[map shop.orders]\nkey = total\ncolumn.total = numeric\n", "key = total",
                 "key: column \"total\" takes total; the key column takes _id");
    expect_error("[map shop.orders]\nkey = nope\ncolumn.id = text from _id\n", "key = nope", "key: no column \"nope\"");
    expect_error("[map shop.orders]\ncolumn.a = text from _id\ncolumn.b = uuid from _id\n", "column.b",
                 "both take _id: say which is the key with key = NAME");
    /* a key that cannot hold every _id exactly (jsonb: {a: 1, b: 2} and {b: 2, a: 1} are one jsonb value) */
    expect_error("[map shop.orders]\ncolumn.id = jsonb from _id\n", "column.id",
                 "the key column \"id\" is jsonb: a jsonb key cannot hold every _id exactly");
    expect_error("[map shop.orders]\ncolumn.id = text[] from _id\n", "column.id",
                 "the key column \"id\" is text[]: a key of an array type cannot hold every _id exactly");
    /* the same pair with key = is fine */
    config c;
    load_ok("[map shop.orders]\ncolumn.a = text from _id\ncolumn.b = jsonb from _id\nkey = a\n", &c);
    config_free(&c);
    load_ok("[map shop.orders]\ncolumn.a = text from _id\ncolumn.b = uuid from _id\nkey = b\n", &c);
    ck_assert_uint_eq(c.maps.colls[0].table.key, 1);
    config_free(&c);
    /* a continuation line */
    expect_error("[map shop.orders]\ncolumn.a = text\n  from a\n", "  from a", "cannot be continued");
    /* section names */
    expect_error("[replication]\nbatch_rows = 5\n[map]\ncolumn.a = text\n", "[map]", "name the collection");
    expect_error("[map nodot]\n", "[map nodot]", "[map DB.COLLECTION]");
    expect_error("[map shop.]\n", "[map shop.]", "[map DB.COLLECTION]");
    expect_error("[map shop.orders]\nchild.items = it\n[child it]\n", "[child it]", "[child SCHEMA.TABLE]");
    /* child tables of child tables */
    expect_error("[map shop.orders]\nchild.items = it\n[child shop.it]\nchild.subs = subs\n", "child.subs",
                 "a child table cannot have child tables of its own");
}
END_TEST

START_TEST(test_errors_of_the_whole)
{
    /* two maps for one namespace */
    expect_error("[map shop.orders]\ncolumn.a = text\n[map  shop.orders ]\n", "[map  shop",
                 "a second map for "
                 "shop.orders (the first is on line 1)");
    /* two maps writing one table; a map and a child writing one table */
    expect_error("[map shop.a]\ntable = t.x\n[map shop.b]\ntable  = t.x\n",
                 "table  =", "table t.x is written by two maps or child tables (also on line 2)");
    expect_error("[map shop.a]\n[map shop.b]\ntable = shop.a\n", "table = shop.a", "table shop.a is written by two");
    expect_error("[map shop.a]\nchild.items = shop.b\n[child shop.b]\n[map shop.b]\n", "[map shop.b]",
                 "table shop.b is written by two");
    expect_error("[map shop.a]\nchild.items = it\n[map shop.b]\nchild.lines = shop.it\n[child shop.it]\n",
                 "child.lines", "already the child table of another array");
    expect_error("[map shop.a]\nchild.items = it\n[child shop.it]\n[child  shop.it]\n", "[child  shop.it]",
                 "a second section for child table shop.it (the first is on line 3)");
    /* a child section no child.PATH names; a child.PATH whose section is missing */
    expect_error("[map shop.a]\ncolumn.x = text\n[child shop.lonely]\ncolumn.y = text\n", "[child shop.lonely]",
                 "no map names this child table");
    expect_error("[map shop.a]\ntable = s.a\nchild.items = it\n[child shop.it]\n", "child.items",
                 "no [child s.it] section declares this child table");
    /* prefixes: two columns, a column and a child */
    expect_error("[map shop.a]\ncolumn.a = jsonb\ncolumn.ab = text from a.b\n", "column.ab",
                 "column \"a\" takes a and column \"ab\" takes a.b: one path lies inside the other");
    expect_error("[map shop.a]\ncolumn.ab = text from a.b\ncolumn.a = jsonb\n", "column.a =", "one path lies inside");
    expect_error("[map shop.a]\ncolumn.a = text from _id.x\n", "column.a", "one path lies inside");
    expect_error("[map shop.a]\ncolumn.items = jsonb\nchild.items = it\n[child shop.it]\n", "child.items",
                 "child table at items and column \"items\" (from items) overlap");
    expect_error("[map shop.a]\ncolumn.first = text from items.0.sku\nchild.items = it\n[child shop.it]\n",
                 "child.items", "overlap");
    expect_error("[map shop.a]\nchild.items = it\nchild.items.x = it2\n[child shop.it]\n[child shop.it2]\n",
                 "child.items.x", "child tables at items and at items.x overlap");
    /* a child path that is _id */
    expect_error("[map shop.a]\nchild._id = it\n[child shop.it]\n", "child._id", "the _id cannot be a child table");
    /* rest_column with rest = drop */
    expect_error("[map shop.a]\nrest_column = r\nrest = drop\n", "rest_column",
                 "rest_column: rest = drop keeps no "
                 "rest column");
    expect_error("[map shop.a]\nchild.items = it\n[child shop.it]\nrest_column = r\n", "rest_column",
                 "rest = drop keeps no rest column"); /* a child's default rest is drop */
    /* reserved schemas */
    expect_error("[map shop.a]\ntable = pg_catalog.a\n", "table", "schema pg_catalog is reserved");
    expect_error("[map shop.a]\ntable = oplog2pg.a\n", "table", "schema oplog2pg is reserved");
    expect_error("[map shop.a]\nchild.items = information_schema.it\n[child information_schema.it]\n", "child.items",
                 "schema information_schema is reserved");
    /* the filter, whether [replication] comes before or after the map */
    expect_error("[replication]\ninclude = shop.*\n[map crm.people]\n", "[map crm.people]",
                 "[map crm.people]: the filter excludes it");
    expect_error("[map crm.people]\n[replication]\ninclude = *.*\nexclude = crm.*\n", "[map crm.people]",
                 "the filter excludes it");
    expect_error("[map admin.x]\n", "[map admin.x]", "oplog2pg never replicates admin.x");
    expect_error("[map shop.system.views]\n", "[map shop", "never replicates");
    /* the earliest line's error wins among the line errors */
    expect_error("[map shop.a]\ncolumn.a = nope\ncolumn.b = nope2\n", "column.a", "\"nope\"");
}
END_TEST

/* An override that would leave a map out is refused, and the configuration is left as it was. */
START_TEST(test_override_checks_the_maps)
{
    config c;
    char err[512];
    load_ok("[replication]\nservice = a\n[map shop.orders]\n", &c);
    ck_assert(config_override(&c, "replication", "service", "b", err, sizeof err));
    ck_assert_uint_eq(c.maps.n, 1);
    ck_assert(!config_override(&c, "replication", "include", "crm.*", err, sizeof err));
    ck_assert_msg(strstr(err, "[map shop.orders]: the filter excludes it") == err, "%s", err);
    ck_assert_str_eq(c.include.items[0], "*.*");
    config_free(&c);
}
END_TEST

/* ---- printing ---------------------------------------------------------------------------------------------------- */

static bson_t *parse_json(const char *json)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    ck_assert_msg(b != NULL, "not JSON (%s): %s", e.message, json);
    return b;
}

static void expect_str(const bson_t *b, const char *dotted, const char *want)
{
    bson_iter_t it, v;
    ck_assert(bson_iter_init(&it, b));
    ck_assert_msg(bson_iter_find_descendant(&it, dotted, &v), "no %s", dotted);
    if (want == NULL) {
        ck_assert_msg(BSON_ITER_HOLDS_NULL(&v), "%s is not null", dotted);
        return;
    }
    ck_assert_msg(BSON_ITER_HOLDS_UTF8(&v), "%s is not a string", dotted);
    ck_assert_str_eq(bson_iter_utf8(&v, NULL), want);
}

static void expect_bool(const bson_t *b, const char *dotted, bool want)
{
    bson_iter_t it, v;
    ck_assert(bson_iter_init(&it, b));
    ck_assert_msg(bson_iter_find_descendant(&it, dotted, &v) && BSON_ITER_HOLDS_BOOL(&v), "no bool %s", dotted);
    ck_assert_int_eq(bson_iter_bool(&v), want);
}

static uint32_t count(const bson_t *b, const char *dotted)
{
    bson_iter_t it, v, child;
    uint32_t n = 0;
    ck_assert(bson_iter_init(&it, b));
    ck_assert_msg(bson_iter_find_descendant(&it, dotted, &v) && BSON_ITER_HOLDS_ARRAY(&v), "no array %s", dotted);
    ck_assert(bson_iter_recurse(&v, &child));
    while (bson_iter_next(&child))
        n++;
    return n;
}

/* The fields of one document of the JSON, in order. */
static void expect_keys(const bson_t *b, const char *dotted, const char *want)
{
    bson_iter_t it, v, child;
    char got[512] = "";
    ck_assert(bson_iter_init(&it, b));
    ck_assert_msg(bson_iter_find_descendant(&it, dotted, &v) && BSON_ITER_HOLDS_DOCUMENT(&v), "no document %s", dotted);
    ck_assert(bson_iter_recurse(&v, &child));
    while (bson_iter_next(&child)) {
        if (got[0])
            strcat(got, ",");
        strcat(got, bson_iter_key(&child));
    }
    ck_assert_str_eq(got, want);
}

START_TEST(test_json)
{
    config c;
    load_ok(FULL, &c);
    char *json = config_map_json(&c.maps);
    ck_assert_ptr_nonnull(json);
    static const char head[] = "{\"version\":1,\"collections\":[{\"namespace\":\"shop.orders\",\"schema\":\"sales\"";
    ck_assert_msg(strncmp(json, head, strlen(head)) == 0, "%s", json);
    bson_t *b = parse_json(json);

    bson_iter_t it;
    ck_assert(bson_iter_init_find(&it, b, "version") && BSON_ITER_HOLDS_INT32(&it) && bson_iter_int32(&it) == 1);
    ck_assert_uint_eq(count(b, "collections"), 1);
    expect_keys(b, "collections.0", "namespace,schema,table,key,rest,rest_column,on_type_error,adopt,columns,children");
    expect_str(b, "collections.0.namespace", "shop.orders");
    expect_str(b, "collections.0.schema", "sales");
    expect_str(b, "collections.0.table", "orders");
    expect_str(b, "collections.0.key", "order_id");
    expect_str(b, "collections.0.rest", "extra");
    expect_str(b, "collections.0.rest_column", "extra_props");
    expect_str(b, "collections.0.on_type_error", "dead_letter");
    expect_bool(b, "collections.0.adopt", false);
    ck_assert_uint_eq(count(b, "collections.0.columns"), 4);
    expect_keys(b, "collections.0.columns.0", "name,type,path,on_type_error");
    expect_str(b, "collections.0.columns.1.name", "total");
    expect_str(b, "collections.0.columns.1.type", "numeric");
    expect_str(b, "collections.0.columns.1.path", "amount.total");
    expect_str(b, "collections.0.columns.1.on_type_error", "dead_letter"); /* the table's */
    expect_str(b, "collections.0.columns.2.on_type_error", "null");        /* its own */
    expect_str(b, "collections.0.columns.3.type", "text[]");
    ck_assert_uint_eq(count(b, "collections.0.children"), 1);
    expect_keys(b, "collections.0.children.0",
                "path,schema,table,parent_key,position,rest,rest_column,on_type_error,adopt,columns,children");
    expect_str(b, "collections.0.children.0.path", "items");
    expect_str(b, "collections.0.children.0.schema", "sales");
    expect_str(b, "collections.0.children.0.table", "order_items");
    expect_str(b, "collections.0.children.0.parent_key", "order_id");
    expect_str(b, "collections.0.children.0.position", "pos");
    expect_str(b, "collections.0.children.0.rest", "drop");
    expect_str(b, "collections.0.children.0.rest_column", NULL);
    expect_str(b, "collections.0.children.0.columns.1.name", "qty");
    expect_str(b, "collections.0.children.0.columns.1.type", "integer");
    ck_assert_uint_eq(count(b, "collections.0.children.0.children"), 0);
    bson_destroy(b);
    free(json);
    config_free(&c);

    /* Names that need escaping come back as they were; no maps is an empty list. */
    load_ok("[map shop.q\"uo\\te]\ncolumn.a \"b\" = text from x\\y\n", &c);
    json = config_map_json(&c.maps);
    b = parse_json(json);
    expect_str(b, "collections.0.namespace", "shop.q\"uo\\te");
    expect_str(b, "collections.0.columns.1.name", "a \"b\"");
    expect_str(b, "collections.0.columns.1.path", "x\\y");
    expect_str(b, "collections.0.key", "_id");
    bson_destroy(b);
    free(json);
    config_free(&c);

    map_set none = {0};
    json = config_map_json(&none);
    ck_assert_str_eq(json, "{\"version\":1,\"collections\":[]}");
    free(json);
}
END_TEST

/* The command's output, through the function it writes with. */
static char *command_output(const map_set *m, bool json)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(config_map_command(f, m, json), 0);
    fclose(f);
    return buf;
}

START_TEST(test_text)
{
    config c;
    load_ok(FULL, &c);
    char *out = command_output(&c.maps, false);
    static const char *const want[] = {
        "shop.orders -> sales.orders\n",
        "\n  key            order_id\n",
        "\n  rest           extra, in jsonb column extra_props\n",
        "\n  on_type_error  dead_letter\n",
        "\n  adopt          false\n",
        "\n    order_id  text         from _id           on_type_error=dead_letter\n",
        "\n    total     numeric      from amount.total  on_type_error=dead_letter\n",
        "\n    placed    timestamptz  from placed_at     on_type_error=null\n",
        "\n    tags      text[]       from tags          on_type_error=dead_letter\n",
        "\n  child table at items -> sales.order_items\n",
        "\n    parent_key     order_id (the parent row's key)\n",
        "\n    position       pos (integer, the element's index from 0)\n",
        "\n    rest           drop\n",
        "\n      sku  text     from sku  on_type_error=dead_letter\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out, want[i]) != NULL, "the output lacks \"%s\":\n%s", want[i], out);
    ck_assert_msg(strncmp(out, want[0], strlen(want[0])) == 0, "%s", out);
    free(out);

    out = command_output(&c.maps, true);
    ck_assert_msg(out[0] == '{' && out[strlen(out) - 1] == '\n', "%s", out);
    bson_t *b = parse_json(out);
    expect_str(b, "collections.0.namespace", "shop.orders");
    bson_destroy(b);
    free(out);
    config_free(&c);

    load_ok("[map shop.orders]\n", &c);
    out = command_output(&c.maps, false);
    ck_assert_msg(strstr(out, "  key            _id (added: text, the key text of the _id") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "  rest           doc, in jsonb column doc\n") != NULL, "%s", out);
    free(out);
    config_free(&c);

    map_set none = {0};
    out = command_output(&none, false);
    ck_assert_msg(strstr(out, "no maps") == out, "%s", out);
    free(out);
}
END_TEST

/* `config` prints the maps as sections that read back to the same map. */
START_TEST(test_print_round_trip)
{
    static const char *const texts[] = {
        FULL,
        "[map shop.orders]\ncolumn.n = double precision from a b.c on_type_error=null\nchild.x.y = s2.kids\n"
        "[child s2.kids]\nrest = extra\nrest_column = more\non_type_error = null\nadopt = true\ncolumn.k = int4[]\n"
        "[map shop.t.u]\ntable = v\nrest = drop\nadopt = 1\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        config c, back;
        char *buf = NULL, err[1024] = "";
        size_t len = 0;
        load_ok(texts[i], &c);
        FILE *f = open_memstream(&buf, &len);
        config_print(f, &c);
        fclose(f);
        ck_assert_msg(strstr(buf, "\n[map shop.orders]\n") != NULL, "%s", buf);
        ck_assert_msg(config_load_string("printed", buf, &back, err, sizeof err), "%s\n%s", err, buf);
        ck_assert_msg(config_map_equal(&c.maps, &back.maps), "%s", buf);
        char *a = config_map_json(&c.maps), *b = config_map_json(&back.maps);
        ck_assert_str_eq(a, b);
        free(a);
        free(b);
        free(buf);
        config_free(&c);
        config_free(&back);
    }
}
END_TEST

/* ---- reload ------------------------------------------------------------------------------------------------------ */

struct logbuf {
    char text[4096];
    int lines;
};

static void collect(void *arg, const char *msg)
{
    struct logbuf *lb = arg;
    strncat(lb->text, msg, sizeof lb->text - strlen(lb->text) - 2);
    strcat(lb->text, "\n");
    lb->lines++;
}

static void rewrite(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_reload_keeps_the_map)
{
    char path[64], err[1024] = "";
    config c;
    struct logbuf lb = {"", 0};

    write_tmp(path, FULL);
    ck_assert_msg(config_load(path, &c, err, sizeof err), "%s", err);

    /* The same map, moved to other lines: nothing to say. */
    char *moved = malloc(strlen(FULL) + 32);
    sprintf(moved, "\n\n; a comment\n%s", FULL);
    rewrite(path, moved);
    ck_assert_msg(config_reload(path, &c, err, sizeof err, collect, &lb, NULL), "%s", err);
    ck_assert_int_eq(lb.lines, 0);
    free(moved);

    /* A changed map: said, and the running one kept. */
    rewrite(path, "[replication]\ninclude = shop.*\nbatch_rows = 7\n[map shop.orders]\ncolumn.total = integer\n");
    ck_assert_msg(config_reload(path, &c, err, sizeof err, collect, &lb, NULL), "%s", err);
    ck_assert_int_eq(c.batch_rows, 7); /* a reloadable option is applied all the same */
    ck_assert_msg(strstr(lb.text, "the map sections ([map ...], [child ...]) changed in the file; restart required "
                                  "to apply them (keeping the running map)") != NULL,
                  "%s", lb.text);
    ck_assert_str_eq(c.maps.colls[0].table.name.schema, "sales");
    ck_assert_uint_eq(c.maps.colls[0].table.nchildren, 1);

    /* A bad map fails the reload as a whole, with its line. */
    lb.lines = 0;
    rewrite(path, "[map shop.orders]\ncolumn.total = nonsense\n");
    ck_assert(!config_reload(path, &c, err, sizeof err, collect, &lb, NULL));
    ck_assert_msg(strstr(err, ":2: [map shop.orders] column.total: unknown type") != NULL, "%s", err);
    ck_assert_int_eq(lb.lines, 0);
    ck_assert_str_eq(c.maps.colls[0].table.name.schema, "sales");

    /* All maps removed: also a change that needs a restart. */
    lb.lines = 0;
    rewrite(path, "[replication]\ninclude = shop.*\nbatch_rows = 7\n");
    ck_assert(config_reload(path, &c, err, sizeof err, collect, &lb, NULL));
    ck_assert_msg(lb.lines == 1, "%s", lb.text);
    ck_assert_uint_eq(c.maps.n, 1);
    unlink(path);
    config_free(&c);
}
END_TEST

/* ---- the shipped examples ---------------------------------------------------------------------------------------- */

/* conf/oplog2pg.ini ends with a commented-out example map ("#[map ...", "#column..." lines, so that the sample's
 * ";name = value" lines can still be switched on alone): with its '#' removed, it loads. */
START_TEST(test_sample_ini_example_map)
{
    char *text = textfile_read("conf/oplog2pg.ini");
    ck_assert_ptr_nonnull(text);
    config c;
    char err[1024] = "";
    ck_assert_msg(config_load_string("conf/oplog2pg.ini", text, &c, err, sizeof err), "%s", err);
    ck_assert_uint_eq(c.maps.n, 0); /* as shipped: no map */
    config_free(&c);

    int switched = 0;
    for (char *line = text; line && *line;) {
        if (line[0] == '#' && (line[1] == '[' || (line[1] >= 'a' && line[1] <= 'z'))) {
            memmove(line, line + 1, strlen(line));
            switched++;
        }
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    ck_assert_msg(switched >= 5, "conf/oplog2pg.ini has no commented-out example map");
    ck_assert_msg(config_load_string("conf/oplog2pg.ini (map switched on)", text, &c, err, sizeof err), "%s", err);
    ck_assert_uint_ge(c.maps.n, 1);
    ck_assert_uint_ge(c.maps.colls[0].table.nchildren, 1);
    config_free(&c);
    free(text);
}
END_TEST

/* The first ```ini block under "## Declaring a map" in docs/mapping.md loads, and is the map these tests check. */
START_TEST(test_docs_example_map)
{
    char *doc = textfile_read("docs/mapping.md");
    ck_assert_msg(doc != NULL, "cannot read docs/mapping.md");
    const char *sect = strstr(doc, "\n## Declaring a map\n");
    ck_assert_msg(sect != NULL, "docs/mapping.md has no \"## Declaring a map\"");
    const char *block = strstr(sect, "\n```ini\n");
    ck_assert_msg(block != NULL, "no ```ini block under \"## Declaring a map\"");
    block += strlen("\n```ini\n");
    const char *end = strstr(block, "\n```");
    ck_assert(end != NULL);
    char *ini = strndup(block, (size_t)(end - block + 1));
    config c;
    char err[1024] = "";
    ck_assert_msg(config_load_string("docs/mapping.md", ini, &c, err, sizeof err), "%s\n%s", err, ini);
    const map_collection *mc = map_find(&c.maps, "shop", "orders");
    ck_assert_ptr_nonnull(mc);
    ck_assert_str_eq(mc->table.name.schema, "sales");
    ck_assert_uint_eq(mc->table.nchildren, 1);

    /* The JSON the page shows under "## Inspecting the map" is what `map --json` prints for it (spacing apart). */
    const char *insp = strstr(doc, "\n## Inspecting the map\n");
    ck_assert_msg(insp != NULL, "docs/mapping.md has no \"## Inspecting the map\"");
    const char *jb = strstr(insp, "\n```json\n");
    ck_assert_msg(jb != NULL, "no ```json block under \"## Inspecting the map\"");
    jb += strlen("\n```json\n");
    const char *je = strstr(jb, "\n```");
    ck_assert(je != NULL);
    char *shown = malloc((size_t)(je - jb) + 1);
    size_t n = 0;
    for (const char *p = jb; p < je; p++)
        if (*p != ' ' && *p != '\n')
            shown[n++] = *p;
    shown[n] = '\0';
    char *json = config_map_json(&c.maps);
    ck_assert_msg(strcmp(shown, json) == 0, "docs/mapping.md shows\n%s\nbut map --json prints\n%s", shown, json);
    free(shown);
    free(json);
    config_free(&c);
    free(ini);
    free(doc);
}
END_TEST

/* ---- map_set_check on a model built by hand ---------------------------------------------------------------------- */

START_TEST(test_model_checks)
{
    char *parts_id[] = {"_id"}, *parts_a[] = {"a"};
    map_column cols[2] = {
        {.name = "_id", .type = {.scalar = MAP_TEXT}, .path = "_id", .parts = parts_id, .nparts = 1, .line = 0},
        {.name = "a", .type = {.scalar = MAP_INTEGER}, .path = "a", .parts = parts_a, .nparts = 1, .line = 5},
    };
    map_collection mc = {.db = "shop", .coll = "orders", .line = 3};
    mc.table = (map_table){.name = {"shop", "orders"},
                           .cols = cols,
                           .ncols = 2,
                           .key = 0,
                           .rest = MAP_REST_DOC,
                           .rest_column = "doc",
                           .on_type_error = MAP_ON_TYPE_ERROR_NULL,
                           .line = 3};
    map_set set = {.colls = &mc, .n = 1};
    int line = -1;
    char why[512];
    ck_assert_msg(map_set_check(&set, &line, why, sizeof why), "%s", why);

    mc.table.key = 1; /* a key column that does not take _id */
    ck_assert(!map_set_check(&set, &line, why, sizeof why));
    ck_assert_int_eq(line, 5);
    ck_assert_msg(strstr(why, "a key column takes _id") != NULL, "%s", why);
    mc.table.key = 7; /* no such column */
    ck_assert(!map_set_check(&set, &line, why, sizeof why));
    ck_assert_int_eq(line, 3);
    mc.table.key = 0;
    mc.table.on_type_error = MAP_ON_TYPE_ERROR_INHERIT;
    ck_assert(!map_set_check(&set, &line, why, sizeof why));
    mc.table.on_type_error = MAP_ON_TYPE_ERROR_DEAD_LETTER;
    mc.table.rest_column = NULL; /* rest = doc without its column */
    ck_assert(!map_set_check(&set, &line, why, sizeof why));
    ck_assert_msg(strstr(why, "needs a rest column") != NULL, "%s", why);
    mc.table.rest_column = "doc";
    cols[1].type = (map_type){.scalar = MAP_JSONB, .array = true};
    ck_assert(!map_set_check(&set, &line, why, sizeof why));
    ck_assert_int_eq(line, 5);
    cols[1].type = (map_type){.scalar = MAP_INTEGER};
    ck_assert(map_set_check(&set, &line, why, sizeof why));

    /* map_path_split */
    char **parts;
    size_t n;
    ck_assert(map_path_split("a.b.c", &parts, &n, why, sizeof why));
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(parts[2], "c");
    for (size_t i = 0; i < n; i++)
        free(parts[i]);
    free(parts);
    ck_assert(!map_path_split("", &parts, &n, why, sizeof why));
    ck_assert(!map_path_split("a.", &parts, &n, why, sizeof why));
    ck_assert(!map_path_split("$a", &parts, &n, why, sizeof why));
    ck_assert(!map_path_split("a.\xff", &parts, &n, why, sizeof why));
    ck_assert_ptr_null(parts);
    ck_assert(map_path_split("a b.c$", &parts, &n, why, sizeof why)); /* spaces and a $ inside a part are fine */
    for (size_t i = 0; i < n; i++)
        free(parts[i]);
    free(parts);

    map_set_clear(NULL);
    map_set empty = {0};
    map_set_clear(&empty);
}
END_TEST

Suite *map_config_suite(void); /* called by the generated runner list */

Suite *map_config_suite(void)
{
    Suite *s = suite_create("map_config");
    TCase *tc = tcase_create("load");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_full_map);
    tcase_add_test(tc, test_defaults_and_added_key);
    tcase_add_test(tc, test_errors_of_lines);
    tcase_add_test(tc, test_errors_of_the_whole);
    tcase_add_test(tc, test_override_checks_the_maps);
    tcase_add_test(tc, test_model_checks);
    suite_add_tcase(s, tc);

    TCase *out = tcase_create("output");
    tcase_set_timeout(out, 20);
    tcase_add_test(out, test_json);
    tcase_add_test(out, test_text);
    tcase_add_test(out, test_print_round_trip);
    tcase_add_test(out, test_reload_keeps_the_map);
    suite_add_tcase(s, out);

    TCase *files = tcase_create("files");
    tcase_set_timeout(files, 20);
    tcase_add_test(files, test_sample_ini_example_map);
    tcase_add_test(files, test_docs_example_map);
    suite_add_tcase(s, files);
    return s;
}
