// Package memstore is the in-memory backend that package memorybackend
// ships: the Store ("server") and its Backends ("processes"), with the
// hooks that the conformance harness and this module's tests use to look
// at and disturb the shared state (Store.Holder, Holders, Waiters, Len, State,
// ExpireNow, Forget, Backend.DelaySubscriptions, DropNotifier, and the
// ManualClock). Package memorybackend documents the semantics.
package memstore
