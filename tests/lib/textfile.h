/*
 * textfile.h — a whole file as one NUL-terminated string, for tests that read docs, man pages and captured output.
 */
#ifndef OPLOG2PG_TESTS_TEXTFILE_H
#define OPLOG2PG_TESTS_TEXTFILE_H

/* The contents of path, malloc'd (free it); NULL when it cannot be opened or read. */
char *textfile_read(const char *path);

#endif
