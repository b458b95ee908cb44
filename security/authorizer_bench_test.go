package security

import (
	"fmt"
	"testing"
)

// BenchmarkAuthorize: one check (a heartbeat's READ on its group) among
// 1000 literal and 100 prefixed bindings of other principals and groups.
func BenchmarkAuthorize(b *testing.B) {
	var acls []ACL
	for i := range 1000 {
		acls = append(acls, acl(group, fmt.Sprintf("g-%d", i), literal, fmt.Sprintf("User:u%d", i), "*", opRead, allow))
	}
	for i := range 100 {
		acls = append(acls, acl(group, fmt.Sprintf("p%d-", i), prefix, fmt.Sprintf("User:u%d", i), "*", opRead, allow))
	}
	a := NewAuthorizer(storeWith(b, acls...), nil)
	p := User("u500")
	b.ReportAllocs()
	for b.Loop() {
		if !a.Authorize(p, "127.0.0.1", opRead, group, "g-500") {
			b.Fatal("refused")
		}
	}
}
