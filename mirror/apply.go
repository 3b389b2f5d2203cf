package mirror

import (
	"context"
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/corvohq/corvo/statemachine"
)

// pending is what one flush writes: the latest change of each job.
type pending struct {
	changes map[string]*change
	index   []uint64 // highest index seen, per shard
}

type change struct {
	shard int
	idx   uint64
	c     statemachine.JobChange
	errs  []statemachine.JobError
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
		case <-tick.C:
			for sh := 0; sh < m.shards; sh++ {
				if !m.hosted[sh].Load() && !m.dirty[sh].Load() && m.src.Hosts(sh) {
					m.markDirty(sh) // hosted again: rebuild
				}
			}
		case info := <-m.in:
			p := &pending{changes: map[string]*change{}, index: make([]uint64, m.shards)}
			m.add(p, info)
			deadline := time.After(m.cfg.FlushWindow)
		collect:
			for len(p.changes) < 20000 {
				select {
				case info := <-m.in:
					m.add(p, info)
				case <-deadline:
					break collect
				case <-m.stop:
					break collect
				}
			}
			if err := m.write(p); err != nil {
				m.log.Error().Err(err).Msg("mirror write failed: rebuilding")
				m.RequestRebuild()
			}
		}
	}
}

// flushAll writes what is buffered at shutdown.
func (m *Mirror) flushAll() {
	p := &pending{changes: map[string]*change{}, index: make([]uint64, m.shards)}
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
	sh := int(info.ShardID) - 1
	if !m.hosted[sh].Load() {
		return
	}
	if info.Index > p.index[sh] {
		p.index[sh] = info.Index
	}
	for i := range info.Changes {
		c := info.Changes[i]
		prev := p.changes[c.ID]
		ch := &change{shard: sh, idx: info.Index, c: c, errs: c.NewErrors}
		if prev != nil && !c.Deleted && !prev.c.Deleted {
			ch.errs = append(prev.errs, c.NewErrors...)
		}
		p.changes[c.ID] = ch
	}
}

const upsertSQL = `INSERT INTO jobs (id, shard, idx, gen, queue, state, priority, attempt, max_retries, payload, tags,
 unique_key, batch_id, chain_id, worker_id, hostname, progress, checkpoint, result, reason, last_error, error_count,
 created_at, scheduled_at, started_at, completed_at, failed_at, expire_at, lease_expires_at)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(id) DO UPDATE SET shard=excluded.shard, idx=excluded.idx, gen=excluded.gen, queue=excluded.queue,
 state=excluded.state, priority=excluded.priority, attempt=excluded.attempt, max_retries=excluded.max_retries,
 payload=excluded.payload, tags=excluded.tags, unique_key=excluded.unique_key, batch_id=excluded.batch_id,
 chain_id=excluded.chain_id, worker_id=excluded.worker_id, hostname=excluded.hostname, progress=excluded.progress,
 checkpoint=excluded.checkpoint, result=excluded.result, reason=excluded.reason, last_error=excluded.last_error,
 error_count=excluded.error_count, created_at=excluded.created_at, scheduled_at=excluded.scheduled_at,
 started_at=excluded.started_at, completed_at=excluded.completed_at, failed_at=excluded.failed_at,
 expire_at=excluded.expire_at, lease_expires_at=excluded.lease_expires_at
WHERE excluded.idx >= jobs.idx`

// writeStmts are the writer's statements, prepared once on the writer's
// SQLite connection and run through the driver directly: database/sql's
// per-call argument conversion, locking and context plumbing were ~15 % of
// the mirror's CPU (BENCHMARKS.md).
type writeStmts struct {
	conn                                             *sqlite3.SQLiteConn
	upsert, delJob, delErrs, insErr, setGen, saveIdx rawStmt
	args                                             []driver.NamedValue // reused for every call
}

// rawStmt is one prepared driver statement of writeStmts.
type rawStmt struct {
	st driver.StmtExecContext
	w  *writeStmts
}

var writeSQL = [...]string{
	upsertSQL,
	`DELETE FROM jobs WHERE id = ?`,
	`DELETE FROM job_errors WHERE job_id = ?`,
	`INSERT INTO job_errors (job_id, attempt, error, at) VALUES (?,?,?,?)`,
	`UPDATE jobs SET gen = ? WHERE id = ?`,
	`INSERT INTO mirror_state (shard, idx, gen) VALUES (?,?,?)
ON CONFLICT(shard) DO UPDATE SET idx = excluded.idx, gen = excluded.gen`,
}

func (w *writeStmts) all() []*rawStmt {
	return []*rawStmt{&w.upsert, &w.delJob, &w.delErrs, &w.insErr, &w.setGen, &w.saveIdx}
}

func prepareWrite(c *sqlite3.SQLiteConn) (*writeStmts, error) {
	w := &writeStmts{conn: c}
	for i, st := range w.all() {
		ds, err := c.Prepare(writeSQL[i])
		if err != nil {
			w.close()
			return nil, err
		}
		st.st, st.w = ds.(driver.StmtExecContext), w
	}
	return w, nil
}

func (w *writeStmts) close() {
	for _, st := range w.all() {
		if st.st != nil {
			_ = st.st.(driver.Stmt).Close()
			st.st = nil
		}
	}
}

// Exec runs the statement with args: strings, []byte, nil and integers.
func (r rawStmt) Exec(args ...any) error {
	w := r.w
	w.args = w.args[:0]
	for i, a := range args {
		var v driver.Value
		switch a := a.(type) {
		case nil, string, []byte, int64:
			v = a
		case int:
			v = int64(a)
		case uint32:
			v = int64(a)
		case uint64:
			v = int64(a)
		case int32:
			v = int64(a)
		default:
			return fmt.Errorf("mirror: unsupported argument type %T", a)
		}
		w.args = append(w.args, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	_, err := r.st.ExecContext(context.Background(), w.args)
	return err
}

// inTx runs fn in one write transaction on the writer's connection, with
// its statements (prepared on first use), and commits.
func (m *Mirror) inTx(fn func(tx *writeStmts) error) error {
	ctx := context.Background()
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*sqlite3.SQLiteConn)
		if !ok {
			return fmt.Errorf("mirror: unexpected driver connection %T", dc)
		}
		if m.ws == nil || m.ws.conn != c {
			if m.ws != nil {
				m.ws.close()
			}
			if m.ws, err = prepareWrite(c); err != nil {
				return err
			}
		}
		tx, err := c.BeginTx(ctx, driver.TxOptions{})
		if err != nil {
			return err
		}
		if err := fn(m.ws); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// write applies one flush in a transaction.
func (m *Mirror) write(p *pending) error {
	if len(p.changes) == 0 && !anyIndex(p.index) {
		return nil
	}
	err := m.inTx(func(st *writeStmts) error {
		for id, ch := range p.changes {
			if ch.c.Deleted {
				if err := st.delJob.Exec(id); err != nil {
					return err
				}
				if err := st.delErrs.Exec(id); err != nil {
					return err
				}
				continue
			}
			if err := st.upsert.Exec(rowArgs(ch.shard, ch.idx, m.gen[ch.shard], ch.c.View)...); err != nil {
				return err
			}
			for _, e := range ch.errs {
				if err := st.insErr.Exec(id, e.Attempt, e.Error, e.At); err != nil {
					return err
				}
			}
		}
		return m.saveIndexes(st, p.index)
	})
	if err != nil {
		return err
	}
	for sh, idx := range p.index {
		if idx > m.mirrored[sh].Load() {
			m.mirrored[sh].Store(idx)
		}
	}
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

func (m *Mirror) saveIndexes(st *writeStmts, idx []uint64) error {
	for sh, i := range idx {
		if i == 0 || i <= m.mirrored[sh].Load() {
			continue
		}
		if err := st.saveIdx.Exec(sh, i, m.gen[sh]); err != nil {
			return err
		}
	}
	return nil
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

// rowArgs are the upsert's arguments for a job view.
func rowArgs(shard int, idx uint64, gen int64, v *statemachine.JobView) []any {
	j, st := &v.Job, &v.State
	sched := st.DueAt
	if sched == 0 && j.ScheduledAt > j.CreatedAt {
		sched = j.ScheduledAt
	}
	chainID := ""
	if j.Chain != nil {
		chainID = j.Chain.ID
	}
	payload := string(j.Payload)
	if payload == "" {
		payload = "null"
	}
	return []any{j.ID, shard, int64(idx), gen, j.Queue, st.State.String(), int(j.Priority), st.Attempt, j.MaxRetries,
		payload, nullJSON(j.Tags), nullText(j.UniqueKey), nullText(j.BatchID), nullText(chainID),
		nullText(st.WorkerID), nullText(st.Hostname), nullJSON(st.Progress), nullJSON(st.Checkpoint), nullJSON(st.Result),
		nullText(st.Reason), nullText(st.LastError), st.Errors, j.CreatedAt, nullTime(sched), nullTime(st.StartedAt),
		nullTime(st.CompletedAt), nullTime(st.FailedAt), nullTime(j.ExpireAt), nullTime(st.LeaseExpiresAt)}
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
	if m.losses[sh].Load() != losses && !m.dirty[sh].Swap(true) {
		m.log.Info().Int("shard", sh).Msg("mirror changes were dropped during the rebuild: rebuilding again")
		m.rebuilds <- sh
	}
	if _, err := m.db.Exec(`DELETE FROM job_errors WHERE job_id IN (SELECT id FROM jobs WHERE shard = ? AND gen < ?)`, sh, gen); err != nil {
		m.log.Error().Err(err).Msg("mirror rebuild: cleanup failed")
	}
	if _, err := m.db.Exec(`DELETE FROM jobs WHERE shard = ? AND gen < ?`, sh, gen); err != nil {
		m.log.Error().Err(err).Msg("mirror rebuild: cleanup failed")
	}
	idx := startIdx
	if s := m.mirrored[sh].Load(); s > idx {
		idx = s
	}
	if _, err := m.db.Exec(writeSQL[5], sh, idx, gen); err != nil {
		m.log.Error().Err(err).Msg("mirror rebuild: state failed")
	}
	m.mirrored[sh].Store(idx)
	m.refill[sh].Store(false)
	m.log.Info().Int("shard", sh).Int("jobs", n).Dur("took", time.Since(start)).Msg("mirror shard rebuilt")
}

// drainEvents applies whatever events are buffered right now.
func (m *Mirror) drainEvents() {
	p := &pending{changes: map[string]*change{}, index: make([]uint64, m.shards)}
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
}

func (m *Mirror) writeRows(sh int, gen int64, page statemachine.ScanPage) error {
	return m.inTx(func(st *writeStmts) error {
		for i := range page.Jobs {
			v := &page.Jobs[i]
			if err := st.upsert.Exec(rowArgs(sh, page.Index, gen, v)...); err != nil {
				return fmt.Errorf("job %s: %w", v.Job.ID, err)
			}
			// The scan's row wins only if no newer event wrote it; the errors
			// are rewritten from the full history either way.
			if err := st.setGen.Exec(gen, v.Job.ID); err != nil {
				return err
			}
			if err := st.delErrs.Exec(v.Job.ID); err != nil {
				return err
			}
			for _, e := range v.Errors {
				if err := st.insErr.Exec(v.Job.ID, e.Attempt, e.Error, e.At); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
