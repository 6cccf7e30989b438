package service

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/sandq/sandq/internal/store"
)

// refusal is one tenant's refusals by one quota.
type refusal struct{ tenant, quota string }

// maxRefusalTenants bounds the tenants counted apart; refusals of further
// tenants count under "other", so a stream of new tenants cannot grow the
// counts without bound.
const maxRefusalTenants = 10_000

// Refused counts a refusal of tenant by quota (a Quota* name); doors that
// refuse on their own (the MCP door's session cap) call it too.
func (s *Service) Refused(tenant, quota string) {
	k := refusal{cmp.Or(tenant, "-"), quota}
	s.refusalsMu.Lock()
	defer s.refusalsMu.Unlock()
	if _, ok := s.refusals[k]; !ok && len(s.refusals) >= maxRefusalTenants*2 {
		k.tenant = "other"
	}
	s.refusals[k]++
}

// refuse counts err when it is a refusal by a quota (TooMany with Quota)
// of c's tenant, and returns it.
func (s *Service) refuse(c Caller, err error) error {
	if e, ok := errors.AsType[*Error](err); ok && e.Kind == TooMany && e.Quota != "" {
		s.Refused(c.Tenant, e.Quota)
	}
	return err
}

// RefusalCount is one tenant's refusals by one quota since the process
// started.
type RefusalCount struct {
	Tenant, Quota string
	N             int64
}

// Refusals returns the refusals counted, by tenant and quota, sorted.
func (s *Service) Refusals() []RefusalCount {
	s.refusalsMu.Lock()
	out := make([]RefusalCount, 0, len(s.refusals))
	for k, n := range s.refusals {
		out = append(out, RefusalCount{k.tenant, k.quota, n})
	}
	s.refusalsMu.Unlock()
	slices.SortFunc(out, func(a, b RefusalCount) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Quota, b.Quota))
	})
	return out
}

// MaxTenantsInUsage bounds the tenants TenantUsages reads.
const MaxTenantsInUsage = 1000

// TenantUsages reads the ledgers of the tenants with jobs not yet final
// (at most MaxTenantsInUsage of them): for the API's per-tenant metrics.
func (s *Service) TenantUsages(ctx context.Context) (map[string]store.TenantUsage, error) {
	return s.st.Usages(ctx, MaxTenantsInUsage)
}
