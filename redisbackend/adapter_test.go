package redisbackend

import "github.com/redislocker/lock/backend"

// concrete returns the adapter behind what New returned, for the tests
// that look at its internals.
func concrete(b backend.Backend, err error) (*adapter, error) {
	if err != nil {
		return nil, err
	}
	return b.(*adapter), nil
}
