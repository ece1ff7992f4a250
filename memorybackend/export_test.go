package memorybackend

// QueueLen returns the raw length of id's queue, expired but not yet purged
// entries included, so that tests can see what a step purged.
func (s *Store) QueueLen(id string) int {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.ids[id]; e != nil {
		return e.queueLen()
	}
	return 0
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
