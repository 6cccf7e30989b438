package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// Egress is the only way out of an install container, which has no
// network: the agent relays the connections the installer makes to
// sandbox.EgressProxy, and Egress serves each as an HTTP proxy (CONNECT for
// https, absolute-form requests for http) that reaches only the allowed
// hosts: the configured mirrors, on their ports, and the hosts the public
// registries send downloads to (an allowed host that cannot be reached is
// answered 502). Everything else is refused with 403: cloud
// metadata, the host's own addresses and ports (a Redis or MinIO on the
// bridge), private ranges, the rest of the internet. Link-local addresses
// (169.254.0.0/16, fe80::/10) are refused even for an allowed host name,
// unless the mirror is configured at that address.
type Egress struct {
	allowed map[string]bool // "host:port", host lowercase
	literal map[netip.Addr]bool
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	log     zerolog.Logger
}

var _ sandbox.EgressHandler = (*Egress)(nil).Serve

// companions are the hosts public registries send downloads to, allowed
// along with the registry.
var companions = map[string][]string{
	"pypi.org:443":     {"files.pythonhosted.org:443"},
	"rubygems.org:443": {"index.rubygems.org:443", "rubygems.global.ssl.fastly.net:443"},
}

// NewEgress allows the hosts of m's mirrors (on their URLs' ports, 443 or
// 80 by default), their companions, and extra ("host:port" each).
func NewEgress(m langs.Mirrors, extra []string, log zerolog.Logger) (*Egress, error) {
	m = m.WithDefaults()
	e := &Egress{allowed: map[string]bool{}, literal: map[netip.Addr]bool{}, log: log,
		dial: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
	add := func(hp string) {
		hp = strings.ToLower(hp)
		e.allowed[hp] = true
		for _, c := range companions[hp] {
			e.allowed[c] = true
		}
		if h, _, err := net.SplitHostPort(hp); err == nil {
			if ip, err := netip.ParseAddr(h); err == nil {
				e.literal[ip.Unmap()] = true
			}
		}
	}
	for _, raw := range []string{m.PipIndexURL, m.NpmRegistry, m.GoProxy, m.CRAN, m.RubyGems, m.Maven} {
		for r := range strings.SplitSeq(raw, ",") { // GOPROXY may list several
			if r == "" || r == "direct" || r == "off" {
				continue
			}
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("worker: egress: mirror %q: not a URL", r)
			}
			port := u.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
			}
			add(net.JoinHostPort(u.Hostname(), port))
		}
	}
	if db := m.GoSumDB; db != "" && db != "off" {
		// "sum.golang.org", or "name+key url": the database's host.
		f := strings.Fields(db)
		host := strings.SplitN(f[0], "+", 2)[0]
		if len(f) > 1 {
			if u, err := url.Parse(f[1]); err == nil && u.Host != "" {
				host = u.Host
			}
		}
		if !strings.Contains(host, ":") {
			host += ":443"
		}
		add(host)
	}
	for _, hp := range extra {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return nil, fmt.Errorf("worker: egress: allowed host %q: want host:port", hp)
		}
		add(hp)
	}
	return e, nil
}

// Allowed lists the allowed host:port pairs, sorted.
func (e *Egress) Allowed() []string {
	out := make([]string, 0, len(e.allowed))
	for hp := range e.allowed {
		out = append(out, hp)
	}
	slices.Sort(out)
	return out
}

// Serve is the sandbox.EgressHandler: one proxied connection.
func (e *Egress) Serve(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	target, plain, err := proxyTarget(req)
	if err == nil {
		err = e.check(target)
	}
	if err != nil {
		e.log.Info().Str("target", req.Host).Err(err).Msg("install egress refused")
		reply(conn, http.StatusForbidden, err)
		return
	}
	up, err := e.dialChecked(ctx, target)
	if err != nil {
		e.log.Info().Str("target", target).Err(err).Msg("install egress failed")
		reply(conn, http.StatusBadGateway, err)
		return
	}
	defer up.Close()
	forward(conn, br, req, plain, up)
}

// forward serves an allowed proxy request over up, the destination's
// connection: a plain http request is sent as the only one of the
// connection (the destination is asked to close after it, and nothing
// more the client sends is relayed; the Host header is the URL's, since
// another would reach another site at the same address); a CONNECT is
// answered and tunnelled both ways.
func forward(conn net.Conn, br *bufio.Reader, req *http.Request, plain bool, up net.Conn) {
	if plain {
		req.RequestURI = ""
		req.Host = req.URL.Host
		req.URL.User = nil
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		req.Close = true
		if err := req.Write(up); err != nil {
			return
		}
		_, _ = io.Copy(conn, up)
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	relay(conn, br, up)
}

// proxyTarget is the "host:port" a proxy request asks for, and whether it
// is a plain http request (else a CONNECT tunnel).
func proxyTarget(req *http.Request) (string, bool, error) {
	if req.Method == http.MethodConnect {
		if _, _, err := net.SplitHostPort(req.Host); err != nil {
			return "", false, fmt.Errorf("CONNECT %q: want host:port", req.Host)
		}
		return strings.ToLower(req.Host), false, nil
	}
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
		return "", false, fmt.Errorf("%s %s: a proxy takes CONNECT or absolute http URLs", req.Method, req.RequestURI)
	}
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	return strings.ToLower(net.JoinHostPort(req.URL.Hostname(), port)), true, nil
}

func (e *Egress) check(target string) error {
	if !e.allowed[target] {
		return fmt.Errorf("%s is not an allowed mirror (the worker's mirror flags and --install-allow-hosts)", target)
	}
	return nil
}

// dialChecked resolves target and dials its first address that is not
// link-local (unless a mirror is configured at that very address).
func (e *Egress) dialChecked(ctx context.Context, target string) (net.Conn, error) {
	host, port, _ := net.SplitHostPort(target)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	var errs []error
	for _, a := range addrs {
		a = a.Unmap()
		if (a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast()) && !e.literal[a] {
			errs = append(errs, fmt.Errorf("%s resolves to %s, a link-local or special address", host, a))
			continue
		}
		c, err := e.dial(ctx, "tcp", net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", host)
	}
	return nil, errors.Join(errs...)
}

// reply answers a proxy request that goes no further: 403 for a target
// that is not allowed, 502 for an allowed one that cannot be reached.
func reply(conn net.Conn, code int, err error) {
	body := "sandq: " + err.Error() + "\n"
	fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// relay copies both ways until either side ends.
func relay(client net.Conn, clientBuf *bufio.Reader, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, clientBuf)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(client, up)
	client.Close()
	wg.Wait()
}
