package artifacts_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/internal/miniotest"
)

func TestKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		prefix, id, name, want, err string
	}{
		{prefix: "sandq", id: "j1", name: "out/a.csv", want: "sandq/j1/out/a.csv"},
		{prefix: "", id: "j1", name: "a.png", want: "j1/a.png"},
		{prefix: "/p/", id: "j1", name: "plots/plot-001.png", want: "p/j1/plots/plot-001.png"},
		{prefix: "p", id: "j1", name: "../x", err: "bad name"},
		{prefix: "p", id: "j1", name: "/etc/x", err: "bad name"},
		{prefix: "p", id: "j1", name: "a/../../x", err: "bad name"},
		{prefix: "p", id: "../j", name: "a", err: "bad job id"},
	} {
		got, err := artifacts.Key(tt.prefix, tt.id, tt.name)
		if tt.err != "" {
			require.ErrorContains(t, err, tt.err, tt.name)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
}

// storeContract is what every Store must do.
func storeContract(t *testing.T, s artifacts.Store, fetch func(url string) (string, string)) {
	ctx := context.Background()
	key, err := artifacts.Key("sandq", "job-1", "out/data.csv")
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, key, strings.NewReader("a,b\n1,2\n"), 8, artifacts.ContentType(key)))
	rc, err := s.Get(ctx, key)
	require.NoError(t, err)
	b, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	require.Equal(t, "a,b\n1,2\n", string(b))

	url, err := s.URL(ctx, key)
	require.NoError(t, err)
	body, ctype := fetch(url)
	require.Equal(t, "a,b\n1,2\n", body)
	if ctype != "" {
		require.Equal(t, "text/csv; charset=utf-8", ctype)
	}

	_, err = s.Get(ctx, "sandq/job-1/missing")
	require.ErrorIs(t, err, artifacts.ErrNotFound)
}

func TestS3Store(t *testing.T) {
	t.Parallel()
	m := miniotest.Start(t)
	s, err := artifacts.NewS3(artifacts.S3Config{
		Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey,
		Bucket: "made-on-first-use", URLExpiry: time.Minute,
	})
	require.NoError(t, err)
	storeContract(t, s, func(url string) (string, string) {
		require.True(t, strings.HasPrefix(url, "http://"+m.Endpoint+"/made-on-first-use/sandq/job-1/out/data.csv?"), url)
		require.Contains(t, url, "X-Amz-Signature=")
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b), resp.Header.Get("Content-Type")
	})
}

func TestLocalStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := artifacts.NewLocal(dir)
	require.NoError(t, err)
	storeContract(t, s, func(url string) (string, string) {
		require.True(t, strings.HasPrefix(url, dir+"/"), url)
		rc, err := s.Get(context.Background(), strings.TrimPrefix(url, dir+"/"))
		require.NoError(t, err)
		defer rc.Close()
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		return string(b), ""
	})
}

func TestS3PutRetriesWhileMinIODown(t *testing.T) {
	t.Parallel()
	m := miniotest.Start(t)
	s, err := artifacts.NewS3(artifacts.S3Config{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, MaxRetries: 1})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, s.EnsureBucket(ctx))
	m.Stop()

	// Down for good: every attempt fails and the error says how many.
	calls := 0
	err = artifacts.Retry(ctx, 3, 10*time.Millisecond, func() error {
		calls++
		return s.Put(ctx, "k", strings.NewReader("x"), 1, "text/plain")
	})
	require.ErrorContains(t, err, "after 3 attempts")
	require.Equal(t, 3, calls)

	// Back after the first failure: a later attempt succeeds.
	calls = 0
	err = artifacts.Retry(ctx, 5, 10*time.Millisecond, func() error {
		calls++
		if calls == 2 {
			m.Restart()
		}
		return s.Put(ctx, "k", strings.NewReader("x"), 1, "text/plain")
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, calls, 2)
}

func TestInputKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ prefix, tenant, key, want string }{
		{"sandq-inputs", "", "data/train.csv", "sandq-inputs/shared/data/train.csv"},
		{"sandq-inputs", "acme", "data/train.csv", "sandq-inputs/tenants/acme/data/train.csv"},
		{"/in/", "a.b:c", "x", "in/tenants/a.b:c/x"},
		{"", "", "x", "shared/x"},
	} {
		got, err := artifacts.InputKey(tt.prefix, tt.tenant, tt.key)
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
	for _, bad := range []struct{ tenant, key string }{
		{"", ""}, {"", "/abs"}, {"", "../sandq/job/x"}, {"", "a/../../x"}, {"", "a//b"}, {"", "a/"},
		{"", "./a"}, {"", ".."}, {"a/b", "x"}, {"..", "x"},
	} {
		_, err := artifacts.InputKey("sandq-inputs", bad.tenant, bad.key)
		require.Error(t, err, "%q %q", bad.tenant, bad.key)
	}
}

func TestOverlap(t *testing.T) {
	t.Parallel()
	require.False(t, artifacts.Overlap("sandq", "sandq-inputs"))
	require.False(t, artifacts.Overlap("a/b", "a/c"))
	for _, p := range [][2]string{{"sandq", "sandq"}, {"", "x"}, {"x", "/"}, {"sandq", "sandq/inputs"}, {"a/b/", "a"}} {
		require.True(t, artifacts.Overlap(p[0], p[1]), "%q %q", p[0], p[1])
	}
}
