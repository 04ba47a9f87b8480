/*
 * test_pgerror.c — the one PostgreSQL error policy (sink/pgerror.h): which SQLSTATEs may set an op aside, which are
 * retried, which need a person; and messages that never carry a password.
 */
#include <check.h>
#include <string.h>

#include "sink/pgerror.h"

START_TEST(test_only_data_errors_are_data)
{
    /* The op's own data: dead-letter material. */
    const char *data[] = {"22P02", "22021", "22P05", "22003", "22023", "22001",
                          "23505", "23502", "23514", "54000", "54001", "P0001"};
    for (size_t i = 0; i < sizeof data / sizeof data[0]; i++)
        ck_assert_msg(pgerror_classify(data[i], true) == APPLY_DATA, "%s should be data", data[i]);
    /* Passing faults: never a dead letter, whatever statement met them. */
    const char *retry[] = {"55P03", "57014", "40P01", "40001", "53100", "53200", "53300", "53000", "08006", "08003",
                           "57P01", "57P02", "57P03", "58030", "XX000", "25006", "25P03", "99999", "HV000"};
    for (size_t i = 0; i < sizeof retry / sizeof retry[0]; i++) {
        ck_assert_msg(pgerror_classify(retry[i], true) == APPLY_RETRY, "%s should be a retry", retry[i]);
        ck_assert_msg(pgerror_classify(retry[i], false) == APPLY_RETRY, "%s should be a retry", retry[i]);
    }
    ck_assert_int_eq(pgerror_classify(NULL, true), APPLY_RETRY); /* no SQLSTATE: the connection */
    ck_assert_int_eq(pgerror_classify("", true), APPLY_RETRY);
    /* A person must act. */
    const char *config[] = {"28P01", "28000", "3D000", "57P04", "42501", "42P01", "42703", "O2BAK"};
    for (size_t i = 0; i < sizeof config / sizeof config[0]; i++)
        ck_assert_msg(pgerror_classify(config[i], true) == APPLY_CONFIG, "%s should need a person", config[i]);
    ck_assert_int_eq(pgerror_classify("O2FEN", false), APPLY_FENCED);
    /* The same data codes from oplog2pg's own statements are not an op's fault; a catalog race is a retry. */
    ck_assert_int_eq(pgerror_classify("22P02", false), APPLY_CONFIG);
    ck_assert_int_eq(pgerror_classify("23505", false), APPLY_RETRY);
    /* RAISE EXCEPTION without ERRCODE: a user's trigger refusing the row; from oplog2pg's own statements (a trigger
     * on its checkpoint, say) a person must look. The rest of class P0 is no refusal of data. */
    ck_assert_int_eq(pgerror_classify("P0001", false), APPLY_CONFIG);
    ck_assert_int_eq(pgerror_classify("P0002", true), APPLY_RETRY);
    ck_assert_int_eq(pgerror_classify("P0004", true), APPLY_RETRY);
}
END_TEST

/* What the policy names, and so what the daemon retries without a bound; the rest it retries only so often on one
 * op. */
START_TEST(test_listed)
{
    const char *listed[] = {"22P02", "23505", "54000", "P0001", "28P01", "3D000", "57P04", "42P01", "O2FEN", "O2FOR",
                            "08006", "40P01", "53200", "55P03", "57014", "57P01", "58030", "25006", "25P03", "XX000"};
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++)
        ck_assert_msg(pgerror_listed(listed[i]), "%s should be listed", listed[i]);
    const char *unlisted[] = {"P0002", "P0004", "XY123", "99999", "HV000", "55000", "54011", "0A000"};
    for (size_t i = 0; i < sizeof unlisted / sizeof unlisted[0]; i++)
        ck_assert_msg(!pgerror_listed(unlisted[i]), "%s should not be listed", unlisted[i]);
    ck_assert(!pgerror_listed(NULL));
    ck_assert(!pgerror_listed(""));
    ck_assert(!pgerror_listed("5320"));
}
END_TEST

START_TEST(test_advice)
{
    ck_assert_ptr_nonnull(strstr(pgerror_advice("28P01"), "password"));
    ck_assert_ptr_nonnull(strstr(pgerror_advice("28000"), "user name"));
    ck_assert_ptr_nonnull(strstr(pgerror_advice("3D000"), "dbname"));
    ck_assert_ptr_nonnull(strstr(pgerror_advice("42501"), "grant"));
    ck_assert_str_eq(pgerror_advice("22P02"), "");
}
END_TEST

/* libpq's words for TLS that fails verification (fe-secure-openssl.c, fe-connect.c): a person must act; the network
 * failing during a handshake is not among them. */
START_TEST(test_tls_refusals)
{
    ck_assert(pgerror_tls_refused("connection to server at \"localhost\" (127.0.0.1), port 5432 failed: SSL error: "
                                  "certificate verify failed"));
    ck_assert(pgerror_tls_refused("connection to server at \"127.0.0.1\", port 5432 failed: server certificate for "
                                  "\"localhost\" (and 1 other name) does not match host name \"db.example.com\""));
    ck_assert(pgerror_tls_refused("root certificate file \"/etc/ca.pem\" does not exist"));
    ck_assert(pgerror_tls_refused("private key file \"/etc/k.pem\" has group or world access"));
    ck_assert(pgerror_tls_refused("server does not support SSL, but SSL was required"));
    ck_assert(pgerror_tls_refused("SSL error: tlsv1 alert unknown ca"));
    ck_assert(!pgerror_tls_refused("SSL SYSCALL error: Connection reset by peer"));
    ck_assert(!pgerror_tls_refused("connection to server at \"localhost\" (127.0.0.1), port 5432 failed: Connection "
                                   "refused"));
    ck_assert(!pgerror_tls_refused(NULL));
}
END_TEST

/* libpq quotes pieces of a malformed connection string; nothing from the password's part may be shown. */
START_TEST(test_conninfo_errors_hide_the_password)
{
    char err[600];
    const char *bad[] = {
        "host=db user=app password=se cret dbname=x", "host=db password='s3cr3t",
        "postgresql://app:hun%zzter2@db/x",           "postgresql://app:hunter2@[db/x",
        "host=db password=abc passwrd=typo",
    };
    const char *secret[] = {"cret", "s3cr3t", "zzter2", "hunter2", "abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert(!pgerror_check_conninfo(bad[i], err, sizeof err));
        ck_assert_msg(strstr(err, "not a valid libpq connection string") != NULL, "%s", err);
        ck_assert_msg(strstr(err, secret[i]) == NULL, "the message shows the password: %s", err);
    }
    ck_assert(pgerror_check_conninfo("host=db user=app password='a b' dbname=x", err, sizeof err));
    /* Without a password the message stays as informative as libpq's. */
    ck_assert(!pgerror_check_conninfo("host=db port=abc x", err, sizeof err));
    ck_assert_msg(strstr(err, "\"x\"") != NULL, "%s", err);
}
END_TEST

START_TEST(test_message_cleaning)
{
    char out[300];
    pgerror_message("connection to server failed: FATAL:  28000: role \"x\" does not exist\nLOCATION:  f, x.c:1\n",
                    NULL, out, sizeof out);
    ck_assert_str_eq(out, "connection to server failed: FATAL:  28000: role \"x\" does not exist");
    pgerror_message("ERROR:  bad\nDETAIL:  more\n", NULL, out, sizeof out);
    ck_assert_str_eq(out, "ERROR:  bad; DETAIL:  more");
    pgerror_message("name \xff\n", NULL, out, sizeof out);
    ck_assert_str_eq(out, "name \\xff");
}
END_TEST

Suite *pgerror_suite(void); /* called by the generated runner list */

Suite *pgerror_suite(void)
{
    Suite *s = suite_create("pgerror");
    TCase *tc = tcase_create("policy");
    tcase_add_test(tc, test_only_data_errors_are_data);
    tcase_add_test(tc, test_listed);
    tcase_add_test(tc, test_advice);
    tcase_add_test(tc, test_tls_refusals);
    tcase_add_test(tc, test_conninfo_errors_hide_the_password);
    tcase_add_test(tc, test_message_cleaning);
    suite_add_tcase(s, tc);
    return s;
}
