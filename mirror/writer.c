#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "writer.h"

// SQLite's C API (sqlite3.h): the functions and constants used here.
int sqlite3_open_v2(const char *filename, sqlite3 **db, int flags, const char *vfs);
int sqlite3_close_v2(sqlite3 *db);
int sqlite3_busy_timeout(sqlite3 *db, int ms);
int sqlite3_exec(sqlite3 *db, const char *sql, void *callback, void *arg, char **errmsg);
int sqlite3_prepare_v3(sqlite3 *db, const char *sql, int n, unsigned int flags, sqlite3_stmt **st, const char **tail);
int sqlite3_bind_parameter_count(sqlite3_stmt *st);
int sqlite3_bind_null(sqlite3_stmt *st, int i);
int sqlite3_bind_int64(sqlite3_stmt *st, int i, long long v);
int sqlite3_bind_text(sqlite3_stmt *st, int i, const char *v, int n, void (*destructor)(void *));
int sqlite3_step(sqlite3_stmt *st);
int sqlite3_reset(sqlite3_stmt *st);
int sqlite3_clear_bindings(sqlite3_stmt *st);
int sqlite3_finalize(sqlite3_stmt *st);
const char *sqlite3_errmsg(sqlite3 *db);

#define SQLITE_OK 0
#define SQLITE_ERROR 1
#define SQLITE_MISUSE 21
#define SQLITE_DONE 101
#define SQLITE_OPEN_READWRITE 0x00000002
#define SQLITE_OPEN_NOMUTEX 0x00008000
#define SQLITE_PREPARE_PERSISTENT 0x01
#define SQLITE_STATIC ((void (*)(void *))0)

// The value tags of a batch (writer.go).
enum { TAG_NULL = 0, TAG_INT = 1, TAG_TEXT = 2 };

int corvo_open(const char *path, sqlite3 **db, long long cache_kib) {
	int rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, 0);
	if (rc != SQLITE_OK) {
		return rc;
	}
	sqlite3_busy_timeout(*db, 5000);
	char pragmas[160];
	snprintf(pragmas, sizeof pragmas, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-%lld;", cache_kib);
	return sqlite3_exec(*db, pragmas, 0, 0, 0);
}

int corvo_prepare(sqlite3 *db, const char *sql, int n, sqlite3_stmt **st) {
	return sqlite3_prepare_v3(db, sql, n, SQLITE_PREPARE_PERSISTENT, st, 0);
}

const char *corvo_errmsg(sqlite3 *db) { return sqlite3_errmsg(db); }

void corvo_finalize(sqlite3_stmt *st) { sqlite3_finalize(st); }

void corvo_close(sqlite3 *db) { sqlite3_close_v2(db); }

static uint64_t get64(const unsigned char *p) {
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--) {
		v = v << 8 | p[i];
	}
	return v;
}

static uint32_t get32(const unsigned char *p) {
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// exec runs one operation at *p: [u16 statement][u8 n] then n values, each
// a tag and its value (int: 8 bytes, text: u32 length and the bytes), all
// little-endian. Text is bound without a copy (SQLITE_STATIC): the
// bindings are cleared before the call returns.
static int exec(sqlite3_stmt **stmts, int nstmts, const unsigned char **pp, const unsigned char *end) {
	const unsigned char *p = *pp;
	if (end - p < 3) {
		return SQLITE_MISUSE;
	}
	int si = p[0] | p[1] << 8, n = p[2];
	p += 3;
	if (si >= nstmts || n != sqlite3_bind_parameter_count(stmts[si])) {
		return SQLITE_MISUSE;
	}
	sqlite3_stmt *st = stmts[si];
	int rc = SQLITE_OK;
	for (int i = 1; i <= n && rc == SQLITE_OK; i++) {
		if (p >= end) {
			rc = SQLITE_MISUSE;
			break;
		}
		switch (*p++) {
		case TAG_NULL:
			rc = sqlite3_bind_null(st, i);
			break;
		case TAG_INT:
			if (end - p < 8) {
				rc = SQLITE_MISUSE;
				break;
			}
			rc = sqlite3_bind_int64(st, i, (long long)get64(p));
			p += 8;
			break;
		case TAG_TEXT: {
			if (end - p < 4) {
				rc = SQLITE_MISUSE;
				break;
			}
			uint32_t len = get32(p);
			p += 4;
			if ((size_t)(end - p) < len || len > 0x7fffffff) {
				rc = SQLITE_MISUSE;
				break;
			}
			rc = sqlite3_bind_text(st, i, (const char *)p, (int)len, SQLITE_STATIC);
			p += len;
			break;
		}
		default:
			rc = SQLITE_MISUSE;
		}
	}
	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_DONE) {
			rc = SQLITE_OK;
		}
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	*pp = p;
	return rc;
}

int corvo_sql(sqlite3 *db, const char *sql) { return sqlite3_exec(db, sql, 0, 0, 0); }

int corvo_exec(sqlite3_stmt **stmts, int nstmts, const unsigned char *buf, size_t n, size_t *at) {
	const unsigned char *p = buf, *end = buf + n;
	while (p < end) {
		const unsigned char *op = p;
		int rc = exec(stmts, nstmts, &p, end);
		if (rc != SQLITE_OK) {
			*at = (size_t)(op - buf);
			return rc;
		}
	}
	return SQLITE_OK;
}
