package batch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/sandq/sandq/jobs"
)

// MaxLineBytes caps one line of a JSON-lines job input. A valid job is
// smaller: 1 MiB of code and 10 MiB of inline files, base64 in JSON, by
// default.
const MaxLineBytes = 64 * jobs.MiB

// Line is one job of an input, with its 1-based line number.
type Line struct {
	N   int
	Job jobs.Job
}

// LineError is an invalid input line.
type LineError struct {
	N   int
	Err error
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %v", e.N, e.Err) }
func (e LineError) Unwrap() error { return e.Err }

// ReadJobs decodes every line of r as a job (jobs.DecodeJob: strict),
// skipping blank lines. A job without a queue gets queue; one without an
// ID gets one from ids (stable: see IDs). Each is then checked with
// validate (a client.Client's Validate: the policy the client enqueues
// with), and two lines may not share an ID. Bad lines are returned apart;
// the error is for a reader that fails or a line over MaxLineBytes.
func ReadJobs(r io.Reader, queue jobs.Queue, ids *IDs, validate func(*jobs.Job) error) ([]Line, []LineError, error) {
	var (
		out  []Line
		bad  []LineError
		seen = map[string]int{} // ID → line
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), MaxLineBytes)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		j, err := jobs.DecodeJob(b)
		if err != nil {
			bad = append(bad, LineError{n, err})
			continue
		}
		if j.ID == "" {
			j.ID = ids.Next(j)
		}
		if j.Queue == "" {
			j.Queue = queue
		}
		if err := validate(&j); err != nil {
			bad = append(bad, LineError{n, err})
			continue
		}
		if first, dup := seen[j.ID]; dup {
			bad = append(bad, LineError{n, fmt.Errorf("id %q is also the id of line %d", j.ID, first)})
			continue
		}
		seen[j.ID] = n
		out = append(out, Line{N: n, Job: j})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, fmt.Errorf("a line is over %d bytes", MaxLineBytes)
		}
		return nil, nil, err
	}
	return out, bad, nil
}

// IDs derives job IDs from jobs' content: the prefix and 32 hex digits of
// SHA-256 over the job's JSON (without ID) and the number of identical
// jobs seen before it. The same input maps to the same IDs on every run,
// so running it again finds the jobs of the first run (Enqueue is
// idempotent by ID), and identical jobs still get distinct IDs.
type IDs struct {
	prefix   string
	occurred map[[sha256.Size]byte]int
}

// NewIDs returns an ID deriver with prefix (a valid job ID prefix).
func NewIDs(prefix string) *IDs {
	return &IDs{prefix: prefix, occurred: map[[sha256.Size]byte]int{}}
}

// Next returns the ID of j, the next job of the input.
func (d *IDs) Next(j jobs.Job) string {
	j.ID = ""
	b, err := json.Marshal(j)
	if err != nil {
		panic(fmt.Sprintf("batch: encode job: %v", err)) // a decoded Job always encodes
	}
	content := sha256.Sum256(b)
	nth := d.occurred[content]
	d.occurred[content] = nth + 1
	h := sha256.New()
	h.Write(content[:])
	fmt.Fprintf(h, "#%d", nth)
	return d.prefix + hex.EncodeToString(h.Sum(nil))[:32]
}
