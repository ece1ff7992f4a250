package memorybackend

import (
	"time"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/memstore"
)

// Options configures a Store. A nil *Options, and every zero field, means
// the default. NewStore and New refuse a negative number with a
// *backend.ArgumentError naming the field.
type Options struct {
	// MaxWaiters caps the queue of one id; an Acquire with Wait that would
	// enqueue beyond it gets backend.ErrQueueFull and enqueues nothing.
	// Default: 10000.
	MaxWaiters int
	// PurgeLimit is the most expired waiters one step purges per id.
	// Default: 100.
	PurgeLimit int
	// NoHandOff turns direct hand-off off (see backend.HandOffer): a step
	// that frees the lock then wakes the head, which takes the lock with
	// its own Acquire step. Default false: the Store hands off.
	NoHandOff bool
	// Now is the store's clock: every lease expiry and waiter deadline is
	// measured by it. Default: time.Now, which a testing/synctest bubble
	// moves together with every timer of a Locker; prefer that to a clock
	// of your own.
	Now func() time.Time
}

// Store is one "server": the shared state of every lock id. Backends made
// by one Store's NewBackend contend like separate processes on one Redis.
// It is safe for concurrent use.
type Store struct{ s *memstore.Store }

// NewStore returns an empty Store configured by opts (nil for defaults).
func NewStore(opts *Options) (*Store, error) {
	var o memstore.Options
	if opts != nil {
		o = memstore.Options{MaxWaiters: opts.MaxWaiters, PurgeLimit: opts.PurgeLimit, NoHandOff: opts.NoHandOff}
		if opts.Now != nil {
			o.Clock = clockFunc(opts.Now)
		}
	}
	s, err := memstore.NewStore(&o)
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// NewBackend returns a new Backend on s: one "process", with its own
// subscriptions and its own Close. It implements backend.Backend and the
// optional backend.Batcher, backend.ExtendBatcher, backend.HandOffer,
// backend.Sharer and backend.Inspector.
func (s *Store) NewBackend() backend.Backend { return s.s.NewBackend() }

// New returns a Backend on a new Store: NewStore(opts), then NewBackend.
func New(opts *Options) (backend.Backend, error) {
	s, err := NewStore(opts)
	if err != nil {
		return nil, err
	}
	return s.NewBackend(), nil
}

// clockFunc adapts Options.Now to the store's clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }
