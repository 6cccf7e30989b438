package mcpserver

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/artifacts/media"
	"github.com/sandq/sandq/jobs"
)

// JobOutput is a job's result as the tools give it.
type JobOutput struct {
	ID       string      `json:"id" jsonschema:"the job's ID (get_job, cancel_job, sandq://jobs/{id}/artifacts/{name})"`
	Status   jobs.Status `json:"status" jsonschema:"queued, running, or how it ended: succeeded, failed, compile_error, timeout, oom, output_limit, rejected, canceled, internal_error"`
	ExitCode *int        `json:"exit_code,omitempty" jsonschema:"the program's exit code; absent when it did not exit by itself"`
	Signal   string      `json:"signal,omitempty" jsonschema:"the signal that ended the program"`
	Reason   string      `json:"reason,omitempty" jsonschema:"why, in words, for statuses that need it"`
	Stdout   string      `json:"stdout" jsonschema:"standard output (the middle elided past the server's cap; base64 when not UTF-8, see stdout_encoding)"`
	Stderr   string      `json:"stderr"`
	// StdoutEncoding / StderrEncoding are "base64" for bytes that are not
	// UTF-8.
	StdoutEncoding jobs.Encoding `json:"stdout_encoding,omitempty"`
	StderrEncoding jobs.Encoding `json:"stderr_encoding,omitempty"`
	// Truncated: the program's limits.output_bytes or the server's text
	// cap dropped bytes from the middle of a stream.
	StdoutTruncated bool             `json:"stdout_truncated,omitempty"`
	StderrTruncated bool             `json:"stderr_truncated,omitempty"`
	CompileOutput   string           `json:"compile_output,omitempty" jsonschema:"the compiler's output, when compiling failed"`
	InstallOutput   string           `json:"install_output,omitempty" jsonschema:"the package manager's output, when installing the libraries failed"`
	Usage           jobs.Usage       `json:"usage,omitzero"`
	Artifacts       []ArtifactOutput `json:"artifacts,omitempty"`
	Lang            string           `json:"lang,omitempty"`
	// A judged job's verdict, score and cases.
	Verdict jobs.Verdict      `json:"verdict,omitempty" jsonschema:"a judged job's verdict: accepted when every case is, else the first failed case's"`
	Score   *float64          `json:"score,omitempty" jsonschema:"the share of test cases accepted"`
	Cases   []jobs.CaseResult `json:"cases,omitempty" jsonschema:"each test case's verdict, usage and, when not accepted, the heads of its output and the expected output"`
}

// ArtifactOutput is one artifact of a job.
type ArtifactOutput struct {
	Name        string `json:"name" jsonschema:"its path in the work dir, or plots/plot-NNN.png for a plot"`
	Kind        string `json:"kind" jsonschema:"plot, file, or output (a stream too large for the result)"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	URI         string `json:"uri" jsonschema:"read it with resources/read"`
}

// jobResult is a Result as a tool result: a text summary, the plots as
// images (within the caps), the other artifacts as resource links, and
// the JobOutput as structured content. Any status but succeeded (and the
// non-final queued and running) is an error result.
func (s *server) jobResult(ctx context.Context, b Backend, r jobs.Result) (*mcp.CallToolResult, *JobOutput, error) {
	out := s.jobOutput(r)
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary(out)}}}
	res.Content = append(res.Content, s.artifactContent(ctx, b, r)...)
	res.IsError = r.Status.Final() && r.Status != jobs.StatusSucceeded
	return res, out, nil
}

func (s *server) jobOutput(r jobs.Result) *JobOutput {
	out := &JobOutput{ID: r.ID, Status: r.Status, ExitCode: r.ExitCode, Signal: r.Signal, Reason: r.Reason,
		StdoutEncoding: r.StdoutEncoding, StderrEncoding: r.StderrEncoding,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated, Usage: r.Usage, Lang: r.Lang,
		Verdict: r.Verdict, Score: r.Score, Cases: r.Cases}
	var cut bool
	out.Stdout, cut = elide(r.Stdout, s.cfg.MaxTextBytes)
	out.StdoutTruncated = out.StdoutTruncated || cut
	out.Stderr, cut = elide(r.Stderr, s.cfg.MaxTextBytes)
	out.StderrTruncated = out.StderrTruncated || cut
	if r.Compile != nil && r.Status == jobs.StatusCompileError {
		out.CompileOutput, _ = elide(r.Compile.Stdout+r.Compile.Stderr, s.cfg.MaxTextBytes)
	}
	if r.Install != nil && r.Install.Step != nil && (r.Install.Step.ExitCode == nil || *r.Install.Step.ExitCode != 0) {
		out.InstallOutput, _ = elide(r.Install.Step.Stdout+r.Install.Step.Stderr, s.cfg.MaxTextBytes)
	}
	for _, a := range r.Artifacts {
		out.Artifacts = append(out.Artifacts, ArtifactOutput{Name: a.Name, Kind: a.Kind, Size: a.Size,
			ContentType: cmp.Or(a.ContentType, media.ContentType(a.Name)), URI: artifactURI(r.ID, a.Name)})
	}
	return out
}

// summary is a job's output as text for the model.
func summary(o *JobOutput) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "job %s: %s", o.ID, o.Status)
	if o.ExitCode != nil {
		fmt.Fprintf(&sb, ", exit code %d", *o.ExitCode)
	}
	if o.Signal != "" {
		fmt.Fprintf(&sb, ", killed by %s", o.Signal)
	}
	if o.Usage.WallMS > 0 {
		fmt.Fprintf(&sb, ", %d ms", o.Usage.WallMS)
	}
	if o.Usage.MaxRSSKB > 0 {
		fmt.Fprintf(&sb, ", peak memory %d KiB", o.Usage.MaxRSSKB)
	}
	sb.WriteString("\n")
	if o.Reason != "" {
		fmt.Fprintf(&sb, "reason: %s\n", o.Reason)
	}
	if !o.Status.Final() {
		fmt.Fprintf(&sb, "the job has not ended: call get_job with id %q (and wait_seconds) to read its result\n", o.ID)
	}
	if o.Verdict != "" {
		passed := 0
		for _, c := range o.Cases {
			if c.Verdict == jobs.VerdictAccepted {
				passed++
			}
		}
		fmt.Fprintf(&sb, "verdict: %s (%d of %d cases accepted)\n", o.Verdict, passed, len(o.Cases))
		shown := 0
		for i, c := range o.Cases {
			if c.Verdict != jobs.VerdictAccepted && c.Verdict != jobs.VerdictSkipped && shown < 10 {
				fmt.Fprintf(&sb, "case %d: %s: %s\n", i+1, c.Verdict, c.Detail)
				shown++
			}
		}
	}
	section := func(name, text string, enc jobs.Encoding, truncated bool) {
		if text == "" {
			return
		}
		if enc == jobs.EncodingBase64 {
			fmt.Fprintf(&sb, "--- %s: binary, %d bytes of base64 (see the structured content) ---\n", name, len(text))
			return
		}
		fmt.Fprintf(&sb, "--- %s", name)
		if truncated {
			sb.WriteString(" (truncated)")
		}
		sb.WriteString(" ---\n")
		sb.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			sb.WriteString("\n")
		}
	}
	section("compiler output", o.CompileOutput, "", false)
	section("install output", o.InstallOutput, "", false)
	section("stdout", o.Stdout, o.StdoutEncoding, o.StdoutTruncated)
	section("stderr", o.Stderr, o.StderrEncoding, o.StderrTruncated)
	for _, a := range o.Artifacts {
		fmt.Fprintf(&sb, "artifact %s (%s, %d bytes): %s\n", a.Name, a.Kind, a.Size, a.URI)
	}
	return sb.String()
}

// artifactContent is a job's artifacts as content: PNG, JPEG, GIF, WebP
// and SVG plots inline as images while the caps allow, every other
// artifact (and those past the caps) as a resource link.
func (s *server) artifactContent(ctx context.Context, b Backend, r jobs.Result) []mcp.Content {
	var out []mcp.Content
	images, inline := 0, int64(0)
	for _, a := range r.Artifacts {
		ct := cmp.Or(a.ContentType, media.ContentType(a.Name))
		if a.Kind == "plot" && inlineImage(ct) && images < s.cfg.MaxImages && a.Size <= s.cfg.MaxImageBytes && inline+a.Size <= s.cfg.MaxInlineBytes {
			_, data, err := b.Artifact(ctx, r.ID, a.Name, s.cfg.MaxImageBytes)
			if err == nil {
				images++
				inline += int64(len(data))
				out = append(out, &mcp.ImageContent{Data: data, MIMEType: ct})
				continue
			}
		}
		size := a.Size
		out = append(out, &mcp.ResourceLink{URI: artifactURI(r.ID, a.Name), Name: a.Name, MIMEType: ct, Size: &size,
			Description: fmt.Sprintf("%s of job %s", a.Kind, r.ID)})
	}
	return out
}

// inlineImage reports whether an image of this type goes inline.
func inlineImage(contentType string) bool {
	switch strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]) {
	case "image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml":
		return true
	}
	return false
}

// elide keeps at most max bytes of text: its head and tail, with a marker
// between. It reports whether it cut.
func elide(text string, max int) (string, bool) {
	if len(text) <= max {
		return text, false
	}
	head, tail := text[:max/2], text[len(text)-max/2:]
	for len(head) > 0 && !utf8.ValidString(head) { // never split a rune
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	return head + fmt.Sprintf("\n[... %d bytes elided ...]\n", len(text)-len(head)-len(tail)) + tail, true
}
