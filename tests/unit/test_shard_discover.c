/*
 * test_shard_discover.c — source/shards/discover.h without a server: a shard's URI made from the router URI (the
 * shard's hosts and replica set; the router's credentials, auth database, TLS and other options; not its replicaSet
 * or SRV), host strings that must not parse, config.shards documents; and source/txn.h's transaction key (equal on
 * the entries of one transaction, different across transactions).
 */
#include <check.h>
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <string.h>

#include "source/shards/discover.h"
#include "source/txn.h"

Suite *shard_discover_suite(void); /* called by the generated runner list */

static mongoc_uri_t *parse(const char *text)
{
    bson_error_t e;
    mongoc_uri_t *u = mongoc_uri_new_with_error(text, &e);
    ck_assert_msg(u != NULL, "%s does not parse: %s", text, e.message);
    return u;
}

/* The hosts of a URI as "h:p,h:p". */
static void hosts_of(const mongoc_uri_t *u, char *out, size_t len)
{
    out[0] = '\0';
    for (const mongoc_host_list_t *h = mongoc_uri_get_hosts(u); h; h = h->next) {
        size_t n = strlen(out);
        snprintf(out + n, len - n, "%s%s", n ? "," : "", h->host_and_port);
    }
}

START_TEST(uri_carries_credentials_and_options)
{
    char err[256] = "", hosts[256];
    const char *router = "mongodb://app:p%40ss@r1.example:27017,r2.example:27017/appdb?authSource=admin"
                         "&authMechanism=SCRAM-SHA-256&tls=true&tlsCAFile=/etc/ca%20x.pem&appName=mi%26ne"
                         "&replicaSet=routers&connectTimeoutMS=1234&compressors=zlib&directConnection=false";
    char *s = shard_uri(router, "shard0", "10.0.0.1:27018,10.0.0.2:27018", err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    mongoc_uri_t *u = parse(s);
    hosts_of(u, hosts, sizeof hosts);
    ck_assert_str_eq(hosts, "10.0.0.1:27018,10.0.0.2:27018");
    ck_assert_str_eq(mongoc_uri_get_replica_set(u), "shard0");
    ck_assert_str_eq(mongoc_uri_get_username(u), "app");
    ck_assert_str_eq(mongoc_uri_get_password(u), "p@ss");
    ck_assert_str_eq(mongoc_uri_get_auth_source(u), "admin");
    ck_assert_str_eq(mongoc_uri_get_auth_mechanism(u), "SCRAM-SHA-256");
    ck_assert_str_eq(mongoc_uri_get_database(u), "appdb");
    ck_assert(mongoc_uri_get_tls(u));
    ck_assert_str_eq(mongoc_uri_get_option_as_utf8(u, MONGOC_URI_TLSCAFILE, ""), "/etc/ca x.pem");
    ck_assert_str_eq(mongoc_uri_get_appname(u), "mi&ne");
    ck_assert_int_eq(mongoc_uri_get_option_as_int32(u, MONGOC_URI_CONNECTTIMEOUTMS, 0), 1234);
    ck_assert(!mongoc_uri_has_option(u, MONGOC_URI_DIRECTCONNECTION));
    const bson_t *comp = mongoc_uri_get_compressors(u);
    ck_assert(comp && bson_has_field(comp, "zlib"));
    mongoc_uri_destroy(u);
    bson_free(s);

    /* no credentials at all: none made up */
    s = shard_uri("mongodb://127.0.0.1:40000/", "shard1", "127.0.0.1:40001", err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    u = parse(s);
    ck_assert_ptr_null(mongoc_uri_get_username(u));
    ck_assert_ptr_null(mongoc_uri_get_auth_mechanism(u));
    ck_assert(!mongoc_uri_get_tls(u));
    ck_assert_str_eq(mongoc_uri_get_replica_set(u), "shard1");
    mongoc_uri_destroy(u);
    bson_free(s);
}
END_TEST

START_TEST(uri_srv_and_mechanism_properties)
{
    char err[256] = "", hosts[256];
    /* mongodb+srv implies TLS; the shard's URI (plain hosts) must say it */
    char *s = shard_uri("mongodb+srv://u:pw@cluster0.example.net/?authMechanism=MONGODB-AWS"
                        "&authMechanismProperties=AWS_SESSION_TOKEN:tok",
                        "rsA", "a.example.net:27017", err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    mongoc_uri_t *u = parse(s);
    hosts_of(u, hosts, sizeof hosts);
    ck_assert_str_eq(hosts, "a.example.net:27017");
    ck_assert(mongoc_uri_get_tls(u));
    ck_assert_ptr_null(mongoc_uri_get_srv_hostname(u));
    ck_assert_str_eq(mongoc_uri_get_auth_mechanism(u), "MONGODB-AWS");
    bson_t props;
    bson_iter_t it;
    ck_assert(mongoc_uri_get_mechanism_properties(u, &props));
    ck_assert(bson_iter_init_find(&it, &props, "AWS_SESSION_TOKEN") && BSON_ITER_HOLDS_UTF8(&it));
    ck_assert_str_eq(bson_iter_utf8(&it, NULL), "tok");
    bson_destroy(&props);
    mongoc_uri_destroy(u);
    bson_free(s);
}
END_TEST

START_TEST(uri_bad_hosts)
{
    static const char *const bad[] = {"", "h1:1,,h2:2", "h1:1,", "h1:1/x", "a@b:1", "h:1?w=0", "h 1:2", "h:1#x"};
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        char *s = shard_uri("mongodb://r:1/", "rs", bad[i], err, sizeof err);
        ck_assert_msg(s == NULL, "host list \"%s\" made %s", bad[i], s ? s : "");
        ck_assert_msg(strstr(err, "does not parse") != NULL, "\"%s\": %s", bad[i], err);
    }
    ck_assert_ptr_null(shard_uri("mongodb://r:1/", "r/s", "h:1", err, sizeof err));
    ck_assert_ptr_null(shard_uri("mongodb://r:1/", "", "h:1", err, sizeof err));
    ck_assert_ptr_null(shard_uri("not a uri", "rs", "h:1", err, sizeof err));
    ck_assert(strstr(err, "bad MongoDB URI") != NULL);
}
END_TEST

static bson_t *json(const char *j)
{
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)j, -1, &e);
    ck_assert_msg(b != NULL, "%s: %s", j, e.message);
    return b;
}

START_TEST(config_shards_documents)
{
    char err[256] = "";
    shard_info si;
    bson_t *d = json("{\"_id\": \"shard0\", \"host\": \"shard0/127.0.0.1:5001,127.0.0.1:5002\", \"state\": 1,"
                     " \"topologyTime\": {\"$timestamp\": {\"t\": 1700000000, \"i\": 3}}}");
    ck_assert_int_eq(shard_info_from_doc(d, "mongodb://u:p@127.0.0.1:5000/?authSource=admin", &si, err, sizeof err),
                     DISCOVER_OK);
    ck_assert_str_eq(si.id, "shard0");
    ck_assert_str_eq(si.rs, "shard0");
    ck_assert_str_eq(si.hosts, "127.0.0.1:5001,127.0.0.1:5002");
    ck_assert_int_eq(si.state, 1);
    ck_assert(!si.draining);
    ck_assert(si.has_topology_time && si.topology_secs == 1700000000 && si.topology_inc == 3);
    mongoc_uri_t *u = parse(si.uri);
    ck_assert_str_eq(mongoc_uri_get_replica_set(u), "shard0");
    ck_assert_str_eq(mongoc_uri_get_username(u), "u");
    mongoc_uri_destroy(u);
    shard_info_free(&si);
    bson_destroy(d);

    d = json("{\"_id\": \"s1\", \"host\": \"rsX/h:1\", \"state\": 1, \"draining\": true}");
    ck_assert_int_eq(shard_info_from_doc(d, "mongodb://r:1/", &si, err, sizeof err), DISCOVER_OK);
    ck_assert(si.draining);
    ck_assert_str_eq(si.rs, "rsX");
    ck_assert(!si.has_topology_time);
    shard_list l = {.v = &si, .n = 1};
    ck_assert_ptr_eq(shard_list_find(&l, "s1"), &si);
    ck_assert_ptr_null(shard_list_find(&l, "s2"));
    shard_info_free(&si);
    bson_destroy(d);

    static const char *const bad[] = {
        "{\"_id\": \"s\", \"host\": \"h:1,h:2\"}", /* not a replica set */
        "{\"_id\": \"s\", \"host\": \"rs/\"}",
        "{\"_id\": \"s\", \"host\": \"/h:1\"}",
        "{\"host\": \"rs/h:1\"}",
        "{\"_id\": \"s\"}",
        "{\"_id\": \"s\", \"host\": \"rs/h:1,h@x:2\"}",
        "{\"_id\": 5, \"host\": \"rs/h:1\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = json(bad[i]);
        err[0] = '\0';
        ck_assert_msg(shard_info_from_doc(d, "mongodb://r:1/", &si, err, sizeof err) == DISCOVER_BAD, "%s accepted",
                      bad[i]);
        ck_assert_msg(err[0] != '\0', "%s: no reason given", bad[i]);
        ck_assert_ptr_null(si.id);
        bson_destroy(d);
    }
}
END_TEST

/* ---- the transaction key (source/txn.h) ---- */

#define LSID_A "{\"id\": {\"$binary\": {\"base64\": \"CK+8+nZ+Eem9p6vK9BEt9g==\", \"subType\": \"04\"}}"
#define LSID_B "{\"id\": {\"$binary\": {\"base64\": \"AAAAAAAAAAAAAAAAAAAAAA==\", \"subType\": \"04\"}}"
#define UID_1                                                                                                          \
    ", \"uid\": {\"$binary\": {\"base64\": \"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\", \"subType\": \"00\"}}"
#define TXUUID(c)                                                                                                      \
    ", \"txnNumber\": {\"$numberLong\": \"0\"}, \"txnUUID\": {\"$binary\": {\"base64\": \"" c                          \
    "AAAAAAAAAAAAAAAAAAAAA==\", \"subType\": \"04\"}}"

/* One entry of role `o` ("prepare", "commit", "abort", "partial") in session lsid with txnNumber txn; its info. */
static txn_info classify(const char *lsid, long txn, const char *o)
{
    char j[1024];
    const char *obj = strcmp(o, "prepare") == 0 ? "{\"applyOps\": [], \"prepare\": true}"
                      : strcmp(o, "commit") == 0
                          ? "{\"commitTransaction\": 1, \"commitTimestamp\": {\"$timestamp\": {\"t\": 5, \"i\": 1}}}"
                      : strcmp(o, "abort") == 0 ? "{\"abortTransaction\": 1}"
                                                : "{\"applyOps\": [], \"partialTxn\": true}";
    snprintf(j, sizeof j,
             "{\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 2}}, \"t\": 1, \"op\": \"c\", \"ns\": \"admin.$cmd\","
             " \"lsid\": %s, \"txnNumber\": {\"$numberLong\": \"%ld\"},"
             " \"prevOpTime\": {\"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 1}}, \"t\": 1}, \"o\": %s}",
             lsid, txn, obj);
    bson_t *b = json(j);
    txn_info ti;
    ck_assert(txn_classify(b, &ti));
    bson_destroy(b);
    return ti;
}

START_TEST(txn_key_per_transaction)
{
    txn_info p = classify(LSID_A "}", 7, "prepare"), c = classify(LSID_A "}", 7, "commit"),
             a = classify(LSID_A "}", 7, "abort");
    ck_assert_int_eq(p.role, TXN_PREPARE);
    ck_assert_int_eq(c.role, TXN_COMMIT_PREPARED);
    ck_assert_int_eq(a.role, TXN_ABORT);
    ck_assert(p.has_key && c.has_key && a.has_key);
    ck_assert(p.key == c.key && c.key == a.key);
    /* the uid (the user's digest) is not part of it: equal */
    ck_assert(classify(LSID_A UID_1 "}", 7, "prepare").key == p.key);
    /* another transaction number, another session, another internal transaction of one parent session: differ */
    ck_assert(classify(LSID_A "}", 8, "prepare").key != p.key);
    ck_assert(classify(LSID_B "}", 7, "prepare").key != p.key);
    uint64_t i1 = classify(LSID_A TXUUID("A") "}", 0, "prepare").key;
    uint64_t i2 = classify(LSID_A TXUUID("B") "}", 0, "prepare").key;
    ck_assert(i1 != i2);
    ck_assert(classify(LSID_A TXUUID("A") "}", 0, "commit").key == i1);
    /* a partialTxn entry carries none */
    txn_info part = classify(LSID_A "}", 7, "partial");
    ck_assert_int_eq(part.role, TXN_PART);
    ck_assert(!part.has_key);
}
END_TEST

Suite *shard_discover_suite(void)
{
    Suite *s = suite_create("shard_discover");
    TCase *tc = tcase_create("discover");
    tcase_add_test(tc, uri_carries_credentials_and_options);
    tcase_add_test(tc, uri_srv_and_mechanism_properties);
    tcase_add_test(tc, uri_bad_hosts);
    tcase_add_test(tc, config_shards_documents);
    tcase_add_test(tc, txn_key_per_transaction);
    suite_add_tcase(s, tc);
    return s;
}
