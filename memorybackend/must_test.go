package memorybackend_test

// must returns v, and panics on err: for constructors that cannot fail
// with the options the tests give them.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
