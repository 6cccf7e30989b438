// Package netguard decides which addresses a connection sandq makes for a
// tenant may reach: a webhook's target, say. Loopback, private,
// link-local (cloud metadata), unspecified, multicast and other special
// ranges are refused after the name is resolved, at every connection (a
// name that resolves elsewhere later is caught then), unless the operator
// allows the host.
package netguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// AllowList is the operator's list of targets allowed despite their
// addresses: "host", "host:port", an IP or a CIDR.
type AllowList struct {
	hosts    map[string]bool // "host" or "host:port", lowercase
	prefixes []netip.Prefix
	// Flag names the operator's setting that allows more, for refusals.
	Flag string
}

// ParseAllowList reads entries; flag names the setting they come from.
func ParseAllowList(flag string, entries []string) AllowList {
	a := AllowList{hosts: map[string]bool{}, Flag: flag}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == "" {
			continue
		}
		if p, err := netip.ParsePrefix(e); err == nil {
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		a.hosts[e] = true
	}
	return a
}

// Special reports whether an address is one a webhook may not reach
// unless allowed: loopback, private, link-local, unspecified, multicast.
func Special(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		slices.ContainsFunc(specialPrefixes, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// specialPrefixes are the other ranges no webhook reaches: "this network"
// (0.0.0.0/8 reaches the host itself on Linux), carrier-grade NAT, IETF
// protocol assignments, benchmarking, reserved, and the IPv6 prefixes that
// embed an IPv4 address (NAT64, 6to4, the deprecated IPv4-compatible
// ::a.b.c.d and IPv4-translated ::ffff:0:a.b.c.d) or are deprecated
// site-local.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("fec0::/10"),
}

func (a AllowList) allowsIP(ip netip.Addr) bool {
	for _, p := range a.prefixes {
		if p.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}

// Resolve returns the address to dial for hostport: the first of its
// addresses that is not special, or is allowed; an error otherwise (which
// does not name the refused address).
func (a AllowList) Resolve(ctx context.Context, hostport string) (netip.Addr, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.Addr{}, err
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	byName := a.hosts[host] || a.hosts[net.JoinHostPort(host, port)]
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return netip.Addr{}, fmt.Errorf("cannot resolve %s: %v", host, err)
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s has no address", host)
	}
	for _, ip := range addrs {
		if !Special(ip) || byName || a.allowsIP(ip) {
			return ip.Unmap(), nil
		}
	}
	// The refused address is not named: a caller must not learn what a
	// name resolves to inside the operator's network.
	return netip.Addr{}, fmt.Errorf("%s resolves to a loopback, private or link-local address; the operator may allow it (%s)", host, a.Flag)
}
