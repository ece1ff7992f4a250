package fallback_test

import (
	"errors"
	"testing"

	"github.com/redislocker/lock/backend"
	"github.com/redislocker/lock/internal/backendkit/fallback"
)

// TestUnsent: Unsent reports exactly the errors of kind unsent.
func TestUnsent(t *testing.T) {
	client := errors.New("client")
	if !fallback.Unsent(backend.WithKind(backend.KindUnsent, client)) || fallback.Unsent(client) || fallback.Unsent(nil) ||
		!fallback.Unsent(backend.ErrClosed) || fallback.Unsent(backend.ErrNotHeld) {
		t.Error("Unsent must report exactly the unsent errors")
	}
}
