package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// JobRequest is the body of POST /v1/jobs: a job (its tenant comes from
// the API key, never from the body) and where to deliver its result.
type JobRequest struct {
	jobs.Job
	// CallbackURL, if set, receives the final Result in a POST when the
	// job ends, signed (see the webhook section of the README).
	CallbackURL string `json:"callback_url,omitempty" maxLength:"2048" doc:"http(s) URL the final Result is POSTed to, signed with the key's webhook secret (Sandq-Signature: t=<unix>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">)"`
}

// JobView is a job as the API shows it: its Result (ID as the tenant
// knows it) and its webhook's delivery.
type JobView struct {
	jobs.Result
	Webhook *WebhookStatus `json:"webhook,omitempty" doc:"the delivery of the job's webhook, when it has a callback_url"`
}

type jobOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     JobView
}

// WaitParam is the ?wait= of a long-poll.
type WaitParam struct {
	Wait string `query:"wait" doc:"wait this long (a Go duration such as 30s, at most the server's --max-wait) for the job to end; the response is 200 with the final Result if it did, else 202"`
}

func (w WaitParam) duration(maxWait time.Duration) (time.Duration, error) {
	if w.Wait == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(w.Wait)
	if err != nil || d < 0 {
		return 0, huma.Error422UnprocessableEntity("invalid wait", &huma.ErrorDetail{Location: "query.wait", Message: "a duration such as 30s", Value: w.Wait})
	}
	return min(d, maxWait), nil
}

// JobIDParam is a job's ID in a path.
type JobIDParam struct {
	ID string `path:"id" minLength:"1" maxLength:"114" pattern:"^[A-Za-z0-9_.:-]+$" doc:"the job's ID"`
}

func (s *Server) registerJobs() {
	huma.Register(s.api, huma.Operation{
		OperationID: "create-job", Method: http.MethodPost, Path: "/v1/jobs", Tags: []string{"jobs"},
		Summary:      "Enqueue a job",
		Description:  "Validates the job against the operator's policy and the key's caps, enqueues it for the key's tenant, and returns its view: 202 while it is queued or running (Location names it), 200 with the final Result when ?wait= was given and it ended in time. 409 if the tenant already has a job with this ID.",
		MaxBodyBytes: s.cfg.MaxJobBytes, Metadata: map[string]any{scope: ScopeWrite},
		Errors:        []int{401, 403, 409, 413, 422, 429},
		DefaultStatus: http.StatusAccepted,
		Responses:     s.jobResponses("202", "the job is queued or running; Location names it", "200", "the job ended within ?wait="),
	}, func(ctx context.Context, in *struct {
		WaitParam
		Body JobRequest
	}) (*jobOutput, error) {
		k := keyOf(ctx)
		wait, err := in.duration(s.cfg.MaxWait)
		if err != nil {
			return nil, err
		}
		job, hook, err := s.prepare(ctx, k, in.Body, "body")
		if err != nil {
			return nil, err
		}
		if err := s.admit(ctx, k, 1); err != nil {
			return nil, err
		}
		if hook != nil {
			if err := s.hooks.register(ctx, job.ID, *hook); err != nil {
				return nil, huma.Error503ServiceUnavailable("cannot record the webhook", err)
			}
		}
		info, err := s.cfg.Client.Enqueue(ctx, job)
		if err != nil {
			return nil, enqueueError(err)
		}
		if info.Existing {
			return nil, huma.Error409Conflict(fmt.Sprintf("the tenant already has a job %s (status %s)", externalID(k.Tenant, info.ID), info.Status))
		}
		s.track(ctx, k.Tenant, info.ID)
		return s.jobResponse(ctx, k, info.ID, wait)
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-job", Method: http.MethodGet, Path: "/v1/jobs/{id}", Tags: []string{"jobs"},
		Summary:     "Read a job",
		Description: "The job's Result: final (200), or queued/running (200; with ?wait=, a long-poll: 200 once it ends, 202 if it has not when the wait is over).",
		Metadata:    map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 422, 429},
		Responses: s.jobResponses("200", "the job's view", "202", "?wait= ran out before the job ended"),
	}, func(ctx context.Context, in *struct {
		JobIDParam
		WaitParam
	}) (*jobOutput, error) {
		k := keyOf(ctx)
		wait, err := in.duration(s.cfg.MaxWait)
		if err != nil {
			return nil, err
		}
		out, err := s.jobResponse(ctx, k, internalID(k.Tenant, in.ID), wait)
		if err == nil && wait == 0 {
			out.Status, out.Location = http.StatusOK, ""
		}
		return out, err
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "cancel-job", Method: http.MethodPost, Path: "/v1/jobs/{id}/cancel", Tags: []string{"jobs"},
		Summary:     "Cancel a job",
		Description: "A queued job ends canceled at once; a running one is killed and ends canceled with its output so far. 409 if the job has already ended.",
		Metadata:    map[string]any{scope: ScopeWrite}, Errors: []int{401, 403, 404, 409, 429}, DefaultStatus: http.StatusAccepted,
	}, func(ctx context.Context, in *struct{ JobIDParam }) (*jobOutput, error) {
		k := keyOf(ctx)
		id := internalID(k.Tenant, in.ID)
		if r, err := s.cfg.Client.Get(ctx, id); err == nil && r.Status.Final() {
			return nil, huma.Error409Conflict(fmt.Sprintf("job %s has already ended (%s)", in.ID, r.Status))
		}
		err := s.cfg.Client.Cancel(ctx, id)
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			return nil, huma.Error404NotFound("no job " + in.ID)
		case errors.Is(err, jobs.ErrAlreadyFinal):
			return nil, huma.Error409Conflict("job " + in.ID + " has already ended")
		case err != nil:
			return nil, huma.Error503ServiceUnavailable("cannot cancel", err)
		}
		out, err := s.jobResponse(ctx, k, id, 0)
		if out != nil {
			out.Status = http.StatusAccepted
		}
		return out, err
	})

	s.registerEvents()
	s.registerArtifacts()
}

// jobResponses documents JobView answers: code and description pairs.
func (s *Server) jobResponses(pairs ...string) map[string]*huma.Response {
	out := map[string]*huma.Response{}
	schema := s.api.OpenAPI().Components.Schemas.Schema(reflectType[JobView](), true, "JobView")
	for i := 0; i+1 < len(pairs); i += 2 {
		out[pairs[i]] = &huma.Response{Description: pairs[i+1],
			Headers: map[string]*huma.Param{"Location": {Schema: &huma.Schema{Type: huma.TypeString}, Description: "the job's URL, while it is not final"}},
			Content: map[string]*huma.MediaType{"application/json": {Schema: schema}}}
	}
	return out
}

// prepare turns a request into the job to enqueue: the key's tenant and
// caps applied, the ID namespaced, the policy checked. where is the
// request's location of the job ("body", "body[3]") for error details.
func (s *Server) prepare(ctx context.Context, k Key, req JobRequest, where string) (jobs.Job, *hookRequest, error) {
	job := req.Job
	if job.Tenant != "" {
		return job, nil, huma.Error422UnprocessableEntity("invalid job", &huma.ErrorDetail{
			Location: where + ".tenant", Message: "the tenant is the API key's; leave tenant out", Value: job.Tenant})
	}
	if len(job.ID) > MaxClientIDBytes {
		return job, nil, huma.Error422UnprocessableEntity("invalid job", &huma.ErrorDetail{
			Location: where + ".id", Message: fmt.Sprintf("is %d bytes; the cap is %d", len(job.ID), MaxClientIDBytes), Value: job.ID})
	}
	if job.ID == "" {
		job.ID = jobs.NewID()
	}
	job.Tenant = k.Tenant
	job.ID = internalID(k.Tenant, job.ID)
	policy := s.policyFor(k)
	if err := policy.Validate(&job); err != nil {
		return job, nil, validationError(err, where, k.Tenant)
	}
	capLimits(&job, k)
	var hook *hookRequest
	if req.CallbackURL != "" {
		if err := s.hooks.check(ctx, req.CallbackURL); err != nil {
			return job, nil, huma.Error422UnprocessableEntity("invalid callback_url", &huma.ErrorDetail{
				Location: where + ".callback_url", Message: err.Error(), Value: req.CallbackURL})
		}
		hook = &hookRequest{URL: req.CallbackURL, KeyID: k.ID, KeyHash: k.Hash, Tenant: k.Tenant}
	}
	return job, hook, nil
}

// policyFor is the server's policy with the key's caps on limits.
func (s *Server) policyFor(k Key) jobs.Policy {
	p := s.cfg.Client.Policy().WithDefaults()
	for _, f := range jobs.LimitTable {
		if v := f.Get(&k.MaxLimits); v > 0 && v < f.Get(&p.MaxLimits) {
			f.Set(&p.MaxLimits, v)
		}
	}
	return p
}

// capLimits sets the limits a job leaves to the worker's defaults to the
// key's caps where the defaults would pass them: the worker applies its own
// defaults, which know nothing of keys.
func capLimits(j *jobs.Job, k Key) { capLimitsOf(&j.Limits, k) }

// capLimitsOf is capLimits for any limits (a job's, a session's).
func capLimitsOf(l *jobs.Limits, k Key) {
	for _, f := range jobs.LimitTable {
		if c := f.Get(&k.MaxLimits); c > 0 && f.Get(l) == 0 && f.Default > c {
			f.Set(l, c)
		}
	}
}

// validationError turns a jobs.ValidationError into 422 naming the field.
func validationError(err error, where, tenant string) error {
	return invalidError("invalid job", err, where, tenant)
}

// invalidError is validationError with its title: 422 naming the field
// (where, then the error's field), the tenant's ID prefix left out of the
// message.
func invalidError(title string, err error, where, tenant string) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		loc := where
		if ve.Field != "" {
			loc += "." + ve.Field
		}
		return huma.Error422UnprocessableEntity(title, &huma.ErrorDetail{Location: loc, Message: strings.ReplaceAll(ve.Msg, tenantPrefix(tenant), "")})
	}
	return huma.Error422UnprocessableEntity(title, err)
}

// enqueueError maps an Enqueue failure.
func enqueueError(err error) error {
	var ve *jobs.ValidationError
	if errors.As(err, &ve) {
		return validationError(err, "body", "")
	}
	return huma.Error503ServiceUnavailable("cannot enqueue", err)
}

// jobResponse reads job id (waiting up to wait for it to end) and returns
// its view: 200 if final, 202 (with Location) if not.
func (s *Server) jobResponse(ctx context.Context, k Key, id string, wait time.Duration) (*jobOutput, error) {
	r, err := s.await(ctx, id, wait)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return nil, huma.Error404NotFound("no job " + externalID(k.Tenant, id))
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, huma.Error503ServiceUnavailable("cannot read the job", err)
	}
	out := &jobOutput{Status: http.StatusOK, Body: s.view(ctx, k, r)}
	if !r.Status.Final() {
		out.Status = http.StatusAccepted
		out.Location = "/v1/jobs/" + url.PathEscape(out.Body.ID)
	}
	return out, nil
}

// await reads job id, waiting up to wait for it to end: the shared
// subscription (hub) wakes it, a 10 s recheck covers a job that ended
// without a message.
func (s *Server) await(ctx context.Context, id string, wait time.Duration) (jobs.Result, error) {
	var woke <-chan struct{}
	if wait > 0 {
		var stop func()
		woke, stop = s.hub.watch(id) // before the read: no end is missed
		defer stop()
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
		case <-recheck.C:
		}
		if r, err = s.cfg.Client.Get(ctx, id); err != nil || r.Status.Final() {
			return r, err
		}
	}
}

// view is r as the tenant sees it.
func (s *Server) view(ctx context.Context, k Key, r jobs.Result) JobView {
	v := JobView{Result: r}
	v.ID = externalID(k.Tenant, r.ID)
	for i := range v.Artifacts {
		v.Artifacts[i].URL = "/v1/jobs/" + url.PathEscape(v.ID) + "/artifacts/" + url.PathEscape(v.Artifacts[i].Name)
		v.Artifacts[i].Key = ""
	}
	if st, err := s.hooks.status(ctx, r.ID); err == nil {
		v.Webhook = st
	}
	return v
}

// Tenants' jobs not yet final are counted in the sorted set
// "<prefix>:tenant-active:<tenant>" (score: enqueue time), so a cap holds
// over every API process. The set is pruned only when the cap is reached:
// then each member's Result is read, and the final ones (and any older
// than a day) leave.
func (s *Server) activeKey(tenant string) string {
	return s.cfg.Client.Store().Prefix() + ":tenant-active:" + tenant
}

func (s *Server) maxQueued(k Key) int {
	if k.MaxQueued > 0 {
		return k.MaxQueued
	}
	return s.cfg.MaxQueued
}

// admit checks that the tenant may have n more jobs not yet final: 429 if
// not.
func (s *Server) admit(ctx context.Context, k Key, n int) error {
	limit := s.maxQueued(k)
	key := s.activeKey(k.Tenant)
	count, err := s.cfg.Redis.ZCard(ctx, key).Result()
	if err != nil {
		return huma.Error503ServiceUnavailable("cannot count the tenant's jobs", err)
	}
	if int(count)+n <= limit {
		return nil
	}
	if count, err = s.prune(ctx, key); err != nil {
		return huma.Error503ServiceUnavailable("cannot count the tenant's jobs", err)
	}
	if int(count)+n > limit {
		return huma.ErrorWithHeaders(huma.Error429TooManyRequests(fmt.Sprintf(
			"the tenant has %d jobs queued or running; its cap is %d (this request adds %d)", count, limit, n)),
			http.Header{"Retry-After": {"5"}})
	}
	return nil
}

// prune drops the tenant's jobs that have ended from its active set and
// returns how many remain.
func (s *Server) prune(ctx context.Context, key string) (int64, error) {
	rdb := s.cfg.Redis
	if err := rdb.ZRemRangeByScore(ctx, key, "-inf", fmt.Sprint(time.Now().Add(-24*time.Hour).UnixMilli())).Err(); err != nil {
		return 0, err
	}
	ids, err := rdb.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		return 0, err
	}
	store := s.cfg.Client.Store()
	for len(ids) > 0 {
		group := ids[:min(len(ids), 1000)]
		ids = ids[len(group):]
		cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range group {
				p.Get(ctx, store.ResultKey(id))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		var done []any
		for i, c := range cmds {
			b, err := c.(*redis.StringCmd).Bytes()
			if errors.Is(err, redis.Nil) || (err == nil && finalJSON(b)) {
				done = append(done, group[i])
			}
		}
		if len(done) > 0 {
			if err := rdb.ZRem(ctx, key, done...).Err(); err != nil {
				return 0, err
			}
		}
	}
	return rdb.ZCard(ctx, key).Result()
}

// track adds a job to its tenant's active set.
func (s *Server) track(ctx context.Context, tenant string, ids ...string) {
	if len(ids) == 0 {
		return
	}
	now := float64(time.Now().UnixMilli())
	zs := make([]redis.Z, len(ids))
	for i, id := range ids {
		zs[i] = redis.Z{Score: now, Member: id}
	}
	key := s.activeKey(tenant)
	_, _ = s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, zs...)
		p.Expire(ctx, key, 48*time.Hour)
		return nil
	})
}
