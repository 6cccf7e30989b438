package jobs

// Live output. A job enqueued with Stream has its compile and run steps'
// stdout and stderr recorded, while they run, as a sequence of
// [StreamEntry] values (one per chunk: the agent coalesces, a chunk goes at
// 16 KiB or 50 ms), and a last entry with the final status once the final
// Result is stored. Producers read it with the client's Stream; the Redis
// layout is the store's (internal/store). Writing it never blocks a job: a
// worker drops what it cannot write and says how much (Dropped).

// StreamEntry is one entry of a job's live output: a chunk of one step's
// stream, or the end.
type StreamEntry struct {
	// ID is the entry's ID in the Redis Stream; pass it to Client.Stream
	// to resume after it. Empty for entries made from a stored Result.
	ID string `json:"id,omitempty"`
	// Attempt is the worker attempt that wrote it (1 unless the job was
	// retried after an infrastructure fault: its steps then start again).
	Attempt int `json:"attempt,omitempty"`
	// Step is "compile" or "run"; empty on the end entry.
	Step string `json:"step,omitempty"`
	// Stream is "stdout" or "stderr".
	Stream string `json:"stream,omitempty"`
	// Offset is where Data starts in the step's stream.
	Offset int64 `json:"offset"`
	// Data is the chunk's bytes, exact.
	Data []byte `json:"data,omitempty"`
	// Dropped counts bytes left out just before Offset.
	Dropped int64 `json:"dropped,omitempty"`
	// Limit marks a stream's last entry: it reached output_bytes and no
	// more of it is streamed (the Result keeps its head and tail).
	Limit bool `json:"limit,omitempty"`
	// Status is set on the end entry only: the job's final status. It is
	// the last entry.
	Status Status `json:"status,omitempty"`
	// FromResult marks entries made from the stored Result, for a job
	// that was not streamed or whose stream has expired: its kept output
	// (head and tail, when truncated, with the marker between).
	FromResult bool `json:"from_result,omitempty"`
}

// End reports whether e is the end entry.
func (e StreamEntry) End() bool { return e.Status != "" }
