package mcpserver

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/service"
)

// Language is one language sandq runs.
type Language struct {
	Name      string   `json:"name"`
	Aliases   []string `json:"aliases,omitempty"`
	Libraries string   `json:"libraries,omitempty" jsonschema:"the package manager that installs a job's libraries; absent when there is none"`
	Version   string   `json:"version,omitempty" jsonschema:"the toolchain's version, as a worker read it from its image"`
	Plots     bool     `json:"plots" jsonschema:"plots are captured (matplotlib, R graphics) and come back as images"`
	Sessions  bool     `json:"sessions" jsonschema:"session_create offers a live interpreter"`
}

// Languages lists the languages with the versions the workers published.
func Languages(ctx context.Context, svc *service.Service) ([]Language, error) {
	list, err := svc.Languages(ctx)
	if err != nil {
		return nil, err
	}
	var out []Language
	for _, l := range list {
		out = append(out, Language{Name: l.Name, Aliases: l.Aliases, Libraries: l.Libraries, Version: l.Version,
			Plots: l.Plots, Sessions: l.Sessions})
	}
	return out, nil
}

// lookupLanguage finds a language by name or alias, case-insensitively.
func lookupLanguage(list []Language, name string) (Language, bool) {
	name = strings.ToLower(strings.TrimSpace(name))
	for _, l := range list {
		if l.Name == name || slices.Contains(l.Aliases, name) {
			return l, true
		}
	}
	return Language{}, false
}

// hello is each language's smallest program, for get_language_details.
var hello = map[string]string{
	"python":     `print("Hello, World!")`,
	"javascript": `console.log("Hello, World!");`,
	"typescript": `const greeting: string = "Hello, World!";` + "\nconsole.log(greeting);",
	"java":       "public class Main {\n    public static void main(String[] args) {\n        System.out.println(\"Hello, World!\");\n    }\n}",
	"cpp":        "#include <iostream>\nint main() {\n    std::cout << \"Hello, World!\" << std::endl;\n}",
	"c":          "#include <stdio.h>\nint main(void) {\n    puts(\"Hello, World!\");\n    return 0;\n}",
	"go":         "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"Hello, World!\")\n}",
	"rust":       "fn main() {\n    println!(\"Hello, World!\");\n}",
	"ruby":       `puts "Hello, World!"`,
	"r":          `print("Hello, World!")`,
	"bash":       `echo "Hello, World!"`,
}

// ExecuteCodeInput is llm-sandbox's execute_code input, its names and
// defaults.
type ExecuteCodeInput struct {
	Code      string   `json:"code" jsonschema:"The code to execute"`
	Language  string   `json:"language,omitempty" jsonschema:"Programming language (python, javascript, java, cpp, go, r, ruby, and sandq's others: list_languages)"`
	Libraries []string `json:"libraries,omitempty" jsonschema:"List of libraries/packages to install"`
	Timeout   int      `json:"timeout,omitempty" jsonschema:"Execution timeout in seconds"`
}

// LanguageInput names a language.
type LanguageInput struct {
	Language string `json:"language" jsonschema:"the language's name or alias"`
}

// addCompatTools adds llm-sandbox's MCP tools under its names, with its
// parameter names and defaults, so prompts written for it work: they run
// on sandq's pool and answer as llm-sandbox does (a JSON text), plots as
// images.
func (s *server) addCompatTools(srv *mcp.Server) error {
	in, err := jsonschema.For[ExecuteCodeInput](nil)
	if err != nil {
		return err
	}
	in.Properties["language"].Default = json.RawMessage(`"python"`)
	in.Properties["timeout"].Default = json.RawMessage(`30`)
	in.Properties["timeout"].Minimum = ptr(1.0)
	mcp.AddTool(srv, &mcp.Tool{Name: "execute_code", Title: "Execute code (llm-sandbox compatible)",
		Description: "Execute code in a secure sandbox environment (llm-sandbox's execute_code). Returns a JSON text with " +
			"success, exit_code, stdout, stderr, language and libraries; plots come back as images.",
		InputSchema: in, Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ExecuteCodeInput) (*mcp.CallToolResult, any, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		job := jobs.Job{Lang: in.Language, Code: in.Code, Libraries: in.Libraries, Tags: map[string]string{"via": "mcp"}}
		job.Limits.TimeoutMS = int64(in.Timeout) * 1000
		r, err := s.run(ctx, req, b, job, 0)
		if err != nil {
			return errorResult(err), nil, nil
		}
		out := s.jobOutput(r)
		libs := in.Libraries
		if libs == nil {
			libs = []string{}
		}
		text, _ := json.Marshal(map[string]any{"success": r.Status == jobs.StatusSucceeded, "exit_code": r.ExitCode,
			"stdout": out.Stdout, "stderr": out.Stderr, "language": in.Language, "libraries": libs,
			"status": r.Status, "reason": r.Reason, "job_id": r.ID})
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}
		res.Content = append(res.Content, s.artifactContent(ctx, b, r)...)
		res.IsError = r.Status.Final() && r.Status != jobs.StatusSucceeded
		return res, nil, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "get_supported_languages", Title: "Supported languages (llm-sandbox compatible)",
		Description: "Get the list of supported programming languages (llm-sandbox's get_supported_languages).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		list, err := Languages(ctx, s.cfg.Service)
		if err != nil {
			return errorResult(err), nil, nil
		}
		var names []string
		for _, l := range list {
			names = append(names, l.Name)
		}
		text, _ := json.Marshal(map[string]any{"languages": names, "total": len(names)})
		return textResult(string(text)), nil, nil
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "get_language_details", Title: "Language details (llm-sandbox compatible)",
		Description: "Get detailed information about a specific language (llm-sandbox's get_language_details): version, " +
			"package manager, visualization support, an example.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in LanguageInput) (*mcp.CallToolResult, any, error) {
		list, err := Languages(ctx, s.cfg.Service)
		if err != nil {
			return errorResult(err), nil, nil
		}
		l, ok := lookupLanguage(list, in.Language)
		if !ok {
			var names []string
			for _, l := range list {
				names = append(names, l.Name)
			}
			return errorResult(fmt.Errorf("unknown language %q; supported: %s", in.Language, strings.Join(names, ", "))), nil, nil
		}
		text, _ := json.MarshalIndent(map[string]any{"language": l.Name, "aliases": l.Aliases, "version": l.Version,
			"package_manager": l.Libraries, "visualization_support": l.Plots, "sessions": l.Sessions,
			"examples": []map[string]string{{"title": "Hello World", "description": "the smallest program", "code": hello[l.Name]}}}, "", "  ")
		return textResult(string(text)), nil, nil
	})
	return nil
}

// addResources adds sandq://languages and the job artifact template.
func (s *server) addResources(srv *mcp.Server) {
	srv.AddResource(&mcp.Resource{URI: "sandq://languages", Name: "languages", MIMEType: "application/json",
		Description: "The languages sandq runs, as list_languages gives them"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			list, err := Languages(ctx, s.cfg.Service)
			if err != nil {
				return nil, err
			}
			data, _ := json.MarshalIndent(list, "", "  ")
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(data)}}}, nil
		})
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "sandq://jobs/{id}/artifacts/{name}", Name: "job artifact",
		Description: "A file a job returned (a plot, an output_files match); name is its path with slashes escaped (plots%2Fplot-001.png)"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id, name, ok := parseArtifactURI(req.Params.URI)
			if !ok {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			b, err := s.backend(ctx, req.Extra)
			if err != nil {
				return nil, err
			}
			a, data, err := b.Artifact(ctx, id, name, s.cfg.MaxResourceBytes)
			if err != nil {
				return nil, resourceError(req.Params.URI, err)
			}
			rc := &mcp.ResourceContents{URI: req.Params.URI, MIMEType: cmp.Or(a.ContentType, media.ContentType(a.Name))}
			if strings.HasPrefix(rc.MIMEType, "text/") || rc.MIMEType == "application/json" {
				rc.Text = string(data)
			} else {
				rc.Blob = data
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}, nil
		})
}

// resourceError is the JSON-RPC error of a resource read that failed with
// err: MCP's "resource not found" (the SDK's: invalid params, -32602, with
// the URI in data) for a job or artifact the caller has none of (another
// tenant's included), invalid params for a request the service refused,
// else an internal error (-32603); never the SDK's code 0 for a plain
// error.
func resourceError(uri string, err error) error {
	switch service.KindOf(err) {
	case service.NotFound:
		return mcp.ResourceNotFoundError(uri)
	case service.Invalid, service.BadRequest, service.Forbidden, service.TooLarge, service.TooMany:
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: uri + ": " + errorText(err)}
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: uri + ": " + errorText(err)}
}

// parseArtifactURI splits sandq://jobs/{id}/artifacts/{name}.
func parseArtifactURI(uri string) (id, name string, ok bool) {
	rest, ok := strings.CutPrefix(uri, "sandq://jobs/")
	if !ok {
		return "", "", false
	}
	rawID, rawName, ok := strings.Cut(rest, "/artifacts/")
	if !ok {
		return "", "", false
	}
	id, err1 := url.PathUnescape(rawID)
	name, err2 := url.PathUnescape(rawName)
	return id, name, err1 == nil && err2 == nil && id != "" && name != ""
}
