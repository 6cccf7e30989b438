package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// What the dashboard reads (the API's /ui door). The rule of who sees
// what lives here: a caller with ScopeTenants (the operator's key, or an
// open API's caller) sees every tenant's jobs, batches, sessions and the
// workers, and names them as stored; any other caller sees its own
// tenant's only, named as it knows them. The dashboard only reads.

// ScopeTenants lets a key read every tenant's jobs, batches and sessions,
// the workers and the queues (asynqmon) in the dashboard: the operator's.
// It gives no other door anything.
const ScopeTenants = "tenants:read"

// SeesEveryTenant reports whether c reads every tenant in the dashboard.
func (c Caller) SeesEveryTenant() bool { return c.raw || c.Has(ScopeTenants) }

// viewer is the caller the dashboard reads as for c: for a caller that
// sees every tenant, one that names jobs as stored and owns every job,
// with c's reading scopes only (the dashboard writes nothing, and a slip
// of a door could not make it).
func (c Caller) viewer() Caller {
	if !c.SeesEveryTenant() {
		return c
	}
	v := Caller{KeyID: c.KeyID, KeyHash: c.KeyHash, Tenant: c.Tenant, raw: true}
	for _, sc := range []string{ScopeRead, ScopeTenants, ScopeMetrics} {
		if c.Has(sc) {
			v.Scopes = append(v.Scopes, sc)
		}
	}
	return v
}

// DashboardListMax caps the entries of one dashboard list.
const DashboardListMax = 500

// DashboardSessionsMax caps the sessions of every tenant one list shows.
const DashboardSessionsMax = 100

// JobFilter selects the jobs of [Service.ListJobs]. Zero fields select
// every job.
type JobFilter struct {
	// Tenant names one tenant; nil is every tenant the caller sees (its
	// own, for a tenant's caller). A tenant's caller naming another is
	// Forbidden.
	Tenant *string
	// Status, Lang: only jobs with this status, this language.
	Status jobs.Status
	Lang   string
	// Batch lists that batch's jobs (the caller's) instead of the recent
	// ones.
	Batch string
	// Limit caps the jobs returned. Default and cap DashboardListMax.
	Limit int
}

// JobSummary is one line of a job list.
type JobSummary struct {
	// ID is the job's ID as the caller names it (stored, for a caller
	// that sees every tenant).
	ID         string
	Tenant     string
	Lang       string
	Status     jobs.Status
	EnqueuedAt time.Time
	// Verdict is a judged job's; filled for a batch's jobs only.
	Verdict jobs.Verdict
}

// ListJobs returns c's most recent jobs (up to store.RecentJobs a tenant,
// store.RecentAll in all), or a batch's, newest first, as f selects.
// Statuses come from the compact status keys; a job whose Result has
// expired is left out.
func (s *Service) ListJobs(ctx context.Context, c Caller, f JobFilter) ([]JobSummary, error) {
	if err := c.need(ScopeRead); err != nil {
		return nil, err
	}
	v := c.viewer()
	limit := min(cmp.Or(f.Limit, DashboardListMax), DashboardListMax)
	tenant, all, err := v.tenantOf(f.Tenant)
	if err != nil {
		return nil, err
	}
	if f.Batch != "" {
		return s.batchJobs(ctx, v, f, tenant, all, limit)
	}
	max := store.RecentJobs
	if all {
		max = store.RecentAll
	}
	recent, err := s.st.RecentJobs(ctx, tenant, all, max)
	if err != nil {
		return nil, unavailable("cannot list the jobs", err)
	}
	recent = slices.DeleteFunc(recent, func(r store.Recent) bool { return f.Lang != "" && r.Lang != f.Lang })
	ids := make([]string, len(recent))
	for i, r := range recent {
		ids[i] = r.ID
	}
	statuses, err := s.st.Statuses(ctx, ids)
	if err != nil {
		return nil, unavailable("cannot read the jobs' statuses", err)
	}
	// Statuses reads a missing status as queued: check those few.
	exists, err := s.st.Exist(ctx, ids, func(i int) bool { return statuses[i] == jobs.StatusQueued })
	if err != nil {
		return nil, unavailable("cannot read the jobs", err)
	}
	out := []JobSummary{}
	for i, r := range recent {
		if len(out) == limit {
			break
		}
		if !exists[i] || f.Status != "" && statuses[i] != f.Status {
			continue
		}
		out = append(out, JobSummary{ID: v.ClientID(r.ID), Tenant: r.Tenant, Lang: r.Lang, Status: statuses[i], EnqueuedAt: r.At})
	}
	return out, nil
}

// tenantOf resolves a filter's tenant for v: the tenant to read and
// whether it is every tenant.
func (v Caller) tenantOf(t *string) (string, bool, error) {
	switch {
	case t == nil && v.raw:
		return "", true, nil
	case t == nil:
		return v.Tenant, false, nil
	case !v.raw && *t != v.Tenant:
		return "", false, newError(Forbidden, "this API key reads its own tenant's jobs only")
	}
	return *t, false, nil
}

// batchJobs is ListJobs of a batch: its jobs in order, their Results read
// (for the language, times and verdicts) a page at a time.
func (s *Service) batchJobs(ctx context.Context, v Caller, f JobFilter, tenant string, all bool, limit int) ([]JobSummary, error) {
	b, err := s.batch(ctx, v, f.Batch)
	if err != nil {
		return nil, err
	}
	if !all && b.Tenant != tenant {
		return []JobSummary{}, nil
	}
	statuses, err := s.st.Statuses(ctx, b.IDs)
	if err != nil {
		return nil, unavailable("cannot read the batch's jobs", err)
	}
	var ids []string
	for i, id := range b.IDs {
		if f.Status == "" || statuses[i] == f.Status {
			ids = append(ids, id)
		}
	}
	out := []JobSummary{}
	// Results are read 50 at a time, at most DashboardListMax of them.
	for read := 0; len(ids) > 0 && len(out) < limit && read < DashboardListMax; {
		page := ids[:min(len(ids), 50)]
		ids = ids[len(page):]
		read += len(page)
		rs, err := s.st.GetMany(ctx, page)
		if err != nil {
			return nil, unavailable("cannot read the batch's jobs", err)
		}
		for _, id := range page {
			r, ok := rs[id]
			if len(out) == limit {
				break
			}
			if !ok || r.Tenant != b.Tenant || f.Lang != "" && r.Lang != f.Lang {
				continue
			}
			out = append(out, JobSummary{ID: v.ClientID(r.ID), Tenant: r.Tenant, Lang: r.Lang, Status: r.Status,
				EnqueuedAt: r.EnqueuedAt, Verdict: r.Verdict})
		}
	}
	return out, nil
}

// DashboardJob returns job id's view as the dashboard shows it to c (see
// [Service.Job]): NotFound for a job c does not see.
func (s *Service) DashboardJob(ctx context.Context, c Caller, id string) (jobs.Result, error) {
	return s.Job(ctx, c.viewer(), id, 0)
}

// DashboardFollow follows job id for the dashboard's live output, after
// the stream entry after ("" from the start; see [Service.Follow]).
func (s *Service) DashboardFollow(ctx context.Context, c Caller, id, after string) (*Follow, error) {
	return s.Follow(ctx, c.viewer(), id, after)
}

// DashboardArtifact returns job id's artifact name and opens it, for the
// dashboard (see [Service.Artifact]); rc is nil for an artifact of a
// remote store, whose URL the caller redirects to.
func (s *Service) DashboardArtifact(ctx context.Context, c Caller, id, name string) (a jobs.Artifact, open func() (io.ReadCloser, error), err error) {
	v := c.viewer()
	a, err = s.Artifact(ctx, v, id, name)
	if err != nil {
		return a, nil, err
	}
	return a, func() (io.ReadCloser, error) { return s.OpenArtifact(ctx, v, a) }, nil
}

// BatchSummary is one line of a batch list.
type BatchSummary struct {
	ID      string
	Tenant  string
	Created time.Time
}

// ListBatches returns the recent batches of the tenant t names (every
// tenant c sees when nil), newest first.
func (s *Service) ListBatches(ctx context.Context, c Caller, t *string) ([]BatchSummary, error) {
	if err := c.need(ScopeRead); err != nil {
		return nil, err
	}
	v := c.viewer()
	tenant, all, err := v.tenantOf(t)
	if err != nil {
		return nil, err
	}
	recent, err := s.st.RecentBatches(ctx, tenant, all, DashboardListMax)
	if err != nil {
		return nil, unavailable("cannot list the batches", err)
	}
	out := []BatchSummary{}
	for _, r := range recent {
		out = append(out, BatchSummary{ID: v.ClientID(r.ID), Tenant: r.Tenant, Created: r.At})
	}
	return out, nil
}

// DashboardBatch is a batch page: its progress, and its tenant.
type DashboardBatch struct {
	BatchProgress
	Tenant string
}

// DashboardBatch returns c's batch id's progress (see [Service.Batch]).
func (s *Service) DashboardBatch(ctx context.Context, c Caller, id string) (DashboardBatch, error) {
	v := c.viewer()
	b, err := s.batch(ctx, v, id)
	if err != nil {
		return DashboardBatch{}, err
	}
	p, err := s.Batch(ctx, v, id)
	return DashboardBatch{BatchProgress: p, Tenant: b.Tenant}, err
}

// ListSessions returns the sessions of the tenant t names (up to 1,000),
// or, when nil, every tenant's c sees (the DashboardSessionsMax most
// recent), newest first.
func (s *Service) ListSessions(ctx context.Context, c Caller, t *string) ([]jobs.SessionInfo, error) {
	if err := c.need(ScopeRead); err != nil {
		return nil, err
	}
	v := c.viewer()
	tenant, all, err := v.tenantOf(t)
	if err != nil {
		return nil, err
	}
	if !all {
		list, err := s.cfg.Client.Sessions(ctx, tenant)
		if err != nil {
			return nil, unavailable("cannot list the sessions", err)
		}
		out := []jobs.SessionInfo{}
		for _, info := range list {
			out = append(out, v.sessionView(info))
		}
		return out, nil
	}
	// Each is read on its own (its worker's heartbeat decides whether it
	// is lost): the most recent DashboardSessionsMax.
	recent, err := s.st.RecentSessions(ctx, DashboardSessionsMax)
	if err != nil {
		return nil, unavailable("cannot list the sessions", err)
	}
	out := []jobs.SessionInfo{}
	for _, r := range recent {
		info, err := s.cfg.Client.SessionInfo(ctx, r.ID)
		if errors.Is(err, jobs.ErrSessionNotFound) {
			continue // its record expired
		}
		if err != nil {
			return nil, unavailable("cannot read the sessions", err)
		}
		out = append(out, v.sessionView(info))
	}
	return out, nil
}

// DashboardSession is a session page: its record and, while it runs, its
// work dir's top-level files.
type DashboardSession struct {
	Info jobs.SessionInfo
	// Cells are its last cells (store.SessionCellsKept), oldest first,
	// with the heads of their code and output.
	Cells []store.SessionCell
	Files []jobs.FileEntry
	// FilesErr says why Files is empty when they could not be listed (an
	// ended session has none).
	FilesErr string
}

// DashboardSession returns session id as c sees it: NotFound for one c
// does not see.
func (s *Service) DashboardSession(ctx context.Context, c Caller, id string) (DashboardSession, error) {
	if err := c.need(ScopeRead); err != nil {
		return DashboardSession{}, err
	}
	v := c.viewer()
	info, err := s.cfg.Client.SessionInfo(ctx, v.StoredID(id))
	if err == nil && !v.raw && info.Tenant != v.Tenant {
		err = jobs.ErrSessionNotFound
	}
	if err != nil {
		return DashboardSession{}, s.sessionError(ctx, v, id, err)
	}
	out := DashboardSession{Info: v.sessionView(info)}
	if out.Cells, err = s.st.SessionCells(ctx, info.ID); err != nil {
		return DashboardSession{}, unavailable("cannot read the session's cells", err)
	}
	if info.State.Final() {
		return out, nil
	}
	sess, err := s.cfg.StreamClient.Session(ctx, info.ID)
	if err == nil {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out.Files, err = sess.Files(fctx, "")
		cancel()
	}
	if err != nil {
		out.FilesErr = v.clean(err.Error())
	}
	return out, nil
}

// Fleet is the workers page: what workers publish in Redis and what asynq
// records of them and of the queues.
type Fleet struct {
	// Workers are the workers that published slots (alive or not).
	Workers []store.FleetWorker
	// Servers are asynq's records of the workers serving sandq's queues:
	// concurrency, the tasks they run now, their heartbeat.
	Servers []*asynq.ServerInfo
	// Queues are asynq's counts of each queue.
	Queues []client.QueueInfo
	// Langs are the toolchain versions workers published, by language.
	Langs map[string]jobs.LangVersion
	// Statuses are what the workers publish with their heartbeats (their
	// pools, warm and busy, and their recent jobs' latency), by owner.
	Statuses map[string]store.WorkerStatus
	// LatencyBuckets label the latency histograms' buckets.
	LatencyBuckets []string
}

// latencyBuckets labels store.LatencyBoundsMS's buckets.
func latencyBuckets() []string {
	label := func(ms int64) string {
		if ms >= 1000 {
			return fmt.Sprintf("%g s", float64(ms)/1000)
		}
		return fmt.Sprintf("%d ms", ms)
	}
	var out []string
	for _, b := range store.LatencyBoundsMS {
		out = append(out, "≤ "+label(b))
	}
	return append(out, "> "+label(store.LatencyBoundsMS[len(store.LatencyBoundsMS)-1]))
}

// Fleet returns the workers page: Forbidden for a caller that does not
// see every tenant (the workers serve every tenant).
func (s *Service) Fleet(ctx context.Context, c Caller) (Fleet, error) {
	if !c.SeesEveryTenant() {
		return Fleet{}, newError(Forbidden, "the workers and queues are the operator's: this API key lacks the %s scope", ScopeTenants)
	}
	var f Fleet
	var err error
	if f.Workers, err = s.st.Fleet(ctx); err != nil {
		return f, unavailable("cannot read the workers", err)
	}
	if f.Servers, err = s.cfg.Client.Servers(); err != nil {
		return f, unavailable("cannot read the workers", err)
	}
	slices.SortFunc(f.Servers, func(a, b *asynq.ServerInfo) int { return cmp.Compare(a.ID, b.ID) })
	if f.Queues, err = s.cfg.Client.Queues(); err != nil {
		return f, unavailable("cannot read the queues", err)
	}
	if f.Langs, err = s.st.LangVersions(ctx); err != nil {
		return f, unavailable("cannot read the languages", err)
	}
	owners := make([]string, 0, len(f.Workers))
	for _, w := range f.Workers {
		owners = append(owners, w.Owner)
	}
	if f.Statuses, err = s.st.WorkerStatuses(ctx, owners); err != nil {
		return f, unavailable("cannot read the workers", err)
	}
	f.LatencyBuckets = latencyBuckets()
	return f, nil
}

// MayInspectQueues reports whether c may see asynq's own monitor (every
// tenant's tasks and payloads): a caller that sees every tenant.
func (c Caller) MayInspectQueues() bool { return c.SeesEveryTenant() }
