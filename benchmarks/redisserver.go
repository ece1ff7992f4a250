package main

import (
	"fmt"

	"github.com/redislocker/lock/internal/testenv/redisserver"
)

// startServer starts a redis-server of its own (the REDIS_SERVER variable
// or PATH) on a free loopback port, in a temporary directory, without
// persistence: the library's test launcher, internal/testenv/redisserver, which
// this nested module imports through its replace directive. Close stops
// it and removes the directory.
func startServer() (*redisserver.Server, error) {
	s, err := redisserver.Start(redisserver.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w (set REDIS_ADDR, or install redis-server)", err)
	}
	return s, nil
}
