package api

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/service"
)

// ArtifactView is one artifact of a job, with the API path that serves it.
type ArtifactView struct {
	Name        string `json:"name" doc:"the file's path in the work dir, plots/plot-NNN.png for a plot, .sandq/stdout for an output stream moved out of a large result"`
	Kind        string `json:"kind" enum:"plot,file,output"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	URL         string `json:"url" doc:"GET it with the API key: a redirect to the store, or the file"`
}

type artifactList struct {
	Body struct {
		Artifacts []ArtifactView `json:"artifacts"`
	}
}

func (s *Server) registerArtifacts() {
	huma.Register(s.api, huma.Operation{
		OperationID: "list-artifacts", Method: http.MethodGet, Path: "/v1/jobs/{id}/artifacts", Tags: []string{"artifacts"},
		Summary:  "List a job's artifacts",
		Metadata: map[string]any{scope: ScopeRead}, Errors: []int{401, 403, 404, 429},
	}, func(ctx context.Context, in *struct{ JobIDParam }) (*artifactList, error) {
		arts, err := s.svc.Artifacts(ctx, callerOf(ctx), in.ID)
		if err != nil {
			return nil, problem(err)
		}
		out := &artifactList{}
		out.Body.Artifacts = []ArtifactView{}
		for _, a := range arts {
			out.Body.Artifacts = append(out.Body.Artifacts, ArtifactView{Name: a.Name, Kind: a.Kind, Size: a.Size,
				ContentType: a.ContentType, URL: service.ArtifactPath(in.ID, a.Name)})
		}
		return out, nil
	})

	huma.Register(s.api, huma.Operation{
		OperationID: "get-artifact", Method: http.MethodGet, Path: "/v1/jobs/{id}/artifacts/{name}", Tags: []string{"artifacts"},
		Summary: "Download an artifact",
		Description: "Redirects (307) to the S3 store's presigned URL, or serves the file from the local store. The name's " +
			"slashes as they are (plots/plot-001.png) or escaped (plots%2Fplot-001.png). A name that is not a clean relative path " +
			"(an empty, . or .. segment, a leading slash, a backslash, a NUL, escaped or not) is 422. HTML, SVG and XML are served " +
			"as downloads (Content-Disposition: attachment).",
		Metadata: map[string]any{scope: ScopeRead, wildcard: "name"}, Errors: []int{401, 403, 404, 422, 429},
		Responses: map[string]*huma.Response{
			"200": {Description: "The file", Content: map[string]*huma.MediaType{"application/octet-stream": {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}}}},
			"307": {Description: "The store's URL", Headers: map[string]*huma.Param{"Location": {Schema: &huma.Schema{Type: huma.TypeString}}}},
		},
	}, func(ctx context.Context, in *struct {
		JobIDParam
		Name string `path:"name" minLength:"1" maxLength:"1024" doc:"the artifact's name, its slashes as they are or escaped"`
	}) (*huma.StreamResponse, error) {
		if err := artifactName(in.Name); err != nil {
			return nil, at(err, "path.name")
		}
		art, err := s.svc.Artifact(ctx, callerOf(ctx), in.ID, in.Name)
		if err != nil {
			return nil, problem(err)
		}
		if service.Remote(art) {
			return &huma.StreamResponse{Body: func(hctx huma.Context) {
				hctx.SetHeader("Location", art.URL)
				hctx.SetStatus(http.StatusTemporaryRedirect)
			}}, nil
		}
		rc, err := s.svc.OpenArtifact(ctx, callerOf(ctx), art)
		if err != nil {
			return nil, problem(err)
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			defer rc.Close()
			ct := art.ContentType
			if ct == "" {
				ct = media.ContentType(art.Name)
			}
			hctx.SetHeader("Content-Type", ct)
			hctx.SetHeader("X-Content-Type-Options", "nosniff")
			if media.Attachment(art.Name, ct) {
				hctx.SetHeader("Content-Disposition", `attachment; filename="`+strings.ReplaceAll(filepath.Base(art.Name), `"`, "")+`"`)
			}
			if f, ok := rc.(interface{ Size() int64 }); ok && f.Size() >= 0 {
				hctx.SetHeader("Content-Length", strconv.FormatInt(f.Size(), 10))
			}
			hctx.SetStatus(http.StatusOK)
			_ = s.writeBody(hctx, rc)
		}}, nil
	})
}

// artifactName refuses a name that is not a clean relative path, as every
// artifact's is: a traversal (.. segments), an absolute path, a
// backslash or a NUL never names an artifact, and says so rather than
// "not found".
func artifactName(name string) error {
	bad := func(why string) error {
		return &service.Error{Kind: service.Invalid, Msg: "invalid artifact name", Detail: why, Value: name}
	}
	switch {
	case strings.ContainsRune(name, 0):
		return bad("has a NUL byte")
	case strings.Contains(name, `\`):
		return bad("has a backslash")
	case strings.HasPrefix(name, "/"):
		return bad("is absolute; an artifact's name is relative to the work dir")
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad("has an empty, . or .. segment")
		}
	}
	return nil
}
