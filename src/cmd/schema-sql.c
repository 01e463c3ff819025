/* schema-sql BACKEND: prints the metadata schema script of a backend
 * ("postgresql", "mysql", "sqlite") on stdout, as deploy/sql/generic-<backend>.sql
 * ships it (make docs writes the files; tests/db keeps them equal). Not
 * installed. */
#include <stdio.h>
#include <stdlib.h>

#include "store/store.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: schema-sql postgresql|mysql|sqlite\n");
        return 2;
    }
    char *sql = sl_store_schema_sql(argv[1]);
    if (!sql) {
        fprintf(stderr, "schema-sql: unknown backend %s\n", argv[1]);
        return 2;
    }
    fputs(sql, stdout);
    free(sql);
    return 0;
}
