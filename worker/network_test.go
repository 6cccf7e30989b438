package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/sandbox"
)

type networkBundle struct {
	srv, other *httptest.Server
	port       string // srv's
	otherPort  string
	n          *Network
	logs       *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// setupNetwork starts two HTTP servers on loopback and the proxy of an
// operator who allows localhost on both their ports (by name: the escape
// hatch for a loopback address), *.example.com on srv's port, and
// 169.254.169.254:80 as a literal. Names resolve through a fixed table,
// the seam under test being the proxy's rules, not the system's DNS.
func setupNetwork(t *testing.T) *networkBundle {
	t.Helper()
	b := &networkBundle{logs: &syncBuffer{}}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://127.0.0.1:"+b.port+"/hello", http.StatusFound)
		case "/host":
			fmt.Fprint(w, r.Host)
		default:
			fmt.Fprint(w, "hello")
		}
	}))
	t.Cleanup(b.srv.Close)
	b.other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "SECRET") }))
	t.Cleanup(b.other.Close)
	_, b.port, _ = net.SplitHostPort(strings.TrimPrefix(b.srv.URL, "http://"))
	_, b.otherPort, _ = net.SplitHostPort(strings.TrimPrefix(b.other.URL, "http://"))
	n, err := NewNetwork([]string{"localhost:" + b.port, "localhost:" + b.otherPort, "*.example.com:" + b.port, "169.254.169.254:80"},
		zerolog.New(b.logs))
	require.NoError(t, err)
	table := map[string][]netip.Addr{
		"localhost":        {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
		"a.example.com":    {netip.MustParseAddr("127.0.0.1")},
		"b.example.com":    {netip.MustParseAddr("10.1.2.3")},
		"meta.example.com": {netip.MustParseAddr("169.254.169.254")},
	}
	n.resolve = func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := table[host]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}
	b.n = n
	return b
}

// ask sends raw to the run's proxy as a step would and returns the
// status and body of its answer; through, when not nil, is sent into an
// established tunnel and the body of the answer to it returned.
func ask(t *testing.T, r *netRun, raw, through string) string {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); r.Serve(context.Background(), server) }()
	go func() { _, _ = io.WriteString(client, raw) }()
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, raw)
	if resp.StatusCode == http.StatusOK && through != "" {
		go func() { _, _ = io.WriteString(client, through) }()
		resp, err = http.ReadResponse(br, nil)
		require.NoError(t, err)
	}
	body, _ := io.ReadAll(resp.Body)
	client.Close()
	<-done
	return fmt.Sprintf("%d %s", resp.StatusCode, body)
}

func TestNetworkProxy(t *testing.T) {
	t.Parallel()
	b := setupNetwork(t)
	job := jobs.Job{ID: "job-net", Network: &jobs.NetworkPolicy{Allow: []string{"localhost:" + b.port, "*.example.com:" + b.port}}}
	r := b.n.forJob(job)
	lp, lq := "localhost:"+b.port, "localhost:"+b.otherPort
	connect := func(target string) string { return "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n" }
	get := func(url, host string) string { return "GET " + url + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n" }
	tunnelGet := "GET /hello HTTP/1.1\r\nHost: " + lp + "\r\nConnection: close\r\n\r\n"

	type testCase struct {
		name, raw, through string
		want               string // status and the body's start
	}
	cases := []testCase{
		{"Get", get("http://"+lp+"/hello", lp), "", "200 hello"},
		{"Tunnel", connect(lp), tunnelGet, "200 hello"},
		{"NameCase", connect("LOCALHOST:" + b.port), tunnelGet, "200 hello"},
		// The Host header is the URL's: another would reach another site
		// at the same address.
		{"HostHeader", get("http://"+lp+"/host", "evil.example"), "", "200 " + lp},
		// A redirect is passed on, not followed; where it points is asked
		// for as any other destination.
		{"Redirect", get("http://"+lp+"/redirect", lp), "", "302 "},
		{"RedirectTarget", get("http://127.0.0.1:"+b.port+"/hello", "127.0.0.1:"+b.port), "", "403 sandq: 127.0.0.1:" + b.port + " is not in the job's network policy"},
		// IP literals, even the allowed name's address, and other forms.
		{"IPLiteral", connect("127.0.0.1:" + b.port), "", "403 sandq: 127.0.0.1:" + b.port + " is not in the job's network policy"},
		{"IPv6Literal", connect("[::1]:" + b.port), "", "403 sandq: [::1]:" + b.port + " is not in the job's network policy"},
		{"IPv4Mapped", connect("[::ffff:127.0.0.1]:" + b.port), "", "400 sandq: \"[::ffff:127.0.0.1]:" + b.port + "\": write an IPv4-mapped address as IPv4"},
		{"DecimalIP", connect("2130706433:" + b.port), "", "400 sandq: \"2130706433:" + b.port + "\": the host is neither"},
		{"TrailingDot", connect("localhost.:" + b.port), "", "400 sandq: \"localhost.:" + b.port + "\": the host has an empty label"},
		{"Userinfo", get("http://"+lp+"@127.0.0.1:"+b.otherPort+"/", lp), "", "403 sandq: 127.0.0.1:" + b.otherPort + " is not in the job's network policy"},
		// Another port of the allowed name, though the operator allows it.
		{"OtherPort", connect(lq), "", "403 sandq: " + lq + " is not in the job's network policy"},
		{"OtherPortGet", get("http://"+lq+"/", lq), "", "403 sandq: " + lq + " is not in the job's network policy"},
		// Another host.
		{"OtherHost", connect("example.org:443"), "", "403 sandq: example.org:443 is not in the job's network policy"},
		{"WildcardApex", connect("example.com:" + b.port), "", "403 sandq: example.com:" + b.port + " is not in the job's network policy"},
		{"WildcardTarget", connect("*.example.com:" + b.port), "", "400 sandq: *.example.com:" + b.port + " is not a host"},
		// A name the policy allows by wildcard that resolves to loopback, a
		// private address or metadata: the operator named none exactly.
		{"WildcardToLoopback", connect("a.example.com:" + b.port), "", "403 sandq: a.example.com resolves to a loopback, private, link-local or other special address"},
		{"WildcardToPrivate", connect("b.example.com:" + b.port), "", "403 sandq: b.example.com resolves to a loopback"},
		{"Unresolvable", connect("nx.example.com:" + b.port), "", "502 sandq: cannot resolve nx.example.com"},
		// Not proxy requests.
		{"HTTPSAbsolute", get("https://"+lp+"/", lp), "", "400 sandq: GET https://"},
		{"OriginForm", get("/hello", lp), "", "400 sandq: GET /hello: a proxy takes CONNECT or absolute http URLs"},
		{"Garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", "", "400 sandq: not a proxy request"},
	}
	for _, tc := range cases {
		got := ask(t, r, tc.raw, tc.through)
		require.True(t, strings.HasPrefix(got, tc.want), "%s: got %q, want %q...", tc.name, got, tc.want)
	}
	uses := r.finish()

	type use struct {
		Host    string
		Port    int
		Refused bool
		Conns   int
		Failed  int
	}
	var got []use
	for _, u := range uses {
		got = append(got, use{u.Host, u.Port, u.Refused, u.Connections, u.Failed})
		if u.Host == "localhost" && !u.Refused {
			require.Positive(t, u.BytesOut, "bytes sent to %s", lp)
			require.Positive(t, u.BytesIn, "bytes received from %s", lp)
		}
		if u.Refused {
			require.Zero(t, u.BytesOut+u.BytesIn, "a refused connection moves no byte")
			require.NotEmpty(t, u.Reason)
		}
	}
	port := func(s string) int {
		var p int
		_, _ = fmt.Sscan(s, &p)
		return p
	}
	P, Q := port(b.port), port(b.otherPort)
	want := []use{
		{"localhost", P, false, 5, 0},
		{"127.0.0.1", P, true, 2, 0},
		{"::1", P, true, 1, 0},
		{"", 0, true, 7, 0}, // not a host: IPv4Mapped, DecimalIP, TrailingDot, WildcardTarget, HTTPSAbsolute, OriginForm, Garbage
		{"127.0.0.1", Q, true, 1, 0},
		{"localhost", Q, true, 2, 0},
		{"example.org", 443, true, 1, 0},
		{"example.com", P, true, 1, 0},
		{"a.example.com", P, true, 1, 0},
		{"b.example.com", P, true, 1, 0},
		{"nx.example.com", P, false, 1, 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Result.Network (-want +got):\n%s", d)
	}

	// Every connection is logged with the job's ID, destination and bytes.
	var logged int
	for line := range strings.SplitSeq(strings.TrimSpace(b.logs.String()), "\n") {
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		if ev["message"] != "network connection" {
			continue
		}
		logged++
		require.Equal(t, "job-net", ev["job_id"], line)
		for _, k := range []string{"host", "port", "bytes_out", "bytes_in"} {
			require.Contains(t, ev, k, line)
		}
	}
	require.Equal(t, len(cases), logged)
	// The log has the address dialled and refused; the job is not told.
	require.Contains(t, b.logs.String(), `"refused_addrs":["10.1.2.3"]`)
	require.NotContains(t, fmt.Sprint(uses), "10.1.2.3")
}

// TestNetworkFinishClosesTunnels: a tunnel still open when the run ends
// is closed, and its bytes are counted.
func TestNetworkFinishClosesTunnels(t *testing.T) {
	t.Parallel()
	b := setupNetwork(t)
	lp := "localhost:" + b.port
	r := b.n.forJob(jobs.Job{ID: "job-open", Network: &jobs.NetworkPolicy{Allow: []string{lp}}})
	client, server := net.Pipe()
	served := make(chan struct{})
	go func() { defer close(served); r.Serve(context.Background(), server) }()
	go func() { _, _ = io.WriteString(client, "CONNECT "+lp+" HTTP/1.1\r\n\r\n") }()
	br := bufio.NewReader(client)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	go func() { _, _ = io.WriteString(client, "GET /hello HTTP/1.1\r\nHost: "+lp+"\r\n\r\n") }() // keep-alive
	resp, err = http.ReadResponse(br, nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 5))
	require.Equal(t, "hello", string(body))

	uses := r.finish()
	select {
	case <-served:
	case <-time.After(netCloseWait):
		t.Fatal("the tunnel was not closed by finish")
	}
	require.Len(t, uses, 1)
	require.Equal(t, 1, uses[0].Connections)
	require.Positive(t, uses[0].BytesIn)
	_, err = br.ReadByte()
	require.Error(t, err, "the step's end of the tunnel is closed")
	// A connection after the run's end is not served.
	client2, server2 := net.Pipe()
	go r.Serve(context.Background(), server2)
	_, err = client2.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}

func TestNetworkPermitted(t *testing.T) {
	t.Parallel()
	n, err := NewNetwork([]string{"svc.internal:8080", "*.corp.example:443", "169.254.169.254:80", "[fd00::5]:443", "*:443"}, zerolog.Nop())
	require.NoError(t, err)
	type testCase struct {
		host string
		port int
		addr string
		want bool
	}
	cases := []testCase{
		{"api.example.org", 443, "93.184.216.34", true},
		{"api.example.org", 443, "2606:2800:220:1::1", true},
		// Exactly named by the operator: loopback and private addresses.
		{"svc.internal", 8080, "127.0.0.1", true},
		{"svc.internal", 8080, "10.1.2.3", true},
		{"svc.internal", 8080, "::1", true},
		{"svc.internal", 8080, "fd12::1", true},
		{"svc.internal", 8080, "::ffff:192.168.1.1", true},
		// ... never link-local, metadata, "this network", CGNAT, NAT64.
		{"svc.internal", 8080, "169.254.169.254", false},
		{"svc.internal", 8080, "fe80::1", false},
		{"svc.internal", 8080, "0.0.0.0", false},
		{"svc.internal", 8080, "100.64.0.1", false},
		{"svc.internal", 8080, "64:ff9b::a01:203", false},
		{"svc.internal", 8080, "::127.0.0.1", false},
		// Named by a wildcard only: no special address.
		{"a.corp.example", 443, "10.1.2.3", false},
		{"a.corp.example", 443, "127.0.0.1", false},
		{"anything.org", 443, "192.168.0.1", false},
		// The named host on another port is not named.
		{"svc.internal", 8081, "10.1.2.3", false},
		// An IP literal of the operator's, whatever its range and name.
		{"169.254.169.254", 80, "169.254.169.254", true},
		{"meta.corp.example", 80, "169.254.169.254", true},
		{"169.254.169.254", 81, "169.254.169.254", false},
		{"fd00::5", 443, "fd00::5", true},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, n.permitted(tc.host, tc.port, netip.MustParseAddr(tc.addr)), "%s:%d at %s", tc.host, tc.port, tc.addr)
	}
}

// TestSpecOfNetwork: the policy is part of the pool key, canonically, and
// a job with one runs fresh.
func TestSpecOfNetwork(t *testing.T) {
	t.Parallel()
	plain := jobs.Job{Lang: "python", Code: "-", Isolation: jobs.IsolationReuse}
	a, b := plain, plain
	a.Network = &jobs.NetworkPolicy{Allow: []string{"b.example.com:443", "a.example.com:443"}}
	b.Network = &jobs.NetworkPolicy{Allow: []string{"A.example.com:443", "b.example.com:443"}}
	sp, sa, sb := SpecOf(plain, "", ""), SpecOf(a, "", ""), SpecOf(b, "", "")
	require.NotEqual(t, sp, sa)
	require.Equal(t, sa, sb, "two spellings of one policy share a key")
	require.Equal(t, "a.example.com:443,b.example.com:443", sa.Network)
	require.Equal(t, sandbox.ModeFresh, sa.Mode)
	require.Equal(t, sandbox.ModeReuse, sp.Mode)
}

// Connections that arrive while the run ends are either served and
// waited for, or closed unserved: never counted after finish returned
// (the race detector checks the wait group's use).
func TestNetworkFinishBesideNewConnections(t *testing.T) {
	t.Parallel()
	b := setupNetwork(t)
	lp := "localhost:" + b.port
	for round := range 20 {
		r := b.n.forJob(jobs.Job{ID: fmt.Sprintf("job-race-%d", round), Network: &jobs.NetworkPolicy{Allow: []string{lp}}})
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			client, server := net.Pipe()
			wg.Add(2)
			go func() { defer wg.Done(); <-start; r.Serve(context.Background(), server) }()
			go func() {
				defer wg.Done()
				defer client.Close()
				<-start
				_, _ = io.WriteString(client, "not a request\r\n\r\n")
				_, _ = io.Copy(io.Discard, client)
			}()
		}
		close(start)
		uses := r.finish()
		wg.Wait()
		after := r.finish()
		require.Equal(t, uses, after, "a connection was counted after finish returned")
	}
}
