/*
 * test_nsfilter.c — the namespace filter: glob patterns per part, include/exclude precedence, malformed patterns.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "core/nsfilter.h"

static nsfilter *make(const char *const *inc, const char *const *exc)
{
    char err[256] = "";
    nsfilter *f = nsfilter_new(inc, exc, err, sizeof err);
    ck_assert_msg(f != NULL, "nsfilter_new failed: %s", err);
    return f;
}

START_TEST(test_everything)
{
    const char *inc[] = {"*.*", NULL};
    nsfilter *f = make(inc, NULL);

    ck_assert(nsfilter_match(f, "shop", "orders"));
    ck_assert(nsfilter_match(f, "a", "b.c.d"));
    ck_assert(nsfilter_match_ns(f, "shop.orders"));
    ck_assert(!nsfilter_match_ns(f, "nodot"));
    nsfilter_free(f);
}
END_TEST

START_TEST(test_exact_and_prefix)
{
    const char *inc[] = {"shop.orders", "crm.cust*", NULL};
    nsfilter *f = make(inc, NULL);

    ck_assert(nsfilter_match(f, "shop", "orders"));
    ck_assert(!nsfilter_match(f, "shop", "orders2"));
    ck_assert(!nsfilter_match(f, "shop", "order"));
    ck_assert(!nsfilter_match(f, "shopx", "orders"));
    ck_assert(!nsfilter_match(f, "Shop", "orders")); /* names are case-sensitive */
    ck_assert(nsfilter_match(f, "crm", "cust"));
    ck_assert(nsfilter_match(f, "crm", "customers"));
    ck_assert(nsfilter_match(f, "crm", "cust.archive"));
    ck_assert(!nsfilter_match(f, "crm", "cus"));
    ck_assert(!nsfilter_match(f, "crm2", "customers"));
    nsfilter_free(f);
}
END_TEST

START_TEST(test_globs)
{
    const char *inc[] = {"*.orders", "shop.order?", "log?.*_2024", "x.a*b*c", NULL};
    nsfilter *f = make(inc, NULL);

    ck_assert(nsfilter_match(f, "any", "orders"));
    ck_assert(!nsfilter_match(f, "any", "orders_old"));
    ck_assert(nsfilter_match(f, "shop", "orderX"));
    ck_assert(!nsfilter_match(f, "shop", "orderXY"));
    ck_assert(nsfilter_match(f, "log1", "events_2024"));
    ck_assert(nsfilter_match(f, "log1", "_2024"));
    ck_assert(!nsfilter_match(f, "log", "events_2024"));
    ck_assert(!nsfilter_match(f, "log12", "events_2024"));
    ck_assert(!nsfilter_match(f, "log1", "events_2023"));
    ck_assert(nsfilter_match(f, "x", "abc"));
    ck_assert(nsfilter_match(f, "x", "aXXbYYc"));
    ck_assert(nsfilter_match(f, "x", "abcbc"));
    ck_assert(!nsfilter_match(f, "x", "acb"));
    ck_assert(!nsfilter_match(f, "x", "abcX"));
    nsfilter_free(f);
}
END_TEST

START_TEST(test_dotted_collections)
{
    /* The database part never holds a dot: "db.a.b" is database db, collection a.b. */
    const char *inc[] = {"db.a.b", "app.sys?em.*", NULL};
    nsfilter *f = make(inc, NULL);

    ck_assert(nsfilter_match(f, "db", "a.b"));
    ck_assert(nsfilter_match_ns(f, "db.a.b"));
    ck_assert(!nsfilter_match(f, "db.a", "b"));
    ck_assert(!nsfilter_match_ns(f, "db.a"));
    ck_assert(nsfilter_match_ns(f, "app.system.views"));
    ck_assert(!nsfilter_match_ns(f, "app.system"));
    nsfilter_free(f);
}
END_TEST

START_TEST(test_question_mark_is_one_character)
{
    const char *inc[] = {"caf?.x", "d.*?z", NULL};
    nsfilter *f = make(inc, NULL);

    ck_assert(nsfilter_match(f, "cafe", "x"));
    ck_assert(nsfilter_match(f, "caf\xC3\xA9", "x")); /* "café": ? takes the two-byte é */
    ck_assert(!nsfilter_match(f, "caf", "x"));
    ck_assert(nsfilter_match(f, "d", "\xC3\xA9z"));
    ck_assert(!nsfilter_match(f, "d", "z"));
    nsfilter_free(f);
}
END_TEST

START_TEST(test_exclude_wins)
{
    const char *inc[] = {"shop.*", "crm.*", NULL};
    const char *exc[] = {"shop.tmp_*", "*.audit", NULL};
    nsfilter *f = make(inc, exc);

    ck_assert(nsfilter_match(f, "shop", "orders"));
    ck_assert(!nsfilter_match(f, "shop", "tmp_1"));
    ck_assert(!nsfilter_match(f, "shop", "audit"));
    ck_assert(!nsfilter_match(f, "crm", "audit"));
    ck_assert(nsfilter_match(f, "crm", "audits"));
    ck_assert(!nsfilter_match(f, "other", "orders")); /* not included at all */
    nsfilter_free(f);
}
END_TEST

START_TEST(test_empty_include_matches_nothing)
{
    const char *inc[] = {NULL};
    nsfilter *f = make(inc, NULL);

    ck_assert(!nsfilter_match(f, "shop", "orders"));
    nsfilter_free(f);
    f = make(NULL, NULL);
    ck_assert(!nsfilter_match(f, "a", "b"));
    nsfilter_free(f);
}
END_TEST

static void expect_malformed(const char *pattern, const char *needle)
{
    const char *inc[] = {"ok.*", pattern, NULL};
    const char *exc[] = {pattern, NULL};
    char err[256] = "";

    ck_assert_msg(nsfilter_new(inc, NULL, err, sizeof err) == NULL, "\"%s\" accepted as include", pattern);
    ck_assert_msg(strstr(err, needle) != NULL, "error for \"%s\" lacks \"%s\": %s", pattern, needle, err);
    err[0] = '\0';
    ck_assert_msg(nsfilter_new(NULL, exc, err, sizeof err) == NULL, "\"%s\" accepted as exclude", pattern);
    ck_assert_msg(strstr(err, needle) != NULL, "error for \"%s\" lacks \"%s\": %s", pattern, needle, err);
    err[0] = '\0';
    ck_assert(!nsfilter_check_pattern(pattern, err, sizeof err));
    ck_assert(err[0] != '\0');
}

START_TEST(test_malformed)
{
    expect_malformed("shop", "no dot");
    expect_malformed("*", "no dot");
    expect_malformed(".orders", "empty database part");
    expect_malformed("shop.", "empty collection part");
    expect_malformed("", "empty namespace pattern");
    expect_malformed("shop.my orders", "space");

    char err[256];
    ck_assert(nsfilter_check_pattern("a.b", err, sizeof err));
    ck_assert(nsfilter_check_pattern("*.*", err, sizeof err));
}
END_TEST

/* Whether a database's collections may be replicated (dropDatabase gets DDL only then). */
START_TEST(test_match_db)
{
    const char *inc[] = {"shop.*", "crm.cust*", "log?.*", NULL};
    const char *exc[] = {"log9.*", "shop.secret", NULL};
    nsfilter *f = make(inc, exc);
    ck_assert(nsfilter_match_db(f, "shop")); /* shop.secret is excluded, the rest of shop is not */
    ck_assert(nsfilter_match_db(f, "crm"));  /* some collections of it */
    ck_assert(nsfilter_match_db(f, "log1"));
    ck_assert(!nsfilter_match_db(f, "log9")); /* excluded as a whole */
    ck_assert(!nsfilter_match_db(f, "analytics"));
    ck_assert(!nsfilter_match_db(f, "public"));
    nsfilter_free(f);
}
END_TEST

START_TEST(test_internal_namespaces)
{
    ck_assert(ns_is_internal("admin", 5, NULL, 0));
    ck_assert(ns_is_internal("local", 5, "oplog.rs", 8));
    ck_assert(ns_is_internal("config", 6, "c", 1));
    ck_assert(ns_is_internal("shop", 4, "system.views", 12));
    ck_assert(!ns_is_internal("shop", 4, "orders", 6));
    ck_assert(!ns_is_internal("shop", 4, NULL, 0));
    ck_assert(!ns_is_internal("admins", 6, NULL, 0));
    ck_assert(!ns_is_internal("adm", 3, NULL, 0));
    ck_assert(!ns_is_internal("shop", 4, "system", 6));
}
END_TEST

/* The temporary collection of a rename across databases is replicated wherever its database may be. */
START_TEST(test_rename_temp_collection)
{
    const char *inc[] = {"dst.target", "src.*", NULL};
    const char *exc[] = {"gone.*", NULL};
    nsfilter *f = make(inc, exc);
    ck_assert(nsfilter_match(f, "dst", "tmpAb3xZ.renameCollection"));
    ck_assert(!nsfilter_match(f, "dst", "other"));
    ck_assert(!nsfilter_match(f, "elsewhere", "tmpAb3xZ.renameCollection")); /* no pattern names that database */
    ck_assert(!nsfilter_match(f, "gone", "tmpAb3xZ.renameCollection"));      /* excluded as a whole */
    ck_assert(!nsfilter_match(f, "dst", "tmpAb3x.renameCollection"));        /* four characters: not the model */
    ck_assert(!nsfilter_match(f, "dst", "tmpAb3xZ.renameCollections"));
    ck_assert(nsfilter_match_ns(f, "dst.tmp00000.renameCollection"));
    nsfilter_free(f);
}
END_TEST

static void one_op(op_entry *e, op_kind kind, const char *db, const char *coll, const char *to_db, const char *to_coll)
{
    op_pos pos = {7, 1, 1};
    ck_assert(op_entry_alloc(e, &pos, 1));
    e->ops[0].kind = kind;
    e->ops[0].db = db;
    e->ops[0].coll = coll;
    e->ops[0].to_db = to_db;
    e->ops[0].to_coll = to_coll;
}

/* Renames across the filter's edge: kept between replicated names, a drop out of it, refused into it. */
START_TEST(test_filter_entry_renames)
{
    const char *inc[] = {"shop.*", "dst.target", NULL};
    const char *exc[] = {"shop.secret", NULL};
    nsfilter *f = make(inc, exc);
    op_entry e;
    char err[512] = "";

    one_op(&e, OP_RENAME, "shop", "a", "shop", "b");
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert_int_eq(e.ops[0].kind, OP_RENAME);
    op_entry_clear(&e);

    one_op(&e, OP_RENAME, "shop", "a", "shop", "secret"); /* out of the filter: its table goes */
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert_int_eq(e.ops[0].kind, OP_DROP);
    ck_assert_str_eq(e.ops[0].db, "shop");
    ck_assert_str_eq(e.ops[0].coll, "a");
    ck_assert_ptr_nonnull(e.ops[0].reason);
    ck_assert_str_eq(e.ops[0].to_coll, "secret");
    op_entry_clear(&e);

    one_op(&e, OP_RENAME, "shop", "secret", "shop", "c"); /* into it: its documents were never read */
    ck_assert(!nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "shop.secret -> shop.c"));
    ck_assert_ptr_nonnull(strstr(err, "--reimport"));
    op_entry_clear(&e);

    one_op(&e, OP_RENAME, "other", "x", "other", "y"); /* neither side */
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert_int_eq(e.ops[0].kind, OP_NOOP);
    op_entry_clear(&e);

    /* a rename across databases as the server writes it: the temporary collection, then the rename over the target */
    one_op(&e, OP_RENAME, "dst", "tmpQ1w2E.renameCollection", "dst", "target");
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert_int_eq(e.ops[0].kind, OP_RENAME);
    op_entry_clear(&e);
    one_op(&e, OP_RENAME, "dst", "tmpQ1w2E.renameCollection", "dst", "unlisted"); /* a target left out */
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert_int_eq(e.ops[0].kind, OP_DROP);
    ck_assert_str_eq(e.ops[0].coll, "tmpQ1w2E.renameCollection");
    op_entry_clear(&e);

    /* a notice about a left-out namespace is not given */
    one_op(&e, OP_NOOP, "shop", "secret", NULL, NULL);
    e.ops[0].notice = true;
    e.ops[0].reason = "a view";
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert(!e.ops[0].notice);
    op_entry_clear(&e);
    one_op(&e, OP_NOOP, "shop", "v", NULL, NULL);
    e.ops[0].notice = true;
    e.ops[0].reason = "a view";
    ck_assert(nsfilter_filter_entry(f, &e, err, sizeof err));
    ck_assert(e.ops[0].notice);
    op_entry_clear(&e);

    ck_assert(nsfilter_filter_entry(NULL, &e, err, sizeof err)); /* no filter keeps everything */
    nsfilter_free(f);
}
END_TEST

static void collect_db(const char *db, size_t len, void *arg)
{
    char *out = arg;
    strncat(out, db, len);
    strcat(out, ";");
}

/* The exact databases of the include patterns, for a server-side $match; none when a database part is a glob. */
START_TEST(test_each_exact_db)
{
    char got[256] = "";
    const char *inc[] = {"shop.*", "crm.users", "shop.orders", NULL}, *exc[] = {"w*.x", NULL};
    nsfilter *f = make(inc, exc);
    ck_assert(nsfilter_each_exact_db(f, collect_db, got));
    ck_assert_str_eq(got, "shop;crm;shop;");
    nsfilter_free(f);
    const char *glob[] = {"shop.*", "s?op.x", NULL}, *all[] = {"*.*", NULL};
    got[0] = '\0';
    f = make(glob, NULL);
    ck_assert(!nsfilter_each_exact_db(f, collect_db, got));
    nsfilter_free(f);
    f = make(all, NULL);
    ck_assert(!nsfilter_each_exact_db(f, collect_db, got));
    nsfilter_free(f);
    ck_assert(!nsfilter_each_exact_db(NULL, collect_db, got));
    ck_assert_str_eq(got, "");
}
END_TEST

Suite *nsfilter_suite(void); /* called by the generated runner list */

Suite *nsfilter_suite(void)
{
    Suite *s = suite_create("nsfilter");
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_everything);
    tcase_add_test(tc, test_exact_and_prefix);
    tcase_add_test(tc, test_globs);
    tcase_add_test(tc, test_dotted_collections);
    tcase_add_test(tc, test_question_mark_is_one_character);
    tcase_add_test(tc, test_exclude_wins);
    tcase_add_test(tc, test_empty_include_matches_nothing);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_match_db);
    tcase_add_test(tc, test_internal_namespaces);
    tcase_add_test(tc, test_rename_temp_collection);
    tcase_add_test(tc, test_filter_entry_renames);
    tcase_add_test(tc, test_each_exact_db);
    suite_add_tcase(s, tc);
    return s;
}
