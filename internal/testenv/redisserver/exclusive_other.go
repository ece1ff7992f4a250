//go:build !unix

package redisserver

// Exclusive is a no-op without flock: test binaries may run at once.
func Exclusive() (release func(), err error) { return func() {}, nil }
