package testkit

// Must returns v, and panics on err: for test set-up whose input is known
// to be valid (nil options never fail).
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
