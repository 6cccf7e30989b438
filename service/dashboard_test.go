package service_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/service"
)

// The dashboard's rule, below its door: a tenant's caller lists and reads
// its own tenant's jobs and batches, under its own IDs, and no other's; a
// caller with the tenants:read scope reads every tenant's, as stored, and
// the workers, in the dashboard only.
func TestDashboardSeesOwnTenantOrEvery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	acme := b.caller(t, "acme", service.KeyOptions{})
	beta := b.caller(t, "beta", service.KeyOptions{})
	ops := b.caller(t, "ops", service.KeyOptions{Scopes: []string{service.ScopeRead, service.ScopeWrite, service.ScopeTenants}})
	_, err := b.svc.SubmitJob(ctx, acme, job("a1", "print(1)"))
	require.NoError(t, err)
	_, err = b.svc.SubmitJob(ctx, beta, job("b1", "print(1)"))
	require.NoError(t, err)
	_, err = b.svc.SubmitBatch(ctx, beta, "bb", []service.JobRequest{job("b2", "print(2)")}, nil)
	require.NoError(t, err)

	ids := func(js []service.JobSummary) []string {
		out := []string{}
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}

	list, err := b.svc.ListJobs(ctx, acme, service.JobFilter{})
	require.NoError(t, err)
	require.Equal(t, []string{"a1"}, ids(list))
	list, err = b.svc.ListJobs(ctx, beta, service.JobFilter{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"b1", "b2"}, ids(list))
	other := "beta"
	_, err = b.svc.ListJobs(ctx, acme, service.JobFilter{Tenant: &other})
	requireKind(t, err, service.Forbidden)
	_, err = b.svc.ListBatches(ctx, acme, &other)
	requireKind(t, err, service.Forbidden)
	_, err = b.svc.DashboardJob(ctx, acme, "b1")
	requireKind(t, err, service.NotFound)
	_, err = b.svc.DashboardJob(ctx, acme, service.StoredID("beta", "b1"))
	requireKind(t, err, service.NotFound)
	_, err = b.svc.DashboardBatch(ctx, acme, "bb")
	requireKind(t, err, service.NotFound)
	_, err = b.svc.Fleet(ctx, acme)
	requireKind(t, err, service.Forbidden)
	require.False(t, acme.SeesEveryTenant())
	require.False(t, acme.MayInspectQueues())

	list, err = b.svc.ListJobs(ctx, ops, service.JobFilter{})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{service.StoredID("acme", "a1"), service.StoredID("beta", "b1"), service.StoredID("beta", "b2")}, ids(list))
	list, err = b.svc.ListJobs(ctx, ops, service.JobFilter{Tenant: &other})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{service.StoredID("beta", "b1"), service.StoredID("beta", "b2")}, ids(list))
	r, err := b.svc.DashboardJob(ctx, ops, service.StoredID("beta", "b1"))
	require.NoError(t, err)
	require.Equal(t, "beta", r.Tenant)
	p, err := b.svc.DashboardBatch(ctx, ops, service.StoredID("beta", "bb"))
	require.NoError(t, err)
	require.Equal(t, "beta", p.Tenant)
	require.Equal(t, 1, p.Total)
	_, err = b.svc.Fleet(ctx, ops)
	require.NoError(t, err)
	require.True(t, ops.MayInspectQueues())

	// The operator's key reads every tenant in the dashboard only: in the
	// API's own calls it is its tenant's caller.
	_, err = b.svc.Job(ctx, ops, service.StoredID("beta", "b1"), 0)
	requireKind(t, err, service.NotFound)
}
