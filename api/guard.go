package api

import (
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"golang.org/x/time/rate"
)

// Guards in front of the service, per request, before Redis is asked
// anything.

// failedAuthRate and failedAuthBurst bound the failed authentications one
// client address may make: a caller guessing keys (or sending a stale
// one in a loop) costs Redis nothing once its address is over them.
const (
	failedAuthRate  = rate.Limit(5)
	failedAuthBurst = 20
	// authLimiterIdle is how long an address's limiter outlives its last
	// failure; authLimiterMax caps the addresses remembered.
	authLimiterIdle = time.Minute
	authLimiterMax  = 100_000
	// goodKeyTTL is how long a key that authenticated vouches for itself
	// at a throttled address: it is looked up (and refused at once if
	// revoked), not refused for others' failures there.
	goodKeyTTL = 10 * time.Minute
)

// authLimiter remembers the failed authentications of client addresses.
// Addresses are shared (a NAT, a proxy), so a key that has authenticated
// recently is not refused for another client's failures at its address.
type authLimiter struct {
	mu    sync.Mutex
	addrs map[string]*addrLimiter
	swept time.Time
	good  map[[sha256.Size]byte]time.Time // keys that authenticated: when, last
}

type addrLimiter struct {
	lim  *rate.Limiter
	last time.Time
}

func newAuthLimiter() *authLimiter {
	return &authLimiter{addrs: map[string]*addrLimiter{}, good: map[[sha256.Size]byte]time.Time{}}
}

// blocked reports whether addr has failed authentication too often and
// token has not authenticated within goodKeyTTL: it is refused before it
// is looked up.
func (a *authLimiter) blocked(addr, token string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.addrs[addr]
	if l == nil || l.lim.Tokens() >= 1 {
		return false
	}
	last, ok := a.good[sha256.Sum256([]byte(token))]
	return !ok || time.Since(last) > goodKeyTTL
}

// vouch records that token authenticated; forget that it did not.
func (a *authLimiter) vouch(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if len(a.good) >= authLimiterMax {
		for k, last := range a.good {
			if now.Sub(last) > goodKeyTTL {
				delete(a.good, k)
			}
		}
		if len(a.good) >= authLimiterMax {
			return
		}
	}
	a.good[sha256.Sum256([]byte(token))] = now
}

func (a *authLimiter) forget(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.good, sha256.Sum256([]byte(token)))
}

// failed counts a failed authentication of addr.
func (a *authLimiter) failed(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if now.Sub(a.swept) > authLimiterIdle || len(a.addrs) >= authLimiterMax {
		for k, l := range a.addrs {
			if now.Sub(l.last) > authLimiterIdle {
				delete(a.addrs, k)
			}
		}
		a.swept = now
	}
	l := a.addrs[addr]
	if l == nil {
		if len(a.addrs) >= authLimiterMax {
			return
		}
		l = &addrLimiter{lim: rate.NewLimiter(failedAuthRate, failedAuthBurst)}
		a.addrs[addr] = l
	}
	l.last = now
	l.lim.Allow()
}

// clientAddr is the request's client address (its IP).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// formFromPage reports whether r is a body a browser would send from a
// form or a fetch without preflight (form-encoded, multipart, text/plain)
// on behalf of a web page: such a request could come from any page the
// user visits (cross-site request forgery), and the API takes none.
// Programs such as curl send no Origin; their untyped bodies are read as
// JSON.
func formFromPage(r *http.Request) bool {
	ct := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Type")))
	simple := ct == "" || strings.HasPrefix(ct, "application/x-www-form-urlencoded") ||
		strings.HasPrefix(ct, "multipart/form-data") || strings.HasPrefix(ct, "text/plain")
	if !simple {
		return false
	}
	site := r.Header.Get("Sec-Fetch-Site")
	return r.Header.Get("Origin") != "" || (site != "" && site != "none" && site != "same-origin")
}

// writeBody writes r to the response in chunks, each with a write deadline
// of Config.WriteStall: a client that stops reading is cut off, and its
// download's slot and memory go back.
func (s *Server) writeBody(hctx huma.Context, r io.Reader) error {
	w := hctx.BodyWriter()
	rc := http.NewResponseController(w.(http.ResponseWriter))
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteStall))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return rc.Flush()
		}
		if err != nil {
			return err
		}
	}
}
