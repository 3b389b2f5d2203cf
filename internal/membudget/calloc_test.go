package membudget

import "testing"

// TestCallocMapsBigBlocksFresh: a 4 MiB calloc made where a burst left a
// bigger free block in the C heap gets a mapping of its own, none of whose
// pages is resident until written (glibc's own calloc zeroes the free
// block and makes all of it resident); glibc's malloc_usable_size,
// realloc and free take the block as their own.
func TestCallocMapsBigBlocksFresh(t *testing.T) {
	if !freshCalloc {
		t.Skip("calloc is glibc's own here (not glibc, or 32-bit)")
	}
	const n = 4 << 20
	resident, pages, usable, ok := callocResident(n)
	if resident < 0 {
		t.Fatalf("calloc or mincore failed")
	}
	if !ok {
		t.Fatalf("the block did not read as zeros, or realloc lost its contents")
	}
	if usable < n {
		t.Fatalf("malloc_usable_size %d < %d", usable, n)
	}
	// The first page holds the header glibc reads.
	if resident > 1 {
		t.Fatalf("%d of %d pages resident before any write", resident, pages)
	}
}
