package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/redistest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

func claimOf(id, tenant string, a store.Admission, payload int) store.Claimed {
	return store.Claimed{Result: jobs.Result{ID: id, Status: jobs.StatusQueued, Tenant: tenant}, Tenant: tenant,
		Queue: jobs.QueueDefault, Payload: make([]byte, payload), Admission: a}
}

// Concurrent claims never pass a tenant's caps, of jobs or of bytes: the
// count and the claim are one script.
func TestLedgerCapsHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "ledger")
	for _, tt := range []struct {
		name string
		a    store.Admission
		want int
		what string
	}{
		{"Jobs", store.Admission{MaxJobs: 8}, 8, "jobs"},
		{"Bytes", store.Admission{MaxBytes: 10 * 1000}, 10, "bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tenant := "t-" + tt.name
			var wg sync.WaitGroup
			var mu sync.Mutex
			admitted, refused := 0, 0
			for i := range 100 {
				wg.Go(func() {
					c := n.Store.Admit(ctx, claimOf(fmt.Sprintf("%s-%d", tenant, i), tenant, tt.a, 1000))
					mu.Lock()
					defer mu.Unlock()
					var q *store.QuotaError
					switch {
					case c.Err == nil && c.Created:
						admitted++
					case errors.As(c.Err, &q):
						require.Equal(t, tt.what, q.Resource)
						refused++
					default:
						t.Errorf("claim %d: %+v", i, c)
					}
				})
			}
			wg.Wait()
			require.Equal(t, tt.want, admitted, "exactly the cap, never more")
			require.Equal(t, 100-tt.want, refused)
			u, err := n.Store.Usage(ctx, tenant)
			require.NoError(t, err)
			require.Equal(t, int64(tt.want), u.Jobs)
			require.Equal(t, int64(tt.want*1000), u.Bytes)
		})
	}
}

// A claim holds its Bytes (a streaming job's live output besides its
// payload) until its final Result, and never less than its payload.
func TestLedgerHoldsWhatAJobMayAdd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "ledger")
	a := store.Admission{MaxBytes: 10_000}
	streaming := claimOf("s", "acme", a, 100)
	streaming.Bytes = jobs.Job{Stream: true, Limits: jobs.Limits{OutputBytes: 2000}}.HeldBytes(100)
	require.True(t, n.Store.Admit(ctx, streaming).Created)
	small := claimOf("p", "acme", a, 100)
	small.Bytes = 1 // less than the payload: the payload counts
	require.True(t, n.Store.Admit(ctx, small).Created)
	u, err := n.Store.Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, int64(8100+100), u.Bytes)
	var q *store.QuotaError
	require.ErrorAs(t, n.Store.Admit(ctx, func() store.Claimed {
		c := claimOf("s2", "acme", a, 100)
		c.Bytes = streaming.Bytes
		return c
	}()).Err, &q, "a second streaming job passes the cap")
	require.Equal(t, "bytes", q.Resource)
	_, err = n.Store.PutFinal(ctx, jobs.Result{ID: "s", Status: jobs.StatusSucceeded, Tenant: "acme"})
	require.NoError(t, err)
	u, err = n.Store.Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, int64(100), u.Bytes, "the end of the streaming job gives its bytes back")
}

// A final Result takes its job out of the ledger, whoever stores it, with
// the tenant read from the claim when the writer does not know it.
func TestLedgerFinalReleasesTheCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "ledger")
	a := store.Admission{MaxJobs: 2}
	for _, id := range []string{"a", "b"} {
		require.True(t, n.Store.Admit(ctx, claimOf(id, "acme", a, 10)).Created)
	}
	var q *store.QuotaError
	require.ErrorAs(t, n.Store.Admit(ctx, claimOf("c", "acme", a, 10)).Err, &q)
	require.Equal(t, int64(2), q.Used)

	// The worker that rejects an undecodable payload knows no tenant.
	out, err := n.Store.PutFinal(ctx, jobs.Result{ID: "a", Status: jobs.StatusRejected, Reason: "poison"})
	require.NoError(t, err)
	require.True(t, out.Written)
	require.Equal(t, "acme", out.Tenant)
	require.True(t, n.Store.Admit(ctx, claimOf("c", "acme", a, 10)).Created, "a final job leaves room")
	u, err := n.Store.Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Jobs: 2, Running: 2, Bytes: 20}, u)

	// A second final write changes nothing (first final wins).
	out, err = n.Store.PutFinal(ctx, jobs.Result{ID: "a", Status: jobs.StatusSucceeded, Tenant: "acme"})
	require.NoError(t, err)
	require.False(t, out.Written)
	u, _ = n.Store.Usage(ctx, "acme")
	require.Equal(t, int64(2), u.Jobs)
}

// With the fleet's slots known, a tenant gets its share released at once
// and the rest held in its lane; another tenant's first job is released
// at once; the end of a job says the tenant has held jobs, and Release
// hands them out up to the share, oldest first.
func TestLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "lanes")
	a := store.Admission{FleetSlots: 2}
	var held []string
	for i := range 5 {
		c := n.Store.Admit(ctx, claimOf(fmt.Sprintf("a%d", i), "A", a, 10))
		require.NoError(t, c.Err)
		if c.Held {
			held = append(held, c.Stored.ID)
		}
	}
	require.Equal(t, []string{"a2", "a3", "a4"}, held, "A alone: the whole fleet (2), the rest held")
	c := n.Store.Admit(ctx, claimOf("b0", "B", a, 10))
	require.NoError(t, c.Err)
	require.False(t, c.Held, "B's first job is released at once")
	again := n.Store.Admit(ctx, claimOf("a3", "A", a, 10))
	require.False(t, again.Created)
	require.True(t, again.Held, "an existing claim says it is held")

	out, err := n.Store.PutFinal(ctx, jobs.Result{ID: "a0", Status: jobs.StatusSucceeded, Tenant: "A"})
	require.NoError(t, err)
	require.Equal(t, 3, out.Held)
	rel, err := n.Store.Release(ctx, "A", 2)
	require.NoError(t, err)
	require.Empty(t, rel, "two tenants: A's share is 1, and A has a1 running")
	out, err = n.Store.PutFinal(ctx, jobs.Result{ID: "a1", Status: jobs.StatusSucceeded, Tenant: "A"})
	require.NoError(t, err)
	rel, err = n.Store.Release(ctx, "A", 2)
	require.NoError(t, err)
	require.Len(t, rel, 1)
	require.Equal(t, "a2", rel[0].ID, "oldest first")
	require.NotEmpty(t, rel[0].Payload)

	// Released but never recorded in asynq: the sweep finds it stale.
	stale, err := n.Store.StaleReleases(ctx, -time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{"a2"}, idsOf(stale))
	require.NoError(t, n.Store.Released(ctx, "a2"))
	stale, err = n.Store.StaleReleases(ctx, -time.Second)
	require.NoError(t, err)
	require.Empty(t, stale)

	// A held job canceled before its release is dropped by the release.
	_, err = n.Store.PutFinal(ctx, jobs.Result{ID: "a3", Status: jobs.StatusCanceled, Tenant: "A"})
	require.NoError(t, err)
	_, err = n.Store.PutFinal(ctx, jobs.Result{ID: "a2", Status: jobs.StatusSucceeded, Tenant: "A"})
	require.NoError(t, err)
	rel, err = n.Store.Release(ctx, "A", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"a4"}, idsOf(rel))
	tenants, err := n.Store.LaneTenants(ctx)
	require.NoError(t, err)
	require.Empty(t, tenants, "every lane empty")
}

func idsOf(hs []store.Held) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.ID)
	}
	return out
}

// A writer that knows no tenant keeps the claim's on record.
// A tenant that sends one job at a time keeps its share between them
// (store.ActiveWindow): a flooding tenant's next job stays in its lane,
// leaving a slot free for the other's next job.
func TestLanesKeepAnActiveTenantsShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "lanes")
	a := store.Admission{FleetSlots: 4}
	for i := range 10 {
		require.NoError(t, n.Store.Admit(ctx, claimOf(fmt.Sprintf("a%d", i), "A", a, 10)).Err)
	}
	require.False(t, n.Store.Admit(ctx, claimOf("b0", "B", a, 10)).Held)
	_, err := n.Store.PutFinal(ctx, jobs.Result{ID: "b0", Status: jobs.StatusSucceeded, Tenant: "B"})
	require.NoError(t, err)
	// B has nothing left, but sent a job just now: A's share is 2 of 4.
	for _, id := range []string{"a0", "a1"} {
		_, err = n.Store.PutFinal(ctx, jobs.Result{ID: id, Status: jobs.StatusSucceeded, Tenant: "A"})
		require.NoError(t, err)
		rel, err := n.Store.Release(ctx, "A", 4)
		require.NoError(t, err)
		require.Empty(t, idsOf(rel), "A has %s running still: its share while B is active", id)
	}
	_, err = n.Store.PutFinal(ctx, jobs.Result{ID: "a2", Status: jobs.StatusSucceeded, Tenant: "A"})
	require.NoError(t, err)
	rel, err := n.Store.Release(ctx, "A", 4)
	require.NoError(t, err)
	require.Equal(t, []string{"a4"}, idsOf(rel), "one running (a3): one more makes its share of 2")
	// B's next job finds a free slot: released at once.
	require.False(t, n.Store.Admit(ctx, claimOf("b1", "B", a, 10)).Held)
}

func TestPutKeepsTheTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "tenant")
	require.True(t, n.Store.Admit(ctx, claimOf("j", "acme", store.Admission{}, 1)).Created)
	_, written, err := n.Store.Put(ctx, jobs.Result{ID: "j", Status: jobs.StatusRunning})
	require.NoError(t, err)
	require.True(t, written)
	got, err := n.Store.Get(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "acme", got.Tenant)
	out, err := n.Store.PutFinal(ctx, jobs.Result{ID: "j", Status: jobs.StatusInternalError, Reason: "a panic"})
	require.NoError(t, err)
	require.Equal(t, "acme", out.Stored.Tenant)
	got, err = n.Store.Get(ctx, "j")
	require.NoError(t, err)
	require.Equal(t, "acme", got.Tenant)
	require.Equal(t, "a panic", got.Reason)
}

// Progress counts read each job's status alone, not its Result: 50 jobs
// whose Results hold 256 KiB each cost Redis a few KiB to count.
func TestStatusesReadNoResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "statuses")
	proxy := redistest.StartProxy(t, n.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	st, err := store.New(rdb, store.Config{Prefix: n.Prefix})
	require.NoError(t, err)

	var ids []string
	big := strings.Repeat("x", 256<<10)
	for i := range 50 {
		id := fmt.Sprintf("j%d", i)
		ids = append(ids, id)
		r := jobs.Result{ID: id, Status: jobs.StatusSucceeded}
		if i%2 == 1 {
			r.Status = jobs.StatusFailed
		}
		r.Stdout = big
		_, _, err := n.Store.Put(ctx, r)
		require.NoError(t, err)
	}
	before := proxy.FromRedis()
	got, err := st.Statuses(ctx, append(ids, "never-stored"))
	require.NoError(t, err)
	require.Less(t, proxy.FromRedis()-before, int64(16<<10), "the statuses alone crossed the wire")
	counts := map[jobs.Status]int{}
	for _, s := range got {
		counts[s]++
	}
	require.Equal(t, map[jobs.Status]int{jobs.StatusSucceeded: 25, jobs.StatusFailed: 25, jobs.StatusQueued: 1}, counts)
}

// With SyncReplicas, a final Result waits (WAIT) for replicas before
// PutFinal returns, at most SyncTimeout: this Redis has none, so it waits
// the whole timeout, and the Result is stored all the same. A Result not
// final does not wait.
func TestPutFinalWaitsForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := jobstest.NewNamespace(t, "sync")
	st, err := store.New(n.RDB, store.Config{Prefix: n.Prefix, SyncReplicas: 1, SyncTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	out, err := st.PutFinal(ctx, jobs.Result{ID: "a", Status: jobs.StatusRunning})
	require.NoError(t, err)
	require.True(t, out.Written)
	require.Less(t, time.Since(start), 300*time.Millisecond, "running: no wait")
	start = time.Now()
	out, err = st.PutFinal(ctx, jobs.Result{ID: "a", Status: jobs.StatusSucceeded})
	require.NoError(t, err)
	require.True(t, out.Written)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "final: WAIT for a replica, up to the timeout")
	r, err := st.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusSucceeded, r.Status)
}
