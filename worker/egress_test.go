package worker

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/langs"
)

// proxyRoundTrip sends raw as a client of the egress proxy would and
// returns what came back.
func proxyRoundTrip(t *testing.T, e *Egress, raw string, after func(net.Conn) string) string {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); e.Serve(context.Background(), server) }()
	go func() { _, _ = io.WriteString(client, raw) }()
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	var out string
	if resp.StatusCode == http.StatusOK && after != nil {
		out = after(&bufConn{Conn: client, r: br})
	} else {
		b, _ := io.ReadAll(resp.Body)
		out = fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	client.Close()
	<-done
	return out
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestEgress(t *testing.T) {
	t.Parallel()
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "mirror says %s", r.URL.Path)
	}))
	defer mirror.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "SECRET") }))
	defer other.Close()
	mhost := strings.TrimPrefix(mirror.URL, "http://")

	e, err := NewEgress(langs.Mirrors{PipIndexURL: mirror.URL + "/simple"}, []string{"extra.example:8443"}, zerolog.Nop())
	require.NoError(t, err)
	require.Contains(t, e.Allowed(), mhost)
	require.Contains(t, e.Allowed(), "registry.npmjs.org:443", "the public defaults")
	require.Contains(t, e.Allowed(), "sum.golang.org:443", "Go's checksum database")
	require.Contains(t, e.Allowed(), "extra.example:8443")
	require.NotContains(t, e.Allowed(), "files.pythonhosted.org:443", "pypi's companion only with pypi")

	// A plain http request to the mirror goes through.
	got := proxyRoundTrip(t, e, "GET "+mirror.URL+"/simple/x/ HTTP/1.1\r\nHost: "+mhost+"\r\n\r\n", func(c net.Conn) string { return "" })
	_ = got
	client, server := net.Pipe()
	go e.Serve(context.Background(), server)
	go func() {
		_, _ = io.WriteString(client, "GET "+mirror.URL+"/simple/x/ HTTP/1.1\r\nHost: "+mhost+"\r\n\r\n")
	}()
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, "mirror says /simple/x/", string(body))
	client.Close()

	// A tunnel to the mirror goes through.
	got = proxyRoundTrip(t, e, "CONNECT "+mhost+" HTTP/1.1\r\nHost: "+mhost+"\r\n\r\n", func(c net.Conn) string {
		_, _ = io.WriteString(c, "GET /tunnel HTTP/1.1\r\nHost: "+mhost+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	})
	require.Equal(t, "mirror says /tunnel", got)

	// Everything else is refused: another port on the same host (a Redis
	// beside the mirror), cloud metadata, a private address, any host.
	for _, target := range []string{strings.TrimPrefix(other.URL, "http://"), "169.254.169.254:80", "10.0.0.1:80", "example.com:443"} {
		got := proxyRoundTrip(t, e, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n", nil)
		require.True(t, strings.HasPrefix(got, "403 sandq: "+target+" is not an allowed mirror"), got)
	}
	got = proxyRoundTrip(t, e, "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", nil)
	require.True(t, strings.HasPrefix(got, "403 "), got)
}

func TestEgressRefusesLinkLocalForAnAllowedName(t *testing.T) {
	t.Parallel()
	e, err := NewEgress(langs.Mirrors{PipIndexURL: "http://metadata.test/simple"}, nil, zerolog.Nop())
	require.NoError(t, err)
	e.dial = func(context.Context, string, string) (net.Conn, error) { panic("dialed") }
	// metadata.test does not resolve here; a name that resolves to a
	// link-local address is refused before any dial (the resolver is the
	// system's: test the address rule on a literal instead).
	_, err = e.dialChecked(context.Background(), "169.254.169.254:80")
	require.ErrorContains(t, err, "link-local")
}
