//go:build linux && cgo

package membudget

/*
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__GLIBC__) && defined(__LP64__)
// corvo_calloc_min is the size from which calloc maps a block of its own
// (SIZE_MAX: never). It is glibc's fixed mmap threshold (trim_cgo.go), and
// off when the operator sets MALLOC_MMAP_THRESHOLD_.
static size_t corvo_calloc_min = 128 << 10;

__attribute__((constructor)) static void corvo_calloc_init(void) {
	if (getenv("MALLOC_MMAP_THRESHOLD_") != NULL) corvo_calloc_min = SIZE_MAX;
}

extern void *__libc_calloc(size_t, size_t);

// calloc replaces glibc's for the program's own C code (Pebble's
// manual.New allocates every memtable and cache block with it). A block of
// corvo_calloc_min or more gets a fresh mapping: its pages are zero
// already, none is resident until written, and free unmaps it. glibc's
// calloc serves such a block from an arena's free space when it has some
// (a burst leaves plenty), and must zero it there: a 4 MiB memtable that
// an idle node writes a few entries to is then resident in full, long
// after malloc_trim gave that space back (BENCHMARKS.md, session 28).
//
// The block is laid out as glibc lays out the chunks it maps itself
// (mmap_chunk in malloc.c): a two-word header at the start of the
// mapping, the previous size 0 and the size of the mapping with the
// IS_MMAPPED bit, the memory right after it. glibc's free, realloc and
// malloc_usable_size read only that header to unmap, remap or measure
// such a chunk, so they handle these blocks as their own; only its
// statistics (mallinfo, malloc_stats) no longer count the maps.
void *calloc(size_t n, size_t size) {
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	if (total < corvo_calloc_min) return __libc_calloc(n, size);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t header = 2 * sizeof(size_t);
	if (total > SIZE_MAX - header - page) {
		errno = ENOMEM;
		return NULL;
	}
	size_t len = (total + header + page - 1) & ~(page - 1);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	((size_t *)p)[0] = 0;       // prev_size: no alignment gap before the chunk
	((size_t *)p)[1] = len | 2; // size | IS_MMAPPED
	return (char *)p + header;
}
#define CORVO_FRESH_CALLOC 1
#else
#define CORVO_FRESH_CALLOC 0
#endif

// corvo_calloc_resident callocs n bytes after leaving a free block of at
// least n in the C heap (many small blocks freed together), and counts how
// many of its pages are resident before anything is written; then it
// checks that realloc and free take the block. For the test.
static void *volatile corvo_sink;

static int corvo_calloc_resident(size_t n, size_t *pages, size_t *usable, int *ok) {
	enum { small = 4096 };
	size_t k = 8 * n / small;
	// The blocks escape (corvo_sink), or the compiler may drop each
	// malloc and free pair and nothing would be left free.
	void **blocks = malloc(k * sizeof(void *));
	corvo_sink = blocks;
	for (size_t i = 0; i < k; i++) {
		corvo_sink = blocks[i] = malloc(small);
		memset(blocks[i], 1, small);
	}
	void *guard = malloc(small); // keeps the freed blocks from the heap's top
	corvo_sink = guard;
	for (size_t i = 0; i < k; i++) free(blocks[i]);
	free(blocks);
	char *p = calloc(1, n);
	if (p == NULL) return -1;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)p & ~(page - 1);
	size_t len = (uintptr_t)p + n - start;
	*pages = (len + page - 1) / page;
	unsigned char *vec = malloc(*pages);
	int resident = 0;
	if (mincore((void *)start, len, vec) == 0) {
		for (size_t i = 0; i < *pages; i++) resident += vec[i] & 1;
	} else {
		resident = -1;
	}
	free(vec);
	*ok = p[0] == 0 && p[n - 1] == 0;
	*usable = malloc_usable_size(p);
	p[n - 1] = 7;
	p = realloc(p, 2 * n);
	*ok = *ok && p != NULL && p[n - 1] == 7;
	free(p);
	free(guard);
	return resident;
}
*/
import "C"

// freshCalloc says whether calloc maps big blocks fresh here (glibc, 64-bit).
const freshCalloc = C.CORVO_FRESH_CALLOC == 1

// callocResident callocs n bytes where a free block of that size waits in
// the C heap, and reports how many of its pages were resident before any
// write, of how many, its usable size, and whether it read as zeros and
// survived a realloc and a free.
func callocResident(n int) (resident, pages, usable int, ok bool) {
	var p, u C.size_t
	var good C.int
	r := C.corvo_calloc_resident(C.size_t(n), &p, &u, &good)
	return int(r), int(p), int(u), good != 0
}
