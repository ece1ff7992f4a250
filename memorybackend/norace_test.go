//go:build !race

package memorybackend_test

const raceEnabled = false
