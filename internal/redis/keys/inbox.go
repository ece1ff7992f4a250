package keys

import (
	"strconv"
	"strings"
	"sync"
)

// SuffixInbox starts the names of a process's inboxes, after the prefix:
// "<prefix>inbox:<process>:" and, where the inbox must share a hash slot
// with the ids it serves, a hash tag of that slot ([SlotTag]). An inbox is
// a pub/sub channel (pub/sub modes) or a list key (the rueidis tracking
// mode) that only its process reads: every wake-up for a waiter of that
// process goes there. An inbox key lives at most 60 s (the scripts'
// INBOX_TTL) after its last write. No id's key starts like an inbox: an
// id's keys have '{' right after the prefix.
const SuffixInbox = "inbox"

// InboxBase returns the part every inbox name of process starts with:
// "<prefix>inbox:<process>:". It is the prefix a tracking connection
// listens to (CLIENT TRACKING BCAST PREFIX).
func (k Keyspace) InboxBase(process string) string {
	return k.prefix + SuffixInbox + ":" + process + ":"
}

// Inbox returns the inbox of process for the ids of one hash slot:
// InboxBase with the slot's hash tag, "{<SlotTag(slot)>}". slot < 0 means
// the inbox of every slot: InboxBase alone, for one server, or for classic
// pub/sub on a cluster (every node forwards a PUBLISH).
func (k Keyspace) Inbox(process string, slot int) string {
	base := k.InboxBase(process)
	if slot < 0 {
		return base
	}
	return base + "{" + SlotTag(slot) + "}"
}

// InboxOf returns the slot of an inbox name: that of its hash tag, or -1
// when it has none.
func InboxOf(name string) int {
	if !strings.HasSuffix(name, "}") {
		return -1
	}
	return Slot(name)
}

var (
	slotTagsOnce sync.Once
	slotTags     []string
)

// SlotTag returns a short hash tag whose hash slot is slot (0 to
// NumSlots-1): the first base-36 number, in counting order, that hashes
// there. The table is built once, on first use, in a few milliseconds.
func SlotTag(slot int) string {
	slotTagsOnce.Do(func() {
		tags := make([]string, NumSlots)
		left := NumSlots
		for i := 0; left > 0; i++ {
			t := strconv.FormatInt(int64(i), 36)
			if s := Slot(t); tags[s] == "" {
				tags[s] = t
				left--
			}
		}
		slotTags = tags
	})
	return slotTags[slot]
}
