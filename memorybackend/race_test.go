//go:build race

package memorybackend_test

const raceEnabled = true
