package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redislocker/lock/backend"
)

func checkCtx(ctx context.Context) error {
	if ctx == nil {
		return argErr("ctx", "nil context")
	}
	return nil
}

func checkID(arg, id string) error {
	switch {
	case id == "":
		return argErr(arg, "empty id")
	case len(id) > backend.MaxIDLength:
		return argErr(arg, fmt.Sprintf("id is %d bytes, more than backend.MaxIDLength (%d)", len(id), backend.MaxIDLength))
	}
	return nil
}

// checkTTL validates ttl and truncates it to the backend's resolution.
func (l *Locker) checkTTL(ttl time.Duration) (time.Duration, error) {
	if ttl <= 0 {
		return 0, argErr("ttl", fmt.Sprintf("must be positive, got %v", ttl))
	}
	t := ttl.Truncate(l.resolution)
	if t < l.resolution {
		return 0, argErr("ttl", fmt.Sprintf("%v is below the backend's resolution (%v)", ttl, l.resolution))
	}
	return t, nil
}

func checkToken(tok string) error {
	if len(tok) > backend.MaxTokenLength {
		return argErr("opts.Token", fmt.Sprintf("token is %d bytes, more than backend.MaxTokenLength (%d)", len(tok), backend.MaxTokenLength))
	}
	return nil
}

// newToken returns 128 random bits from crypto/rand, hex encoded.
func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand.Read does not fail on supported platforms (Go 1.24+
		// it panics itself); keep the contract explicit.
		panic("lock: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}
