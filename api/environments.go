package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/danielgtaylor/huma/v2"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// Environments built from recipes (docs/environments.md): the tenant's
// own, and the shared ones a key with the environments:shared scope makes.
// Every rule is the service's.

// EnvNameParam is an environment's name in a path, and whether the shared
// one is meant.
type EnvNameParam struct {
	Name   string `path:"name" minLength:"1" maxLength:"64" pattern:"^[a-z0-9][a-z0-9_.-]*$" doc:"the environment's name"`
	Shared bool   `query:"shared" doc:"the shared environment of that name, not the tenant's own"`
}

// EnvironmentList answers GET /v1/environments.
type EnvironmentList struct {
	Environments []service.EnvironmentView `json:"environments" doc:"the environments the tenant's jobs may name: its own and the shared ones, by name (a tenant's own before a shared one of the same name)"`
}

type envOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     service.EnvironmentView
}

func (s *Server) registerEnvironments() {
	huma.Register(s.api, huma.Operation{
		OperationID: "create-environment", Method: http.MethodPost, Path: "/v1/environments", Tags: []string{"environments"},
		Summary: "Make an environment from a recipe",
		Description: "Validates the recipe (a sandq language, Debian packages, libraries, files) and records it as the tenant's " +
			"environment, or a shared one (shared: true, which needs the environments:shared scope). Nothing is built yet: the " +
			"worker that runs the first job naming it builds its image, once per engine. Answers 201 with the environment, or 200 " +
			"when one of that name with the same recipe exists already; 409 when one of that name has another recipe.",
		MaxBodyBytes: s.cfg.MaxJobBytes, Metadata: map[string]any{scope: ScopeWrite},
		Errors: []int{401, 403, 409, 413, 422, 429, 503}, DefaultStatus: http.StatusCreated,
		Responses: s.envResponses("201", "the environment is made", "200", "the tenant has this environment already, with the same recipe"),
	}, func(ctx context.Context, in *struct{ Body jobs.Recipe }) (*envOutput, error) {
		v, made, err := s.svc.CreateEnvironment(ctx, callerOf(ctx), in.Body)
		if err != nil {
			return nil, at(err, "body")
		}
		out := &envOutput{Status: http.StatusOK, Body: v}
		if made {
			out.Status = http.StatusCreated
		}
		out.Location = "/v1/environments/" + url.PathEscape(v.Name)
		if v.Shared {
			out.Location += "?shared=true"
		}
		return out, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "list-environments", Method: http.MethodGet, Path: "/v1/environments", Tags: []string{"environments"},
		Summary:  "List the environments the tenant's jobs may name",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 429, 503},
	}, func(ctx context.Context, _ *struct{}) (*struct{ Body EnvironmentList }, error) {
		list, err := s.svc.Environments(ctx, callerOf(ctx))
		if err != nil {
			return nil, problem(err)
		}
		return &struct{ Body EnvironmentList }{EnvironmentList{Environments: list}}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-environment", Method: http.MethodGet, Path: "/v1/environments/{name}", Tags: []string{"environments"},
		Summary: "Read an environment and its build",
		Description: "The environment a job naming it would run in: the tenant's own, else the shared one (?shared=true: the " +
			"shared one). Its state is built, failed (the build's error and the tail of its output) or not_built.",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429, 503},
	}, func(ctx context.Context, in *struct{ EnvNameParam }) (*struct{ Body service.EnvironmentView }, error) {
		v, err := s.svc.Environment(ctx, callerOf(ctx), in.Name, in.Shared)
		if err != nil {
			return nil, problem(err)
		}
		return &struct{ Body service.EnvironmentView }{v}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "delete-environment", Method: http.MethodDelete, Path: "/v1/environments/{name}", Tags: []string{"environments"},
		Summary: "Delete an environment",
		Description: "Deletes the tenant's environment (?shared=true: the shared one, which needs the environments:shared scope). " +
			"Jobs naming it are refused from then on; the workers remove its image when no job uses it. Answers 204.",
		Metadata: map[string]any{scope: ScopeWrite}, Errors: []int{401, 403, 404, 429, 503}, DefaultStatus: http.StatusNoContent,
	}, func(ctx context.Context, in *struct{ EnvNameParam }) (*struct{}, error) {
		if err := s.svc.DeleteEnvironment(ctx, callerOf(ctx), in.Name, in.Shared); err != nil {
			return nil, problem(err)
		}
		return nil, nil
	})
}

func (s *Server) envResponses(pairs ...string) map[string]*huma.Response {
	out := map[string]*huma.Response{}
	schema := s.api.OpenAPI().Components.Schemas.Schema(reflectType[service.EnvironmentView](), true, "EnvironmentView")
	for i := 0; i+1 < len(pairs); i += 2 {
		out[pairs[i]] = &huma.Response{Description: pairs[i+1],
			Headers: map[string]*huma.Param{"Location": {Schema: &huma.Schema{Type: huma.TypeString}, Description: "the environment's URL"}},
			Content: map[string]*huma.MediaType{"application/json": {Schema: schema}}}
	}
	return out
}
