package statemachine

import "encoding/binary"

// Unique keys: a job enqueued with a unique_key holds (queue, key) for its
// unique_period, or until it finishes; the sweep frees expired locks.

func uniqueKey(q, key string) []byte {
	k := make([]byte, 0, len(pfxUnique)+len(q)+1+len(key))
	k = append(k, pfxUnique...)
	k = append(k, q...)
	k = append(k, 0)
	return append(k, key...)
}

func uniqueXKey(exp int64, q, key string) []byte {
	k := timeIndexKey(pfxUniqueX, exp, q)
	k = append(k, 0)
	return append(k, key...)
}

// uniqueHolder returns the job holding a live lock on (queue, key).
func (a *applier) uniqueHolder(q, key string) (string, bool) {
	v, ok := a.get(uniqueKey(q, key))
	if !ok || len(v) < 8 {
		return "", false
	}
	id, exp := string(v[:len(v)-8]), int64(binary.BigEndian.Uint64(v[len(v)-8:]))
	if exp != 0 && exp <= a.now {
		return "", false // expired: the next enqueue takes it over
	}
	return id, true
}

// lockUnique takes (queue, key) for j, for its unique_period (0: until the
// job finishes).
func (a *applier) lockUnique(j *Job) {
	var exp int64
	if j.UniquePeriod > 0 {
		exp = a.now + j.UniquePeriod*1e9
		a.set(uniqueXKey(exp, j.Queue, j.UniqueKey), nil)
	}
	v := append([]byte(j.ID), make([]byte, 8)...)
	binary.BigEndian.PutUint64(v[len(j.ID):], uint64(exp))
	a.set(uniqueKey(j.Queue, j.UniqueKey), v)
}

// releaseUnique frees j's unique key when j still holds it.
func (a *applier) releaseUnique(j *Job) {
	if j.UniqueKey == "" {
		return
	}
	k := uniqueKey(j.Queue, j.UniqueKey)
	if v, ok := a.get(k); ok && len(v) >= 8 && string(v[:len(v)-8]) == j.ID {
		a.del(k)
	}
}

// cleanUnique frees the unique locks whose period has ended (the ux| index),
// unless the key has been taken again since.
func (a *applier) cleanUnique(limit int) int {
	n := 0
	for _, k := range a.scanTimeIndex(pfxUniqueX, &a.s.uniqueCursor, limit) {
		a.del(k)
		exp, rest, _ := splitTimeIndexKey(pfxUniqueX, k)
		for i := 0; i < len(rest); i++ {
			if rest[i] == 0 {
				uk := uniqueKey(rest[:i], rest[i+1:])
				if v, ok := a.get(uk); ok && len(v) >= 8 && int64(binary.BigEndian.Uint64(v[len(v)-8:])) == exp {
					a.del(uk)
					n++
				}
				break
			}
		}
	}
	return n
}
