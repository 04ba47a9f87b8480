/*
 * test_fuzz_regressions.c — every input a fuzz target once failed on (the files of tests/fuzz/regressions/TARGET/), run
 * again through the same entry point (tests/fuzz/fuzz.h) in the ordinary unit tests, built normally and under
 * SANITIZE=1: the fix stays fixed. Plus the fixes themselves, checked directly (what each input showed).
 */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../fuzz/fuzz.h"
#include "map/bucket.h"

Suite *fuzz_regressions_suite(void); /* called by the generated runner list */

#define REGRESSIONS "tests/fuzz/regressions/"

typedef struct {
    const char *name;
    int (*entry)(const uint8_t *, size_t);
} target;

#define FUZZ_ROW(n) {#n, fuzz_##n},
static const target targets[] = {FUZZ_TARGETS(FUZZ_ROW)};
#undef FUZZ_ROW
#define NTARGETS (sizeof targets / sizeof *targets)

/* Runs every file of the target's folder; returns how many (0 when it has none). */
static int run_target(const target *t)
{
    char dir[256];
    snprintf(dir, sizeof dir, REGRESSIONS "%s", t->name);
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f != NULL, "cannot read %s", path);
        struct stat st;
        ck_assert_int_eq(fstat(fileno(f), &st), 0);
        uint8_t *data = malloc((size_t)st.st_size + 1);
        ck_assert_int_eq(fread(data, 1, (size_t)st.st_size, f), (size_t)st.st_size);
        fclose(f);
        /* A copy of exactly the file's size, so ASan sees any read past the input's end. */
        uint8_t *exact = malloc((size_t)st.st_size);
        memcpy(exact, data, (size_t)st.st_size);
        free(data);
        ck_assert_int_eq(t->entry(exact, (size_t)st.st_size), 0);
        free(exact);
        n++;
    }
    closedir(d);
    return n;
}

START_TEST(test_target_inputs)
{
    run_target(&targets[_i]);
}
END_TEST

/* Every folder under regressions/ names a target (a misspelt one would never run). */
START_TEST(test_folders_are_targets)
{
    DIR *d = opendir(REGRESSIONS);
    ck_assert_msg(d != NULL, "run from the repository root: " REGRESSIONS " not found");
    struct dirent *de;
    int total = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        const target *t = NULL;
        for (size_t i = 0; i < NTARGETS; i++)
            if (strcmp(targets[i].name, de->d_name) == 0)
                t = &targets[i];
        ck_assert_msg(t != NULL, REGRESSIONS "%s is not a fuzz target of tests/fuzz/fuzz.h", de->d_name);
        total += run_target(t) > 0;
    }
    closedir(d);
    ck_assert_int_gt(total, 0);
}
END_TEST

/* ---- the fixes, directly ---------------------------------------------------------------------------------------- */

static bool apply(const char *pre_json, const char *diff_json, bucket_diff_mode mode, bson_t *out, char *err,
                  size_t errlen)
{
    bson_error_t e;
    bson_t *pre = bson_new_from_json((const uint8_t *)pre_json, -1, &e);
    bson_t *diff = bson_new_from_json((const uint8_t *)diff_json, -1, &e);
    ck_assert(pre != NULL && diff != NULL);
    bool ok =
        bucket_apply_diff_ex(bson_get_data(pre), pre->len, bson_get_data(diff), diff->len, mode, out, err, errlen);
    bson_destroy(pre);
    bson_destroy(diff);
    return ok;
}

/* regressions/v2diff/array-length-805306371: an array diff {a: true, l: 805306371} (35 bytes) filled the array with
 * 805 million nulls, gigabytes, before libbson's 2 GB limit stopped it. The array may grow only by what a 16 MB
 * document holds: refused at once, in both modes, naming the index; a length that fits still pads with nulls. */
START_TEST(test_array_length_bounded)
{
    const char *huge[] = {"{\"sarr\": {\"a\": true, \"l\": 805306371}}", "{\"sarr\": {\"a\": true, \"u6000000\": 1}}",
                          /* two arrays, each under the bound (8.8 MB of nulls), together over it; strict mode only,
                           * as a million nulls take a while under the sanitizers */
                          "{\"sarr\": {\"a\": true, \"l\": 1100000}, \"sb\": {\"a\": true, \"l\": 1100000}}"};
    for (int mode = 0; mode < 2; mode++) {
        for (size_t i = 0; i < (mode == 0 ? 3u : 2u); i++) {
            bson_t out;
            char err[512] = "";
            bool ok = apply("{\"arr\": [1, 2], \"b\": []}", huge[i], (bucket_diff_mode)mode, &out, err, sizeof err);
            ck_assert_msg(!ok, "diff %zu (mode %d) applied: %u bytes", i, mode, out.len);
            ck_assert_msg(strstr(err, "outgrow a BSON document") != NULL, "%s", err);
            bson_destroy(&out);
        }
    }
    bson_t out;
    char err[512] = "";
    ck_assert_msg(
        apply("{\"arr\": [1]}", "{\"sarr\": {\"a\": true, \"l\": 100000}}", BUCKET_DIFF_STRICT, &out, err, sizeof err),
        "%s", err);
    bson_iter_t it, arr;
    ck_assert(bson_iter_init_find(&it, &out, "arr") && bson_iter_recurse(&it, &arr));
    uint32_t n = 0;
    while (bson_iter_next(&arr))
        n++;
    ck_assert_uint_eq(n, 100000);
    bson_destroy(&out);
}
END_TEST

Suite *fuzz_regressions_suite(void)
{
    Suite *s = suite_create("fuzz_regressions");
    TCase *tc = tcase_create("inputs");
    tcase_add_loop_test(tc, test_target_inputs, 0, (int)NTARGETS);
    tcase_add_test(tc, test_folders_are_targets);
    suite_add_tcase(s, tc);
    tc = tcase_create("fixes");
    tcase_add_test(tc, test_array_length_bounded);
    suite_add_tcase(s, tc);
    return s;
}
