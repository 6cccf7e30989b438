package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// The recent indexes list a tenant's jobs and batches, and every tenant's,
// newest first, capped, expiring; a second claim of an ID adds nothing.
func TestRecentIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	type testBundle struct{ n *jobstest.Namespace }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{n: jobstest.NewNamespace(t, "recent")}
	}
	claim := func(id, tenant, lang string) store.Claimed {
		c := claimOf(id, tenant, store.Admission{}, 10)
		c.Result.Lang = lang
		return c
	}
	ids := func(rs []store.Recent) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}

	t.Run("JobsByTenantAndAll", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i, c := range []store.Claimed{claim("a1", "acme", "python"), claim("b1", "beta", "go"), claim("a2", "acme", "c"), claim("anon", "", "python")} {
			require.NoError(t, b.n.Store.Admit(ctx, c).Err, "claim %d", i)
		}
		require.NoError(t, b.n.Store.Admit(ctx, claim("a1", "acme", "python")).Err) // existing: not added again

		acme, err := b.n.Store.RecentJobs(ctx, "acme", false, 10)
		require.NoError(t, err)
		// Claims in one millisecond tie; the order is by score (Redis's
		// clock at the claim), so only the members are compared here.
		require.ElementsMatch(t, []string{"a2", "a1"}, ids(acme))
		for _, r := range acme {
			require.Equal(t, map[string]string{"a1": "python", "a2": "c"}[r.ID], r.Lang)
			require.Equal(t, "acme", r.Tenant)
			require.WithinDuration(t, time.Now(), r.At, time.Minute)
		}

		anon, err := b.n.Store.RecentJobs(ctx, "", false, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"anon"}, ids(anon))

		all, err := b.n.Store.RecentJobs(ctx, "ignored", true, 10)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"anon", "a2", "b1", "a1"}, ids(all))

		two, err := b.n.Store.RecentJobs(ctx, "", true, 2)
		require.NoError(t, err)
		require.Len(t, two, 2)

		ttl, err := b.n.RDB.PTTL(ctx, b.n.Prefix+":recent-jobs:acme").Result()
		require.NoError(t, err)
		require.Greater(t, ttl, time.Hour, "the result TTL (24 h), renewed by each claim")
		require.LessOrEqual(t, ttl, store.DefaultResultTTL)
	})

	t.Run("JobsCapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var cs []store.Claimed
		for i := range store.RecentJobs + 20 {
			cs = append(cs, claim(fmt.Sprintf("j%04d", i), "acme", "python"))
		}
		for _, cl := range b.n.Store.AdmitMany(ctx, cs) {
			require.NoError(t, cl.Err)
		}
		n, err := b.n.RDB.ZCard(ctx, b.n.Prefix+":recent-jobs:acme").Result()
		require.NoError(t, err)
		require.EqualValues(t, store.RecentJobs, n)
		got, err := b.n.Store.RecentJobs(ctx, "acme", false, store.RecentJobs+20)
		require.NoError(t, err)
		require.Len(t, got, store.RecentJobs)
	})

	t.Run("Batches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		now := time.Now().UTC()
		set, err := b.n.Store.CreateBatch(ctx, "b1", store.Batch{Tenant: "acme", Created: now, IDs: []string{"x"}})
		require.NoError(t, err)
		require.True(t, set)
		set, err = b.n.Store.CreateBatch(ctx, "b2", store.Batch{Tenant: "beta", Created: now.Add(time.Second), IDs: []string{"y"}})
		require.NoError(t, err)
		require.True(t, set)
		set, err = b.n.Store.CreateBatch(ctx, "b1", store.Batch{Tenant: "acme", Created: now.Add(2 * time.Second)})
		require.NoError(t, err)
		require.False(t, set)

		acme, err := b.n.Store.RecentBatches(ctx, "acme", false, 10)
		require.NoError(t, err)
		require.Equal(t, []store.Recent{{ID: "b1", Tenant: "acme", At: now.Truncate(time.Millisecond)}}, acme)
		all, err := b.n.Store.RecentBatches(ctx, "", true, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"b2", "b1"}, ids(all))
	})

	t.Run("Sessions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		now := time.Now().UTC()
		for i, tenant := range []string{"acme", "beta"} {
			info := jobs.SessionInfo{ID: fmt.Sprintf("s%d", i), Tenant: tenant, State: jobs.SessionReady,
				CreatedAt: now.Add(time.Duration(i) * time.Second), ExpiresAt: now.Add(time.Hour)}
			require.NoError(t, b.n.Store.PutSession(ctx, info))
			require.NoError(t, b.n.Store.PutSession(ctx, info)) // rewritten: one entry
		}
		all, err := b.n.Store.RecentSessions(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"s1", "s0"}, ids(all))
		require.Equal(t, "beta", all[0].Tenant)
	})

	t.Run("Fleet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		alive, dead := "fleet-alive-"+b.n.Prefix, "fleet-dead-"+b.n.Prefix
		require.NoError(t, b.n.Store.Heartbeat(ctx, alive, time.Minute))
		t.Cleanup(func() { _ = b.n.Store.OwnerGone(context.Background(), alive) })
		require.NoError(t, b.n.Store.SetFleetSlots(ctx, alive, 4))
		require.NoError(t, b.n.Store.SetFleetSlots(ctx, dead, 2))
		require.NoError(t, b.n.Store.SessionHeartbeat(ctx, alive, 3, true))
		got, err := b.n.Store.Fleet(ctx)
		require.NoError(t, err)
		require.Equal(t, []store.FleetWorker{
			{Owner: alive, Alive: true, JobSlots: 4, SessionSlots: 3},
			{Owner: dead, Alive: false, JobSlots: 2, SessionSlots: -1},
		}, got)
	})

	t.Run("Exist", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.n.Store.Admit(ctx, claim("here", "acme", "python")).Err)
		got, err := b.n.Store.Exist(ctx, []string{"here", "gone", "unchecked"}, func(i int) bool { return i < 2 })
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, true}, got)
	})
}
