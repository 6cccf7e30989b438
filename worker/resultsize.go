package worker

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/artifacts"
	"github.com/sandq/sandq/jobs"
)

// Stored results are bounded: a Result's JSON in Redis never passes
// Config.MaxResultBytes. Streams that would take it past the cap move to
// the artifact store, largest first, and the Result keeps their first
// bytes and a reference (Output.StdoutArtifact); see boundResult.
const (
	// DefaultMaxResultBytes is the default cap on a stored Result's JSON.
	DefaultMaxResultBytes = 1 << 20
	// MinMaxResultBytes is the smallest cap a worker accepts: room for
	// every stream's kept head and the rest of a Result.
	MinMaxResultBytes = 256 << 10
	// spillHead is how many bytes of a moved stream the Result keeps.
	spillHead = 8 << 10
)

// stream is one output stream of a Result: the run's, the compile step's
// or the installer's stdout or stderr.
type stream struct {
	name   string // artifact name: ".sandq/stdout", ".sandq/compile.stderr", ...
	out    *jobs.Output
	stderr bool
}

func (s stream) encoded() string {
	if s.stderr {
		return s.out.Stderr
	}
	return s.out.Stdout
}

func (s stream) bytes() ([]byte, error) {
	if s.stderr {
		return s.out.StderrBytes()
	}
	return s.out.StdoutBytes()
}

// keep replaces the stream's kept bytes with b's head, noting where the
// whole is (artifact name, or "" with truncated set when it could not be
// stored).
func (s stream) keep(b []byte, artifact string) {
	head := jobs.Head(b, spillHead)
	if s.stderr {
		s.out.SetStderr(head)
		s.out.StderrArtifact = artifact
		s.out.StderrTruncated = s.out.StderrTruncated || artifact == ""
		return
	}
	s.out.SetStdout(head)
	s.out.StdoutArtifact = artifact
	s.out.StdoutTruncated = s.out.StdoutTruncated || artifact == ""
}

// streams lists res's output streams.
func streams(res *jobs.Result) []stream {
	var out []stream
	add := func(prefix string, o *jobs.Output) {
		// Under agent.ReservedDir: no job file is ever collected there, so
		// a moved stream never takes a job file's name or key.
		dir := agent.ReservedDir + "/"
		out = append(out, stream{dir + prefix + "stdout", o, false}, stream{dir + prefix + "stderr", o, true})
	}
	add("", &res.Output)
	if res.Compile != nil {
		add("compile.", &res.Compile.Output)
	}
	if res.Install != nil && res.Install.Step != nil {
		add("install.", &res.Install.Step.Output)
	}
	return out
}

// resultSize is the size of r's stored JSON.
func resultSize(r *jobs.Result) int {
	b, err := jobs.EncodeJSON(r)
	if err != nil {
		return 0 // checked again by the store
	}
	return len(b)
}

// boundResult keeps res's JSON within h.cfg.MaxResultBytes. Streams move to
// the artifact store, largest first, until it fits; the Result keeps each
// one's first bytes, and the artifact (kind "output") holds the whole kept
// stream. A stream that cannot be stored (no artifact store, or it fails)
// is cut to its head and marked truncated, with the reason in
// ArtifactErrors. Should lists of names still not fit (an operator's
// artifact caps far above the defaults), they are cut too.
func (h *Handler) boundResult(ctx context.Context, res *jobs.Result, log zerolog.Logger) {
	limit := h.cfg.MaxResultBytes
	size := resultSize(res)
	if size <= limit {
		return
	}
	ss := streams(res)
	slices.SortStableFunc(ss, func(a, b stream) int { return cmp.Compare(len(b.encoded()), len(a.encoded())) })
	for _, s := range ss {
		if size <= limit {
			return
		}
		if len(s.encoded()) <= spillHead {
			break
		}
		h.spill(ctx, res, s, log)
		size = resultSize(res)
	}
	for cut := 0; size > limit && cut < 64; cut++ {
		// Halve the longest list, noting it, until the Result fits.
		note := fmt.Sprintf("result over the %d-byte cap: ", limit)
		switch {
		case len(res.DroppedArtifacts) > 1:
			res.DroppedArtifacts = res.DroppedArtifacts[:len(res.DroppedArtifacts)/2]
			note += "dropped_artifacts list cut"
		case len(res.ArtifactErrors) > 1:
			res.ArtifactErrors = res.ArtifactErrors[:len(res.ArtifactErrors)/2]
			note += "artifact_errors list cut"
		case len(res.Artifacts) > 1:
			res.Artifacts = halveFiles(res.Artifacts)
			note += "artifacts list cut (the files stay in the store under the job's prefix)"
		default:
			res.DroppedArtifacts, res.ArtifactErrors = nil, nil
			res.Artifacts = slices.DeleteFunc(res.Artifacts, func(a jobs.Artifact) bool { return a.Kind != "output" })
			note += "artifact lists dropped"
		}
		if !slices.Contains(res.ArtifactErrors, note) {
			res.ArtifactErrors = append(res.ArtifactErrors, note)
		}
		size = resultSize(res)
	}
	if size > limit {
		log.Error().Int("bytes", size).Int("cap", limit).Msg("result still over the cap after moving its output out")
	}
}

// spill moves stream s of res to the artifact store.
func (h *Handler) spill(ctx context.Context, res *jobs.Result, s stream, log zerolog.Logger) {
	b, err := s.bytes()
	if err != nil { // our own encoding: cannot happen
		s.keep(nil, "")
		return
	}
	fail := func(err error) {
		log.Warn().Err(err).Str("stream", s.name).Msg("move output to the artifact store")
		res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: result over the %d-byte cap and the stream could not be stored (%v); only its first %d bytes are kept",
			s.name, h.cfg.MaxResultBytes, err, len(jobs.Head(b, spillHead))))
		s.keep(b, "")
	}
	if h.cfg.Artifacts == nil {
		fail(fmt.Errorf("this worker has no artifact store"))
		return
	}
	key, err := artifacts.Key(h.cfg.ArtifactPrefix, res.ID, s.name)
	if err == nil && slices.ContainsFunc(res.Artifacts, func(a jobs.Artifact) bool { return a.Key == key }) {
		// Cannot happen (the name is reserved); never store over another.
		err = fmt.Errorf("key %s is another artifact's", key)
	}
	if err != nil {
		fail(err)
		return
	}
	ct := "application/octet-stream"
	if utf8.Valid(b) {
		ct = "text/plain; charset=utf-8"
	}
	err = artifacts.Retry(ctx, h.cfg.UploadAttempts, h.cfg.UploadBackoff, func() error {
		return h.cfg.Artifacts.Put(ctx, key, bytes.NewReader(b), int64(len(b)), ct)
	})
	if err != nil {
		fail(err)
		return
	}
	url, err := h.cfg.Artifacts.URL(ctx, key)
	if err != nil {
		res.ArtifactErrors = append(res.ArtifactErrors, fmt.Sprintf("%s: %v", s.name, err))
	}
	res.Artifacts = append(res.Artifacts, jobs.Artifact{
		Name: s.name, Kind: "output", Key: key, URL: url, Size: int64(len(b)), ContentType: ct,
	})
	s.keep(b, s.name)
}

// halveFiles drops the second half of the plots and files in as, keeping
// the moved output streams (which the Result references).
func halveFiles(as []jobs.Artifact) []jobs.Artifact {
	files := 0
	for _, a := range as {
		if a.Kind != "output" {
			files++
		}
	}
	keep, out := files/2, as[:0]
	for _, a := range as {
		if a.Kind == "output" || keep > 0 {
			if a.Kind != "output" {
				keep--
			}
			out = append(out, a)
		}
	}
	return out
}
