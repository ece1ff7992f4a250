// Package testkit holds the helpers that the project's tests share across
// packages: Must for set-up that cannot fail, Eventually and Until to wait
// on a condition with a deadline, ClosedAddr for a dial that is refused,
// Recorder for values that callbacks receive, and AwaitLoss to record how
// a lease's loss was seen. It depends on the standard library only, and
// only tests import it.
package testkit
