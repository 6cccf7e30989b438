package api

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/service"
)

// The dashboard (/ui): server-rendered pages over the same service and
// keys as the API. A browser cannot send a Bearer header when it
// navigates, so /ui/login takes an API key in a form and keeps it in a
// cookie (HttpOnly, SameSite=Strict, Path=/ui, Secure over TLS); every
// /ui request authenticates the cookie's key the way the API does its
// header (an open API's requests need none). Which jobs, batches and
// sessions a key sees is the service's rule (service.ScopeTenants); the
// pages only render what it returns, escaped by html/template. The
// dashboard's POSTs (login, logout) are refused unless the browser says
// they come from this origin (Sec-Fetch-Site, else Origin). asynq's own
// monitor is mounted at /ui/queues, read-only, for keys that see every
// tenant.

//go:embed ui
var uiFiles embed.FS

// uiCookie is the cookie that carries a dashboard user's API key.
const uiCookie = "sandq_key"

// uiCookieAge is how long a login lasts.
const uiCookieAge = 12 * time.Hour

// ui is the dashboard's handler.
type ui struct {
	s      *Server
	mux    *http.ServeMux
	pages  map[string]*template.Template
	queues http.Handler // asynqmon, nil when unavailable
}

func newUI(s *Server) (*ui, error) {
	u := &ui{s: s, mux: http.NewServeMux(), pages: map[string]*template.Template{}}
	funcs := template.FuncMap{
		"since":    uiSince,
		"ms":       uiMS,
		"time":     uiTime,
		"final":    uiFinal,
		"isImage":  uiIsImage,
		"pathEsc":  url.PathEscape,
		"artifact": uiArtifactPath,
		"pct":      uiPct,
		"kb":       uiKB,
		"output":   uiOutput,
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(uiFiles, "ui/layout.html")
	if err != nil {
		return nil, err
	}
	pages, err := fs.Glob(uiFiles, "ui/page-*.html")
	if err != nil {
		return nil, err
	}
	for _, p := range pages {
		t, err := template.Must(layout.Clone()).ParseFS(uiFiles, p)
		if err != nil {
			return nil, err
		}
		u.pages[strings.TrimSuffix(strings.TrimPrefix(p, "ui/page-"), ".html")] = t
	}
	static, err := fs.Sub(uiFiles, "ui/static")
	if err != nil {
		return nil, err
	}
	u.queues = asynqmon.New(asynqmon.Options{RootPath: "/ui/queues", RedisConnOpt: sharedRedis{s.cfg.Client.Store().Redis()},
		// Read-only: deleting or archiving a task behind sandq's back
		// would leave its job queued forever; cancel jobs through the API.
		ReadOnly: true})

	u.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	u.mux.HandleFunc("GET /ui/login", u.loginPage)
	u.mux.HandleFunc("POST /ui/login", u.login)
	u.mux.HandleFunc("POST /ui/logout", u.logout)
	u.mux.HandleFunc("GET /ui", u.page(func(w http.ResponseWriter, r *http.Request, c service.Caller) {
		http.Redirect(w, r, "/ui/jobs", http.StatusSeeOther)
	}))
	u.mux.HandleFunc("GET /ui/{$}", u.page(func(w http.ResponseWriter, r *http.Request, c service.Caller) {
		http.Redirect(w, r, "/ui/jobs", http.StatusSeeOther)
	}))
	u.mux.HandleFunc("GET /ui/jobs", u.page(u.jobs))
	u.mux.HandleFunc("GET /ui/jobs/{id}", u.page(u.job))
	u.mux.HandleFunc("GET /ui/jobs/{id}/events", u.page(u.events))
	u.mux.HandleFunc("GET /ui/jobs/{id}/artifacts/{name...}", u.page(u.artifact))
	u.mux.HandleFunc("GET /ui/batches", u.page(u.batches))
	u.mux.HandleFunc("GET /ui/batches/{id}", u.page(u.batch))
	u.mux.HandleFunc("GET /ui/sessions", u.page(u.sessions))
	u.mux.HandleFunc("GET /ui/sessions/{id}", u.page(u.session))
	u.mux.HandleFunc("GET /ui/workers", u.page(u.workers))
	u.mux.HandleFunc("/ui/queues", u.page(u.queuesPage))
	u.mux.HandleFunc("/ui/queues/", u.page(u.queuesPage))
	return u, nil
}

// sharedRedis hands asynqmon the API's own Redis client (its Sentinel,
// TLS and pool settings). asynqmon closes it only in Close, which the API
// never calls.
type sharedRedis struct{ rdb redis.UniversalClient }

func (r sharedRedis) MakeRedisClient() any { return r.rdb }

var _ asynq.RedisConnOpt = sharedRedis{}

// ServeHTTP serves a /ui request: the browser's POSTs are checked to come
// from this origin first.
func (u *ui) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
		u.error(w, r, service.Caller{}, http.StatusForbidden, "refused: this request did not come from the dashboard's own pages (Sec-Fetch-Site / Origin)")
		return
	}
	u.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether a state-changing request comes from this
// origin: the browser's Sec-Fetch-Site says same-origin (or none: typed by
// the user), else its Origin names this host. A request with neither is
// refused: every browser sends Origin with a POST.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return true
	case "":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return false
	}
	ou, err := url.Parse(o)
	return err == nil && ou.Host == r.Host && (ou.Scheme == "https") == (r.TLS != nil)
}

// caller authenticates a /ui request by its cookie (none: the open API's
// caller while it is open).
func (u *ui) caller(r *http.Request) (service.Caller, error) {
	auth := ""
	if ck, err := r.Cookie(uiCookie); err == nil && ck.Value != "" {
		auth = "Bearer " + ck.Value
	}
	return u.s.caller(r.Context(), auth, clientAddr(r))
}

// page wraps a handler that needs a caller: without a valid login a page
// redirects to /ui/login; other requests (events, files) get 401.
func (u *ui) page(h func(http.ResponseWriter, *http.Request, service.Caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := u.caller(r)
		if err != nil {
			if service.KindOf(err) == service.Unauthorized && r.Method == http.MethodGet && wantsHTML(r) {
				if _, e := r.Cookie(uiCookie); e == nil {
					clearCookie(w, r) // a revoked or stale key
				}
				http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			u.fail(w, r, service.Caller{}, err)
			return
		}
		if !c.Has(service.ScopeRead) {
			u.error(w, r, service.Caller{}, http.StatusForbidden, "this API key lacks the "+service.ScopeRead+" scope the dashboard needs")
			return
		}
		h(w, r, c)
	}
}

// wantsHTML: a navigation (not an EventSource or an image).
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html") || r.Header.Get("Accept") == ""
}

func (u *ui) loginPage(w http.ResponseWriter, r *http.Request) {
	u.render(w, r, http.StatusOK, "login", service.Caller{}, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (u *ui) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		u.error(w, r, service.Caller{}, http.StatusBadRequest, "the login form could not be read")
		return
	}
	key := strings.TrimSpace(r.PostForm.Get("key"))
	next := safeNext(r.PostForm.Get("next"))
	if key == "" {
		u.render(w, r, http.StatusUnauthorized, "login", service.Caller{}, map[string]any{"Next": next, "Error": "an API key is required"})
		return
	}
	c, err := u.s.caller(r.Context(), "Bearer "+key, clientAddr(r))
	if err != nil {
		u.render(w, r, status(err), "login", service.Caller{}, map[string]any{"Next": next, "Error": detail(err)})
		return
	}
	if !c.Has(service.ScopeRead) {
		u.render(w, r, http.StatusForbidden, "login", service.Caller{}, map[string]any{"Next": next,
			"Error": "this API key lacks the " + service.ScopeRead + " scope the dashboard needs"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: key, Path: "/ui", MaxAge: int(uiCookieAge.Seconds()),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (u *ui) logout(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: "", Path: "/ui", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// safeNext is where a login goes on to: a /ui path of this site only.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/jobs"
	}
	return next
}

// queuesPage serves asynqmon to a caller that sees every tenant.
func (u *ui) queuesPage(w http.ResponseWriter, r *http.Request, c service.Caller) {
	if !c.MayInspectQueues() {
		u.error(w, r, c, http.StatusForbidden, "the queues are the operator's: this API key lacks the "+service.ScopeTenants+" scope")
		return
	}
	if r.URL.Path == "/ui/queues" {
		http.Redirect(w, r, "/ui/queues/", http.StatusSeeOther)
		return
	}
	u.queues.ServeHTTP(w, r)
}

// render writes page name with data, in the layout, for caller c.
func (u *ui) render(w http.ResponseWriter, r *http.Request, code int, name string, c service.Caller, data map[string]any) {
	t := u.pages[name]
	if data == nil {
		data = map[string]any{}
	}
	data["Page"] = name
	data["LoggedIn"] = c.KeyID != ""
	data["Operator"] = c.SeesEveryTenant()
	data["Tenant"] = c.Tenant
	data["Open"] = c.IsOpen()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' https: http:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout.html", data); err != nil {
		u.s.cfg.Logger.Error().Err(err).Str("page", name).Msg("dashboard: render")
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// fail renders err as the service's kind says.
func (u *ui) fail(w http.ResponseWriter, r *http.Request, c service.Caller, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	var e *service.Error
	if errorAs(err, &e) && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfter(e.RetryAfter))
	}
	u.error(w, r, c, status(err), detail(err))
}

// error renders an error page for caller c (the zero Caller before one is
// known).
func (u *ui) error(w http.ResponseWriter, r *http.Request, c service.Caller, code int, msg string) {
	u.render(w, r, code, "error", c, map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg})
}
