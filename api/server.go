// Package api is sandq's HTTP API: enqueue, wait, stream, cancel and fetch
// the artifacts of jobs and batches, and drive sessions, over HTTP, for
// producers that are not Go programs; MCP over Streamable HTTP at /mcp;
// and a web dashboard at /ui (ui.go). It is a door of package service,
// which holds every rule (the caller's tenant, scopes and caps,
// admission, batches, sessions, webhooks): the API authenticates a
// request's key into a caller, calls the service and maps its typed
// errors to RFC 9457 problems (errors.go). It links no container engine
// and no storage SDK, and reaches Redis only through the service, but for
// asynqmon at /ui/queues, asynq's own monitor, which reads asynq's keys
// on the API's Redis client.
//
// Requests carry an API key (Authorization: Bearer sqk_...); its record
// names the tenant every job of the key belongs to, and its scopes. The
// OpenAPI 3.1 document is generated from the Go types by huma and served
// at /openapi.json, with a docs page at /docs.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// Config configures a Server.
type Config struct {
	// Client is the producer client the API enqueues and reads with; its
	// Redis, prefixes and policy are the API's. Required.
	Client *client.Client
	// StreamClient serves the blocking reads, event streams and session
	// cells (service.Config.StreamClient). Default: Client.
	StreamClient *client.Client
	// Open serves requests without a key, as the anonymous tenant with
	// every scope, while no API key exists: for an API on loopback only.
	// A request with a key is always authenticated, and once any key
	// exists every request needs one.
	Open bool
	// ArtifactDir is the local artifact store's directory, whose files the
	// API serves (the S3 store's are redirected to). Empty: none.
	ArtifactDir string
	// RatePerSecond caps each key's requests per second, over every API
	// process (a key may set its own). Default 100.
	RatePerSecond int
	// MaxQueued caps a tenant's jobs not yet final (a key may set its
	// own). Default 10,000.
	MaxQueued int
	// MaxQueuedBytes caps the held bytes (jobs.Job.HeldBytes) of a tenant's jobs not yet
	// final (a key may set its own). Default 512 MiB.
	MaxQueuedBytes int64
	// MaxSessions caps a tenant's sessions not ended. Default 8.
	MaxSessions int
	// MCPMaxWait caps how long an MCP tool waits for a job. Default 10
	// minutes.
	MCPMaxWait time.Duration
	// MaxMCPSessions caps the MCP sessions open in this process (more
	// get 503). Default 1,000. MaxMCPSessionsPerTenant caps one tenant's
	// (more get 429). Default an eighth of MaxMCPSessions.
	MaxMCPSessions, MaxMCPSessionsPerTenant int
	// MCPSessionIdle closes an MCP session without a request for this
	// long. Default 10 minutes.
	MCPSessionIdle time.Duration
	// MaxJobBytes caps POST /v1/jobs bodies. Default 16 MiB.
	MaxJobBytes int64
	// MaxBatchBytes caps POST /v1/batches bodies. Default 64 MiB.
	MaxBatchBytes int64
	// MaxBatchJobs caps the jobs of one batch. Default 10,000.
	MaxBatchJobs int
	// MaxWait caps ?wait=. Default 60 s.
	MaxWait time.Duration
	// MaxStreams caps the event streams one process follows at once (more
	// get 503). Default 256. MaxStreamsPerTenant caps one tenant's (more
	// get 429). Default an eighth of MaxStreams.
	MaxStreams, MaxStreamsPerTenant int
	// MaxDownloads caps the downloads (session files, local artifacts)
	// one process serves at once (more get 503), MaxDownloadsPerTenant one
	// tenant's (more get 429). Defaults 8 and 2.
	MaxDownloads, MaxDownloadsPerTenant int
	// WriteStall is how long a client may take to accept each chunk of a
	// download before it is cut off. Default 10 s.
	WriteStall time.Duration
	// Webhooks configures deliveries.
	Webhooks service.WebhookConfig
	// Logger gets one line per request and the deliveries. Default: discard.
	Logger zerolog.Logger
}

func (c Config) withDefaults() Config {
	c.MaxMCPSessions = cmp.Or(c.MaxMCPSessions, 1000)
	c.MaxMCPSessionsPerTenant = cmp.Or(c.MaxMCPSessionsPerTenant, max(1, c.MaxMCPSessions/8))
	c.MCPSessionIdle = cmp.Or(c.MCPSessionIdle, 10*time.Minute)
	c.MaxJobBytes = cmp.Or(c.MaxJobBytes, 16<<20)
	c.MaxBatchBytes = cmp.Or(c.MaxBatchBytes, 64<<20)
	c.MaxWait = cmp.Or(c.MaxWait, time.Minute)
	c.MaxBatchJobs = cmp.Or(c.MaxBatchJobs, 10_000)
	c.WriteStall = cmp.Or(c.WriteStall, 10*time.Second)
	return c
}

// Server is the HTTP API: a door over the service, which holds every rule
// (tenants, scopes, caps, quotas, batches, sessions, webhooks); the API
// maps its answers and errors to HTTP.
type Server struct {
	cfg   Config
	svc   *service.Service
	auths *authLimiter
	// The MCP server, its sessions' tenants by session ID, and the
	// requests that may open a session, by tenant, under mcpMu.
	mcpMu      sync.Mutex
	mcpServer  *mcp.Server
	mcpTenants map[string]string
	mcpOpening map[string]int
	api        huma.API
	mux        *http.ServeMux
	registry   *prometheus.Registry
	requests   *prometheus.HistogramVec
	ui         *ui
}

// New starts the server's service (its subscription and webhook
// dispatcher), and returns the server once the subscription is confirmed.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Client == nil {
		return nil, errors.New("api: Config needs Client")
	}
	svc, err := service.New(ctx, service.Config{
		Client: cfg.Client, StreamClient: cfg.StreamClient, Open: cfg.Open, ArtifactDir: cfg.ArtifactDir,
		RatePerSecond: cfg.RatePerSecond, MaxQueued: cfg.MaxQueued, MaxQueuedBytes: cfg.MaxQueuedBytes, MaxSessions: cfg.MaxSessions,
		MaxBatchJobs: cfg.MaxBatchJobs, MaxStreams: cfg.MaxStreams, MaxStreamsPerTenant: cfg.MaxStreamsPerTenant,
		MaxDownloads: cfg.MaxDownloads, MaxDownloadsPerTenant: cfg.MaxDownloadsPerTenant, Webhooks: cfg.Webhooks, DeliverWebhooks: true,
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s := &Server{cfg: cfg, svc: svc, mux: http.NewServeMux(), registry: prometheus.NewRegistry(), auths: newAuthLimiter(),
		mcpTenants: map[string]string{}, mcpOpening: map[string]int{}}

	s.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sandq_api_request_seconds", Help: "API requests by operation and status code.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"operation", "code"})
	s.registry.MustRegister(s.requests, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandq_api_waiting", Help: "Requests waiting for a job to end."},
			func() float64 { return float64(s.svc.Waiting()) }),
		tenantCollector{s.svc})

	config := huma.DefaultConfig("sandq", "1.0.0")
	config.Info.Description = "Run untrusted code in hardened sandboxes: enqueue jobs and batches, wait for results, " +
		"follow live output, cancel, fetch artifacts. Authenticate with `Authorization: Bearer <API key>`; " +
		"the key's tenant owns every job it enqueues, and job IDs are the tenant's own."
	config.CreateHooks = nil // no $schema fields in bodies
	config.OpenAPIPath = "/openapi"
	config.DocsPath = "/docs"
	config.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "An API key made with `api keys create`."},
	}
	if !cfg.Open {
		config.Security = []map[string][]string{{"bearer": {}}}
	}
	// A displayed value is one flat JSON object of MIME types to strings.
	config.Components.Schemas.RegisterTypeAlias(reflectType[jobs.Display](), reflectType[map[string]string]())
	s.api = huma.NewAPI(config, wildcardAdapter{humago.NewAdapter(s.mux, "")})
	s.api.UseMiddleware(s.observe, s.authenticate)
	s.registerJobs()
	s.registerBatches()
	s.registerSessions()
	s.registerEnvironments()
	s.registerMisc()
	s.documentRefusals()
	if err := s.mountMCP(); err != nil {
		s.Close()
		return nil, fmt.Errorf("api: MCP server: %w", err)
	}
	if s.ui, err = newUI(s); err != nil {
		s.Close()
		return nil, fmt.Errorf("api: dashboard: %w", err)
	}
	s.mux.Handle("/ui", s.ui)
	s.mux.Handle("/ui/", s.ui)
	metrics := promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{})
	s.mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// Every tenant's usage is here: a key with the metrics scope (the
		// operator's scraper's), or an open API's caller.
		c, err := s.caller(r.Context(), r.Header.Get("Authorization"), clientAddr(r))
		if err == nil && !c.Has(service.ScopeMetrics) {
			err = &service.Error{Kind: service.Forbidden, Msg: "this API key lacks the " + service.ScopeMetrics + " scope"}
		}
		if err != nil {
			writeProblem(w, err)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.svc.Ping(ctx); err != nil {
			writeProblem(w, &service.Error{Kind: service.Unavailable, Msg: "redis: " + err.Error()})
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return s, nil
}

// documentRefusals adds to every POST operation of the OpenAPI document
// the answer Handler gives a form a web page could send: 415, a problem.
func (s *Server) documentRefusals() {
	problem := s.api.OpenAPI().Components.Schemas.Schema(reflectType[huma.ErrorModel](), true, "ErrorModel")
	for _, item := range s.api.OpenAPI().Paths {
		if op := item.Post; op != nil {
			if op.Responses == nil {
				op.Responses = map[string]*huma.Response{}
			}
			if _, ok := op.Responses["415"]; !ok {
				op.Responses["415"] = &huma.Response{Description: "Unsupported Media Type: a form or text body from a web page",
					Content: map[string]*huma.MediaType{"application/problem+json": {Schema: problem}}}
			}
		}
	}
	// /metrics is served beside the operations (Prometheus' text format)
	// and documented here.
	refused := func(what string) *huma.Response {
		return &huma.Response{Description: what, Content: map[string]*huma.MediaType{"application/problem+json": {Schema: problem}}}
	}
	s.api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "metrics", Method: http.MethodGet, Path: "/metrics", Tags: []string{"meta"},
		Summary: "Prometheus metrics",
		Description: "Requests by operation and code, each tenant's jobs not yet final (released and held), held bytes and " +
			"refusals by quota. Every tenant's usage is here: the key needs the `" + service.ScopeMetrics + "` scope " +
			"(an open API serves it to its callers).",
		Security: []map[string][]string{{"bearer": {}}},
		Responses: map[string]*huma.Response{
			"200": {Description: "Prometheus' text exposition format", Content: map[string]*huma.MediaType{"text/plain": {Schema: &huma.Schema{Type: "string"}}}},
			"401": refused("Unauthorized: no key, or an unknown one"),
			"403": refused("Forbidden: the key lacks the " + service.ScopeMetrics + " scope"),
			"429": refused("Too Many Requests: the key's rate, or failed authentications from this address"),
		},
	})
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		r, endSpan := traceRequest(r)
		defer func() { endSpan(info, sw.code) }()
		if s.refuseUnrouted(sw, r) {
			return
		}
		// The dashboard takes its own forms (login, logout), each checked
		// to come from its own pages.
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") {
			s.ui.ServeHTTP(sw, r)
			return
		}
		// A body sent without a JSON type (curl -d sends a form type) is
		// read as JSON: the API takes no forms. One a web page could make
		// a browser send is refused.
		if r.Method == http.MethodPost && formFromPage(r) {
			writeProblem(sw, &service.Error{Kind: service.UnsupportedMedia,
				Msg: "the API takes no forms: send the body as application/json (a web page must ask with Content-Type: application/json)"})
			return
		}
		if ct := r.Header.Get("Content-Type"); r.Method == http.MethodPost && (ct == "" || strings.HasPrefix(ct, "application/x-www-form-urlencoded")) {
			r.Header.Set("Content-Type", "application/json")
		}
		s.mux.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info)))
		if info.op != "" {
			s.requests.WithLabelValues(info.op, fmt.Sprint(sw.code)).Observe(time.Since(start).Seconds())
		}
	})
}

// refuseUnrouted answers, with a problem, a request that no operation
// takes, and reports whether it did: a path that is not clean (an empty,
// . or .. segment, escaped or not), which the mux would redirect to
// another path, is 400; an unknown path 404; a known path's other
// methods 405, with Allow. The mux's own answers are text.
func (s *Server) refuseUnrouted(w http.ResponseWriter, r *http.Request) bool {
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && cleanPath(p) != p {
		writeRouteProblem(w, http.StatusBadRequest, fmt.Sprintf("the path %s is not clean: it has an empty, . or .. segment", strconv.Quote(p)))
		return true
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		return false
	}
	rec := &headerRecorder{header: http.Header{}}
	h.ServeHTTP(rec, r)
	switch rec.code {
	case http.StatusMethodNotAllowed:
		allow := rec.header.Get("Allow")
		w.Header().Set("Allow", allow)
		writeRouteProblem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, allow, r.Method))
	case http.StatusNotFound:
		writeRouteProblem(w, http.StatusNotFound, fmt.Sprintf("no operation at %s: the API's paths are in /openapi.json", strconv.Quote(r.URL.EscapedPath())))
	default:
		return false // a redirect the mux makes
	}
	return true
}

// cleanPath is p as ServeMux cleans it before matching: rooted, without
// empty, . or .. segments, its trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// headerRecorder records the status and headers of the mux's own
// answer to a request it routes nowhere; the body is dropped.
type headerRecorder struct {
	header http.Header
	code   int
}

func (h *headerRecorder) Header() http.Header         { return h.header }
func (h *headerRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerRecorder) WriteHeader(code int) {
	if h.code == 0 {
		h.code = code
	}
}

// requestInfo carries what the huma middleware learns (the operation) out
// to Handler, which knows the status written.
type requestInfo struct{ op, route string }

type requestInfoKey struct{}

// statusWriter records the status a handler writes.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flush,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// OpenAPI returns the generated OpenAPI document.
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

// Close stops the service's subscription and webhook dispatcher.
func (s *Server) Close() { s.svc.Close() }

// Service returns the service the server is a door of.
func (s *Server) Service() *service.Service { return s.svc }

// HTTPServer returns an http.Server for s on addr with timeouts that fit
// long-polls (up to MaxWait) and event streams: headers must come within
// 10 s and bodies within a minute; responses have no global write timeout
// (each long response sets its own deadlines).
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{Addr: addr, Handler: s.Handler(),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: 64 << 10}
}

// observe names the request's operation for the metrics Handler records.
func (s *Server) observe(ctx huma.Context, next func(huma.Context)) {
	if info, ok := ctx.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		info.op, info.route = ctx.Operation().OperationID, ctx.Operation().Path
	}
	next(ctx)
}

// wildcard is the Operation.Metadata entry naming the path parameter of an
// operation that takes the rest of the path, slashes included: the
// OpenAPI document shows it as {name} (a client may escape the slashes),
// the mux matches it as {name...}.
const wildcard = "wildcard"

// wildcardAdapter registers operations on the mux, their wildcard
// parameter (Metadata[wildcard]) as a ServeMux {name...}.
type wildcardAdapter struct{ huma.Adapter }

var _ huma.Adapter = wildcardAdapter{}

func (a wildcardAdapter) Handle(op *huma.Operation, handler func(huma.Context)) {
	if name, ok := op.Metadata[wildcard].(string); ok {
		cp := *op
		cp.Path = strings.Replace(op.Path, "{"+name+"}", "{"+name+"...}", 1)
		op = &cp
	}
	a.Adapter.Handle(op, handler)
}

// reflectType is T's reflect.Type.
func reflectType[T any]() reflect.Type { return reflect.TypeFor[T]() }
