package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

// Language is one language the workers run.
type Language struct {
	Name      string   `json:"name"`
	Aliases   []string `json:"aliases,omitempty"`
	Libraries string   `json:"libraries,omitempty" doc:"the package manager that installs a job's libraries; empty when there is none"`
	Version   string   `json:"version,omitempty" doc:"the toolchain's version, as a worker read it from the image"`
	Image     string   `json:"image,omitempty"`
}

// WebhookSecret answers GET /v1/webhook-secret.
type WebhookSecret struct {
	Secret string `json:"secret" doc:"the HMAC-SHA256 secret that signs this key's webhooks"`
}

func (s *Server) registerMisc() {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-languages", Method: http.MethodGet, Path: "/v1/languages", Tags: []string{"meta"},
		Summary:  "The languages, their aliases, installers and toolchain versions",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 429},
	}, func(ctx context.Context, _ *struct{}) (*struct{ Body []Language }, error) {
		list, err := s.svc.Languages(ctx)
		if err != nil {
			return nil, problem(err)
		}
		var out []Language
		for _, l := range list {
			out = append(out, Language{Name: l.Name, Aliases: l.Aliases, Libraries: l.Libraries, Version: l.Version, Image: l.Image})
		}
		return &struct{ Body []Language }{out}, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-webhook-secret", Method: http.MethodGet, Path: "/v1/webhook-secret", Tags: []string{"meta"},
		Summary:  "The secret that signs this key's webhooks",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 429},
	}, func(ctx context.Context, _ *struct{}) (*struct{ Body WebhookSecret }, error) {
		secret, err := s.svc.WebhookSecret(ctx, callerOf(ctx))
		if err != nil {
			return nil, problem(err)
		}
		return &struct{ Body WebhookSecret }{WebhookSecret{Secret: secret}}, nil
	})
}
