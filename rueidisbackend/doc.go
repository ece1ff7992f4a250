// Package rueidisbackend is the rueidis adapter of the lock package.
package rueidisbackend
