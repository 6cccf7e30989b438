package eval

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// MarkerTag is the job tag that carries the end-of-tests marker of the
// program the job runs. The worker copies a job's tags into its Result,
// so the judge reads the marker of the program that actually ran, even
// when that job was enqueued by an earlier, interrupted run of the same
// evaluation (see [ForID]). Tags never reach the container.
const MarkerTag = "eval_marker"

// markerPrefix starts every end-of-tests marker; a nonce follows.
const markerPrefix = "sandq-eval-end-"

// nonceBytes is the size of a marker's nonce: 128 random bits, written as
// 32 hex digits.
const nonceBytes = 16

// nonceZero stands for any nonce in the content a job's ID is derived
// from (see [ForID]).
var nonceZero = strings.Repeat("0", 2*nonceBytes)

// newNonce returns a fresh nonce from crypto/rand.
func newNonce() string {
	b := make([]byte, nonceBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand.Read panics rather than return an error)
	return hex.EncodeToString(b)
}

// markerOf returns the marker line of nonce.
func markerOf(nonce string) string { return markerPrefix + nonce }

// ForID returns j as the content its ID is to be derived from: the
// marker's nonce, wherever it appears in the code, replaced by zeros, and
// the marker tag left out. Every assembly of a sample draws a new nonce,
// so the job differs from run to run; ForID(j) does not, and an ID derived
// from it (batch.IDs) maps the same sample to the same job at every run,
// which is what lets a rerun of the same evaluation resume. j itself is
// not changed.
func ForID(j jobs.Job) jobs.Job {
	marker := j.Tags[MarkerTag]
	nonce, ok := strings.CutPrefix(marker, markerPrefix)
	if !ok || nonce == "" {
		return j
	}
	j.Code = strings.ReplaceAll(j.Code, nonce, nonceZero)
	j.Tags = maps.Clone(j.Tags)
	delete(j.Tags, MarkerTag)
	if len(j.Tags) == 0 {
		j.Tags = nil
	}
	return j
}

// ranToTheEnd reports whether the last non-blank line of stdout is marker:
// the program printed it after its last test, and printed nothing after
// it. Output limits keep the head and the tail of stdout, so the marker
// survives truncation.
func ranToTheEnd(stdout []byte, marker string) bool {
	if marker == "" {
		return false
	}
	s := bytes.TrimRight(stdout, " \t\r\n")
	last := s[bytes.LastIndexByte(s, '\n')+1:]
	return string(bytes.TrimSpace(last)) == marker
}
