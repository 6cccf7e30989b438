package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// Batches: many jobs in one request, their progress, and their results as
// they finish. A batch is a list of the tenant's job IDs, stored under
// "<prefix>:batch:<id>" (its ID namespaced like a job's) for the result
// TTL.

// BatchItem is the outcome of one job of a submitted batch.
type BatchItem struct {
	Index  int         `json:"index" doc:"the job's position in the request"`
	ID     string      `json:"id,omitempty"`
	Status jobs.Status `json:"status,omitempty" doc:"queued, or the status of the tenant's existing job with this ID"`
	Error  *ItemError  `json:"error,omitempty"`
}

// ItemError is why one job of a batch was not enqueued: a problem as an
// error response would carry it.
type ItemError struct {
	Status int                 `json:"status"`
	Detail string              `json:"detail"`
	Errors []*huma.ErrorDetail `json:"errors,omitempty"`
}

// BatchCreated answers POST /v1/batches.
type BatchCreated struct {
	ID       string      `json:"id"`
	Total    int         `json:"total"`
	Enqueued int         `json:"enqueued"`
	Items    []BatchItem `json:"items"`
}

// BatchProgress answers GET /v1/batches/{id}.
type BatchProgress struct {
	ID      string              `json:"id"`
	Total   int                 `json:"total"`
	Done    int                 `json:"done" doc:"jobs with a final status"`
	Counts  map[jobs.Status]int `json:"counts" doc:"jobs per status"`
	Created time.Time           `json:"created"`
}

type batchRecord struct {
	Tenant  string    `json:"tenant"`
	Created time.Time `json:"created"`
	IDs     []string  `json:"ids"`
}

// BatchIDParam is a batch's ID in a path.
type BatchIDParam struct {
	ID string `path:"id" minLength:"1" maxLength:"114" pattern:"^[A-Za-z0-9_.:-]+$"`
}

func (s *Server) batchKey(internal string) string {
	return s.cfg.Client.Store().Prefix() + ":batch:" + internal
}

func (s *Server) registerBatches() {
	huma.Register(s.api, huma.Operation{
		OperationID: "create-batch", Method: http.MethodPost, Path: "/v1/batches", Tags: []string{"batches"},
		Summary: "Enqueue a batch of jobs",
		Description: "The body is a JSON array of jobs or NDJSON (one job per line, Content-Type application/x-ndjson). Each job is " +
			"checked and enqueued on its own: the answer lists every item's ID and status, or its error (a job with an ID the " +
			"tenant already has is an item error 409). 429 if the batch would take the tenant past its cap of jobs not yet final.",
		MaxBodyBytes: s.cfg.MaxBatchBytes, Metadata: map[string]any{scope: ScopeWrite}, Errors: []int{400, 401, 403, 409, 413, 422, 429},
		SkipValidateBody: true, // parsed here: a JSON array or NDJSON
		DefaultStatus:    http.StatusCreated,
		RequestBody: &huma.RequestBody{Required: true, Content: map[string]*huma.MediaType{
			"application/json":     {Schema: &huma.Schema{Type: huma.TypeArray, Items: s.api.OpenAPI().Components.Schemas.Schema(reflectType[JobRequest](), true, "JobRequest")}},
			"application/x-ndjson": {Schema: &huma.Schema{Type: huma.TypeString, Description: "one JobRequest JSON object per line"}},
		}},
	}, func(ctx context.Context, in *struct {
		BatchID     string `query:"id" maxLength:"114" pattern:"^[A-Za-z0-9_.:-]*$" doc:"the batch's ID (default: generated)"`
		ContentType string `header:"Content-Type"`
		RawBody     []byte
	}) (*struct{ Body BatchCreated }, error) {
		k := keyOf(ctx)
		reqs, err := parseBatch(in.RawBody, in.ContentType, s.cfg.MaxBatchJobs)
		if err != nil {
			return nil, err
		}
		bid := in.BatchID
		if bid == "" {
			bid = "b" + jobs.NewID()
		}
		if n, err := s.cfg.Redis.Exists(ctx, s.batchKey(internalID(k.Tenant, bid))).Result(); err != nil {
			return nil, huma.Error503ServiceUnavailable("cannot read the batch", err)
		} else if n > 0 {
			return nil, huma.Error409Conflict("the tenant already has a batch " + bid)
		}
		out := BatchCreated{ID: bid, Total: len(reqs), Items: make([]BatchItem, len(reqs))}
		var valid []jobs.Job
		var at []int
		for i, req := range reqs {
			out.Items[i].Index = i
			job, hook, err := s.prepare(ctx, k, req, fmt.Sprintf("body[%d]", i))
			if err != nil {
				out.Items[i].Error = itemError(err)
				continue
			}
			if hook != nil {
				if err := s.hooks.register(ctx, job.ID, *hook); err != nil {
					out.Items[i].Error = &ItemError{Status: 503, Detail: "cannot record the webhook: " + err.Error()}
					continue
				}
			}
			valid, at = append(valid, job), append(at, i)
		}
		if err := s.admit(ctx, k, len(valid)); err != nil {
			return nil, err
		}
		infos, err := s.cfg.Client.EnqueueBatch(ctx, valid)
		if err != nil && len(infos) == 0 {
			return nil, enqueueError(err)
		}
		var ids, fresh []string
		for j, info := range infos {
			it := &out.Items[at[j]]
			it.ID = externalID(k.Tenant, info.ID)
			switch {
			case info.Err != nil:
				it.Error = itemError(enqueueError(info.Err))
				continue
			case info.Existing:
				it.Status = info.Status
				it.Error = &ItemError{Status: http.StatusConflict, Detail: fmt.Sprintf("the tenant already has a job %s (status %s)", it.ID, info.Status)}
			default:
				it.Status = info.Status
				out.Enqueued++
				fresh = append(fresh, info.ID)
			}
			ids = append(ids, info.ID)
		}
		s.track(ctx, k.Tenant, fresh...)
		rec, _ := json.Marshal(batchRecord{Tenant: k.Tenant, Created: time.Now().UTC(), IDs: ids})
		set, err := s.cfg.Redis.SetNX(ctx, s.batchKey(internalID(k.Tenant, bid)), rec, s.resultTTL()).Result()
		if err != nil {
			return nil, huma.Error503ServiceUnavailable("cannot record the batch", err)
		}
		if !set {
			return nil, huma.Error409Conflict(fmt.Sprintf("the tenant already has a batch %s (its jobs were enqueued: %d)", bid, out.Enqueued))
		}
		return &struct{ Body BatchCreated }{out}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-batch", Method: http.MethodGet, Path: "/v1/batches/{id}", Tags: []string{"batches"},
		Summary:  "A batch's progress: its jobs per status",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429},
	}, func(ctx context.Context, in *struct{ BatchIDParam }) (*struct{ Body BatchProgress }, error) {
		k := keyOf(ctx)
		rec, err := s.batch(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		p := BatchProgress{ID: in.ID, Total: len(rec.IDs), Counts: map[jobs.Status]int{}, Created: rec.Created}
		statuses, err := s.statuses(ctx, rec.IDs)
		if err != nil {
			return nil, huma.Error503ServiceUnavailable("cannot read the batch's jobs", err)
		}
		for _, st := range statuses {
			p.Counts[st]++
			if st.Final() {
				p.Done++
			}
		}
		return &struct{ Body BatchProgress }{p}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "batch-results", Method: http.MethodGet, Path: "/v1/batches/{id}/results", Tags: []string{"batches"},
		Summary: "A batch's results as its jobs finish (NDJSON)",
		Description: "One job view per line (application/x-ndjson), in the order the jobs finish; those already final first. " +
			"The response ends when every job of the batch has ended.",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429},
		Responses: map[string]*huma.Response{"200": {Description: "NDJSON of JobView", Content: map[string]*huma.MediaType{
			"application/x-ndjson": {Schema: s.api.OpenAPI().Components.Schemas.Schema(reflectType[JobView](), true, "JobView")}}}},
	}, func(ctx context.Context, in *struct{ BatchIDParam }) (*huma.StreamResponse, error) {
		k := keyOf(ctx)
		rec, err := s.batch(ctx, k, in.ID)
		if err != nil {
			return nil, err
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			hctx.SetHeader("Content-Type", "application/x-ndjson")
			hctx.SetStatus(http.StatusOK)
			w := hctx.BodyWriter()
			rc := http.NewResponseController(w.(http.ResponseWriter))
			ids := make(chan string, len(rec.IDs))
			for _, id := range rec.IDs {
				ids <- id
			}
			close(ids)
			_ = rc.Flush()
			_ = s.cfg.Client.WaitEach(hctx.Context(), ids, func(r jobs.Result) error {
				b, err := json.Marshal(s.view(hctx.Context(), k, r))
				if err != nil {
					return err
				}
				_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := w.Write(append(b, '\n')); err != nil {
					return err
				}
				return rc.Flush()
			})
		}}, nil
	})
}

// parseBatch reads a batch body: a JSON array, or NDJSON.
func parseBatch(body []byte, contentType string, max int) ([]JobRequest, error) {
	var reqs []JobRequest
	strict := func(b []byte, v any) error {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return err
		}
		if dec.More() {
			return errors.New("trailing data after the JSON value")
		}
		return nil
	}
	// NDJSON when it says so, or when the body starts with an object
	// rather than an array (curl --data-binary @jobs.ndjson says JSON).
	if strings.HasPrefix(strings.TrimSpace(contentType), "application/x-ndjson") || bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 1<<20), len(body)+1)
		for line := 1; sc.Scan(); line++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var r JobRequest
			if err := strict(sc.Bytes(), &r); err != nil {
				return nil, huma.Error400BadRequest(fmt.Sprintf("line %d: %v", line, err))
			}
			reqs = append(reqs, r)
		}
		if err := sc.Err(); err != nil {
			return nil, huma.Error400BadRequest(err.Error())
		}
	} else if err := strict(body, &reqs); err != nil {
		return nil, huma.Error400BadRequest("the body is not a JSON array of jobs: " + err.Error())
	}
	switch {
	case len(reqs) == 0:
		return nil, huma.Error422UnprocessableEntity("the batch has no jobs")
	case len(reqs) > max:
		return nil, huma.Error422UnprocessableEntity(fmt.Sprintf("the batch has %d jobs; the cap is %d", len(reqs), max))
	}
	return reqs, nil
}

// itemError turns a huma error into a batch item's.
func itemError(err error) *ItemError {
	var se huma.StatusError
	if errors.As(err, &se) {
		e := &ItemError{Status: se.GetStatus(), Detail: err.Error()}
		if m, ok := se.(*huma.ErrorModel); ok {
			e.Detail, e.Errors = m.Detail, m.Errors
		}
		return e
	}
	return &ItemError{Status: http.StatusInternalServerError, Detail: err.Error()}
}

// batch reads the tenant's batch id: 404 if it has none.
func (s *Server) batch(ctx context.Context, k Key, id string) (batchRecord, error) {
	var rec batchRecord
	b, err := s.cfg.Redis.Get(ctx, s.batchKey(internalID(k.Tenant, id))).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return rec, huma.Error404NotFound("no batch " + id)
	case err != nil:
		return rec, huma.Error503ServiceUnavailable("cannot read the batch", err)
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Tenant != k.Tenant {
		return rec, huma.Error404NotFound("no batch " + id)
	}
	return rec, nil
}

// statuses reads the stored status of each job (pipelined); a job without
// a stored result counts as queued.
func (s *Server) statuses(ctx context.Context, ids []string) ([]jobs.Status, error) {
	out := make([]jobs.Status, 0, len(ids))
	store := s.cfg.Client.Store()
	for len(ids) > 0 {
		group := ids[:min(len(ids), 1000)]
		ids = ids[len(group):]
		cmds, err := s.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range group {
				p.Get(ctx, store.ResultKey(id))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for _, c := range cmds {
			st := jobs.StatusQueued
			if b, err := c.(*redis.StringCmd).Bytes(); err == nil {
				var v struct {
					Status jobs.Status `json:"status"`
				}
				if json.Unmarshal(b, &v) == nil && v.Status != "" {
					st = v.Status
				}
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// finalJSON reports whether a stored Result's JSON is final.
func finalJSON(b []byte) bool {
	var v struct {
		Status jobs.Status `json:"status"`
	}
	return json.Unmarshal(b, &v) == nil && v.Status.Final()
}

// resultTTL is how long batch records are kept: the results'.
func (s *Server) resultTTL() time.Duration { return s.cfg.ResultTTL }
