package api

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// The dashboard's pages: each reads through the service as the caller and
// renders one template (ui/page-<name>.html).

// tenantParam is the ?tenant= filter: nil (every tenant the caller sees)
// when absent or empty; "@" names the anonymous tenant.
func tenantParam(r *http.Request) *string {
	t := r.URL.Query().Get("tenant")
	switch t {
	case "":
		return nil
	case "@": // the anonymous tenant (no tenant is named "@")
		t = ""
	}
	return &t
}

func (u *ui) jobs(w http.ResponseWriter, r *http.Request, c service.Caller) {
	q := r.URL.Query()
	f := service.JobFilter{Tenant: tenantParam(r), Status: jobs.Status(q.Get("status")), Lang: q.Get("lang"), Batch: q.Get("batch")}
	list, err := u.s.svc.ListJobs(r.Context(), c, f)
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	statuses := []jobs.Status{jobs.StatusQueued, jobs.StatusRunning}
	statuses = append(statuses, jobs.FinalStatuses()...)
	u.render(w, r, http.StatusOK, "jobs", c, map[string]any{"Jobs": list, "Filter": q, "Statuses": statuses,
		"Langs": uiLangNames(u.s.svc.Policy(c))})
}

func (u *ui) job(w http.ResponseWriter, r *http.Request, c service.Caller) {
	res, err := u.s.svc.DashboardJob(r.Context(), c, r.PathValue("id"))
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	var wait, run time.Duration
	if !res.StartedAt.IsZero() && !res.EnqueuedAt.IsZero() {
		wait = res.StartedAt.Sub(res.EnqueuedAt)
	}
	if !res.FinishedAt.IsZero() && !res.StartedAt.IsZero() {
		run = res.FinishedAt.Sub(res.StartedAt)
	}
	var images []jobs.Artifact
	for _, a := range res.Artifacts {
		if uiIsImage(a) {
			images = append(images, a)
		}
	}
	u.render(w, r, http.StatusOK, "job", c, map[string]any{"Job": res, "Wait": wait, "Run": run, "Images": images})
}

// uiOutputEvent is the data of the dashboard's "output" event.
type uiOutputEvent struct {
	Stream string `json:"stream"`
	Step   string `json:"step"`
	Data   string `json:"data"`
}

// events streams a job's live output to the job page (an EventSource):
// "output" events (JSON: stream, step, data as text; id: the stream
// entry's, which a reconnecting EventSource sends back as Last-Event-ID),
// "status" events, and "end" when the job is final, after which the page
// reloads.
func (u *ui) events(w http.ResponseWriter, r *http.Request, c service.Caller) {
	after := ""
	if id := r.Header.Get("Last-Event-ID"); streamIDRE.MatchString(id) {
		after = id // the browser reconnected: resume after what it has
	}
	f, err := u.s.svc.DashboardFollow(r.Context(), c, r.PathValue("id"), after)
	if err != nil {
		http.Error(w, detail(err), status(err))
		return
	}
	defer f.Close()
	ctx, cancel := u.s.whileKeyLive(r.Context(), c)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	send := newSSE(w).send
	for ev := range f.Events(ctx) {
		var ok bool
		switch {
		case ev.Output != nil:
			ok = send("output", ev.Output.ID, uiOutputEvent{Stream: ev.Output.Stream, Step: ev.Output.Step, Data: strings.ToValidUTF8(string(ev.Output.Data), "\uFFFD")})
		case ev.Result != nil:
			send("end", "", map[string]string{"status": string(ev.Result.Status)})
			return
		default:
			ok = send("status", "", map[string]string{"status": string(ev.Status)})
		}
		if !ok {
			return
		}
	}
}

// artifact serves a job's artifact to the dashboard: images inline, every
// type the API serves as a download (HTML, SVG, XML) as one, and never as
// a page of this origin (CSP sandbox).
func (u *ui) artifact(w http.ResponseWriter, r *http.Request, c service.Caller) {
	name := r.PathValue("name")
	if err := artifactName(name); err != nil {
		http.Error(w, detail(err), status(err))
		return
	}
	art, open, err := u.s.svc.DashboardArtifact(r.Context(), c, r.PathValue("id"), name)
	if err != nil {
		http.Error(w, detail(err), status(err))
		return
	}
	if service.Remote(art) {
		http.Redirect(w, r, art.URL, http.StatusTemporaryRedirect)
		return
	}
	rc, err := open()
	if err != nil {
		http.Error(w, detail(err), status(err))
		return
	}
	defer rc.Close()
	ct := art.ContentType
	if ct == "" {
		ct = media.ContentType(art.Name)
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if media.Attachment(art.Name, ct) {
		w.Header().Set("Content-Disposition", `attachment; filename="`+strings.ReplaceAll(filepath.Base(art.Name), `"`, "")+`"`)
	}
	if f, ok := rc.(interface{ Size() int64 }); ok && f.Size() >= 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(f.Size(), 10))
	}
	rctl := http.NewResponseController(w)
	buf := make([]byte, 64<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			_ = rctl.SetWriteDeadline(time.Now().Add(u.s.cfg.WriteStall))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (u *ui) batches(w http.ResponseWriter, r *http.Request, c service.Caller) {
	list, err := u.s.svc.ListBatches(r.Context(), c, tenantParam(r))
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	u.render(w, r, http.StatusOK, "batches", c, map[string]any{"Batches": list, "Filter": r.URL.Query()})
}

// uiBatchJobs caps the jobs a batch page lists.
const uiBatchJobs = 200

// uiCount is one line of a count table.
type uiCount struct {
	Name  string
	Count int
}

func (u *ui) batch(w http.ResponseWriter, r *http.Request, c service.Caller) {
	id := r.PathValue("id")
	b, err := u.s.svc.DashboardBatch(r.Context(), c, id)
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	list, err := u.s.svc.ListJobs(r.Context(), c, service.JobFilter{Batch: id, Limit: uiBatchJobs})
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	var counts, failures, verdicts []uiCount
	for _, st := range append([]jobs.Status{jobs.StatusQueued, jobs.StatusRunning}, jobs.FinalStatuses()...) {
		n := b.Counts[st]
		if n == 0 {
			continue
		}
		counts = append(counts, uiCount{string(st), n})
		if st.Final() && st != jobs.StatusSucceeded {
			failures = append(failures, uiCount{string(st), n})
		}
	}
	byVerdict := map[jobs.Verdict]int{}
	judged, accepted := 0, 0
	for _, j := range list {
		if j.Verdict != "" {
			byVerdict[j.Verdict]++
			judged++
			if j.Verdict == jobs.VerdictAccepted {
				accepted++
			}
		}
	}
	for _, v := range slices.Sorted(func(yield func(jobs.Verdict) bool) {
		for v := range byVerdict {
			if !yield(v) {
				return
			}
		}
	}) {
		verdicts = append(verdicts, uiCount{string(v), byVerdict[v]})
	}
	u.render(w, r, http.StatusOK, "batch", c, map[string]any{"Batch": b, "Jobs": list, "Counts": counts, "Failures": failures,
		"Verdicts": verdicts, "Judged": judged, "Accepted": accepted, "Listed": len(list), "Cap": uiBatchJobs})
}

func (u *ui) sessions(w http.ResponseWriter, r *http.Request, c service.Caller) {
	list, err := u.s.svc.ListSessions(r.Context(), c, tenantParam(r))
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	u.render(w, r, http.StatusOK, "sessions", c, map[string]any{"Sessions": list, "Filter": r.URL.Query()})
}

func (u *ui) session(w http.ResponseWriter, r *http.Request, c service.Caller) {
	s, err := u.s.svc.DashboardSession(r.Context(), c, r.PathValue("id"))
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	u.render(w, r, http.StatusOK, "session", c, map[string]any{"Session": s})
}

func (u *ui) workers(w http.ResponseWriter, r *http.Request, c service.Caller) {
	f, err := u.s.svc.Fleet(r.Context(), c)
	if err != nil {
		u.fail(w, r, c, err)
		return
	}
	langs := slices.Sorted(func(yield func(string) bool) {
		for l := range f.Langs {
			if !yield(l) {
				return
			}
		}
	})
	u.render(w, r, http.StatusOK, "workers", c, map[string]any{"Fleet": f, "LangNames": langs})
}

// Template helpers.

func uiSince(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func uiTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func uiMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}

func uiFinal(s jobs.Status) bool { return s.Final() }

// uiIsImage: an artifact shown inline (raster images only: an SVG can
// carry script, and is a download).
func uiIsImage(a jobs.Artifact) bool {
	ct := a.ContentType
	if ct == "" {
		ct = media.ContentType(a.Name)
	}
	switch ct {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

// uiArtifactPath is the dashboard's path of job id's artifact name (each
// segment escaped).
func uiArtifactPath(id, name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = pathEscape(s)
	}
	return "/ui/jobs/" + pathEscape(id) + "/artifacts/" + strings.Join(segs, "/")
}

func pathEscape(s string) string { return url.PathEscape(s) }

// uiLangNames are the languages on offer, sorted.
func uiLangNames(p jobs.Policy) []string {
	var out []string
	for _, l := range p.Languages {
		out = append(out, l.Name)
	}
	slices.Sort(out)
	return out
}

func uiPct(n, total int) int {
	if total == 0 {
		return 0
	}
	return n * 100 / total
}

func uiKB(kb int64) string {
	if kb >= 1024 {
		return strconv.FormatFloat(float64(kb)/1024, 'f', 1, 64) + " MiB"
	}
	return strconv.FormatInt(kb, 10) + " KiB"
}

// uiOutput is a stream's text: base64 output decoded, bytes that are not
// UTF-8 replaced (html/template escapes the rest).
func uiOutput(s string, enc jobs.Encoding) string {
	if enc == jobs.EncodingBase64 {
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			s = string(b)
		}
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
