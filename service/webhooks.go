package service

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
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/netguard"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Webhooks. A job submitted with a callback URL gets its final Result
// POSTed there when it ends: body the job's view (as the HTTP API shows
// it), headers Sandq-Event: job.finished, Sandq-Delivery (the job's ID and
// the attempt), and Sandq-Signature: t=<unix seconds>,v1=<hex
// HMAC-SHA256(secret, "<t>.<body>")> ([Sign]), secret the caller's
// webhook secret. A 2xx answer is a delivery; anything else is retried
// with exponential backoff (1 s, 2 s, 4 s, ... at most 5 min apart) up to
// MaxAttempts, and the outcome is recorded on the job (JobView.Webhook).
//
// Targets that are loopback, link-local (cloud metadata), private,
// unspecified or multicast are refused, at submission and again at every
// connection (netguard), unless the operator allows the host
// (WebhookConfig.AllowHosts). Redirects are not followed.
//
// Deliveries are shared by every process through the store; every
// process looks for due attempts each second, and at once for a job whose
// end its subscription hears of.

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
	// Senders caps the attempts one process makes at once. Default 16.
	Senders int
	// PerTenant caps one tenant's attempts at once in one process, so a
	// tenant whose targets are slow (or never answer) holds at most this
	// many senders; its other deliveries wait their turn. Default 2.
	PerTenant int
}

func (c WebhookConfig) withDefaults() WebhookConfig {
	c.Timeout = cmp.Or(c.Timeout, 10*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 8)
	c.TTL = cmp.Or(c.TTL, 7*24*time.Hour)
	c.Senders = cmp.Or(c.Senders, 16)
	c.PerTenant = cmp.Or(c.PerTenant, 2)
	return c
}

// hookRequest is what a submission records for a webhook.
type hookRequest struct {
	URL, KeyID, KeyHash, Tenant string
	// Secret is the caller's webhook secret; empty: the open API's.
	Secret string
}

type webhooks struct {
	st     *store.Store
	client *client.Client
	cfg    WebhookConfig
	log    zerolog.Logger
	http   *http.Client
	allow  netguard.AllowList
	pokes  chan string

	// The attempts under way: by job, and how many per tenant.
	mu       sync.Mutex
	busy     map[string]bool
	inflight map[string]int
	wg       sync.WaitGroup
}

func newWebhooks(st *store.Store, cl *client.Client, cfg WebhookConfig, log zerolog.Logger) *webhooks {
	w := &webhooks{st: st, client: cl, cfg: cfg, log: log,
		allow: netguard.ParseAllowList("--webhook-allow-hosts", cfg.AllowHosts), pokes: make(chan string, 1024),
		busy: map[string]bool{}, inflight: map[string]int{}}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	w.http = &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy: nil, // a proxy would reach what the checks refuse
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ip, err := w.allow.Resolve(ctx, addr)
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
	_, err = w.allow.Resolve(ctx, u.Host+portSuffix(u))
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
	secret := h.Secret
	if secret == "" {
		var err error
		if secret, err = w.openSecret(ctx); err != nil {
			return err
		}
	}
	rec := store.Webhook{URL: h.URL, KeyID: h.KeyID, KeyHash: h.KeyHash, Tenant: h.Tenant, Secret: secret,
		Status: WebhookStatus{URL: h.URL, State: "pending"}}
	// Due at once: the job may have ended before this record was made.
	return w.st.PutWebhook(ctx, id, rec, w.cfg.TTL, time.Now())
}

// openSecret is the secret that signs the webhooks of an API without
// keys, made on first use.
func (w *webhooks) openSecret(ctx context.Context) (string, error) {
	return w.st.OpenWebhookSecret(ctx, func() string { return "whsec_" + randomString(32) })
}

// WebhookSecret returns the secret that signs c's webhooks.
func (s *Service) WebhookSecret(ctx context.Context, c Caller) (string, error) {
	if err := c.need(ScopeRead); err != nil {
		return "", err
	}
	if c.WebhookSecret != "" {
		return c.WebhookSecret, nil
	}
	secret, err := s.hooks.openSecret(ctx)
	if err != nil {
		return "", unavailable("cannot read the secret", err)
	}
	return secret, nil
}

// status returns job id's webhook delivery, or an error if it has none.
func (w *webhooks) status(ctx context.Context, id string) (*WebhookStatus, error) {
	rec, err := w.st.GetWebhook(ctx, id)
	if err != nil {
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

// run delivers until ctx ends: at most Senders attempts at once, at most
// PerTenant of them for one tenant; a due delivery that finds no room
// stays due for the next scan (each second).
func (w *webhooks) run(ctx context.Context) {
	defer w.wg.Wait()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-w.pokes:
			w.start(ctx, id, true)
		case <-t.C:
			ids, err := w.st.DueWebhooks(ctx, 100)
			if err != nil {
				continue
			}
			for _, id := range ids {
				w.start(ctx, id, false)
			}
		}
	}
}

// start starts an attempt of job id's webhook if there is room for it.
func (w *webhooks) start(ctx context.Context, id string, poked bool) {
	rec, err := w.st.GetWebhook(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNoWebhook) {
			_ = w.st.DropWebhook(ctx, id) // expired record
		}
		return
	}
	w.mu.Lock()
	total := 0
	for _, n := range w.inflight {
		total += n
	}
	if w.busy[id] || total >= w.cfg.Senders || w.inflight[rec.Tenant] >= w.cfg.PerTenant {
		w.mu.Unlock()
		return
	}
	w.busy[id] = true
	w.inflight[rec.Tenant]++
	w.mu.Unlock()
	w.wg.Go(func() {
		defer func() {
			w.mu.Lock()
			delete(w.busy, id)
			if w.inflight[rec.Tenant]--; w.inflight[rec.Tenant] == 0 {
				delete(w.inflight, rec.Tenant)
			}
			w.mu.Unlock()
		}()
		w.attempt(ctx, id, rec, poked)
	})
}

// attempt makes one delivery attempt of job id's webhook if it is due.
func (w *webhooks) attempt(ctx context.Context, id string, rec store.Webhook, poked bool) {
	lease := time.Now().Add(2 * w.cfg.Timeout)
	if ok, err := w.st.ClaimWebhook(ctx, id, poked && rec.Status.Attempts == 0, lease); err != nil || !ok {
		return
	}
	r, err := w.client.Get(ctx, id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		// The job is gone (its result expired): nothing will ever be
		// delivered.
		rec.Status.State, rec.Status.LastError = "failed", "the job is gone"
		_ = w.st.UpdateWebhook(ctx, id, rec, time.Time{})
		return
	case err != nil || !r.Status.Final():
		// Not over yet: look again in a while (its end pokes sooner).
		_ = w.st.DelayWebhook(ctx, id, time.Now().Add(10*time.Second))
		return
	}
	code, derr := w.deliver(ctx, rec, r)
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
	var next time.Time
	if rec.Status.State == "pending" {
		next = time.Now().Add(min(time.Second<<(rec.Status.Attempts-1), 5*time.Minute))
	}
	_ = w.st.UpdateWebhook(ctx, id, rec, next)
	w.log.Info().Str("job_id", id).Str("url", rec.URL).Int("attempt", rec.Status.Attempts).Int("code", code).
		Err(derr).Str("state", rec.Status.State).Msg("webhook")
}

// deliver POSTs the job's view, signed, and returns the answer's status.
func (w *webhooks) deliver(ctx context.Context, rec store.Webhook, r jobs.Result) (int, error) {
	view := JobView{Result: r}
	view.ID = Caller{Tenant: rec.Tenant}.ClientID(r.ID)
	apiPaths(&view.Result)
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
