// The mirror's write path in C: a flush's statement executions (up to a few
// MiB of them) are one cgo call. The SQLite functions are the
// ones github.com/mattn/go-sqlite3 compiles into the binary; only the
// few used here are declared, with SQLite's stable C ABI.
#ifndef CORVO_MIRROR_WRITER_H
#define CORVO_MIRROR_WRITER_H

#include <stddef.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_stmt sqlite3_stmt;

// What SQLite holds in the whole process (sqlite3_memory_used).
long long sqlite3_memory_used(void);

// corvo_open opens the database file for writing, with the mirror's
// pragmas (WAL, synchronous=OFF, a 64 MiB page cache, a busy timeout).
int corvo_open(const char *path, sqlite3 **db, long long cache_kib);
int corvo_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st);
// corvo_sql runs SQL without results (BEGIN IMMEDIATE, COMMIT, ROLLBACK).
int corvo_sql(sqlite3 *db, const char *sql);
// corvo_exec executes every operation of buf (see writer.go's batch) and
// stops at the first that fails, storing its offset in *at.
int corvo_exec(sqlite3_stmt **stmts, int nstmts, const unsigned char *buf, size_t n, size_t *at);
const char *corvo_errmsg(sqlite3 *db);
void corvo_finalize(sqlite3_stmt *st);
void corvo_close(sqlite3 *db);

#endif
