package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/sandq/sandq/service"
)

// JobRequest is the body of POST /v1/jobs: a job (its tenant comes from
// the API key, never from the body) and where to deliver its result.
type JobRequest = service.JobRequest

// JobView is a job as the API shows it: its Result (ID as the tenant
// knows it) and its webhook's delivery.
type JobView = service.JobView

// WebhookStatus is the delivery of a job's webhook.
type WebhookStatus = service.WebhookStatus

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
	ID string `path:"id" minLength:"1" maxLength:"94" pattern:"^[A-Za-z0-9_.:-]+$" doc:"the job's ID"`
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
		c := callerOf(ctx)
		wait, err := in.duration(s.cfg.MaxWait)
		if err != nil {
			return nil, err
		}
		id, err := s.svc.SubmitJob(ctx, c, in.Body)
		if err != nil {
			return nil, at(err, "body")
		}
		return s.jobResponse(ctx, c, c.ClientID(id), wait)
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
		wait, err := in.duration(s.cfg.MaxWait)
		if err != nil {
			return nil, err
		}
		out, err := s.jobResponse(ctx, callerOf(ctx), in.ID, wait)
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
		c := callerOf(ctx)
		if err := s.svc.CancelJob(ctx, c, in.ID); err != nil {
			return nil, problem(err)
		}
		out, err := s.jobResponse(ctx, c, in.ID, 0)
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

// jobResponse reads the caller's job id (waiting up to wait for it to
// end) and returns its view: 200 if final, 202 (with Location) if not.
func (s *Server) jobResponse(ctx context.Context, c service.Caller, id string, wait time.Duration) (*jobOutput, error) {
	r, err := s.svc.Job(ctx, c, id, wait)
	if err != nil {
		return nil, problem(err)
	}
	out := &jobOutput{Status: http.StatusOK, Body: s.svc.View(ctx, c, r)}
	if !r.Status.Final() {
		out.Status = http.StatusAccepted
		out.Location = service.JobPath(r.ID)
	}
	return out, nil
}
