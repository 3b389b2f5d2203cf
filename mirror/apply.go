package mirror

import (
	"time"

	"github.com/corvohq/corvo/statemachine"
)

// pending is what one flush writes: the latest change of each job.
type pending struct {
	changes map[string]change
	index   []uint64 // highest index seen, per shard
	bytes   int64    // what the Updates taken from m.in hold (Config.Buffer)
}

type change struct {
	shard int
	idx   uint64
	c     *statemachine.JobChange // in the Update's list, which nothing modifies
	errs  []statemachine.JobError
	usage []statemachine.UsageRecord
	score []statemachine.ScoreRecord
}

// hostCheckInterval is how often the mirror asks the source whether it
// hosts again a shard it dropped (events of the shard ask at once).
const hostCheckInterval = time.Second

func (m *Mirror) loop() {
	defer close(m.done)
	tick := time.NewTicker(hostCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			m.flushAll()
			return
		case sh := <-m.rebuilds:
			m.rebuild(sh)
		case r := <-m.drops:
			r.done <- m.drop(r.shard)
		case <-m.shrinks:
			if err := m.w.shrink(); err != nil {
				m.log.Warn().Err(err).Msg("mirror: releasing SQLite's memory failed")
			}
		case <-tick.C:
			for sh := 0; sh < m.shards; sh++ {
				if !m.hosted[sh].Load() && !m.dirty[sh].Load() && m.src.Hosts(sh) {
					m.markDirty(sh) // hosted again: rebuild
				}
			}
		case info := <-m.in:
			p := m.newPending()
			m.add(p, info)
			deadline := time.After(m.cfg.FlushWindow)
		collect:
			for len(p.changes) < 20000 {
				select {
				case info := <-m.in:
					m.add(p, info)
				case <-deadline:
					break collect
				case <-m.hurry:
					break collect
				case <-m.stop:
					break collect
				}
			}
			if err := m.write(p); err != nil {
				m.log.Error().Err(err).Msg("mirror write failed: rebuilding")
				m.RequestRebuild()
			}
			m.recycle(p)
		}
	}
}

// newPending starts a flush's changes, in the last flush's map (kept by
// recycle: one object a change fewer than a map of pointers, and no growth
// from empty each flush).
func (m *Mirror) newPending() *pending {
	ch := m.spare
	if ch == nil {
		ch = make(map[string]change)
	}
	m.spare = nil
	return &pending{changes: ch, index: make([]uint64, m.shards)}
}

// recycle keeps p's map for the next flush, emptied at once (an idle mirror
// holds none of the records its last flush wrote), unless it held more
// than pendingReuseMax changes: a burst's buckets are not kept.
func (m *Mirror) recycle(p *pending) {
	if len(p.changes) <= pendingReuseMax {
		clear(p.changes)
		m.spare = p.changes
	}
}

const pendingReuseMax = 1024

// flushAll writes what is buffered at shutdown.
func (m *Mirror) flushAll() {
	p := m.newPending()
	for {
		select {
		case info := <-m.in:
			m.add(p, info)
		default:
			if err := m.write(p); err != nil {
				m.log.Warn().Err(err).Msg("mirror flush at shutdown failed")
			}
			return
		}
	}
}

// add collects an Update's changes, unless its shard is not kept here
// (an event queued before the shard was dropped).
func (m *Mirror) add(p *pending, info *statemachine.AppliedInfo) {
	p.bytes += infoBytes(info)
	sh := int(info.ShardID) - 1
	if !m.hosted[sh].Load() {
		return
	}
	if info.Index > p.index[sh] {
		p.index[sh] = info.Index
	}
	for i := range info.Changes {
		c := &info.Changes[i]
		prev, had := p.changes[c.ID]
		ch := change{shard: sh, idx: info.Index, c: c, errs: c.NewErrors, usage: c.NewUsage, score: c.NewScores}
		if had && !c.Deleted && !prev.c.Deleted {
			ch.errs = append(prev.errs, c.NewErrors...)
			// In order: a later record of the same number replaces an
			// earlier one when written.
			ch.usage = append(append([]statemachine.UsageRecord(nil), prev.usage...), c.NewUsage...)
			ch.score = append(append([]statemachine.ScoreRecord(nil), prev.score...), c.NewScores...)
		}
		p.changes[c.ID] = ch
	}
}

// write applies one flush in a transaction.
func (m *Mirror) write(p *pending) error {
	defer func() { m.cfg.Buffer.Release(p.bytes) }() // unless given back below
	if len(p.changes) == 0 && !anyIndex(p.index) {
		return nil
	}
	err := m.w.tx(func(b *batch) error {
		for id, ch := range p.changes {
			if ch.c.Deleted {
				b.deleteJob(id)
			} else {
				if err := m.w.upsert(b, ch.shard, ch.idx, m.gen[ch.shard], ch.c.Job, &ch.c.State); err != nil {
					return err
				}
				b.insertDeps(id, ch.c.Job.DependsOn)
				for i := range ch.errs {
					b.insertError(id, &ch.errs[i])
				}
				for i := range ch.usage {
					b.putUsage(id, ch.shard, &ch.usage[i])
				}
				for i := range ch.score {
					b.putScore(id, ch.shard, &ch.score[i])
				}
			}
			if err := b.spill(); err != nil {
				return err
			}
		}
		m.saveIndexes(b, p.index)
		return nil
	})
	if err != nil {
		return err
	}
	// Given back before the progress is told (Caught then sees it).
	m.cfg.Buffer.Release(p.bytes)
	p.bytes = 0
	for sh, idx := range p.index {
		if idx > m.mirrored[sh].Load() {
			m.mirrored[sh].Store(idx)
		}
	}
	m.advanced()
	m.applied.Add(len(p.changes))
	return nil
}

func anyIndex(idx []uint64) bool {
	for _, i := range idx {
		if i > 0 {
			return true
		}
	}
	return false
}

func (m *Mirror) saveIndexes(b *batch, idx []uint64) {
	for sh, i := range idx {
		if i == 0 || i <= m.mirrored[sh].Load() {
			continue
		}
		b.saveIndex(sh, i, m.gen[sh])
	}
}

func nullTime(ns int64) any {
	if ns == 0 {
		return nil
	}
	return ns
}

func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// readSource reads from the shards unless StopReads was called (ok false).
func (m *Mirror) readSource(sh int, q interface{}) (v interface{}, err error, ok bool) {
	m.readMu.Lock()
	defer m.readMu.Unlock()
	if m.noReads {
		return nil, nil, false
	}
	v, err = m.src.Read(sh, q)
	return v, err, true
}

// StopReads makes the mirror stop reading the shards (rebuilds end at
// their next page) and waits for a read in progress; call it before the
// shards close. Change events are still applied until Close.
func (m *Mirror) StopReads() {
	m.readMu.Lock()
	m.noReads = true
	m.readMu.Unlock()
}

// rebuild re-reads one shard's jobs from Pebble. Events keep flowing in
// between pages; rows carry the index they reflect, so an older event
// never overwrites a newer row, and rows the scan did not see again
// (deleted meanwhile) are removed at the end by generation. A dropped
// shard is rebuilt only once the source hosts it again (its events are
// applied from then on; the scan holds those ignored before).
func (m *Mirror) rebuild(sh int) {
	if m.src == nil {
		return
	}
	if !m.hosted[sh].Load() {
		if !m.src.Hosts(sh) {
			m.dirty[sh].Store(false)
			return
		}
		m.log.Info().Int("shard", sh).Msg("mirror: the shard is hosted here again: rebuilding it")
		m.refill[sh].Store(true)
		m.hosted[sh].Store(true)
	}
	start := time.Now()
	losses := m.losses[sh].Load()
	m.gen[sh]++
	gen := m.gen[sh]
	var startIdx uint64
	after := ""
	n := 0
	for first := true; ; first = false {
		v, err, ok := m.readSource(sh, statemachine.ScanJobsQuery{After: after, Limit: 2000})
		if !ok {
			// The shards are closing: stop; the mirror's index still says
			// it is behind, so the next start rebuilds the shard.
			m.log.Info().Int("shard", sh).Msg("mirror rebuild interrupted by shutdown")
			return
		}
		if err != nil {
			if !m.src.Hosts(sh) {
				// The node stopped hosting the shard: forget it.
				m.dirty[sh].Store(false)
				if err := m.drop(sh); err != nil {
					m.log.Error().Err(err).Msg("mirror rebuild: the shard is no longer hosted")
				}
				return
			}
			m.log.Error().Err(err).Int("shard", sh).Msg("mirror rebuild: read failed; will retry")
			time.AfterFunc(time.Second, func() { m.rebuilds <- sh })
			return
		}
		page := v.(statemachine.ScanPage)
		if first {
			startIdx = page.Index
		}
		if err := m.writeRows(sh, gen, page); err != nil {
			m.log.Error().Err(err).Int("shard", sh).Msg("mirror rebuild: write failed")
			return
		}
		n += len(page.Jobs)
		// Keep up with live events between pages.
		m.drainEvents()
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	// The shard is consistent once the events since the scan started are
	// in, unless more were lost meanwhile: then it goes again.
	m.dirty[sh].Store(false)
	lost := m.losses[sh].Load() != losses
	if lost && !m.dirty[sh].Swap(true) {
		m.log.Info().Int("shard", sh).Msg("mirror changes were dropped during the rebuild: rebuilding again")
		m.rebuilds <- sh
	}
	for _, table := range []string{"job_errors", "job_deps", "job_usage", "job_scores"} {
		if _, err := m.db.Exec(`DELETE FROM `+table+` WHERE job_id IN (SELECT id FROM jobs WHERE shard = ? AND gen < ?)`, sh, gen); err != nil {
			m.log.Error().Err(err).Msg("mirror rebuild: cleanup failed")
		}
	}
	if _, err := m.db.Exec(`DELETE FROM jobs WHERE shard = ? AND gen < ?`, sh, gen); err != nil {
		m.log.Error().Err(err).Msg("mirror rebuild: cleanup failed")
	}
	idx := startIdx
	if s := m.mirrored[sh].Load(); s > idx {
		idx = s
	}
	if _, err := m.db.Exec(fixedSQL[stSaveIdx], sh, idx, gen); err != nil {
		m.log.Error().Err(err).Msg("mirror rebuild: state failed")
	}
	m.mirrored[sh].Store(idx)
	if !lost { // else the next rebuild completes it
		m.refill[sh].Store(false)
	}
	m.advanced()
	m.log.Info().Int("shard", sh).Int("jobs", n).Dur("took", time.Since(start)).Msg("mirror shard rebuilt")
}

// drainEvents applies whatever events are buffered right now.
func (m *Mirror) drainEvents() {
	p := m.newPending()
	for len(p.changes) < 20000 {
		select {
		case info := <-m.in:
			m.add(p, info)
			continue
		default:
		}
		break
	}
	if err := m.write(p); err != nil {
		m.log.Error().Err(err).Msg("mirror write failed")
	}
	m.recycle(p)
}

func (m *Mirror) writeRows(sh int, gen int64, page statemachine.ScanPage) error {
	return m.w.tx(func(b *batch) error {
		for i := range page.Jobs {
			v := &page.Jobs[i]
			if err := m.w.upsert(b, sh, page.Index, gen, &v.Job, &v.State); err != nil {
				return err
			}
			// The scan's row wins only if no newer event wrote it; the errors
			// are rewritten from the full history either way.
			b.setGen(v.Job.ID, gen)
			b.insertDeps(v.Job.ID, v.Job.DependsOn)
			b.deleteErrors(v.Job.ID)
			for k := range v.Errors {
				b.insertError(v.Job.ID, &v.Errors[k])
			}
			b.deleteUsage(v.Job.ID)
			for k := range v.Usage {
				b.putUsage(v.Job.ID, sh, &v.Usage[k])
			}
			b.deleteScores(v.Job.ID)
			for k := range v.Scores {
				b.putScore(v.Job.ID, sh, &v.Scores[k])
			}
			if err := b.spill(); err != nil {
				return err
			}
		}
		return nil
	})
}
