// Package testkit holds the helpers that the project's tests share across
// packages and modules: Must for set-up that cannot fail, Eventually and
// Until to wait on a condition with a deadline, FreePort and ClosedAddr
// for servers a test starts, and AwaitLoss to record how a lease's loss
// was seen. It depends on the standard library only.
package testkit
