package worker

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/internal/jobstest"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

// TestLibsCollector runs the collector against real Docker volumes and a
// real Redis: sets past the size bound go least recently used first, sets
// past the age bound go, a set a container uses is never removed, and
// another namespace's sets are left alone.
func TestLibsCollector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := jobstest.NewNamespace(t, "libsgc")
	rt, err := sandbox.Open(ctx, sandbox.Options{})
	require.NoError(t, err, "docker must be running (make setup)")
	t.Cleanup(func() { _ = rt.Close() })

	suffix := jobs.NewID()[:8]
	vol := func(name, namespace string) string {
		v := sandbox.VolumePrefix + name + "-" + suffix
		require.NoError(t, rt.CreateVolume(ctx, v, map[string]string{sandbox.LabelManaged: "true", sandbox.LabelLibs: name, sandbox.LabelNamespace: namespace}))
		t.Cleanup(func() { _ = rt.RemoveVolume(context.Background(), v, true) })
		return v
	}
	inUse, v1, v2, v3 := vol("inuse", ns.Prefix), vol("one", ns.Prefix), vol("two", ns.Prefix), vol("three", ns.Prefix)
	unknown, other := vol("unknown", ns.Prefix), vol("other", "another-namespace")
	for _, u := range []struct {
		v     string
		bytes int64
	}{{inUse, 1 << 20}, {v1, 1 << 20}, {v2, 2 << 20}, {v3, 1 << 20}} {
		require.NoError(t, ns.Store.UseLibs(ctx, u.v, "", u.bytes))
		time.Sleep(10 * time.Millisecond) // distinct last uses, in this order
	}
	require.NoError(t, ns.Store.UseLibs(ctx, other, "", 5<<20))
	// A container holds inUse mounted.
	out, err := exec.Command("docker", "run", "-d", "--rm", "--entrypoint", "sleep", "-v", inUse+":/x", "sandq/python:latest", "300").CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", string(out[:12])).Run() })

	var forgotten []string
	c := &LibsCollector{Volumes: rt, Store: ns.Store, MaxBytes: 3 << 20, MaxAge: 2 * time.Hour,
		Forget: func(v string) { forgotten = append(forgotten, v) }}
	sets, err := c.Sets(ctx)
	require.NoError(t, err)
	var names []string
	for _, s := range sets {
		names = append(names, s.Volume)
	}
	require.Equal(t, []string{unknown, inUse, v1, v2, v3}, names, "this namespace's sets, least recently used first")

	// 5 MiB recorded, 3 allowed: the least recently used go, but not the
	// one in use; the set of unknown size is not removed for size.
	removed, err := c.Collect(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{v1, v2}, removed)
	require.Equal(t, removed, forgotten)
	uses, err := ns.Store.LibsUses(ctx)
	require.NoError(t, err)
	require.NotContains(t, uses, v1, "a removed set's record goes too")

	// Three hours on: everything past the age bound goes, but the set in
	// use; another namespace's set is never touched.
	removed, err = c.Collect(ctx, time.Now().Add(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{unknown, v3}, removed)
	left, err := rt.ListVolumes(ctx, map[string]string{sandbox.LabelManaged: "true"})
	require.NoError(t, err)
	var still []string
	for _, v := range left {
		if v.Name == inUse || v.Name == other || v.Name == v1 || v.Name == v2 || v.Name == v3 || v.Name == unknown {
			still = append(still, v.Name)
		}
	}
	require.ElementsMatch(t, []string{inUse, other}, still)
}

// tenantSets makes a namespace and an engine for a collector test, and
// vol, which makes a library-set volume there recorded as tenant's, of
// mib MiB, used after the previous one.
func tenantSets(t *testing.T, name string) (*jobstest.Namespace, sandbox.Engine, func(name, tenant string, mib int64) string) {
	t.Helper()
	ctx := context.Background()
	ns := jobstest.NewNamespace(t, name)
	rt, err := sandbox.Open(ctx, sandbox.Options{})
	require.NoError(t, err, "docker must be running (make setup)")
	t.Cleanup(func() { _ = rt.Close() })
	suffix := jobs.NewID()[:8]
	return ns, rt, func(name, tenant string, mib int64) string {
		v := sandbox.VolumePrefix + name + "-" + suffix
		require.NoError(t, rt.CreateVolume(ctx, v, map[string]string{sandbox.LabelManaged: "true", sandbox.LabelLibs: name, sandbox.LabelNamespace: ns.Prefix}))
		t.Cleanup(func() { _ = rt.RemoveVolume(context.Background(), v, true) })
		require.NoError(t, ns.Store.UseLibs(ctx, v, tenant, mib<<20))
		time.Sleep(10 * time.Millisecond) // distinct last uses, in this order
		return v
	}
}

// TestLibsCollectorTenantQuota: a tenant past its quota of library sets
// loses its own least recently used sets, never the set just installed,
// and never another tenant's, older as those are; the periodic pass
// applies the same quota.
func TestLibsCollectorTenantQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, rt, vol := tenantSets(t, "libsquota")
	quiet := vol("quiet", "quiet", 2)
	a1, a2, a3 := vol("a1", "noisy", 2), vol("a2", "noisy", 2), vol("a3", "noisy", 2)
	var forgotten []string
	c := &LibsCollector{Volumes: rt, Store: ns.Store, MaxBytes: 100 << 20, MaxTenantBytes: 3 << 20, MaxAge: time.Hour,
		Forget: func(v string) { forgotten = append(forgotten, v) }}

	// noisy holds 6 MiB of a 3 MiB quota; a1 is its oldest but is the
	// set just installed: a2 and a3 go, and quiet's older set stays.
	removed, err := c.TrimTenant(ctx, "noisy", a1)
	require.NoError(t, err)
	require.Equal(t, []string{a2, a3}, removed)
	require.Equal(t, removed, forgotten)
	sets, err := c.Sets(ctx)
	require.NoError(t, err)
	var left []string
	for _, s := range sets {
		left = append(left, s.Volume+"/"+s.Tenant)
	}
	require.Equal(t, []string{quiet + "/quiet", a1 + "/noisy"}, left)

	// The periodic pass: a4 takes noisy past its quota again, and its
	// least recently used set (a1) goes.
	a4 := vol("a4", "noisy", 2)
	removed, err = c.Collect(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, []string{a1}, removed)
	uses, err := ns.Store.LibsUses(ctx)
	require.NoError(t, err)
	require.Equal(t, "noisy", uses[a4].Tenant)
	require.Contains(t, uses, quiet)

	// A later use that knows no tenant keeps the recorded one.
	require.NoError(t, ns.Store.UseLibs(ctx, a4, "", 0))
	uses, err = ns.Store.LibsUses(ctx)
	require.NoError(t, err)
	require.Equal(t, store.LibsUse{Volume: a4, Tenant: "noisy", Bytes: 2 << 20, LastUsed: uses[a4].LastUsed}, uses[a4])
}

// TestLibsCollectorHeldOverQuota: a tenant past its quota whose sets a
// container holds this moment cannot be trimmed yet; the total bound does
// not evict another tenant's set in its place, and the tenant's set goes
// once it comes free.
func TestLibsCollectorHeldOverQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns, rt, vol := tenantSets(t, "libsheld")
	quiet := vol("quiet", "quiet", 2)
	noisy := vol("noisy", "noisy", 4)
	out, err := exec.Command("docker", "run", "-d", "--rm", "--entrypoint", "sleep", "-v", noisy+":/x", "sandq/python:latest", "300").CombinedOutput()
	require.NoError(t, err, "%s", out)
	holder := string(out[:12])
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", holder).Run() })

	// 6 MiB of 5 allowed; noisy holds 4 of its 3 in use: nothing goes,
	// quiet's older set least of all.
	c := &LibsCollector{Volumes: rt, Store: ns.Store, MaxBytes: 5 << 20, MaxTenantBytes: 3 << 20, MaxAge: time.Hour}
	removed, err := c.Collect(ctx, time.Now())
	require.NoError(t, err)
	require.Empty(t, removed, "another tenant's set is not evicted for a set held past its tenant's quota")

	// Free, noisy's set goes for its quota; quiet's stays.
	require.NoError(t, exec.Command("docker", "rm", "-f", holder).Run())
	removed, err = c.Collect(ctx, time.Now())
	require.NoError(t, err)
	require.Equal(t, []string{noisy}, removed)
	sets, err := c.Sets(ctx)
	require.NoError(t, err)
	require.Len(t, sets, 1)
	require.Equal(t, quiet, sets[0].Volume)
}

type fakeVolumes struct {
	list   func(ctx context.Context, labels map[string]string) ([]sandbox.VolumeInfo, error)
	remove func(ctx context.Context, name string, force bool) error
}

func (f *fakeVolumes) ListVolumes(ctx context.Context, labels map[string]string) ([]sandbox.VolumeInfo, error) {
	if f.list == nil {
		panic("fakeVolumes: unexpected ListVolumes")
	}
	return f.list(ctx, labels)
}

func (f *fakeVolumes) RemoveVolume(ctx context.Context, name string, force bool) error {
	if f.remove == nil {
		panic("fakeVolumes: unexpected RemoveVolume")
	}
	return f.remove(ctx, name, force)
}

var _ Volumes = (*fakeVolumes)(nil)

// TestLibsCollectorRun: the loop collects at once and ends with its
// context, however long its interval.
func TestLibsCollectorRun(t *testing.T) {
	t.Parallel()
	ns := jobstest.NewNamespace(t, "libsrun")
	listed := make(chan map[string]string, 1)
	c := &LibsCollector{Store: ns.Store, Volumes: &fakeVolumes{
		list: func(_ context.Context, labels map[string]string) ([]sandbox.VolumeInfo, error) {
			listed <- labels
			return nil, nil
		},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, time.Hour)
	}()
	select {
	case labels := <-listed:
		require.Equal(t, ns.Prefix, labels[sandbox.LabelNamespace], "only its namespace's sets")
	case <-time.After(10 * time.Second):
		t.Fatal("no collection at start")
	}
	cancel()
	waitDone(t, done, "the library-set collector")
}
