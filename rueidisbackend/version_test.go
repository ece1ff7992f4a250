package rueidisbackend

import "testing"

// TestVersionAtLeast: Tracking mode needs Redis 6.2 (LPOP with a count);
// New falls back to pub/sub below it, and keeps Tracking when INFO names
// no version it can read.
func TestVersionAtLeast(t *testing.T) {
	want := map[string]bool{
		"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n": true,
		"# Server\r\nredis_version:6.2.0\r\n":                           true,
		"# Server\r\nredis_version:6.0.20\r\n":                          false,
		"# Server\r\nredis_version:5.0.14\r\n":                          false,
		"# Server\r\nredis_version:10.0.0\r\n":                          true,
		"# Server\r\nredis_mode:standalone\r\n":                         true,
		"redis_version:unknown\r\n":                                     true,
	}
	for info, w := range want {
		if got := versionAtLeast(info, 6, 2); got != w {
			t.Errorf("versionAtLeast(%q, 6, 2) = %v, want %v", info, got, w)
		}
	}
}
