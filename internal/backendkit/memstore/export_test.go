package memstore

// QueueLen returns the raw length of id's queue, expired but not yet purged
// entries included, so that tests can see what a step purged.
func (s *Store) QueueLen(id string) (n int) {
	s.withEntry(id, func(_ *shard, e *entry) { n = e.queueLen() })
	return n
}

// Entries returns the number of id entries the store keeps, without the
// sweep that Len does.
func (s *Store) Entries() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.ids)
		sh.mu.Unlock()
	}
	return n
}
