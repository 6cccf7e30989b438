package jobs

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Network policies (Job.Network): a run reaches the destinations its
// policy lists, and nothing else, through the worker's egress proxy. The
// operator's Policy.NetworkAllow (a worker's and an API's
// --run-allow-hosts) bounds what a policy may list.

// Bounds of network policies.
const (
	// DefaultMaxNetworkAllow is Policy.MaxNetworkAllow's default.
	DefaultMaxNetworkAllow = 32
	// maxDestinationBytes caps one "host:port" entry: a DNS name's 253
	// bytes, a port and the separator.
	maxDestinationBytes = 253 + 1 + 5
)

// MaxNetworkEntries caps Result.Network: a run that asks for more
// destinations has the rest logged by the worker, not listed.
const MaxNetworkEntries = 64

// NetworkUse is what a run's connections to one destination did, as the
// egress proxy saw them (Result.Network).
type NetworkUse struct {
	// Host and Port are the destination as the run asked for it (a
	// CONNECT's authority, or an http URL's host and port), host in
	// lowercase; empty and 0 for a request that was not a proxy request.
	// The address a name resolved to is not reported.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Connections counts the run's connections to it with this outcome.
	Connections int `json:"connections"`
	// BytesOut are the bytes sent to the destination (an http request's
	// head and body, or a tunnel's data); BytesIn the bytes received from
	// it. Both 0 when refused.
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	// Refused marks the connections the proxy refused: a destination the
	// policy does not list, a name that resolves to an address the run may
	// not reach, a request that is not a proxy request. A destination's
	// refused connections and its others are two entries.
	Refused bool `json:"refused,omitempty"`
	// Failed counts the connections to an allowed destination that could
	// not be made (a name that does not resolve, an address that does not
	// answer).
	Failed int `json:"failed,omitempty"`
	// Reason says why the last refused or failed connection was.
	Reason string `json:"reason,omitempty"`
}

// Destination is one entry of an allow list, "host:port": Host is a DNS
// name in lowercase ("api.example.com"), a wildcard of a name's
// subdomains ("*.example.com": any name ending in ".example.com", not
// "example.com" itself), an IP address literal (IPv6 written in brackets
// in the entry, without them in Host), or, in the operator's list only,
// "*": any DNS name (never an IP literal). Port is 1-65535; there is no
// port wildcard.
type Destination struct {
	Host string
	Port int
}

// String is the entry as written canonically: "host:port", an IPv6
// address in brackets.
func (d Destination) String() string {
	return net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
}

// IsIP reports whether d names an IP address literal.
func (d Destination) IsIP() bool {
	_, err := netip.ParseAddr(d.Host)
	return err == nil
}

// IsWildcard reports whether d names several hosts ("*.example.com" or
// "*").
func (d Destination) IsWildcard() bool { return strings.HasPrefix(d.Host, "*") }

// Matches reports whether the concrete destination host:port (a name in
// lowercase or an IP literal as [ParseDestination] leaves it) is one d
// allows. A wildcard matches names only, never an IP literal.
func (d Destination) Matches(host string, port int) bool {
	if port != d.Port || host == "" || strings.HasPrefix(host, "*") {
		return false
	}
	_, err := netip.ParseAddr(host)
	isIP := err == nil
	switch {
	case d.Host == "*":
		return !isIP
	case strings.HasPrefix(d.Host, "*."):
		return !isIP && strings.HasSuffix(host, d.Host[1:])
	}
	return host == d.Host
}

// Covers reports whether every destination e allows, d allows too: the
// check of a job's entry e against an operator's entry d.
func (d Destination) Covers(e Destination) bool {
	if e.Port != d.Port {
		return false
	}
	switch {
	case !e.IsWildcard():
		return d.Matches(e.Host, e.Port)
	case e.Host == "*":
		return d.Host == "*"
	case d.Host == "*":
		return true
	case strings.HasPrefix(d.Host, "*."):
		// *.a.example.com is within *.example.com, as is *.example.com.
		return e.Host == d.Host || strings.HasSuffix(e.Host, d.Host[1:])
	}
	return false
}

// ParseDestination parses one allow-list entry, "host:port" (see
// [Destination]); operator lets the host be "*" (the operator's lists). It
// is strict: a trailing dot, an IPv6 zone, an IPv4-mapped IPv6 address,
// a port with a sign or a leading zero, a name with characters outside
// [A-Za-z0-9-] or an all-numeric last label (such as "127.1", which some
// resolvers read as an address) are refused.
func ParseDestination(s string, operator bool) (Destination, error) {
	if len(s) > maxDestinationBytes {
		return Destination{}, fmt.Errorf("is %d bytes; the cap is %d", len(s), maxDestinationBytes)
	}
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return Destination{}, fmt.Errorf("%q is not host:port", s)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portStr {
		return Destination{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, portStr)
	}
	bracketed := strings.HasPrefix(s, "[")
	if ip, err := netip.ParseAddr(host); err == nil {
		switch {
		case ip.Zone() != "":
			return Destination{}, fmt.Errorf("%q: an IPv6 zone is not accepted", s)
		case ip.Is4In6():
			return Destination{}, fmt.Errorf("%q: write an IPv4-mapped address as IPv4 (%s)", s, ip.Unmap())
		case ip.Is6() != bracketed:
			return Destination{}, fmt.Errorf("%q: write an IPv6 address in brackets, [addr]:port", s)
		}
		return Destination{Host: ip.String(), Port: port}, nil
	}
	if bracketed {
		return Destination{}, fmt.Errorf("%q: only an IPv6 address goes in brackets", s)
	}
	host = strings.ToLower(host)
	name := host
	switch {
	case host == "*":
		if !operator {
			return Destination{}, fmt.Errorf("%q: \"*\" allows every host; name the hosts (a wildcard such as *.example.com allows a domain's subdomains)", s)
		}
		return Destination{Host: host, Port: port}, nil
	case strings.HasPrefix(host, "*."):
		name = host[2:]
		if !strings.Contains(name, ".") {
			return Destination{}, fmt.Errorf("%q: a wildcard needs a domain of at least two labels (*.example.com)", s)
		}
	}
	if msg := checkDNSName(name); msg != "" {
		return Destination{}, fmt.Errorf("%q: %s", s, msg)
	}
	return Destination{Host: host, Port: port}, nil
}

// checkDNSName checks a DNS name in lowercase: labels of 1-63 bytes of
// [a-z0-9-], not starting or ending with '-', 253 bytes at most, no
// trailing dot, the last label not all digits.
func checkDNSName(name string) string {
	if name == "" {
		return "the host is empty"
	}
	if len(name) > 253 {
		return fmt.Sprintf("the host is %d bytes; a DNS name has at most 253", len(name))
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return "the host has an empty label (a trailing dot, or \"..\")"
		case len(l) > 63:
			return fmt.Sprintf("the label %q is %d bytes; the cap is 63", l, len(l))
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("the label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Sprintf("the host has character %q; a name has A-Z a-z 0-9 - and dots, '*.' starts a wildcard", c)
			}
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return "the host is neither an IP address nor a DNS name (its last label is all digits)"
	}
	return ""
}

// ParseAllowList parses an operator's list of destinations
// (Policy.NetworkAllow, --run-allow-hosts), "*" hosts allowed.
func ParseAllowList(entries []string) ([]Destination, error) {
	out := make([]Destination, 0, len(entries))
	for _, e := range entries {
		d, err := ParseDestination(strings.TrimSpace(e), true)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Destinations parses the policy's entries, which [Policy.Validate] has
// checked (an entry that does not parse is left out).
func (n *NetworkPolicy) Destinations() []Destination {
	if n == nil {
		return nil
	}
	out := make([]Destination, 0, len(n.Allow))
	for _, e := range n.Allow {
		if d, err := ParseDestination(e, false); err == nil {
			out = append(out, d)
		}
	}
	return out
}

// Key is the policy in one canonical string: its entries parsed, sorted,
// without duplicates, comma-separated; "" for no policy. Two policies
// that allow the same entries have the same Key (the worker's pool key).
func (n *NetworkPolicy) Key() string {
	if n == nil {
		return ""
	}
	var out []string
	for _, d := range n.Destinations() {
		out = append(out, d.String())
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}

// normalizeNetwork rewrites a valid policy's entries canonically
// (lowercase, sorted, duplicates dropped).
func normalizeNetwork(n *NetworkPolicy) *NetworkPolicy {
	if n == nil {
		return nil
	}
	k := n.Key()
	if k == "" {
		return n // not valid: left for Validate to refuse
	}
	return &NetworkPolicy{Allow: strings.Split(k, ",")}
}

// validateNetwork checks Job.Network: each entry a [Destination] within
// the operator's NetworkAllow, at most MaxNetworkAllow of them.
func (p Policy) validateNetwork(n *NetworkPolicy) error {
	if n == nil {
		return nil
	}
	if len(n.Allow) == 0 {
		return invalid("network.allow", "is empty; leave network out for a run without network")
	}
	if len(n.Allow) > p.MaxNetworkAllow {
		return invalid("network.allow", "has %d entries; the cap is %d", len(n.Allow), p.MaxNetworkAllow)
	}
	ops, err := ParseAllowList(p.NetworkAllow)
	if err != nil { // Check refuses such a policy; a second line of defence
		return invalid("network", "the operator's allow list is invalid: %v", err)
	}
	if len(ops) == 0 {
		return invalid("network", "this deployment allows no network (the operator's --run-allow-hosts is empty)")
	}
	for i, e := range n.Allow {
		field := fmt.Sprintf("network.allow[%d]", i)
		d, err := ParseDestination(e, false)
		if err != nil {
			return invalid(field, "%v", err)
		}
		if !slices.ContainsFunc(ops, func(o Destination) bool { return o.Covers(d) }) {
			return invalid(field, "%s is not among the destinations the operator allows (--run-allow-hosts)", d)
		}
	}
	return nil
}

// validateSessionNetwork checks SessionSpec.Network. A session's
// interpreter lives across many requests to the agent, whose egress
// relay lasts one run: until it lasts a session, a session asking for a
// network is refused rather than run without it.
func (p Policy) validateSessionNetwork(n *NetworkPolicy) error {
	if n == nil {
		return nil
	}
	return invalid("network", "sessions do not support network policies yet; run a job with network instead")
}
