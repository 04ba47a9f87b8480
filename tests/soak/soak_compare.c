/*
 * soak_compare — the fault soak's final check (tests/soak/soak.py): compares every collection of the source whose
 * database starts with PREFIX with its PostgreSQL table, with the integration tests' comparison (tests/lib/compare.c:
 * missing, extra and different rows, tables without a source collection).
 *
 *   soak_compare MONGO_URI PG_CONNINFO PREFIX
 *
 * Prints the report (every collection, then the differences with example _ids) and exits 0 when PostgreSQL equals
 * the source, 1 when it does not, 2 when the comparison could not run.
 */
#include <libpq-fe.h>
#include <mongoc/mongoc.h>
#include <stdio.h>

#include "../lib/compare.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s MONGO_URI PG_CONNINFO PREFIX\n", argv[0]);
        return 2;
    }
    PGconn *pg = PQconnectdb(argv[2]);
    if (PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "soak_compare: PostgreSQL: %s", PQerrorMessage(pg));
        PQfinish(pg);
        return 2;
    }
    compare_options opts = {.db_prefix = argv[3]};
    compare_report rep;
    char err[1024] = "";
    bool ran = compare_all(argv[1], pg, &opts, &rep, err, sizeof err);
    int rc = 2;
    if (!ran) {
        fprintf(stderr, "soak_compare: %s\n", err);
    } else {
        compare_report_print(&rep, stdout, true);
        rc = rep.match ? 0 : 1;
    }
    compare_report_free(&rep);
    PQfinish(pg);
    mongoc_cleanup();
    return rc;
}
