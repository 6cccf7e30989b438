package tracing

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrShutdown is the cause of an export canceled by the exporter's
// Shutdown, and the error of an export asked for after it.
var ErrShutdown = errors.New("tracing: exporter is shut down")

const (
	// defaultExportTimeout is the OTLP default of OTEL_EXPORTER_OTLP_TIMEOUT.
	defaultExportTimeout = 10 * time.Second
	// maxRetryAfter bounds the wait a collector's Retry-After asks for.
	maxRetryAfter = 30 * time.Second
	// retryDelay is the wait before the retry when the collector gives
	// no Retry-After.
	retryDelay = time.Second
	// maxResponseBytes is how much of a response is read: enough for an
	// ExportTraceServiceResponse with its partial success message.
	maxResponseBytes = 64 << 10
	// errorBodyBytes is how much of a refusal's body its error quotes.
	errorBodyBytes = 512
)

// ExporterConfig configures an Exporter.
type ExporterConfig struct {
	// URL is where each batch of spans is POSTed: the collector's
	// OTLP/HTTP traces URL, http or https, for example
	// http://otel-collector:4318/v1/traces. Required.
	URL string
	// Headers are set on every export request (an API key, for example).
	// They cannot replace Content-Type or Content-Encoding. None if nil.
	Headers map[string]string
	// Timeout bounds each export request, the response read included; a
	// retry has its own. If unset or zero, 10 seconds.
	Timeout time.Duration
	// Gzip compresses the request bodies (Content-Encoding: gzip). Off if
	// false.
	Gzip bool
	// TLS is the TLS configuration for an https URL: the CA to trust, a
	// client certificate. If nil, the system's roots and no client
	// certificate.
	TLS *tls.Config
}

// WithDefaults returns a copy of c with zero fields set to their
// defaults.
func (c ExporterConfig) WithDefaults() ExporterConfig {
	c.Timeout = cmp.Or(c.Timeout, defaultExportTimeout)
	return c
}

func (c ExporterConfig) validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("tracing: exporter: no URL")
	case err != nil:
		return fmt.Errorf("tracing: exporter: URL: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("tracing: exporter: URL %q: want http:// or https://", c.URL)
	case u.Host == "":
		return fmt.Errorf("tracing: exporter: URL %q has no host", c.URL)
	case c.Timeout < 0:
		return fmt.Errorf("tracing: exporter: timeout %v is negative", c.Timeout)
	}
	for k := range c.Headers {
		if !validHeaderName(k) {
			return fmt.Errorf("tracing: exporter: header name %q is not an HTTP token", k)
		}
	}
	return nil
}

// Exporter sends spans to an OpenTelemetry collector over OTLP/HTTP
// with protobuf (http/protobuf): each ExportSpans is one POST of an
// ExportTraceServiceRequest. A collector's 429, 502, 503 or 504 is
// retried once, after its Retry-After (at most 30 s) or 1 s; any other
// answer outside 2xx is an error quoting the status and the head of the
// body. A 2xx answer that reports spans rejected (a partial success) is
// an error too, which the SDK logs; the rest were taken.
type Exporter struct {
	cfg    ExporterConfig
	client *http.Client
	// stopped is done once Shutdown is called; its cause is ErrShutdown.
	stopped context.Context
	stop    context.CancelCauseFunc
	// sleep waits d or until ctx is done; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// NewExporter returns an Exporter for cfg.
func NewExporter(cfg ExporterConfig) (*Exporter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       cfg.TLS,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	stopped, stop := context.WithCancelCause(context.Background())
	return &Exporter{
		cfg:     cfg,
		client:  &http.Client{Transport: transport, Timeout: cfg.Timeout},
		stopped: stopped,
		stop:    stop,
		sleep:   sleepCtx,
	}, nil
}

// ExportSpans sends spans in one request (and at most one retry). It
// returns when the collector has answered, ctx is done, or Shutdown is
// called; an empty batch sends nothing. After Shutdown it returns
// ErrShutdown.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Err() != nil {
		return ErrShutdown
	}
	if len(spans) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(e.stopped, func() { cancel(ErrShutdown) })()

	body := appendRequest(nil, spans)
	if e.cfg.Gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(body); err != nil {
			return fmt.Errorf("tracing: export: gzip: %w", err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("tracing: export: gzip: %w", err)
		}
		body = buf.Bytes()
	}
	retryAfter, err := e.post(ctx, body)
	if retryAfter < 0 {
		return err
	}
	if werr := e.sleep(ctx, retryAfter); werr != nil {
		return fmt.Errorf("%w (no retry: %w)", err, werr)
	}
	_, rerr := e.post(ctx, body)
	if rerr != nil {
		return fmt.Errorf("%w (retried after %v: %w)", err, retryAfter, rerr)
	}
	return nil
}

// post sends body once. retry is how long to wait before the one retry
// the answer allows, negative when it allows none (success included).
func (e *Exporter) post(ctx context.Context, body []byte) (retry time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("tracing: export: %w", err)
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "sandq OTLP/HTTP trace exporter")
	if e.cfg.Gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			return -1, fmt.Errorf("tracing: export: POST %s: %w", e.cfg.URL, cause)
		}
		return -1, fmt.Errorf("tracing: export: %w", err) // the *url.Error names the URL
	}
	defer resp.Body.Close()
	data, rerr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if resp.StatusCode/100 == 2 {
		if rerr != nil {
			return -1, fmt.Errorf("tracing: export: POST %s: read the response: %w", e.cfg.URL, rerr)
		}
		return -1, responseError(resp.Header.Get("Content-Type"), data)
	}
	head := strings.TrimSpace(string(data[:min(len(data), errorBodyBytes)]))
	if len(data) > errorBodyBytes {
		head += "..."
	}
	err = fmt.Errorf("tracing: export: POST %s: %s: %q", e.cfg.URL, resp.Status, head)
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfterDelay(resp.Header.Get("Retry-After"), time.Now()), err
	}
	return -1, err
}

// responseError is the error a 2xx response's body reports: a partial
// success with spans rejected or a message. A body that is not protobuf
// (a collector may answer with JSON or nothing) reports nothing.
func responseError(contentType string, body []byte) error {
	if len(body) == 0 || !strings.HasPrefix(contentType, "application/x-protobuf") {
		return nil
	}
	rejected, msg, err := partialSuccess(body)
	switch {
	case err != nil:
		return fmt.Errorf("tracing: export: decode the collector's response: %w", err)
	case rejected != 0 || msg != "":
		return fmt.Errorf("tracing: export: the collector rejected %d spans: %q", rejected, msg)
	}
	return nil
}

// retryAfterDelay is the wait a Retry-After header asks for (seconds or
// an HTTP date), at most maxRetryAfter; retryDelay if it has none.
func retryAfterDelay(v string, now time.Time) time.Duration {
	if v == "" {
		return retryDelay
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s >= 0 {
		return min(time.Duration(min(s, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return retryDelay
}

// Shutdown cancels the exports in flight and makes later ones fail with
// ErrShutdown. The SDK's batch processor calls it after its last export.
// It returns ctx's error if ctx is already done.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.stop(ErrShutdown)
	e.client.CloseIdleConnections()
	return ctx.Err()
}

// sleepCtx waits d, or until ctx is done: then it returns ctx's cause.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
