package service

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/sandq/sandq/client"
	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// JobRequest is a job as a caller submits it: the job (its tenant is the
// caller's, never the request's) and where to deliver its result.
type JobRequest struct {
	jobs.Job
	// CallbackURL, if set, receives the final Result in a POST when the
	// job ends, signed.
	CallbackURL string `json:"callback_url,omitempty" maxLength:"2048" doc:"http(s) URL the final Result is POSTed to, signed with the key's webhook secret (Sandq-Signature: t=<unix>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">)"`
}

// WebhookStatus is the delivery of a job's webhook.
type WebhookStatus = store.WebhookStatus

// JobView is a job as its caller sees it: its Result (the ID as the caller
// knows it, artifacts by their API paths) and its webhook's delivery.
type JobView struct {
	jobs.Result
	Webhook *WebhookStatus `json:"webhook,omitempty" doc:"the delivery of the job's webhook, when it has a callback_url"`
}

// Submitted is the outcome of [Service.SubmitJob].
type Submitted struct {
	// ID is the job's stored ID.
	ID string
}

// SubmitJob checks req for c (the policy with c's caps, the callback URL,
// c's quota of jobs not yet final), enqueues it and records its webhook,
// once the job is admitted: a refused request records nothing and leaves
// an existing job's webhook as it was. Conflict when c has a job of this
// ID already.
func (s *Service) SubmitJob(ctx context.Context, c Caller, req JobRequest) (string, error) {
	if err := c.need(ScopeWrite); err != nil {
		return "", err
	}
	job, hook, err := s.prepare(ctx, c, req)
	if err != nil {
		return "", err
	}
	info, err := s.cfg.Client.EnqueueWith(ctx, job, s.admission(c))
	if _, ok := errors.AsType[*client.QuotaError](err); ok {
		// Jobs that ended without leaving the ledger (a fault) stop
		// counting; then the claim is tried once more.
		if _, perr := s.st.PruneTenant(ctx, c.Tenant); perr == nil {
			info, err = s.cfg.Client.EnqueueWith(ctx, job, s.admission(c))
		}
	}
	if err != nil {
		return "", s.enqueueError(c, err, 1)
	}
	if info.Existing {
		return "", newError(Conflict, "the tenant already has a job %s (status %s)", c.ClientID(info.ID), info.Status)
	}
	if hook != nil {
		if err := s.hooks.register(ctx, info.ID, *hook); err != nil {
			return info.ID, unavailable(fmt.Sprintf("job %s is enqueued, but its webhook could not be recorded", c.ClientID(info.ID)), err)
		}
	}
	return info.ID, nil
}

// prepare turns a request into the job to enqueue: c's tenant and caps
// applied, the ID namespaced, the policy checked, the callback URL
// checked.
func (s *Service) prepare(ctx context.Context, c Caller, req JobRequest) (jobs.Job, *hookRequest, error) {
	job := req.Job
	if job.Tenant != "" && !c.raw {
		return job, nil, &Error{Kind: Invalid, Msg: "invalid job", Field: "tenant", Detail: "the tenant is the API key's; leave tenant out", Value: job.Tenant}
	}
	if err := c.checkClientID("job", job.ID); err != nil {
		return job, nil, err
	}
	if job.ID == "" {
		job.ID = jobs.NewID()
	}
	if err := c.mayUse(job.Queue); err != nil {
		return job, nil, err
	}
	if err := c.mayReach(job.Network); err != nil {
		return job, nil, err
	}
	job.Tenant = c.Tenant
	job.ID = c.StoredID(job.ID)
	if err := s.Policy(c).Validate(&job); err != nil {
		return job, nil, invalid(c, "invalid job", err)
	}
	if err := s.checkEnvironment(ctx, c, "job", job.Environment, job.Lang); err != nil {
		return job, nil, err
	}
	s.capLimits(job.Lang, &job.Limits, c)
	var hook *hookRequest
	if req.CallbackURL != "" {
		if err := s.hooks.check(ctx, req.CallbackURL); err != nil {
			return job, nil, &Error{Kind: Invalid, Msg: "invalid callback_url", Field: "callback_url", Detail: err.Error(), Value: req.CallbackURL}
		}
		hook = &hookRequest{URL: req.CallbackURL, KeyID: c.KeyID, KeyHash: c.KeyHash, Tenant: c.Tenant, Secret: c.WebhookSecret}
	}
	return job, hook, nil
}

// invalid turns a *jobs.ValidationError into an Invalid error titled msg,
// naming its field, c's ID prefix left out.
func invalid(c Caller, msg string, err error) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return &Error{Kind: Invalid, Msg: msg, Field: ve.Field, Detail: c.clean(ve.Msg), Err: nil}
	}
	return &Error{Kind: Invalid, Msg: msg, Detail: c.clean(err.Error())}
}

// enqueueError maps an Enqueue failure of a request that adds n jobs.
func (s *Service) enqueueError(c Caller, err error, n int) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return invalid(c, "invalid job", err)
	}
	if q, ok := errors.AsType[*client.QuotaError](err); ok {
		return s.refuse(c, quotaError(q, n))
	}
	return unavailable("cannot enqueue", err)
}

// quotaError is a refused admission as the caller reads it.
func quotaError(q *client.QuotaError, n int) error {
	e := &Error{Kind: TooMany, RetryAfter: 5 * time.Second, Quota: QuotaJobs, Msg: fmt.Sprintf(
		"the tenant has %d jobs queued or running; its cap is %d (this request adds %d)", q.Used, q.Limit, n)}
	if q.Resource == "bytes" {
		e.Quota = QuotaBytes
		e.Msg = fmt.Sprintf("the tenant's jobs queued or running hold %d bytes; its cap is %d bytes", q.Used, q.Limit)
	}
	return e
}

// Job reads c's job id, waiting up to wait for it to end; the Result as c
// sees it (its ID, its reason without c's ID prefix). NotFound when c has
// no job id.
func (s *Service) Job(ctx context.Context, c Caller, id string, wait time.Duration) (jobs.Result, error) {
	if err := c.need(ScopeRead); err != nil {
		return jobs.Result{}, err
	}
	r, err := s.await(ctx, c.StoredID(id), wait)
	if err == nil && !c.owns(r) {
		err = jobs.ErrNotFound
	}
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return jobs.Result{}, newError(NotFound, "no job %s", id)
	case err != nil && ctx.Err() != nil:
		return r, err
	case err != nil:
		return r, unavailable("cannot read the job", err)
	}
	r.ID = c.ClientID(r.ID)
	r.Reason = c.clean(r.Reason)
	return r, nil
}

// await reads job id, waiting up to wait for it to end: the shared
// subscription (hub) wakes it, a 10 s recheck covers a job that ended
// without a message.
func (s *Service) await(ctx context.Context, id string, wait time.Duration) (jobs.Result, error) {
	var woke <-chan struct{}
	var w *waiter
	if wait > 0 {
		var stop func()
		w, stop = s.hub.watch(id) // before the read: no end is missed
		defer stop()
		woke = w.ch
	}
	r, err := s.cfg.Client.Get(ctx, id)
	if err != nil || r.Status.Final() || wait == 0 {
		return r, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	recheck := time.NewTicker(10 * time.Second)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return r, context.Cause(ctx)
		case <-deadline.C:
			return r, nil
		case <-woke:
			if r, ok := s.hub.noticed(w, id); ok {
				return r, nil // it came in the done message
			}
		case <-recheck.C:
		}
		if r, err = s.cfg.Client.Get(ctx, id); err != nil || r.Status.Final() {
			return r, err
		}
	}
}

// View is c's job r as the HTTP API shows it (r as [Service.Job] returns
// it): artifacts by their API paths, and the webhook's delivery.
func (s *Service) View(ctx context.Context, c Caller, r jobs.Result) JobView {
	v := JobView{Result: r}
	apiPaths(&v.Result)
	if st, err := s.hooks.status(ctx, c.StoredID(r.ID)); err == nil {
		v.Webhook = st
	}
	return v
}

// apiPaths replaces r's artifacts' URLs by their paths in the HTTP API
// (r's ID is the caller's) and drops their store keys.
func apiPaths(r *jobs.Result) {
	for i := range r.Artifacts {
		r.Artifacts[i].URL = ArtifactPath(r.ID, r.Artifacts[i].Name)
		r.Artifacts[i].Key = ""
	}
}

// JobPath is a job's path in the HTTP API.
func JobPath(id string) string { return "/v1/jobs/" + url.PathEscape(id) }

// ArtifactPath is an artifact's path in the HTTP API.
func ArtifactPath(id, name string) string {
	return JobPath(id) + "/artifacts/" + url.PathEscape(name)
}

// CancelJob cancels c's job id: a queued job ends canceled at once, a
// running one is killed. Conflict when it has ended.
func (s *Service) CancelJob(ctx context.Context, c Caller, id string) error {
	if err := c.need(ScopeWrite); err != nil {
		return err
	}
	stored := c.StoredID(id)
	if r, err := s.cfg.Client.Get(ctx, stored); err == nil && !c.owns(r) {
		return newError(NotFound, "no job %s", id)
	} else if err == nil && r.Status.Final() {
		return newError(Conflict, "job %s has already ended (%s)", id, r.Status)
	}
	err := s.cfg.Client.Cancel(ctx, stored)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return newError(NotFound, "no job %s", id)
	case errors.Is(err, jobs.ErrAlreadyFinal):
		return newError(Conflict, "job %s has already ended", id)
	case err != nil:
		return unavailable("cannot cancel", err)
	}
	return nil
}

// admission is what c's jobs are admitted under: c's caps of jobs not
// yet final and of their bytes, and c's own cap of running jobs (else a
// fair share). The operator's tools have no caps.
func (s *Service) admission(c Caller) client.Admission {
	if c.raw {
		return client.Admission{}
	}
	a := client.Admission{MaxJobs: s.cfg.MaxQueued, MaxBytes: s.cfg.MaxQueuedBytes, MaxRunning: c.MaxRunning}
	if c.MaxQueued > 0 {
		a.MaxJobs = c.MaxQueued
	}
	if c.MaxQueuedBytes > 0 {
		a.MaxBytes = c.MaxQueuedBytes
	}
	return a
}

// precheck refuses a request of n jobs that c's tenant has no room for
// (TooMany), before any is enqueued: a batch is then refused whole. The
// admission of each job checks again, atomically.
func (s *Service) precheck(ctx context.Context, c Caller, n int) error {
	a := s.admission(c)
	if a.MaxJobs <= 0 {
		return nil
	}
	u, err := s.st.Usage(ctx, c.Tenant)
	if err != nil {
		return unavailable("cannot count the tenant's jobs", err)
	}
	if int(u.Jobs)+n <= a.MaxJobs {
		return nil
	}
	if u, err = s.st.PruneTenant(ctx, c.Tenant); err != nil {
		return unavailable("cannot count the tenant's jobs", err)
	}
	if int(u.Jobs)+n > a.MaxJobs {
		return s.refuse(c, quotaError(&client.QuotaError{Resource: "jobs", Used: u.Jobs, Limit: int64(a.MaxJobs)}, n))
	}
	return nil
}
