/*
 * test_docs.c — the manual keeps up with the code: every option of the configuration table has an entry under its
 * section in man/oplog2pg.ini.5 (with the table's type, default and reloadability); every command and long option
 * of the usage in src/daemon/main.c, and every exit code of include/daemon/exitcodes.h, appear in man/oplog2pg.8;
 * every exit code has a row in docs/operations.md's exit-code table. The facts are read from the sources
 * themselves (the option table through config_option_at, main.c and exitcodes.h as text), so a new option, command
 * or code fails this suite until the manual describes it. Run from the repository root, like the other suites.
 */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/textfile.h"
#include "daemon/config.h"

/* ---- helpers ----------------------------------------------------------------------------------------------------- */

static char *read_all(const char *path)
{
    char *buf = textfile_read(path);
    ck_assert_msg(buf != NULL, "cannot read %s (tests run from the repository root)", path);
    return buf;
}

/* Roff source as plain text: font changes (\fB \fI \fR \fP \f(CW), zero-width \& and \c dropped, \- and \(hy
 * made '-', \e made '\', and double quotes removed (macro arguments), so that ".BR \-\-tail\-from" reads
 * ".BR --tail-from". Comment lines (.\") are dropped whole. */
static char *roff_plain(const char *src)
{
    size_t n = strlen(src);
    char *out = malloc(n + 1);
    ck_assert(out != NULL);
    size_t o = 0;
    bool line_start = true;
    for (size_t i = 0; i < n;) {
        if (line_start && strncmp(src + i, ".\\\"", 3) == 0) {
            const char *nl = strchr(src + i, '\n');
            i = nl ? (size_t)(nl - src) + 1 : n;
            continue;
        }
        line_start = false;
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char d = src[i + 1];
            if (d == 'f' && i + 2 < n) {
                i += src[i + 2] == '(' ? 5 : 3;
                continue;
            }
            if (d == '&' || d == 'c') {
                i += 2;
                continue;
            }
            if (d == '-') {
                out[o++] = '-';
                i += 2;
                continue;
            }
            if (d == 'e') {
                out[o++] = '\\';
                i += 2;
                continue;
            }
            if (d == '(' && i + 3 < n && strncmp(src + i + 2, "hy", 2) == 0) {
                out[o++] = '-';
                i += 4;
                continue;
            }
        }
        if (c != '"')
            out[o++] = c;
        if (c == '\n')
            line_start = true;
        i++;
    }
    out[o] = '\0';
    return out;
}

/* The text of the section (".SH NAME" or ".SS NAME") that starts at a line equal to `head`, up to the next line
 * starting with any of `stops` (".SH", or ".SH"/".SS"); NULL if there is no such line. Caller frees. */
static char *roff_section(const char *plain, const char *head, const char *const *stops)
{
    size_t hl = strlen(head);
    const char *p = plain;
    while (p && *p) {
        if (strncmp(p, head, hl) == 0 && (p[hl] == '\n' || p[hl] == '\0'))
            break;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    if (p == NULL || *p == '\0')
        return NULL;
    const char *body = p + hl;
    const char *end = NULL;
    for (const char *q = strchr(body, '\n'); q && !end; q = strchr(q + 1, '\n')) {
        for (size_t s = 0; stops[s] != NULL; s++) {
            if (strncmp(q + 1, stops[s], strlen(stops[s])) == 0) {
                end = q + 1;
                break;
            }
        }
    }
    return end ? strndup(body, (size_t)(end - body)) : strdup(body);
}

/* The first word of the tag line of each ".TP" item in text, passed to fn; the tag line's macro (".B", ".BR",
 * ".BI", ".I") is skipped. Returns the number of items. Comma-separated tags (".BR SIGTERM , SIGINT") give the
 * first word only. */
typedef void (*tag_fn)(const char *word, const char *entry, void *arg);

static int roff_items(const char *text, tag_fn fn, void *arg)
{
    int count = 0;
    for (const char *p = strstr(text, ".TP\n"); p != NULL; p = strstr(p + 1, ".TP\n")) {
        const char *tag = p + 4;
        if (tag[0] == '.') {
            while (*tag && *tag != ' ' && *tag != '\n')
                tag++;
            while (*tag == ' ')
                tag++;
        }
        char word[128];
        size_t w = 0;
        while (tag[w] && !isspace((unsigned char)tag[w]) && tag[w] != ',' && w + 1 < sizeof word) {
            word[w] = tag[w];
            w++;
        }
        word[w] = '\0';
        const char *next = strstr(tag, ".TP\n");
        char *entry = next ? strndup(tag, (size_t)(next - tag)) : strdup(tag);
        fn(word, entry, arg);
        free(entry);
        count++;
    }
    return count;
}

/* Looks for a .TP item whose tag starts with `want`; copies its entry (the tag and text up to the next item). */
struct find_item {
    const char *want;
    char *entry;
};

static void find_item_cb(const char *word, const char *entry, void *arg)
{
    struct find_item *fi = arg;
    if (fi->entry == NULL && strcmp(word, fi->want) == 0)
        fi->entry = strdup(entry);
}

static char *item_entry(const char *text, const char *word)
{
    struct find_item fi = {.want = word, .entry = NULL};
    roff_items(text, find_item_cb, &fi);
    return fi.entry;
}

/* Newlines folded to spaces, so a check does not depend on where the roff source breaks its lines. */
static void fold_lines(char *s)
{
    for (; *s; s++)
        if (*s == '\n')
            *s = ' ';
}

static const char *const STOP_SH[] = {".SH ", NULL};
static const char *const STOP_SH_SS[] = {".SH ", ".SS ", NULL};

/* ---- exit codes, commands and flags as the sources state them ---------------------------------------------------- */

#define MAX_CODES 32

/* The values of include/daemon/exitcodes.h's enum: lines "EXIT_NAME = N,". */
static int exit_codes(int *codes, char names[][48])
{
    char *h = read_all("include/daemon/exitcodes.h");
    int n = 0;
    for (const char *p = strstr(h, "EXIT_"); p != NULL; p = strstr(p + 1, "EXIT_")) {
        char name[48];
        int value, used = 0;
        if (sscanf(p, "%47[A-Z_] = %d,%n", name, &value, &used) == 2 && used > 0) {
            ck_assert_msg(n < MAX_CODES, "exitcodes.h: more than %d codes", MAX_CODES);
            codes[n] = value;
            snprintf(names[n], 48, "%s", name);
            n++;
        }
    }
    free(h);
    return n;
}

/* The usage text of src/daemon/main.c: from the line holding "Usage:" to the one holding "Exit codes:". */
static char *usage_text(void)
{
    char *src = read_all("src/daemon/main.c");
    const char *a = strstr(src, "Usage:");
    ck_assert_msg(a != NULL, "src/daemon/main.c: no \"Usage:\" in the usage text");
    const char *b = strstr(a, "Exit codes:");
    ck_assert_msg(b != NULL, "src/daemon/main.c: no \"Exit codes:\" after \"Usage:\"");
    char *u = strndup(a, (size_t)(b - a));
    free(src);
    return u;
}

/* Commands: the word after "oplog2pg [OPTIONS] " on each usage line, brackets dropped ("[run]" is run); a command
 * may hold hyphens ("infer-map"). */
static int usage_commands(const char *usage, char cmds[][32], int max)
{
    int n = 0;
    const char *marker = "oplog2pg [OPTIONS] ";
    for (const char *p = strstr(usage, marker); p != NULL; p = strstr(p + 1, marker)) {
        const char *w = p + strlen(marker);
        if (*w == '[')
            w++;
        size_t len = 0;
        while (islower((unsigned char)w[len]) || (w[len] == '-' && len > 0 && islower((unsigned char)w[len + 1])))
            len++;
        ck_assert_msg(len > 0 && len < 32, "main.c usage: no command after \"%s\"", marker);
        ck_assert(n < max);
        snprintf(cmds[n++], 32, "%.*s", (int)len, w);
    }
    return n;
}

/* Long options: every "--name" in the usage, and every {"name", ...} of main.c's longopts table. */
static int long_options(const char *usage, char opts[][32], int max)
{
    int n = 0;
    for (const char *p = strstr(usage, "--"); p != NULL; p = strstr(p + 2, "--")) {
        size_t len = 0;
        while (islower((unsigned char)p[2 + len]) || p[2 + len] == '-')
            len++;
        if (len == 0)
            continue;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)len, p + 2);
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen = seen || strcmp(opts[i], name) == 0;
        if (!seen) {
            ck_assert(n < max);
            snprintf(opts[n++], 32, "%s", name);
        }
    }
    char *src = read_all("src/daemon/main.c");
    const char *t = strstr(src, "longopts[] = {");
    ck_assert_msg(t != NULL, "src/daemon/main.c: no longopts table");
    const char *end = strstr(t, "};");
    for (const char *p = strstr(t, "{\""); p != NULL && p < end; p = strstr(p + 1, "{\"")) {
        char name[32];
        if (sscanf(p, "{\"%31[a-z-]\"", name) != 1)
            continue;
        bool seen = false;
        for (int i = 0; i < n; i++)
            seen = seen || strcmp(opts[i], name) == 0;
        if (!seen) {
            ck_assert(n < max);
            snprintf(opts[n++], 32, "%s", name);
        }
    }
    free(src);
    return n;
}

/* ---- oplog2pg.ini(5) -----------------------------------------------------------------------------------------------
 */

START_TEST(test_ini5_lists_every_option_under_its_section)
{
    char *raw = read_all("man/oplog2pg.ini.5");
    char *plain = roff_plain(raw);
    char *options = roff_section(plain, ".SH OPTIONS", STOP_SH);
    ck_assert_msg(options != NULL, "man/oplog2pg.ini.5 has no .SH OPTIONS");
    size_t nopt = config_option_count();
    ck_assert_msg(nopt >= 20, "the option table has only %zu options", nopt);

    for (size_t i = 0; i < nopt; i++) {
        const config_option_info *o = config_option_at(i);
        char head[80], want[300];
        snprintf(head, sizeof head, ".SS [%s]", o->section);
        char *sect = roff_section(options, head, STOP_SH_SS);
        ck_assert_msg(sect != NULL, "man/oplog2pg.ini.5: no \".SS \\\"[%s]\\\"\" under OPTIONS", o->section);
        char *entry = item_entry(sect, o->name);
        ck_assert_msg(entry != NULL, "man/oplog2pg.ini.5: no .TP entry for %s under [%s]", o->name, o->section);
        fold_lines(entry);

        snprintf(want, sizeof want, "Type: %s", o->type_name);
        ck_assert_msg(strstr(entry, want) != NULL, "oplog2pg.ini.5 [%s] %s lacks \"%s\"", o->section, o->name, want);
        if (o->default_text[0] != '\0')
            snprintf(want, sizeof want, "Default: %s.", o->default_text);
        else
            snprintf(want, sizeof want, "Default: empty.");
        ck_assert_msg(strstr(entry, want) != NULL, "oplog2pg.ini.5 [%s] %s lacks \"%s\"", o->section, o->name, want);
        snprintf(want, sizeof want, "Reloadable: %s.", o->reloadable ? "yes" : "no");
        ck_assert_msg(strstr(entry, want) != NULL, "oplog2pg.ini.5 [%s] %s lacks \"%s\"", o->section, o->name, want);
        /* An enum's entry names each of its values (the choices a reader may write). */
        for (size_t c = 0; o->choices != NULL && o->choices[c] != NULL; c++)
            ck_assert_msg(strstr(entry, o->choices[c]) != NULL, "oplog2pg.ini.5 [%s] %s does not name the value %s",
                          o->section, o->name, o->choices[c]);
        free(entry);
        free(sect);
    }
    free(options);
    free(plain);
    free(raw);
}
END_TEST

/* The reverse: every section and item of the page's OPTIONS is in the table, so a removed or renamed option does
 * not linger in the manual. */
struct ini_reverse {
    const char *section;
    int unknown;
    char first_unknown[128];
};

static void ini_reverse_cb(const char *word, const char *entry, void *arg)
{
    struct ini_reverse *r = arg;
    if (config_option_find(r->section, word) < 0) {
        if (r->unknown++ == 0)
            snprintf(r->first_unknown, sizeof r->first_unknown, "%s", word);
    }
}

START_TEST(test_ini5_has_no_unknown_option)
{
    char *raw = read_all("man/oplog2pg.ini.5");
    char *plain = roff_plain(raw);
    char *options = roff_section(plain, ".SH OPTIONS", STOP_SH);
    ck_assert(options != NULL);
    int sections = 0;
    for (const char *p = strstr(options, "\n.SS ["); p != NULL; p = strstr(p + 1, "\n.SS [")) {
        char name[64];
        ck_assert(sscanf(p, "\n.SS [%63[a-z_]]", name) == 1);
        char head[80];
        snprintf(head, sizeof head, ".SS [%s]", name);
        char *sect = roff_section(options, head, STOP_SH_SS);
        ck_assert(sect != NULL);
        struct ini_reverse r = {.section = name, .unknown = 0};
        int items = roff_items(sect, ini_reverse_cb, &r);
        ck_assert_msg(items > 0, "man/oplog2pg.ini.5: section [%s] lists no option", name);
        ck_assert_msg(r.unknown == 0, "man/oplog2pg.ini.5: [%s] %s is not an option of the table", name,
                      r.first_unknown);
        free(sect);
        sections++;
    }
    ck_assert_msg(sections >= 6, "man/oplog2pg.ini.5: only %d option sections", sections);
    free(options);
    free(plain);
    free(raw);
}
END_TEST

/* ---- oplog2pg(8) ------------------------------------------------------------------------------------------------- */

START_TEST(test_man8_has_every_command)
{
    char *usage = usage_text();
    char cmds[16][32];
    int n = usage_commands(usage, cmds, 16);
    ck_assert_msg(n >= 5, "main.c usage lists only %d commands", n);

    char *raw = read_all("man/oplog2pg.8");
    char *plain = roff_plain(raw);
    char *sect = roff_section(plain, ".SH COMMANDS", STOP_SH);
    ck_assert_msg(sect != NULL, "man/oplog2pg.8 has no .SH COMMANDS");
    char *synopsis = roff_section(plain, ".SH SYNOPSIS", STOP_SH);
    ck_assert_msg(synopsis != NULL, "man/oplog2pg.8 has no .SH SYNOPSIS");
    for (int i = 0; i < n; i++) {
        char *entry = item_entry(sect, cmds[i]);
        ck_assert_msg(entry != NULL, "man/oplog2pg.8: COMMANDS has no entry for \"%s\"", cmds[i]);
        free(entry);
        ck_assert_msg(strstr(synopsis, cmds[i]) != NULL, "man/oplog2pg.8: SYNOPSIS lacks \"%s\"", cmds[i]);
    }
    free(synopsis);
    free(sect);
    free(plain);
    free(raw);
    free(usage);
}
END_TEST

START_TEST(test_man8_has_every_long_option)
{
    char *usage = usage_text();
    char opts[32][32];
    int n = long_options(usage, opts, 32);
    ck_assert_msg(n >= 9, "main.c has only %d long options", n);

    char *raw = read_all("man/oplog2pg.8");
    char *plain = roff_plain(raw);
    char *sect = roff_section(plain, ".SH OPTIONS", STOP_SH);
    ck_assert_msg(sect != NULL, "man/oplog2pg.8 has no .SH OPTIONS");
    for (int i = 0; i < n; i++) {
        char want[40];
        snprintf(want, sizeof want, "--%.31s", opts[i]);
        /* Either an item of its own (".BI --tail-from TS") or the second tag of one (".BR -c , --config FILE"). */
        bool found = false;
        for (const char *p = strstr(sect, ".TP\n"); p != NULL && !found; p = strstr(p + 1, ".TP\n")) {
            const char *tag = p + 4;
            const char *eol = strchr(tag, '\n');
            size_t len = eol ? (size_t)(eol - tag) : strlen(tag);
            char line[256];
            snprintf(line, sizeof line, "%.*s", (int)len, tag);
            for (char *w = strtok(line, " ,"); w != NULL && !found; w = strtok(NULL, " ,"))
                found = strcmp(w, want) == 0;
        }
        ck_assert_msg(found, "man/oplog2pg.8: OPTIONS has no entry for %s", want);
    }
    free(sect);
    free(plain);
    free(raw);
    free(usage);
}
END_TEST

START_TEST(test_man8_has_every_exit_code)
{
    int codes[MAX_CODES];
    char names[MAX_CODES][48];
    int n = exit_codes(codes, names);
    ck_assert_msg(n >= 9, "include/daemon/exitcodes.h: only %d codes found", n);

    char *raw = read_all("man/oplog2pg.8");
    char *plain = roff_plain(raw);
    char *sect = roff_section(plain, ".SH EXIT STATUS", STOP_SH);
    ck_assert_msg(sect != NULL, "man/oplog2pg.8 has no .SH EXIT STATUS");
    for (int i = 0; i < n; i++) {
        char want[16];
        snprintf(want, sizeof want, "%d", codes[i]);
        char *entry = item_entry(sect, want);
        ck_assert_msg(entry != NULL, "man/oplog2pg.8: EXIT STATUS has no entry for %d (%s)", codes[i], names[i]);
        free(entry);
    }
    free(sect);
    free(plain);
    free(raw);
}
END_TEST

/* The page's required sections exist, in the order man-pages(7) gives them. */
START_TEST(test_man_sections)
{
    static const char *const man8[] = {".SH NAME",    ".SH SYNOPSIS",    ".SH DESCRIPTION", ".SH COMMANDS",
                                       ".SH OPTIONS", ".SH EXIT STATUS", ".SH SIGNALS",     ".SH ENVIRONMENT",
                                       ".SH FILES",   ".SH EXAMPLES",    ".SH SEE ALSO",    NULL};
    static const char *const man5[] = {".SH NAME",        ".SH SYNOPSIS",    ".SH DESCRIPTION",
                                       ".SH FILE SYNTAX", ".SH VALUE TYPES", ".SH OPTIONS",
                                       ".SH FILES",       ".SH SEE ALSO",    NULL};
    static const char *const envs[] = {"PGPASSFILE",    "PGSERVICEFILE",  "NOTIFY_SOCKET",
                                       "WATCHDOG_USEC", "JOURNAL_STREAM", NULL};
    struct {
        const char *path;
        const char *const *heads;
    } pages[] = {{"man/oplog2pg.8", man8}, {"man/oplog2pg.ini.5", man5}};

    for (size_t p = 0; p < sizeof pages / sizeof pages[0]; p++) {
        char *raw = read_all(pages[p].path);
        char *plain = roff_plain(raw);
        const char *last = plain;
        for (size_t h = 0; pages[p].heads[h] != NULL; h++) {
            char want[64];
            snprintf(want, sizeof want, "\n%s\n", pages[p].heads[h]);
            const char *at = strstr(plain, want);
            ck_assert_msg(at != NULL, "%s: no \"%s\"", pages[p].path, pages[p].heads[h]);
            ck_assert_msg(at >= last, "%s: \"%s\" is out of order", pages[p].path, pages[p].heads[h]);
            last = at;
        }
        free(plain);
        free(raw);
    }

    char *raw = read_all("man/oplog2pg.8");
    char *plain = roff_plain(raw);
    char *env = roff_section(plain, ".SH ENVIRONMENT", STOP_SH);
    ck_assert(env != NULL);
    for (size_t i = 0; envs[i] != NULL; i++) {
        char *entry = item_entry(env, envs[i]);
        ck_assert_msg(entry != NULL, "man/oplog2pg.8: ENVIRONMENT has no entry for %s", envs[i]);
        free(entry);
    }
    free(env);
    free(plain);
    free(raw);
}
END_TEST

/* The .TH line of each page names the version of the VERSION file, so a release cannot ship pages of another. */
START_TEST(test_man_version)
{
    char *version = read_all("VERSION");
    version[strcspn(version, "\n")] = '\0';
    ck_assert_msg(version[0] != '\0', "VERSION is empty");
    const char *pages[] = {"man/oplog2pg.8", "man/oplog2pg.ini.5"};
    for (size_t p = 0; p < sizeof pages / sizeof pages[0]; p++) {
        char *raw = read_all(pages[p]);
        const char *th = strstr(raw, "\n.TH ");
        ck_assert_msg(th != NULL, "%s has no .TH line", pages[p]);
        char *line = strndup(th + 1, strcspn(th + 1, "\n"));
        char want[128];
        snprintf(want, sizeof want, "\"oplog2pg %s\"", version);
        ck_assert_msg(strstr(line, want) != NULL, "%s: the .TH line \"%s\" does not name %s (the VERSION file)",
                      pages[p], line, want);
        free(line);
        free(raw);
    }
    free(version);
}
END_TEST

/* ---- docs/operations.md ------------------------------------------------------------------------------------------ */

/* Under the heading "## Exit codes", one table row "| N | ..." per code of exitcodes.h, and no row for a code the
 * header does not have. */
START_TEST(test_operations_exit_code_table)
{
    int codes[MAX_CODES];
    char names[MAX_CODES][48];
    int n = exit_codes(codes, names);
    ck_assert_msg(n >= 9, "include/daemon/exitcodes.h: only %d codes found", n);

    char *doc = read_all("docs/operations.md");
    const char *s = strstr(doc, "\n## Exit codes\n");
    ck_assert_msg(s != NULL, "docs/operations.md has no \"## Exit codes\" heading");
    const char *end = strstr(s + 1, "\n## ");
    char *sect = end ? strndup(s, (size_t)(end - s)) : strdup(s);
    for (int i = 0; i < n; i++) {
        char want[32];
        snprintf(want, sizeof want, "\n| %d |", codes[i]);
        ck_assert_msg(strstr(sect, want) != NULL, "docs/operations.md: the exit-code table has no row \"| %d |\" (%s)",
                      codes[i], names[i]);
    }
    int rows = 0;
    for (const char *p = strstr(sect, "\n| "); p != NULL; p = strstr(p + 1, "\n| ")) {
        int code;
        if (sscanf(p, "\n| %d |", &code) != 1)
            continue;
        bool known = false;
        for (int i = 0; i < n; i++)
            known = known || codes[i] == code;
        ck_assert_msg(known, "docs/operations.md: exit code %d is not in include/daemon/exitcodes.h", code);
        rows++;
    }
    ck_assert_int_eq(rows, n);
    free(sect);
    free(doc);
}
END_TEST

/* The helpers themselves, on text where the answer is known, so a broken parser cannot pass everything. */
START_TEST(test_helpers)
{
    char *plain = roff_plain(".\\\" a comment with .TP\n.SH \"EXIT STATUS\"\n.TP\n.B 4\nLost.\n.TP\n"
                             ".BR \\-c \", \" \\-\\-config \" \\fIFILE\\fR\"\nx\n.SH NEXT\n.TP\n.B 5\n");
    ck_assert_ptr_null(strstr(plain, "a comment"));
    char *sect = roff_section(plain, ".SH EXIT STATUS", STOP_SH);
    ck_assert_ptr_nonnull(sect);
    char *e4 = item_entry(sect, "4");
    ck_assert_ptr_nonnull(e4);
    ck_assert_ptr_nonnull(strstr(e4, "Lost."));
    ck_assert_ptr_null(item_entry(sect, "5")); /* in the next section */
    ck_assert_ptr_nonnull(strstr(sect, ".BR -c ,  --config"));
    free(e4);
    free(sect);
    free(plain);

    char cmds[4][32];
    ck_assert_int_eq(usage_commands("  oplog2pg [OPTIONS] [run]  x\n  oplog2pg [OPTIONS] status [--json]\n"
                                    "  oplog2pg [OPTIONS] infer-map [NS...]\n",
                                    cmds, 4),
                     3);
    ck_assert_str_eq(cmds[0], "run");
    ck_assert_str_eq(cmds[1], "status");
    ck_assert_str_eq(cmds[2], "infer-map");
}
END_TEST

Suite *docs_suite(void); /* called by the generated runner list */

Suite *docs_suite(void)
{
    Suite *s = suite_create("docs");
    TCase *tc = tcase_create("manual");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_helpers);
    tcase_add_test(tc, test_ini5_lists_every_option_under_its_section);
    tcase_add_test(tc, test_ini5_has_no_unknown_option);
    tcase_add_test(tc, test_man8_has_every_command);
    tcase_add_test(tc, test_man8_has_every_long_option);
    tcase_add_test(tc, test_man8_has_every_exit_code);
    tcase_add_test(tc, test_man_sections);
    tcase_add_test(tc, test_man_version);
    tcase_add_test(tc, test_operations_exit_code_table);
    suite_add_tcase(s, tc);
    return s;
}
