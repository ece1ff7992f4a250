package memstore

import (
	"slices"
	"time"
)

// entry is the state of one id: its leases and the queue of waiters. It
// exists only while the id has a holder or a waiter; a free id with an
// empty queue has no entry.
//
// A mutex is an id of capacity 1 whose leases take 1 permit each, so that
// it has at most one lease; a shared id (checklist item 15) has the
// capacity of the requests that made it, and leases of 1 to capacity
// permits. One code path serves both.
type entry struct {
	capacity int     // 1 for a mutex, 2 or more for a shared id; 0 in a reset entry
	used     int     // the permits of leases
	leases   []lease // in grant (fence) order; ended ones go with expire
	drops    uint64  // leases removed so far (see mark.drops)

	// The queue: a doubly linked list in ticket order (enqueue order, since
	// tickets come from a global monotonic counter and are taken under the
	// shard lock), an index by token, and a min-heap on deadline for purges.
	head, tail *waiter
	byToken    map[string]*waiter
	heap       []*waiter
}

// lease is one holder of an id.
type lease struct {
	token   string
	expiry  time.Time
	fence   uint64
	permits int
}

type waiter struct {
	token      string
	ticket     uint64
	deadline   time.Time
	prev, next *waiter
	hi         int           // index in entry.heap
	ttl        time.Duration // the lease TTL it asked for, for a hand-off
	permits    int           // the permits it asks for (1 on a mutex)
	owner      *Backend      // the process that queued it (nil: unknown)

	since time.Time // when it was enqueued (read by Inspect only)
}

// shared reports whether the id is shared (capacity 2 or more).
func (e *entry) shared() bool { return e.capacity >= 2 }

// live reports whether a lease of the id is live at now.
func (e *entry) live(now time.Time) bool {
	for i := range e.leases {
		if e.leases[i].expiry.After(now) {
			return true
		}
	}
	return false
}

// lease returns token's lease, or nil. Call expire first.
func (e *entry) lease(token string) *lease {
	if token == "" {
		return nil
	}
	for i := range e.leases {
		if e.leases[i].token == token {
			return &e.leases[i]
		}
	}
	return nil
}

// fits reports whether a lease of permits fits beside the leases.
func (e *entry) fits(permits int) bool { return e.used+permits <= e.capacity }

// add records a new lease.
func (e *entry) add(l lease) {
	e.leases = append(e.leases, l)
	e.used += l.permits
}

// drop removes token's lease, if it has one, and reports whether it had.
func (e *entry) drop(token string) bool {
	for i := range e.leases {
		if e.leases[i].token == token {
			e.removeLease(i)
			return true
		}
	}
	return false
}

func (e *entry) removeLease(i int) {
	e.used -= e.leases[i].permits
	e.leases = slices.Delete(e.leases, i, i+1)
	e.drops++
}

// clearLeases removes every lease.
func (e *entry) clearLeases() {
	if len(e.leases) > 0 {
		e.drops++
	}
	clear(e.leases)
	e.leases = e.leases[:0]
	e.used = 0
}

// expire removes the leases that have ended at now.
func (e *entry) expire(now time.Time) {
	for i := 0; i < len(e.leases); {
		if e.leases[i].expiry.After(now) {
			i++
			continue
		}
		e.removeLease(i)
	}
}

// minTTL returns the remaining TTL of the lease that ends first, or 0
// when there is none. Call expire first.
func (e *entry) minTTL(now time.Time) time.Duration {
	var d time.Duration
	for i := range e.leases {
		if r := e.leases[i].expiry.Sub(now); i == 0 || r < d {
			d = r
		}
	}
	return d
}

// last returns the live lease granted last, or nil.
func (e *entry) last(now time.Time) *lease {
	for i := len(e.leases) - 1; i >= 0; i-- {
		if e.leases[i].expiry.After(now) {
			return &e.leases[i]
		}
	}
	return nil
}

func (e *entry) queueLen() int { return len(e.heap) }

// purge removes up to limit waiters whose deadline is at or before now,
// earliest deadline first, wherever they are in the queue.
func (e *entry) purge(now time.Time, limit int) {
	for n := 0; n < limit && len(e.heap) > 0 && !e.heap[0].deadline.After(now); n++ {
		e.remove(e.heap[0])
	}
}

// lookup returns token's live queue entry, or nil. An entry that has
// expired but was not purged yet (beyond the purge limit) is removed here,
// so that it is never refreshed back to life nor granted.
func (e *entry) lookup(token string, now time.Time) *waiter {
	if len(e.heap) == 0 {
		return nil
	}
	w := e.byToken[token]
	if w != nil && !w.deadline.After(now) {
		e.remove(w)
		return nil
	}
	return w
}

// enqueue appends a waiter at the tail.
func (e *entry) enqueue(token string, ticket uint64, deadline time.Time) *waiter {
	w := &waiter{token: token, ticket: ticket, deadline: deadline, prev: e.tail}
	if e.tail != nil {
		e.tail.next = w
	} else {
		e.head = w
	}
	e.tail = w
	if e.byToken == nil {
		e.byToken = make(map[string]*waiter)
	}
	e.byToken[token] = w
	w.hi = len(e.heap)
	e.heap = append(e.heap, w)
	e.up(w.hi)
	return w
}

// remove takes w out of the queue.
func (e *entry) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.prev, w.next = nil, nil
	delete(e.byToken, w.token)

	i, last := w.hi, len(e.heap)-1
	if i != last {
		e.swap(i, last)
	}
	e.heap[last] = nil
	e.heap = e.heap[:last]
	if i != last {
		e.fix(i)
	}
	w.hi = -1
}

// refresh sets w's deadline.
func (e *entry) refresh(w *waiter, deadline time.Time) {
	w.deadline = deadline
	e.fix(w.hi)
}

// reset clears e for reuse. Large queue structures are dropped rather than
// kept in the pool.
func (e *entry) reset() {
	e.capacity = 0
	e.clearLeases()
	e.drops = 0
	if cap(e.leases) > 8 {
		e.leases = nil
	}
	e.head, e.tail = nil, nil
	if cap(e.heap) > 64 {
		e.heap, e.byToken = nil, nil
	} else {
		e.heap = e.heap[:0]
		clear(e.byToken)
	}
}

// Min-heap on (deadline, ticket).

func (e *entry) less(i, j int) bool {
	a, b := e.heap[i], e.heap[j]
	if a.deadline.Equal(b.deadline) {
		return a.ticket < b.ticket
	}
	return a.deadline.Before(b.deadline)
}

func (e *entry) swap(i, j int) {
	e.heap[i], e.heap[j] = e.heap[j], e.heap[i]
	e.heap[i].hi = i
	e.heap[j].hi = j
}

func (e *entry) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !e.less(j, i) {
			break
		}
		e.swap(i, j)
		j = i
	}
}

func (e *entry) down(i0 int) bool {
	i, n := i0, len(e.heap)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && e.less(r, j) {
			j = r
		}
		if !e.less(j, i) {
			break
		}
		e.swap(i, j)
		i = j
	}
	return i > i0
}

func (e *entry) fix(i int) {
	if !e.down(i) {
		e.up(i)
	}
}
