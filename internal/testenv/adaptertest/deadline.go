package adaptertest

import "time"

// Deadline bounds every wait of the adapters' tests: a test that waits
// longer fails.
const Deadline = 10 * time.Second
