package statemachine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/corvohq/corvo/router"
)

// Budgets (issue 20): a spending limit over a queue, a tag value or a
// whole namespace, per UTC day and per job.
//
// Every shard holds every budget (the gateway proposes a SetBudgetOp to
// each shard), because any shard may run a job a global or tag budget
// covers. Each shard keeps, per budget and UTC day, what its own jobs
// spent (bd|{day}{id}, moved in addUsage with the same delta as the
// queue's day, on the day of the entry's proposer time, so a day rolls
// over at UTC midnight on every replica alike). A budget's spend is the
// sum over the shards (BudgetsQuery on each); the gateway adds it up and
// decides at enqueue, and stamps its decision into the op (EnqueueOp's
// Budget): the state machine only carries it out, so replicas agree
// whatever the gateway saw. A per-job limit is the state machine's to
// test: a heartbeat of a job whose cost is past it answers
// HeartbeatBudgetExceeded.

// HoldBudget is the Reason of a job held because a budget with on_exceed
// hold was spent when it was enqueued.
const HoldBudget = "budget"

// BudgetAction is what happens to a new job once a budget's day is spent.
type BudgetAction uint8

// Budget actions. Values are stored; never renumber.
const (
	BudgetActionHold      BudgetAction = 1
	BudgetActionReject    BudgetAction = 2
	BudgetActionAlertOnly BudgetAction = 3
)

var budgetActionNames = [...]string{BudgetActionHold: "hold", BudgetActionReject: "reject", BudgetActionAlertOnly: "alert_only"}

func (b BudgetAction) String() string {
	if int(b) < len(budgetActionNames) && budgetActionNames[b] != "" {
		return budgetActionNames[b]
	}
	return fmt.Sprintf("action(%d)", uint8(b))
}

// ParseBudgetAction maps hold, reject or alert_only to its action.
func ParseBudgetAction(s string) (BudgetAction, bool) {
	for i, n := range budgetActionNames {
		if n != "" && n == s {
			return BudgetAction(i), true
		}
	}
	return 0, false
}

// Budget is one spending limit. Its scope is Queue (a stored queue name),
// TagKey=TagValue over the namespace's jobs, or, with neither, every job
// of Namespace.
type Budget struct {
	Namespace   string // the stored namespace name ("" is the default)
	Queue       string // scope queue:<name> (stored name)
	TagKey      string // scope tag:<key>=<value>
	TagValue    string
	DailyNanos  int64 // 0: no daily limit
	PerJobNanos int64 // 0: no per-job limit
	OnExceed    BudgetAction
}

// Scope is the budget's scope as the API names it: queue:<name> (the
// name inside its namespace), tag:<key>=<value> or global.
func (b *Budget) Scope() string {
	switch {
	case b.Queue != "":
		return "queue:" + router.DisplayQueue(b.Queue)
	case b.TagKey != "":
		return "tag:" + b.TagKey + "=" + b.TagValue
	}
	return "global"
}

// ID is the budget's key: its namespace and scope (one budget per scope).
func (b *Budget) ID() string { return b.Namespace + "\x00" + b.Scope() }

// MaxBudgetName bounds a budget's queue, tag key and tag value.
const MaxBudgetName = 256

// Check reports what is wrong with a budget (nil: nothing).
func (b *Budget) Check() error {
	switch {
	case b.Queue != "" && b.TagKey != "":
		return errors.New("a budget's scope is a queue or a tag, not both")
	case b.TagKey == "" && b.TagValue != "":
		return errors.New("a tag value needs its key")
	case len(b.TagKey) > MaxBudgetName || len(b.TagValue) > MaxBudgetName || len(b.Queue) > MaxBudgetName:
		return fmt.Errorf("a budget's tag key, tag value and queue are at most %d bytes", MaxBudgetName)
	case strings.ContainsAny(b.TagKey, "=\x00") || strings.ContainsRune(b.TagValue, 0):
		return errors.New("a tag key has no '=' and no NUL")
	case b.DailyNanos < 0 || b.PerJobNanos < 0 || b.DailyNanos > MaxUsageCostNanos || b.PerJobNanos > MaxUsageCostNanos:
		return errors.New("budget limits are 0–1000000 USD")
	case b.DailyNanos == 0 && b.PerJobNanos == 0:
		return errors.New("a budget needs a daily or a per-job limit above 0 (0 sets no limit)")
	case b.OnExceed < BudgetActionHold || b.OnExceed > BudgetActionAlertOnly:
		return errors.New("unknown on_exceed")
	}
	if b.Queue != "" {
		if ns, _ := router.SplitQueue(b.Queue); ns != b.Namespace && !(ns == router.DefaultNamespace && b.Namespace == "") {
			return errors.New("a budget's queue is in its namespace")
		}
		return router.ValidateStoredQueue(b.Queue)
	}
	return nil
}

// Covers reports whether the budget applies to a job of queue with the
// raw JSON tags.
func (b *Budget) Covers(queue string, tags []byte) bool {
	switch {
	case b.Queue != "":
		return queue == b.Queue
	case !router.QueueInNamespace(queue, b.Namespace):
		return false
	case b.TagKey != "":
		return tagIs(tags, b.TagKey, b.TagValue)
	}
	return true
}

// tagIs reports whether the tags object holds key with the string value.
func tagIs(tags []byte, key, value string) bool {
	if len(tags) == 0 {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(tags, &m) != nil {
		return false
	}
	raw, ok := m[key]
	if !ok {
		return false
	}
	var v string
	return json.Unmarshal(raw, &v) == nil && v == value
}

const budgetVersion = 1

func (b *Budget) appendTo(e *enc) {
	e.u8(budgetVersion)
	e.str(b.Namespace)
	e.str(b.Queue)
	e.str(b.TagKey)
	e.str(b.TagValue)
	e.varint(b.DailyNanos)
	e.varint(b.PerJobNanos)
	e.u8(uint8(b.OnExceed))
}

func (b *Budget) decode(d *dec) {
	if d.u8() != budgetVersion {
		d.fail()
		return
	}
	b.Namespace = d.str()
	b.Queue = d.str()
	b.TagKey = d.str()
	b.TagValue = d.str()
	b.DailyNanos = d.varint()
	b.PerJobNanos = d.varint()
	b.OnExceed = BudgetAction(d.u8())
}

// SetBudgetOp creates or replaces a budget (Delete: removes the budget of
// Budget's namespace and scope, and its daily spends).
type SetBudgetOp struct {
	Budget Budget
	Delete bool
}

// Code implements Op.
func (*SetBudgetOp) Code() OpCode { return OpSetBudget }
func (o *SetBudgetOp) appendBody(b []byte) []byte {
	e := enc{b: b}
	o.Budget.appendTo(&e)
	e.boolean(o.Delete)
	return e.b
}
func (o *SetBudgetOp) decode(d *dec) {
	o.Budget.decode(d)
	o.Delete = d.boolean()
}

func budgetKey(id string) []byte { return append([]byte(pfxBudget), id...) }

func budgetDayKey(day int64, id string) []byte {
	k := make([]byte, 0, len(pfxBudgetDay)+4+len(id))
	k = append(k, pfxBudgetDay...)
	k = binary.BigEndian.AppendUint32(k, uint32(day))
	return append(k, id...)
}

func (a *applier) setBudget(o *SetBudgetOp) Result {
	b := &o.Budget
	if o.Delete {
		if b.Queue != "" && b.TagKey != "" {
			return Result{Status: StatusInvalid, Message: "a budget's scope is a queue or a tag, not both"}
		}
		id := b.ID()
		if _, ok := a.get(budgetKey(id)); !ok {
			return Result{Status: StatusNotFound, Message: "no budget " + b.Scope()}
		}
		a.del(budgetKey(id))
		// Its daily spends go too: a budget set again starts from what
		// is reported after it.
		var days [][]byte
		a.eachKey([]byte(pfxBudgetDay), func(k, _ []byte) bool {
			if len(k) >= len(pfxBudgetDay)+4 && string(k[len(pfxBudgetDay)+4:]) == id {
				days = append(days, slices.Clone(k))
			}
			return true
		})
		for _, k := range days {
			a.del(k)
		}
		return Result{}
	}
	if err := b.Check(); err != nil {
		return Result{Status: StatusInvalid, Message: err.Error()}
	}
	e := enc{}
	b.appendTo(&e)
	a.set(budgetKey(b.ID()), e.b)
	return Result{}
}

// eachBudget calls f with every budget (through the batch, so a budget set
// earlier in the same Update counts). It stops early when f says so.
func (a *applier) eachBudget(f func(b *Budget) bool) {
	a.eachKey([]byte(pfxBudget), func(k, v []byte) bool {
		var b Budget
		d := dec{b: v}
		b.decode(&d)
		if d.err != nil {
			a.fail(fmt.Errorf("corrupt budget %q: %w", k, d.err))
			return false
		}
		return f(&b)
	})
}

// addBudgetSpend adds a usage change of job j to the day's spend of every
// budget with a daily limit that covers it.
func (a *applier) addBudgetSpend(j *Job, nanos int64) {
	if nanos == 0 {
		return
	}
	day := UsageDay(a.now)
	a.eachBudget(func(b *Budget) bool {
		if b.DailyNanos == 0 || !b.Covers(j.Queue, j.Tags) {
			return true
		}
		k := budgetDayKey(day, b.ID())
		var spent int64
		if v, ok := a.get(k); ok {
			d := dec{b: v}
			spent = d.varint()
		}
		a.set(k, binary.AppendVarint(nil, spent+nanos))
		return true
	})
}

// overJobBudget reports whether a job that has cost nanos is past a
// per-job budget that covers it.
func (a *applier) overJobBudget(j *Job, nanos int64) bool {
	over := false
	a.eachBudget(func(b *Budget) bool {
		over = b.PerJobNanos > 0 && nanos > b.PerJobNanos && b.Covers(j.Queue, j.Tags)
		return !over
	})
	return over
}

// pruneBudgetDays deletes the budgets' daily spends older than the usage
// retention.
func (a *applier) pruneBudgetDays() {
	a.deleteRangeIfAny([]byte(pfxBudgetDay), budgetDayKey(UsageDay(a.now)-usageDayRetention, ""))
}

// BudgetsQuery reads every budget and what this shard's jobs spent under
// each on one UTC day (UsageDay); the answer is []BudgetSpend in ID order.
type BudgetsQuery struct{ Day int64 }

// BudgetSpend is a budget and this shard's spend under it for a day.
type BudgetSpend struct {
	Budget
	SpentNanos int64
}

func (s *StateMachine) budgets(day int64) ([]BudgetSpend, error) {
	pfx := []byte(pfxBudget)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := []BudgetSpend{}
	for it.First(); it.Valid(); it.Next() {
		var bs BudgetSpend
		d := dec{b: it.Value()}
		bs.Budget.decode(&d)
		if d.err != nil {
			return nil, fmt.Errorf("corrupt budget %q: %w", it.Key(), d.err)
		}
		v, closer, err := s.db.Get(budgetDayKey(day, bs.ID()))
		switch {
		case err == nil:
			d := dec{b: v}
			bs.SpentNanos = d.varint()
			_ = closer.Close()
		case !errors.Is(err, pebble.ErrNotFound):
			return nil, err
		}
		out = append(out, bs)
	}
	return out, it.Error()
}
