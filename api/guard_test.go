package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/service"
)

// A form a web page could make a browser send is refused (415); a
// program's untyped body (curl -d) is read as JSON as before.
func TestFormsFromPagesAreRefused(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.Open = true })
	job := `{"lang":"python","code":"print(1)"}`
	for _, tt := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"CrossSiteForm", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, 415},
		{"CrossSiteText", []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}, 415},
		{"CrossSiteMultipart", []string{"Content-Type", "multipart/form-data; boundary=x", "Origin", "null"}, 415},
		{"CurlForm", []string{"Content-Type", "application/x-www-form-urlencoded"}, 202},
		{"PageWithJSON", []string{"Content-Type", "application/json", "Origin", "http://app.example"}, 202},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := b.do("POST", "/v1/jobs", "", job, tt.hdr...)
			require.Equal(t, tt.want, resp.StatusCode, string(body))
			if tt.want == 415 {
				require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
				require.Contains(t, string(body), "takes no forms")
			}
		})
	}
}

// An address that keeps failing authentication is refused before its key
// is looked up; a valid key from another address is unaffected, and so is
// a key that has authenticated from it (an address may be a NAT or a
// proxy shared with the client that fails), until it is revoked.
func TestFailedAuthenticationsAreThrottled(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	resp, body := b.do("GET", "/v1/languages", key, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	var codes []int
	for i := range failedAuthBurst + 5 {
		resp, _ := b.do("GET", "/v1/languages", fmt.Sprintf("sqk_guess_%d", i), nil)
		codes = append(codes, resp.StatusCode)
	}
	require.Equal(t, 401, codes[0])
	require.Equal(t, 429, codes[len(codes)-1], "past the burst the guesses are refused: %v", codes)
	require.False(t, b.srv.auths.blocked("192.0.2.1", "sqk_guess_0"), "another address is not")
	resp, body = b.do("GET", "/v1/languages", key, nil)
	require.Equal(t, 200, resp.StatusCode, "a key that authenticated is not refused for another's failures: %s", body)
	fresh := b.key("acme", service.KeyOptions{})
	resp, _ = b.do("GET", "/v1/languages", fresh, nil)
	require.Equal(t, 429, resp.StatusCode, "a key not seen yet waits like any guess")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	id := strings.Split(key, "_")[1]
	require.NoError(t, b.keys.Revoke(context.Background(), id))
	resp, _ = b.do("GET", "/v1/languages", key, nil)
	require.Equal(t, 401, resp.StatusCode, "a revoked key is refused at once")
	resp, _ = b.do("GET", "/v1/languages", key, nil)
	require.Equal(t, 429, resp.StatusCode, "and no longer vouches for itself")
}

// A tenant may download at most its share of files at once; a client that
// stops reading is cut off after WriteStall, and its download's slot goes
// back to the tenant.
func TestDownloadsAreBounded(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) {
		c.MaxDownloadsPerTenant, c.WriteStall = 2, 6*time.Second
	})
	b.ns.StartFakeSessionWorker(t, 4)
	key := b.key("acme", service.KeyOptions{})
	resp, body := b.do("POST", "/v1/sessions", key, map[string]any{"id": "s", "lang": "python"})
	require.Equal(t, 201, resp.StatusCode, string(body))
	big := bytes.Repeat([]byte("x"), 16<<20-1) // past what loopback's socket buffers hold
	resp, body = b.do("PUT", "/v1/sessions/s/files/big.bin", key, big)
	require.Equal(t, 204, resp.StatusCode, string(body))

	// Two clients that ask and never read, with small receive buffers so
	// the kernel cannot take the whole file for them.
	addr := strings.TrimPrefix(b.http.URL, "http://")
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	for range 2 {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = fmt.Fprintf(c, "GET /v1/sessions/s/files/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", key)
		require.NoError(t, err)
		status, err := bufio.NewReader(c).ReadString('\n') // the status line, then no more
		require.NoError(t, err)
		require.Contains(t, status, " 200 ")
	}
	resp, body = b.do("GET", "/v1/sessions/s/files/big.bin", key, nil)
	require.Equal(t, 429, resp.StatusCode, "a third download of the tenant is refused while two are held: %s", body)
	require.Contains(t, string(body), `"location":"quota","value":"downloads"`)
	require.Eventually(t, func() bool {
		resp, _ := b.do("GET", "/v1/sessions/s/files/big.bin", key, nil)
		return resp.StatusCode == 200
	}, 30*time.Second, 50*time.Millisecond, "the stalled readers are cut off and their slots go back")
}

// A tenant may follow at most its share of the process's event streams.
func TestStreamsPerTenant(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.MaxStreams, c.MaxStreamsPerTenant = 10, 1 })
	key, other := b.key("acme", service.KeyOptions{}), b.key("umbrella", service.KeyOptions{})
	for _, k := range []string{key, other} {
		resp, body := b.do("POST", "/v1/jobs", k, map[string]any{"id": "j", "lang": "python", "code": "x"})
		require.Equal(t, 202, resp.StatusCode, string(body))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", b.http.URL+"/v1/jobs/j/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	held, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer held.Body.Close()
	require.Equal(t, 200, held.StatusCode)
	resp, body := b.do("GET", "/v1/jobs/j/events", key, nil)
	require.Equal(t, 429, resp.StatusCode, string(body))
	require.Contains(t, string(body), "event streams")
	require.Contains(t, string(body), `"location":"quota","value":"streams"`)
	require.Contains(t, b.srv.svc.Refusals(), service.RefusalCount{Tenant: "acme", Quota: service.QuotaStreams, N: 1})
	otherReq, err := http.NewRequestWithContext(ctx, "GET", b.http.URL+"/v1/jobs/j/events", nil)
	require.NoError(t, err)
	otherReq.Header.Set("Authorization", "Bearer "+other)
	resp, err = http.DefaultClient.Do(otherReq)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, "another tenant's stream is served")
}
