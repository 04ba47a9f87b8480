/*
 * config_map_print.c — the map of the configuration (include/daemon/config_map.h) written out: as INI sections that
 * config_map.c reads back to the same set (`config`), as text a person reads and as one JSON document (the `map`
 * command), and compared (reload) through the JSON, which holds everything the map says but the lines.
 *
 * on_type_error is written dead_letter or null, in the INI, the text and the JSON alike.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bson/bson.h>

#include "daemon/config_map.h"
#include "daemon/exitcodes.h"
#include "map/ejson.h"
#include "util/strbuf.h"

/* ---- writing the map out ----------------------------------------------------------------------------------------- */

/* How the map writes an on_type_error setting: as the file does (dead_letter), which is also the JSON's spelling. */
static const char *ote_name(map_on_type_error e)
{
    return e == MAP_ON_TYPE_ERROR_NULL ? "null" : e == MAP_ON_TYPE_ERROR_DEAD_LETTER ? "dead_letter" : "inherit";
}

/* A column's on_type_error as it applies: its own, else its table's. */
static map_on_type_error effective(const map_table *t, const map_column *c)
{
    return c->on_type_error != MAP_ON_TYPE_ERROR_INHERIT ? c->on_type_error : t->on_type_error;
}

bool config_map_equal(const map_set *a, const map_set *b)
{
    /* The JSON holds everything the map says but the lines, which is what a restart would change. */
    char *ja = config_map_json(a), *jb = config_map_json(b);
    bool same = ja != NULL && jb != NULL && strcmp(ja, jb) == 0;
    free(ja);
    free(jb);
    return same;
}

static void print_table_ini(FILE *out, const map_table *t)
{
    char type[64];

    if (t->parent == NULL) {
        fprintf(out, "table = %s.%s\n", t->name.schema, t->name.table);
        if (t->cols[t->key].line != 0) /* the added key column is added again when this is read back */
            fprintf(out, "key = %s\n", t->cols[t->key].name);
    } else {
        fprintf(out, "parent_key = %s\nposition = %s\n", t->parent_key_column, t->position_column);
    }
    fprintf(out, "rest = %s\n", map_rest_name(t->rest));
    if (t->rest_column != NULL)
        fprintf(out, "rest_column = %s\n", t->rest_column);
    fprintf(out, "on_type_error = %s\nadopt = %s\n", ote_name(t->on_type_error), t->adopt ? "true" : "false");
    for (size_t i = 0; i < t->ncols; i++) {
        const map_column *c = &t->cols[i];
        if (c->line == 0)
            continue;
        fprintf(out, "column.%s = %s from %s", c->name, map_type_sql(&c->type, type, sizeof type), c->path);
        if (c->on_type_error != MAP_ON_TYPE_ERROR_INHERIT)
            fprintf(out, " on_type_error=%s", ote_name(c->on_type_error));
        fputc('\n', out);
    }
    for (size_t i = 0; i < t->nchildren; i++)
        fprintf(out, "child.%s = %s.%s\n", t->children[i].path, t->children[i].table->name.schema,
                t->children[i].table->name.table);
}

static void print_children_ini(FILE *out, const map_table *t)
{
    for (size_t i = 0; i < t->nchildren; i++) {
        const map_table *c = t->children[i].table;
        fprintf(out, "\n[child %s.%s]\n", c->name.schema, c->name.table);
        print_table_ini(out, c);
        print_children_ini(out, c);
    }
}

void config_map_print_ini(FILE *out, const map_set *m)
{
    for (size_t i = 0; i < m->n; i++) {
        fprintf(out, "\n[map %s.%s]\n", m->colls[i].db, m->colls[i].coll);
        print_table_ini(out, &m->colls[i].table);
        print_children_ini(out, &m->colls[i].table);
    }
}

/* ---- as text ----------------------------------------------------------------------------------------------------- */

static void pad(strbuf *out, size_t n)
{
    while (n-- > 0)
        strbuf_putc(out, ' ');
}

static void render_table(strbuf *out, const map_table *t, int indent)
{
    char type[64];
    size_t wname = 0, wtype = 0, wpath = 0;

    if (t->parent == NULL) {
        const map_column *k = &t->cols[t->key];
        strbuf_printf(out, "%*skey            %s%s\n", indent, "", k->name,
                      k->line == 0 ? " (added: text, the key text of the _id, as in a jsonb table)" : "");
    } else {
        strbuf_printf(out, "%*sparent_key     %s (the parent row's key)\n", indent, "", t->parent_key_column);
        strbuf_printf(out, "%*sposition       %s (integer, the element's index from 0)\n", indent, "",
                      t->position_column);
    }
    if (t->rest_column != NULL)
        strbuf_printf(out, "%*srest           %s, in jsonb column %s\n", indent, "", map_rest_name(t->rest),
                      t->rest_column);
    else
        strbuf_printf(out, "%*srest           %s\n", indent, "", map_rest_name(t->rest));
    strbuf_printf(out, "%*son_type_error  %s\n", indent, "", ote_name(t->on_type_error));
    strbuf_printf(out, "%*sadopt          %s\n", indent, "", t->adopt ? "true" : "false");
    for (size_t i = 0; i < t->ncols; i++) {
        size_t n = strlen(t->cols[i].name), ty = strlen(map_type_sql(&t->cols[i].type, type, sizeof type)),
               p = strlen(t->cols[i].path);
        wname = n > wname ? n : wname;
        wtype = ty > wtype ? ty : wtype;
        wpath = p > wpath ? p : wpath;
    }
    strbuf_printf(out, "%*scolumns%s\n", indent, "", t->ncols == 0 ? "        (none)" : "");
    for (size_t i = 0; i < t->ncols; i++) {
        const map_column *c = &t->cols[i];
        map_type_sql(&c->type, type, sizeof type);
        strbuf_printf(out, "%*s  %s", indent, "", c->name);
        pad(out, wname - strlen(c->name) + 2);
        strbuf_puts(out, type);
        pad(out, wtype - strlen(type) + 2);
        strbuf_printf(out, "from %s", c->path);
        pad(out, wpath - strlen(c->path) + 2);
        strbuf_printf(out, "on_type_error=%s\n", ote_name(effective(t, c)));
    }
    for (size_t i = 0; i < t->nchildren; i++) {
        const map_child *ch = &t->children[i];
        strbuf_printf(out, "%*schild table at %s -> %s.%s\n", indent, "", ch->path, ch->table->name.schema,
                      ch->table->name.table);
        render_table(out, ch->table, indent + 2);
    }
}

void config_map_render_text(strbuf *out, const map_set *m)
{
    if (m->n == 0) {
        strbuf_puts(out, "no maps: every replicated collection keeps the jsonb shape (_id text, doc jsonb)\n");
        return;
    }
    for (size_t i = 0; i < m->n; i++) {
        const map_collection *mc = &m->colls[i];
        strbuf_printf(out, "%s%s.%s -> %s.%s\n", i > 0 ? "\n" : "", mc->db, mc->coll, mc->table.name.schema,
                      mc->table.name.table);
        render_table(out, &mc->table, 2);
    }
}

/* ---- as JSON ----------------------------------------------------------------------------------------------------- */

static bool put_str(bson_t *b, const char *key, const char *value)
{
    return value != NULL ? BSON_APPEND_UTF8(b, key, value) : BSON_APPEND_NULL(b, key);
}

static bool json_table(bson_t *b, const map_table *t)
{
    char type[64], idx[16];
    const char *ikey;
    bson_t arr, el;
    bool ok = put_str(b, "schema", t->name.schema) && put_str(b, "table", t->name.table);

    if (t->parent == NULL)
        ok = ok && put_str(b, "key", t->cols[t->key].name);
    else
        ok = ok && put_str(b, "parent_key", t->parent_key_column) && put_str(b, "position", t->position_column);
    ok = ok && put_str(b, "rest", map_rest_name(t->rest)) && put_str(b, "rest_column", t->rest_column) &&
         put_str(b, "on_type_error", ote_name(t->on_type_error)) && BSON_APPEND_BOOL(b, "adopt", t->adopt);
    ok = ok && BSON_APPEND_ARRAY_BEGIN(b, "columns", &arr);
    for (uint32_t i = 0; ok && i < t->ncols; i++) {
        const map_column *c = &t->cols[i];
        bson_uint32_to_string(i, &ikey, idx, sizeof idx);
        ok = BSON_APPEND_DOCUMENT_BEGIN(&arr, ikey, &el) && put_str(&el, "name", c->name) &&
             put_str(&el, "type", map_type_sql(&c->type, type, sizeof type)) && put_str(&el, "path", c->path) &&
             put_str(&el, "on_type_error", ote_name(effective(t, c))) && bson_append_document_end(&arr, &el);
    }
    ok = ok && bson_append_array_end(b, &arr);
    ok = ok && BSON_APPEND_ARRAY_BEGIN(b, "children", &arr);
    for (uint32_t i = 0; ok && i < t->nchildren; i++) {
        bson_uint32_to_string(i, &ikey, idx, sizeof idx);
        ok = BSON_APPEND_DOCUMENT_BEGIN(&arr, ikey, &el) && put_str(&el, "path", t->children[i].path) &&
             json_table(&el, t->children[i].table) && bson_append_document_end(&arr, &el);
    }
    return ok && bson_append_array_end(b, &arr);
}

char *config_map_json(const map_set *m)
{
    char idx[16];
    const char *ikey;
    bson_t doc, arr, el;
    char *text = NULL;

    bson_init(&doc);
    bool ok = BSON_APPEND_INT32(&doc, "version", 1) && BSON_APPEND_ARRAY_BEGIN(&doc, "collections", &arr);
    for (uint32_t i = 0; ok && i < m->n; i++) {
        const map_collection *mc = &m->colls[i];
        bson_uint32_to_string(i, &ikey, idx, sizeof idx);
        char *ns = bson_strdup_printf("%s.%s", mc->db, mc->coll);
        ok = BSON_APPEND_DOCUMENT_BEGIN(&arr, ikey, &el) && put_str(&el, "namespace", ns) &&
             json_table(&el, &mc->table) && bson_append_document_end(&arr, &el);
        bson_free(ns);
    }
    ok = ok && bson_append_array_end(&doc, &arr);
    if (ok)
        text = ejson_document(&doc, NULL);
    bson_destroy(&doc);
    return text;
}

int config_map_command(FILE *out, const map_set *m, bool json)
{
    strbuf text = STRBUF_INIT;
    char *j = NULL;
    bool ok;

    if (json) {
        ok = (j = config_map_json(m)) != NULL && fprintf(out, "%s\n", j) >= 0;
    } else {
        config_map_render_text(&text, m);
        ok = !strbuf_failed(&text) && fputs(text.data != NULL ? text.data : "", out) >= 0;
    }
    ok = fflush(out) == 0 && ok;
    free(j);
    strbuf_free(&text);
    if (!ok)
        fprintf(stderr, "oplog2pg: map: cannot write the map (out of memory, or the output is closed)\n");
    return ok ? EXIT_OK : EXIT_SOFTWARE;
}
