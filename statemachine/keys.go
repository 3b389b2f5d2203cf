package statemachine

import "encoding/binary"

// Pebble key layout, after spec 004 (see docs/architecture.md). Keys are
// byte-sortable: '|' ends the prefix, 0x00 ends a variable-length name, and
// numbers are big-endian. A job is written once (j|) and its transitions only
// touch the small state record (js|) and index keys (p|, d|, l|).
const (
	pfxJob       = "j|"        // j|{id}                                  → Job
	pfxState     = "js|"       // js|{id}                                 → JobState
	pfxError     = "je|"       // je|{id}\x00{n:4BE} → the job's n-th JobError
	pfxPending   = "p|"        // p|{queue}\x00{prio:1}{created:8BE}{seq:8BE} → job id
	pfxDue       = "d|"        // d|{due:8BE}{id}                         → "" (scheduled + retrying)
	pfxLease     = "l|"        // l|{lease_expires:8BE}{id}               → "" (active)
	pfxFinished  = "t|"        // t|{finished:8BE}{id} → "" (completed, dead, cancelled: retention)
	pfxDead      = "dx|"       // dx|{died:8BE}{id} → the job's queue, or "" in older entries (the dead-letter list)
	pfxExpire    = "x|"        // x|{expire_at:8BE}{id} → "" (jobs with expire_after)
	pfxUnique    = "u|"        // u|{queue}\x00{unique key} → job id, expires:8BE (0: until done)
	pfxUniqueX   = "ux|"       // ux|{expires:8BE}{queue}\x00{unique key} → "" (expiring unique locks)
	pfxWorker    = "w|"        // w|{worker id} → Worker
	pfxWorkerX   = "wx|"       // wx|{last seen:8BE}{worker id} → "" (forgetting silent workers)
	pfxOutbox    = "ob|"       // ob|{seq:8BE} → OutboxRecord (cross-shard effects awaiting delivery)
	pfxMoved     = "mv|"       // mv|{old id} → new id (jobs moved to another shard)
	pfxBatch     = "b|"        // b|{batch id} → Batch
	pfxBatchJob  = "bj|"       // bj|{batch id}\x00{job id} → "" (counted finished jobs)
	pfxDepWatch  = "dw|"       // dw|{dep id}\x00{dependent id} → dependent shard (uvarint)
	pfxDepDone   = "dd|"       // dd|{dependent id}\x00{dep id} → "" (reported dependencies)
	pfxSchedule  = "sc|"       // sc|{schedule id} → Schedule
	pfxScheduleX = "sx|"       // sx|{next run:8BE}{schedule id} → "" (due schedules)
	pfxQueueCfg  = "qc|"       // qc|{queue}                              → QueueConfig
	pfxQueueSt   = "qs|"       // qs|{queue}                              → QueueStats
	pfxDedup     = "rq|"       // rq|{entry id:16}                        → compact results
	pfxRate      = "rl|"       // rl|{queue}\x00{fetched:8BE}{seq:8BE}   → "" (throttled queues' sliding window)
	pfxAudit     = "au|"       // au|{namespace}\x00{at:8BE}{id} → AuditRecord
	pfxUsage     = "ju|"       // ju|{id}\x00{n:4BE} → the job's n-th UsageRecord
	pfxUsageDay  = "ud|"       // ud|{day:4BE}{queue} → UsageTotals (the queue's usage on a UTC day)
	pfxCache     = "ck|"       // ck|{queue}\x00{cache key} → CacheEntry (cache.go)
	pfxCacheX    = "cx|"       // cx|{expires:8BE}{queue}\x00{cache key} → "" (expiring cache entries)
	pfxScore     = "sj|"       // sj|{id}\x00{n:4BE} → the job's n-th ScoreRecord (scores.go)
	pfxBudget    = "bg|"       // bg|{budget id} → Budget (budget.go)
	pfxBudgetDay = "bd|"       // bd|{day:4BE}{budget id} → spend in nano-USD (varint) of this shard's jobs on a UTC day
	pfxProvider  = "pv|"       // pv|{namespace}\x00{name} → providerRec (provider.go)
	pfxProvReq   = "pr|"       // pr|{provider id}\x00{at:8BE}{seq:8BE} → "" (jobs handed out in the provider's window)
	pfxProvTok   = "pt|"       // pt|{provider id}\x00{at:8BE}{seq:8BE} → input, output tokens (varints) reported in the window
	keyMeta      = "m|applied" // applied index:8BE, last now:8BE
)

func jobKey(id string) []byte   { return append([]byte(pfxJob), id...) }
func stateKey(id string) []byte { return appendStateKey(nil, id) }

// The append forms write a key into a buffer the applier reuses for keys
// it only sets, deletes or reads with (applier.tmp).
func appendStateKey(k []byte, id string) []byte { return append(append(k, pfxState...), id...) }

func errorKey(id string, n uint32) []byte {
	k := make([]byte, 0, len(pfxError)+len(id)+5)
	k = append(k, pfxError...)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, n)
}

func errorPrefix(id string) []byte {
	k := append([]byte(pfxError), id...)
	return append(k, 0)
}

func pendingPrefix(queue string) []byte {
	return appendPendingPrefix(make([]byte, 0, len(pfxPending)+len(queue)+1+17), queue)
}

// appendPendingPrefix appends queue's pendingPrefix to k.
func appendPendingPrefix(k []byte, queue string) []byte {
	k = append(k, pfxPending...)
	k = append(k, queue...)
	return append(k, 0)
}

func pendingKey(queue string, prio Priority, created int64, seq uint64) []byte {
	return appendPendingKey(pendingPrefix(queue), prio, created, seq)
}

// appendPendingKey appends to k, which holds a queue's pendingPrefix, a
// job's place in it.
func appendPendingKey(k []byte, prio Priority, created int64, seq uint64) []byte {
	k = append(k, byte(prio))
	k = binary.BigEndian.AppendUint64(k, uint64(created))
	return binary.BigEndian.AppendUint64(k, seq)
}

// pendingQueue is the queue of a pending key.
func pendingQueue(k []byte) (string, bool) {
	rest := k[len(pfxPending):]
	if len(rest) < 18 || rest[len(rest)-18] != 0 {
		return "", false
	}
	return string(rest[:len(rest)-18]), true
}

// pendingSuffix splits the part of a pending key after its queue prefix.
func pendingSuffix(suffix []byte) (prio Priority, created int64, ok bool) {
	if len(suffix) != 17 {
		return 0, 0, false
	}
	return Priority(suffix[0]), int64(binary.BigEndian.Uint64(suffix[1:9])), true
}

func timeIndexKey(pfx string, at int64, id string) []byte {
	return appendTimeIndexKey(make([]byte, 0, len(pfx)+8+len(id)), pfx, at, id)
}

func appendTimeIndexKey(k []byte, pfx string, at int64, id string) []byte {
	k = append(k, pfx...)
	k = binary.BigEndian.AppendUint64(k, uint64(at))
	return append(k, id...)
}

// timeIndexUpper is the exclusive upper bound of a time index up to and
// including time at.
func timeIndexUpper(pfx string, at int64) []byte {
	k := append([]byte(pfx), make([]byte, 8)...)
	binary.BigEndian.PutUint64(k[len(pfx):], uint64(at)+1)
	return k
}

func splitTimeIndexKey(pfx string, k []byte) (int64, string, bool) {
	if len(k) <= len(pfx)+8 {
		return 0, "", false
	}
	return int64(binary.BigEndian.Uint64(k[len(pfx):])), string(k[len(pfx)+8:]), true
}

func queueCfgKey(q string) []byte { return append([]byte(pfxQueueCfg), q...) }

func ratePrefix(q string) []byte {
	k := append([]byte(pfxRate), q...)
	return append(k, 0)
}

func rateKey(q string, at int64, seq uint64) []byte {
	k := ratePrefix(q)
	k = binary.BigEndian.AppendUint64(k, uint64(at))
	return binary.BigEndian.AppendUint64(k, seq)
}
func queueStatsKey(q string) []byte { return appendQueueStatsKey(nil, q) }

func appendQueueStatsKey(k []byte, q string) []byte { return append(append(k, pfxQueueSt...), q...) }

func dedupKey(id EntryID) []byte { return appendDedupKey(nil, id) }

func appendDedupKey(k []byte, id EntryID) []byte { return append(append(k, pfxDedup...), id[:]...) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
