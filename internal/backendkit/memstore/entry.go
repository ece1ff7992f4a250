package memstore

import "time"

// entry is the state of one id: the lock and the queue of waiters. It exists
// only while the id has a holder or a waiter; a free id with an empty queue
// has no entry.
type entry struct {
	holder string    // "" when free
	expiry time.Time // valid when holder != ""
	fence  uint64    // the holder's fence

	// The queue: a doubly linked list in ticket order (enqueue order, since
	// tickets come from a global monotonic counter and are taken under the
	// shard lock), an index by token, and a min-heap on deadline for purges.
	head, tail *waiter
	byToken    map[string]*waiter
	heap       []*waiter
}

type waiter struct {
	token      string
	ticket     uint64
	deadline   time.Time
	prev, next *waiter
	hi         int           // index in entry.heap
	ttl        time.Duration // the lease TTL it asked for, for a hand-off
	owner      *Backend      // the process that queued it (nil: unknown)

	since time.Time // when it was enqueued (read by Inspect only)
}

// live reports whether the lock is held and not expired at now.
func (e *entry) live(now time.Time) bool {
	return e.holder != "" && e.expiry.After(now)
}

// heldBy reports whether token holds the lock. Call expire first.
func (e *entry) heldBy(token string) bool {
	return token != "" && e.holder == token
}

// expire frees the lock if its lease has ended at now.
func (e *entry) expire(now time.Time) {
	if e.holder != "" && !e.expiry.After(now) {
		e.holder = ""
	}
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
	e.holder = ""
	e.expiry = time.Time{}
	e.fence = 0
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
