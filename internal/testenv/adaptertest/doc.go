// Package adaptertest holds what the tests of the Redis adapters share:
// a collector of wake-ups, polling with a deadline, a log of the commands
// a client sends, and the command-cost tests both adapters run (see
// [Adapter]). It is test support: no library code imports it.
package adaptertest
