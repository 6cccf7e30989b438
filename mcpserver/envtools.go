package mcpserver

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// Environments built from recipes (docs/environments.md): env_create,
// env_list, env_show, env_delete. run_code and session_create name one
// with "environment".

// EnvCreateInput is env_create's input.
type EnvCreateInput struct {
	Name      string            `json:"name" jsonschema:"the environment's name, which jobs give as environment: 1 to 64 of a-z 0-9 _ . -, starting with a letter or digit"`
	Lang      string            `json:"lang" jsonschema:"the sandq language whose image is the base (list_languages); jobs in the environment are of this language"`
	Packages  []string          `json:"packages,omitempty" jsonschema:"Debian packages installed with apt-get, optionally =version (jq, or jq=1.6-2.1+deb12u3)"`
	Libraries []string          `json:"libraries,omitempty" jsonschema:"libraries installed with the language's installer, as run_code's libraries"`
	Files     []jobs.RecipeFile `json:"files,omitempty" jsonschema:"files written into the image (an absolute path, not under /sandq, /work or /tmp; root's, mode 0644)"`
	Shared    bool              `json:"shared,omitempty" jsonschema:"shared with every tenant (needs the environments:shared scope); default: the caller's tenant's own"`
}

// EnvNameInput names an environment.
type EnvNameInput struct {
	Name   string `json:"name" jsonschema:"the environment's name"`
	Shared bool   `json:"shared,omitempty" jsonschema:"the shared environment of that name, not the tenant's own"`
}

// EnvListOutput is env_list's output.
type EnvListOutput struct {
	Environments []service.EnvironmentView `json:"environments"`
}

func (s *server) addEnvTools(srv *mcp.Server) error {
	mcp.AddTool(srv, &mcp.Tool{Name: "env_create", Title: "Make an environment",
		Description: "Records a recipe as an environment: a sandq language image plus Debian packages, libraries and files. " +
			"Nothing is built yet: the first job naming it (run_code or session_create with environment: NAME) builds its " +
			"image, which can take a minute; later jobs start at once. Making it again with the same recipe does nothing; " +
			"another recipe under the same name is an error (env_delete it first).",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in EnvCreateInput) (*mcp.CallToolResult, *service.EnvironmentView, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		v, made, err := b.CreateEnvironment(ctx, jobs.Recipe{Name: in.Name, Lang: in.Lang, Packages: in.Packages,
			Libraries: in.Libraries, Files: in.Files, Shared: in.Shared})
		if err != nil {
			return errorResult(err), nil, nil
		}
		what := "made"
		if !made {
			what = "exists already with this recipe"
		}
		return textResult(fmt.Sprintf("environment %s (%s) %s; run code in it with environment %q", v.Name, v.Lang, what, v.Name)), &v, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "env_list", Title: "List the environments",
		Description: "The environments jobs may name: the tenant's own and the shared ones, with their state (built, failed, not_built).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *EnvListOutput, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		list, err := b.Environments(ctx)
		if err != nil {
			return errorResult(err), nil, nil
		}
		return nil, &EnvListOutput{Environments: list}, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "env_show", Title: "Read an environment",
		Description: "An environment (the tenant's own, else the shared one) with its recipe and its last build: built (the image, " +
			"how long the build took, when it was last used), failed (the error and the tail of the build's output) or not_built.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in EnvNameInput) (*mcp.CallToolResult, *service.EnvironmentView, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		v, err := b.Environment(ctx, in.Name, in.Shared)
		if err != nil {
			return errorResult(err), nil, nil
		}
		return nil, &v, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "env_delete", Title: "Delete an environment",
		Description: "Deletes an environment: jobs naming it are refused from then on, and the workers remove its image.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: false},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in EnvNameInput) (*mcp.CallToolResult, any, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		if err := b.DeleteEnvironment(ctx, in.Name, in.Shared); err != nil {
			return errorResult(err), nil, nil
		}
		return textResult("environment " + in.Name + " deleted"), nil, nil
	})
	return nil
}
