package coordinator

import (
	"testing"
	"unsafe"
)

// Every idle member of every group pays for a member, and a heartbeat reads
// its first cache line only: the member stays in the 192-byte size class,
// whose objects start on 64-byte boundaries, with the fields a heartbeat
// touches in its first 64 bytes. A new field that grows it past 192 bytes
// costs every member the next size class (208 bytes, not aligned).
func TestMemberLayout(t *testing.T) {
	var m member
	if size := unsafe.Sizeof(m); size != 192 {
		t.Errorf("member is %d bytes, want 192", size)
	}
	for name, end := range map[string]uintptr{
		"id":           unsafe.Offsetof(m.id) + unsafe.Sizeof(m.id),
		"sessionUntil": unsafe.Offsetof(m.sessionUntil) + unsafe.Sizeof(m.sessionUntil),
		"sessionMs":    unsafe.Offsetof(m.sessionMs) + unsafe.Sizeof(m.sessionMs),
	} {
		if end > 64 {
			t.Errorf("member.%s ends at byte %d, past the first cache line", name, end)
		}
	}
}
