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

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
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
type BatchProgress = service.BatchProgress

// BatchIDParam is a batch's ID in a path.
type BatchIDParam struct {
	ID string `path:"id" minLength:"1" maxLength:"94" pattern:"^[A-Za-z0-9_.:-]+$"`
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
		BatchID     string `query:"id" maxLength:"94" pattern:"^[A-Za-z0-9_.:-]*$" doc:"the batch's ID (default: generated)"`
		ContentType string `header:"Content-Type"`
		RawBody     []byte
	}) (*struct{ Body BatchCreated }, error) {
		c := callerOf(ctx)
		reqs, err := parseBatch(in.RawBody, in.ContentType, s.cfg.MaxBatchJobs)
		if err != nil {
			return nil, err
		}
		created, err := s.svc.SubmitBatch(ctx, c, in.BatchID, reqs, func(i int) string { return fmt.Sprintf("body[%d]", i) })
		if err != nil {
			return nil, problem(err)
		}
		out := BatchCreated{ID: created.ID, Total: created.Total, Enqueued: created.Enqueued, Items: make([]BatchItem, len(created.Items))}
		for i, it := range created.Items {
			out.Items[i] = BatchItem{Index: it.Index, ID: it.ID, Status: it.Status, Error: itemError(it.Err)}
		}
		return &struct{ Body BatchCreated }{out}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-batch", Method: http.MethodGet, Path: "/v1/batches/{id}", Tags: []string{"batches"},
		Summary:  "A batch's progress: its jobs per status",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429},
	}, func(ctx context.Context, in *struct{ BatchIDParam }) (*struct{ Body BatchProgress }, error) {
		p, err := s.svc.Batch(ctx, callerOf(ctx), in.ID)
		if err != nil {
			return nil, problem(err)
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
		results, err := s.svc.BatchResults(ctx, callerOf(ctx), in.ID)
		if err != nil {
			return nil, problem(err)
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			hctx.SetHeader("Content-Type", "application/x-ndjson")
			hctx.SetStatus(http.StatusOK)
			w := hctx.BodyWriter()
			rc := http.NewResponseController(w.(http.ResponseWriter))
			_ = rc.Flush()
			_ = results(hctx.Context(), func(v JobView) error {
				b, err := json.Marshal(v)
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
	if len(reqs) > max {
		// Refused before the jobs are checked; the service checks it
		// again.
		return nil, huma.Error422UnprocessableEntity(fmt.Sprintf("the batch has %d jobs; the cap is %d", len(reqs), max))
	}
	return reqs, nil
}

// itemError is a batch item's error: a problem as an error response
// would carry it.
func itemError(err error) *ItemError {
	if err == nil {
		return nil
	}
	e := &ItemError{Status: status(err), Detail: detail(err)}
	for _, d := range details(err) {
		if ed, ok := d.(*huma.ErrorDetail); ok {
			e.Errors = append(e.Errors, ed)
		} else {
			e.Errors = append(e.Errors, &huma.ErrorDetail{Message: d.Error()})
		}
	}
	return e
}
