package jobs_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

func TestParseDestination(t *testing.T) {
	t.Parallel()
	type testCase struct {
		in       string
		operator bool
		want     string // the canonical entry; "" when refused
		err      string // part of the refusal
	}
	long := strings.Repeat("a", 63)
	cases := []testCase{
		{in: "api.example.com:443", want: "api.example.com:443"},
		{in: "API.Example.COM:443", want: "api.example.com:443"},
		{in: "*.example.com:443", want: "*.example.com:443"},
		{in: "localhost:8080", want: "localhost:8080"},
		{in: "10.0.0.1:80", want: "10.0.0.1:80"},
		{in: "[2001:DB8::1]:443", want: "[2001:db8::1]:443"},
		{in: "a-b.c1.example:1", want: "a-b.c1.example:1"},
		{in: "*:443", operator: true, want: "*:443"},
		{in: long + "." + long + ".com:65535", want: long + "." + long + ".com:65535"},

		{in: "*:443", err: `"*" allows every host`},
		{in: "*.com:443", err: "at least two labels"},
		{in: "a.*.example.com:443", err: "character '*'"},
		{in: "**.example.com:443", err: "character '*'"},
		{in: "example.com", err: "not host:port"},
		{in: "example.com:", err: "port"},
		{in: "example.com:0", err: "port"},
		{in: "example.com:65536", err: "port"},
		{in: "example.com:+443", err: "port"},
		{in: "example.com:0443", err: "port"},
		{in: "example.com:*", err: "port"},
		{in: "example.com.:443", err: "empty label"},
		{in: "a..b:443", err: "empty label"},
		{in: "-a.com:443", err: "starts or ends with '-'"},
		{in: "a_b.com:443", err: "character '_'"},
		{in: "user@example.com:443", err: "character '@'"},
		{in: "ex%61mple.com:443", err: "character '%'"},
		{in: "127.1:80", err: "neither an IP address nor a DNS name"},
		{in: "0x7f.1:80", err: "neither an IP address nor a DNS name"},
		{in: "2130706433:80", err: "neither an IP address nor a DNS name"},
		{in: "127.000.000.001:80", err: "neither an IP address nor a DNS name"},
		{in: "[::ffff:127.0.0.1]:80", err: "IPv4-mapped"},
		{in: "[fe80::1%eth0]:80", err: "zone"},
		{in: "[10.0.0.1]:80", err: "IPv6 address in brackets"},
		{in: "[example.com]:80", err: "only an IPv6 address goes in brackets"},
		{in: "::1:80", err: "not host:port"},
		{in: strings.Repeat("a", 63) + "a.com:443", err: "the cap is 63"},
		{in: strings.Repeat("a.", 127) + "com:443", err: "the cap is 259"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%t", tc.in, tc.operator), func(t *testing.T) {
			t.Parallel()
			d, err := jobs.ParseDestination(tc.in, tc.operator)
			if tc.want == "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, d.String())
		})
	}
}

func TestDestinationMatches(t *testing.T) {
	t.Parallel()
	type testCase struct {
		entry, host string
		port        int
		want        bool
	}
	cases := []testCase{
		{"api.example.com:443", "api.example.com", 443, true},
		{"api.example.com:443", "api.example.com", 80, false},
		{"api.example.com:443", "example.com", 443, false},
		{"api.example.com:443", "x.api.example.com", 443, false},
		{"*.example.com:443", "api.example.com", 443, true},
		{"*.example.com:443", "a.b.example.com", 443, true},
		{"*.example.com:443", "example.com", 443, false},
		{"*.example.com:443", "badexample.com", 443, false},
		{"*.example.com:443", "*.example.com", 443, false},
		{"*:443", "anything.org", 443, true},
		{"*:443", "93.184.216.34", 443, false},
		{"*:443", "::1", 443, false},
		{"10.0.0.1:80", "10.0.0.1", 80, true},
		{"10.0.0.1:80", "10.0.0.2", 80, false},
		{"[2001:db8::1]:443", "2001:db8::1", 443, true},
	}
	for _, tc := range cases {
		d, err := jobs.ParseDestination(tc.entry, true)
		require.NoError(t, err)
		require.Equal(t, tc.want, d.Matches(tc.host, tc.port), "%s matches %s:%d", tc.entry, tc.host, tc.port)
	}
}

func TestDestinationCovers(t *testing.T) {
	t.Parallel()
	type testCase struct {
		op, job string
		want    bool
	}
	cases := []testCase{
		{"api.example.com:443", "api.example.com:443", true},
		{"api.example.com:443", "api.example.com:80", false},
		{"api.example.com:443", "*.api.example.com:443", false},
		{"*.example.com:443", "api.example.com:443", true},
		{"*.example.com:443", "*.example.com:443", true},
		{"*.example.com:443", "*.a.example.com:443", true},
		{"*.example.com:443", "*.ample.com:443", false},
		{"*.example.com:443", "example.com:443", false},
		{"*:443", "example.com:443", true},
		{"*:443", "*.example.com:443", true},
		{"*:443", "10.0.0.1:443", false},
		{"*:443", "example.com:80", false},
		{"10.0.0.1:443", "10.0.0.1:443", true},
	}
	for _, tc := range cases {
		op, err := jobs.ParseDestination(tc.op, true)
		require.NoError(t, err)
		job, err := jobs.ParseDestination(tc.job, false)
		require.NoError(t, err)
		require.Equal(t, tc.want, op.Covers(job), "%s covers %s", tc.op, tc.job)
	}
}

func TestValidateNetwork(t *testing.T) {
	t.Parallel()
	op := []string{"api.example.com:443", "*.files.example.com:443", "localhost:8080", "10.0.0.1:80"}
	type testCase struct {
		name   string
		policy jobs.Policy
		job    func(j *jobs.Job)
		want   string // full error text; "" means valid
	}
	cases := []testCase{
		{name: "Exact", job: func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{Allow: []string{"api.example.com:443"}} }},
		{name: "WithinWildcard", job: func(j *jobs.Job) {
			j.Network = &jobs.NetworkPolicy{Allow: []string{"a.files.example.com:443", "*.b.files.example.com:443", "LOCALHOST:8080", "10.0.0.1:80"}}
		}},
		{name: "NotAllowed", job: func(j *jobs.Job) {
			j.Network = &jobs.NetworkPolicy{Allow: []string{"api.example.com:443", "example.org:443"}}
		},
			want: "jobs: invalid job: network.allow[1]: example.org:443 is not among the destinations the operator allows (--run-allow-hosts)"},
		{name: "OtherPort", job: func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{Allow: []string{"localhost:8081"}} },
			want: "jobs: invalid job: network.allow[0]: localhost:8081 is not among the destinations the operator allows (--run-allow-hosts)"},
		{name: "IPOfAllowedName", job: func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{Allow: []string{"127.0.0.1:8080"}} },
			want: "jobs: invalid job: network.allow[0]: 127.0.0.1:8080 is not among the destinations the operator allows (--run-allow-hosts)"},
		{name: "WiderWildcard", job: func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{Allow: []string{"*.example.com:443"}} },
			want: "jobs: invalid job: network.allow[0]: *.example.com:443 is not among the destinations the operator allows (--run-allow-hosts)"},
		{name: "Malformed", job: func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{Allow: []string{"api.example.com"}} },
			want: `jobs: invalid job: network.allow[0]: "api.example.com" is not host:port`},
		{name: "Empty", job: func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{} },
			want: "jobs: invalid job: network.allow: is empty; leave network out for a run without network"},
		{name: "TooMany", policy: jobs.Policy{MaxNetworkAllow: 2}, job: func(j *jobs.Job) {
			j.Network = &jobs.NetworkPolicy{Allow: []string{"api.example.com:443", "api.example.com:443", "api.example.com:443"}}
		}, want: "jobs: invalid job: network.allow: has 3 entries; the cap is 2"},
		{name: "OperatorAllowsNone", policy: jobs.Policy{NetworkAllow: []string{}},
			job:  func(j *jobs.Job) { j.Network = &jobs.NetworkPolicy{Allow: []string{"api.example.com:443"}} },
			want: "jobs: invalid job: network: this deployment allows no network (the operator's --run-allow-hosts is empty)"},
		{name: "Judged", job: func(j *jobs.Job) {
			j.Network = &jobs.NetworkPolicy{Allow: []string{"api.example.com:443"}}
			j.Tests = []jobs.TestCase{{Stdin: "1", ExpectedStdout: "1"}}
		}, want: "jobs: invalid job: network: a judged job (tests) runs without network"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := tc.policy
			if p.NetworkAllow == nil {
				p.NetworkAllow = op
			}
			p = langs.Policy(p)
			j := validJob()
			tc.job(&j)
			err := p.Validate(&j)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestNetworkNormalized(t *testing.T) {
	t.Parallel()
	p := langs.Policy(jobs.Policy{NetworkAllow: []string{"*:443"}})
	j := validJob()
	j.Network = &jobs.NetworkPolicy{Allow: []string{"B.example.com:443", "a.example.com:443", "b.example.com:443"}}
	require.NoError(t, p.Validate(&j))
	p.Normalize(&j)
	if d := cmp.Diff(&jobs.NetworkPolicy{Allow: []string{"a.example.com:443", "b.example.com:443"}}, j.Network); d != "" {
		t.Fatalf("normalized policy (-want +got):\n%s", d)
	}
	require.Equal(t, "a.example.com:443,b.example.com:443", j.Network.Key())
	require.Equal(t, "", (*jobs.NetworkPolicy)(nil).Key())
}

func TestSessionNetworkRefused(t *testing.T) {
	t.Parallel()
	p := langs.Policy(jobs.Policy{NetworkAllow: []string{"*:443"}})
	s := jobs.SessionSpec{Lang: "python", Network: &jobs.NetworkPolicy{Allow: []string{"a.example.com:443"}}}
	require.EqualError(t, p.ValidateSession(&s), "jobs: invalid job: network: sessions do not support network policies yet; run a job with network instead")
}

func TestPolicyCheckNetworkAllow(t *testing.T) {
	t.Parallel()
	p := langs.Policy(jobs.Policy{NetworkAllow: []string{"example.com"}}).WithDefaults()
	require.EqualError(t, p.Check(), `jobs: policy: NetworkAllow: "example.com" is not host:port`)
}
