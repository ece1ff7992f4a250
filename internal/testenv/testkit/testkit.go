// Package testkit holds the helpers that the project's tests share across
// packages: Must for set-up that cannot fail, Eventually and Until to wait
// on a condition with a deadline, ClosedAddr for a dial that is refused,
// Recorder for values that callbacks receive, AwaitLoss to record how a
// lease's loss was seen, and Forwards to check that a wrapper of a backend
// keeps every optional capability. It depends on the standard library and
// package backend only, and only tests import it.
package testkit
