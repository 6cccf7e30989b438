package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sandq/sandq/client"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/sandq/sandq/jobs"
)

// Webhooks. A job enqueued with callback_url gets its final Result POSTed
// there when it ends: body the job's view (as GET /v1/jobs/{id} returns
// it), headers Sandq-Event: job.finished, Sandq-Delivery (the job's ID and
// the attempt), and Sandq-Signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256(secret, "<t>.<body>")>, secret the key's webhook secret.
// A 2xx answer is a delivery; anything else is retried with exponential
// backoff (1 s, 2 s, 4 s, ... at most 5 min apart) up to MaxAttempts, and
// the outcome is recorded on the job (JobView.Webhook).
//
// Targets that are loopback, link-local (cloud metadata), private,
// unspecified or multicast are refused, at enqueue and again at every
// connection (a name that resolves elsewhere later is caught then),
// unless the operator allows the host (WebhookConfig.AllowHosts).
// Redirects are not followed.
//
// Deliveries are shared by every API process through Redis: the sorted
// set "<prefix>:webhooks" holds each pending job with the time of its next
// attempt; a process claims an attempt with a Lua script that moves it a
// lease into the future, so exactly one process delivers it, and one that
// dies mid-attempt leaves it to another when the lease ends. Every process
// looks for due attempts each second, and at once for a job whose end its
// subscription hears of.

// WebhookConfig configures webhook deliveries.
type WebhookConfig struct {
	// AllowHosts are targets allowed even though they are loopback,
	// private or link-local: "host", "host:port", an IP or a CIDR.
	AllowHosts []string
	// Timeout bounds one delivery attempt. Default 10 s.
	Timeout time.Duration
	// MaxAttempts caps the attempts of one delivery. Default 8.
	MaxAttempts int
	// TTL is how long delivery records are kept. Default 7 days.
	TTL time.Duration
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	c.Timeout = cmp.Or(c.Timeout, 10*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 8)
	c.TTL = cmp.Or(c.TTL, 7*24*time.Hour)
	return c
}

// WebhookStatus is the delivery of a job's webhook.
type WebhookStatus struct {
	URL            string    `json:"url"`
	State          string    `json:"state" enum:"pending,delivered,failed" doc:"pending until delivered or out of attempts"`
	Attempts       int       `json:"attempts"`
	LastStatusCode int       `json:"last_status_code,omitempty"`
	LastError      string    `json:"last_error,omitempty"`
	DeliveredAt    time.Time `json:"delivered_at,omitzero"`
}

// hookRequest is what enqueue records for a webhook.
type hookRequest struct {
	URL     string `json:"url"`
	KeyID   string `json:"key_id"`
	KeyHash string `json:"key_hash"`
	Tenant  string `json:"tenant"`
}

// hookRecord is the stored webhook: the request, the secret it is signed
// with, and its delivery.
type hookRecord struct {
	hookRequest
	Secret string        `json:"secret"`
	Status WebhookStatus `json:"status"`
}

type webhooks struct {
	rdb    redis.UniversalClient
	client *client.Client
	prefix string
	cfg    WebhookConfig
	log    zerolog.Logger
	http   *http.Client
	allow  allowList
	pokes  chan string
}

func newWebhooks(rdb redis.UniversalClient, cl *client.Client, prefix string, cfg WebhookConfig, log zerolog.Logger) *webhooks {
	w := &webhooks{rdb: rdb, client: cl, prefix: prefix, cfg: cfg, log: log,
		allow: parseAllowList(cfg.AllowHosts), pokes: make(chan string, 1024)}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	w.http = &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy: nil, // a proxy would reach what the checks refuse
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ip, err := w.allow.resolve(ctx, addr)
				if err != nil {
					return nil, err
				}
				_, port, _ := net.SplitHostPort(addr)
				return dialer.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			},
			MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return w
}

func (w *webhooks) recordKey(id string) string { return w.prefix + ":webhook:" + id }
func (w *webhooks) pendingKey() string         { return w.prefix + ":webhooks" }
func (w *webhooks) openSecretKey() string      { return w.prefix + ":webhook-secret" }

// check refuses a callback URL the dispatcher would not deliver to.
func (w *webhooks) check(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("the scheme must be http or https")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("the URL has no host")
	case u.User != nil:
		return errors.New("credentials in the URL are refused")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = w.allow.resolve(ctx, u.Host+portSuffix(u))
	return err
}

func portSuffix(u *url.URL) string {
	if u.Port() != "" {
		return ""
	}
	if u.Scheme == "https" {
		return ":443"
	}
	return ":80"
}

// register records job id's webhook, pending, due once the job ends.
func (w *webhooks) register(ctx context.Context, id string, h hookRequest) error {
	secret, err := w.secret(ctx, h)
	if err != nil {
		return err
	}
	rec := hookRecord{hookRequest: h, Secret: secret, Status: WebhookStatus{URL: h.URL, State: "pending"}}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, w.recordKey(id), b, w.cfg.TTL)
		p.ZAdd(ctx, w.pendingKey(), redis.Z{Score: float64(time.Now().Add(10 * time.Second).UnixMilli()), Member: id})
		return nil
	})
	return err
}

// secret is the signing secret of h's key: the key's own, or without keys
// the namespace's (made on first use).
func (w *webhooks) secret(ctx context.Context, h hookRequest) (string, error) {
	if h.KeyHash != "" && h.KeyID != openKey.ID {
		b, err := w.rdb.Get(ctx, w.prefix+":apikey:"+h.KeyHash).Bytes()
		if err != nil {
			return "", err
		}
		var k Key
		if err := json.Unmarshal(b, &k); err != nil {
			return "", err
		}
		return k.WebhookSecret, nil
	}
	return OpenWebhookSecret(ctx, w.rdb, w.prefix)
}

// OpenWebhookSecret returns the secret that signs the webhooks of an API
// without keys, making it on first use.
func OpenWebhookSecret(ctx context.Context, rdb redis.UniversalClient, prefix string) (string, error) {
	key := prefix + ":webhook-secret"
	_ = rdb.SetNX(ctx, key, "whsec_"+randomString(32), 0).Err()
	return rdb.Get(ctx, key).Result()
}

// status returns job id's webhook delivery, or an error if it has none.
func (w *webhooks) status(ctx context.Context, id string) (*WebhookStatus, error) {
	b, err := w.rdb.Get(ctx, w.recordKey(id)).Bytes()
	if err != nil {
		return nil, err
	}
	var rec hookRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	return &rec.Status, nil
}

// poke asks for job id's delivery now (its end was just published); it
// never blocks.
func (w *webhooks) poke(id string) {
	select {
	case w.pokes <- id:
	default: // the scan each second catches up
	}
}

// run delivers until ctx ends.
func (w *webhooks) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-w.pokes:
			w.attempt(ctx, id, true)
		case <-t.C:
			ids, err := w.rdb.ZRangeByScore(ctx, w.pendingKey(), &redis.ZRangeBy{
				Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: 100}).Result()
			if err != nil {
				continue
			}
			for _, id := range ids {
				w.attempt(ctx, id, false)
			}
		}
	}
}

// claimScript moves a pending delivery a lease into the future if it is
// due (ARGV[2]: now, or "+inf" for a first attempt on a poke), so that one
// process makes the attempt.
var claimScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if ARGV[2] ~= '+inf' and tonumber(s) > tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
`)

// attempt makes one delivery attempt of job id's webhook if it is due.
func (w *webhooks) attempt(ctx context.Context, id string, poked bool) {
	rec, err := w.record(ctx, id)
	if err != nil {
		if errors.Is(err, redis.Nil) {
			_ = w.rdb.ZRem(ctx, w.pendingKey(), id).Err() // expired record
		}
		return
	}
	due := strconv.FormatInt(time.Now().UnixMilli(), 10)
	if poked && rec.Status.Attempts == 0 {
		due = "+inf"
	}
	lease := time.Now().Add(2 * w.cfg.Timeout).UnixMilli()
	if ok, err := claimScript.Run(ctx, w.rdb, []string{w.pendingKey()}, id, due, lease).Int(); err != nil || ok != 1 {
		return
	}
	r, err := w.client.Get(ctx, id)
	if err != nil || !r.Status.Final() {
		// Not over yet: look again in a while (its end pokes sooner).
		_ = w.rdb.ZAdd(ctx, w.pendingKey(), redis.Z{Score: float64(time.Now().Add(10 * time.Second).UnixMilli()), Member: id}).Err()
		return
	}
	code, derr := w.deliver(ctx, id, rec, r)
	rec.Status.Attempts++
	rec.Status.LastStatusCode = code
	rec.Status.LastError = ""
	if derr != nil {
		rec.Status.LastError = derr.Error()
	}
	switch {
	case derr == nil:
		rec.Status.State, rec.Status.DeliveredAt = "delivered", time.Now().UTC()
	case rec.Status.Attempts >= w.cfg.MaxAttempts:
		rec.Status.State = "failed"
	}
	b, _ := json.Marshal(rec)
	_, _ = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SetArgs(ctx, w.recordKey(id), b, redis.SetArgs{KeepTTL: true})
		if rec.Status.State == "pending" {
			backoff := min(time.Second<<(rec.Status.Attempts-1), 5*time.Minute)
			p.ZAdd(ctx, w.pendingKey(), redis.Z{Score: float64(time.Now().Add(backoff).UnixMilli()), Member: id})
		} else {
			p.ZRem(ctx, w.pendingKey(), id)
		}
		return nil
	})
	w.log.Info().Str("job_id", id).Str("url", rec.URL).Int("attempt", rec.Status.Attempts).Int("code", code).
		Err(derr).Str("state", rec.Status.State).Msg("webhook")
}

func (w *webhooks) record(ctx context.Context, id string) (hookRecord, error) {
	var rec hookRecord
	b, err := w.rdb.Get(ctx, w.recordKey(id)).Bytes()
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(b, &rec)
}

// deliver POSTs the job's view, signed, and returns the answer's status.
func (w *webhooks) deliver(ctx context.Context, id string, rec hookRecord, r jobs.Result) (int, error) {
	view := JobView{Result: r}
	view.ID = externalID(rec.Tenant, r.ID)
	for i := range view.Artifacts {
		view.Artifacts[i].URL = "/v1/jobs/" + url.PathEscape(view.ID) + "/artifacts/" + url.PathEscape(view.Artifacts[i].Name)
		view.Artifacts[i].Key = ""
	}
	body, err := json.Marshal(view)
	if err != nil {
		return 0, err
	}
	t := strconv.FormatInt(time.Now().Unix(), 10)
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rec.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandq-webhooks")
	req.Header.Set("Sandq-Event", "job.finished")
	req.Header.Set("Sandq-Delivery", fmt.Sprintf("%s.%d", view.ID, rec.Status.Attempts+1))
	req.Header.Set("Sandq-Signature", "t="+t+",v1="+Sign(rec.Secret, t, body))
	resp, err := w.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the target answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// Sign returns the hex HMAC-SHA256 of "<t>.<body>" with secret: the v1
// part of a Sandq-Signature header. Receivers compute it and compare, and
// check that t is recent.
func Sign(secret, t string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(t + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// allowList is the operator's list of targets allowed despite their
// addresses.
type allowList struct {
	hosts    map[string]bool // "host" or "host:port", lowercase
	prefixes []netip.Prefix
}

func parseAllowList(entries []string) allowList {
	a := allowList{hosts: map[string]bool{}}
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

// special reports whether an address is one a webhook may not reach
// unless allowed: loopback, private, link-local, unspecified, multicast.
func special(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() ||
		slices.ContainsFunc(specialPrefixes, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// specialPrefixes are the other ranges no webhook reaches: "this network"
// (0.0.0.0/8 reaches the host itself on Linux), carrier-grade NAT, IETF
// protocol assignments, benchmarking, reserved, and the IPv6 prefixes that
// embed an IPv4 address (NAT64, 6to4) or are deprecated site-local.
var specialPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("fec0::/10"),
}

func (a allowList) allowsIP(ip netip.Addr) bool {
	for _, p := range a.prefixes {
		if p.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}

// resolve returns the address to dial for hostport: the first of its
// addresses that is not special, or is allowed; an error naming the
// refused address otherwise.
func (a allowList) resolve(ctx context.Context, hostport string) (netip.Addr, error) {
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
	var refused netip.Addr
	for _, ip := range addrs {
		if !special(ip) || byName || a.allowsIP(ip) {
			return ip.Unmap(), nil
		}
		refused = ip
	}
	if !refused.IsValid() {
		return netip.Addr{}, fmt.Errorf("%s has no address", host)
	}
	return netip.Addr{}, fmt.Errorf("%s resolves to %s, a loopback, private or link-local address; the operator may allow it (--webhook-allow-hosts)", host, refused)
}
