package backend

import (
	"errors"
	"fmt"
	"testing"
)

// KindOf finds the kind a backend gave an error through any wrapping, and
// classifies the sentinels; errors.Is still sees the wrapped error.
func TestKindOf(t *testing.T) {
	client := errors.New("client")
	for _, c := range []struct {
		err  error
		want Kind
	}{
		{client, KindUnknown},
		{WithKind(KindUnsent, client), KindUnsent},
		{fmt.Errorf("lock: backend acquire: %w", WithKind(KindUnsent, client)), KindUnsent},
		{fmt.Errorf("x: %w", WithKind(KindAnswer, client)), KindAnswer},
		{WithKind(KindUnknown, WithKind(KindUnsent, client)), KindUnknown},
		{ErrNotHeld, KindAnswer},
		{fmt.Errorf("x: %w", ErrCapacity), KindAnswer},
		{ErrClosed, KindUnsent},
	} {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("KindOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !errors.Is(WithKind(KindUnsent, client), client) || WithKind(KindUnsent, nil) != nil {
		t.Error("WithKind must keep the error matchable and map nil to nil")
	}
}
