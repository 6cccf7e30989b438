package service

import (
	"fmt"
	"sync"
	"time"
)

// gate admits at most total holders at once in this process, and at most
// perTenant of them for one tenant, so one tenant cannot take every slot
// of a process-wide resource (live-output followers, downloads).
type gate struct {
	what, quota      string
	total, perTenant int
	// refused is told of each refusal of a tenant (Service.refused).
	refused func(tenant, quota string)

	mu  sync.Mutex
	n   int
	per map[string]int
}

func newGate(what, quota string, total, perTenant int, refused func(tenant, quota string)) *gate {
	return &gate{what: what, quota: quota, total: total, perTenant: max(1, min(perTenant, total)), per: map[string]int{}, refused: refused}
}

// take admits one holder of tenant, or refuses: TooMany when the tenant
// holds its share, Unavailable when the process is full. Call release
// once.
func (g *gate) take(tenant string) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.per[tenant] >= g.perTenant:
		if g.refused != nil {
			g.refused(tenant, g.quota)
		}
		return nil, &Error{Kind: TooMany, RetryAfter: 2 * time.Second, Quota: g.quota,
			Msg: fmt.Sprintf("the tenant has %d %s open in this process; its cap is %d", g.per[tenant], g.what, g.perTenant)}
	case g.n >= g.total:
		return nil, &Error{Kind: Unavailable, RetryAfter: 2 * time.Second,
			Msg: fmt.Sprintf("this API process has %d %s open already", g.n, g.what)}
	}
	g.n++
	g.per[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.n--
			if g.per[tenant]--; g.per[tenant] <= 0 {
				delete(g.per, tenant)
			}
		})
	}, nil
}
