package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// The cell history of a session: what the dashboard shows of its cells.
// The worker appends each cell it ran; only the last SessionCellsKept, and
// only the heads of their code and output (SessionCellHead bytes each), are
// kept, for as long as the session's record.
const (
	SessionCellsKept = 50
	SessionCellHead  = 2 << 10
)

// SessionCell is one cell of a session's history.
type SessionCell struct {
	ID             string          `json:"id"`
	At             time.Time       `json:"at"`
	Status         jobs.CellStatus `json:"status"`
	ExecutionCount int             `json:"execution_count,omitempty"`
	WallMS         int64           `json:"wall_ms"`
	// Code, Stdout and Stderr are heads of at most SessionCellHead bytes;
	// Cut says which were cut.
	Code   string `json:"code"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	Cut    bool   `json:"cut,omitempty"`
	// Error is the error the cell raised, "Name: value".
	Error string `json:"error,omitempty"`
	// Results counts its displayed values (images, tables, ...); Values
	// are the heads of their plain-text forms, in order (those that have
	// one).
	Results int      `json:"results,omitempty"`
	Values  []string `json:"values,omitempty"`
}

// SessionCellOf is the record of a cell of code and its result.
func SessionCellOf(code string, r jobs.CellResult, at time.Time) SessionCell {
	c := SessionCell{ID: r.ID, At: at, Status: r.Status, ExecutionCount: r.ExecutionCount, WallMS: r.Usage.WallMS,
		Results: len(r.Results)}
	var cut bool
	for _, f := range []struct {
		dst *string
		src string
	}{{&c.Code, code}, {&c.Stdout, r.Stdout}, {&c.Stderr, r.Stderr}} {
		*f.dst = f.src
		if len(f.src) > SessionCellHead {
			*f.dst, cut = f.src[:SessionCellHead], true
		}
	}
	for _, d := range r.Results {
		if v, ok := d.Data["text/plain"]; ok && len(c.Values) < 8 {
			if len(v) > SessionCellHead {
				v, cut = v[:SessionCellHead], true
			}
			c.Values = append(c.Values, v)
		}
	}
	c.Cut = cut || r.StdoutTruncated || r.StderrTruncated
	if r.Error != nil {
		c.Error = r.Error.Name + ": " + r.Error.Value
		if len(c.Error) > SessionCellHead {
			c.Error = c.Error[:SessionCellHead]
		}
	}
	return c
}

// AppendSessionCell adds a cell to session id's history, keeping the last
// SessionCellsKept.
func (s *Store) AppendSessionCell(ctx context.Context, id string, c SessionCell) error {
	if err := s.sessionWrites(ctx, func(p redis.Pipeliner) error { return s.appendSessionCell(ctx, p, id, c) }); err != nil {
		return fmt.Errorf("store: session cell %s: %w", id, err)
	}
	return nil
}

// appendSessionCell queues AppendSessionCell's writes on p.
func (s *Store) appendSessionCell(ctx context.Context, p redis.Pipeliner, id string, c SessionCell) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("store: session cell: %w", err)
	}
	k := s.SessionCellsKey(id)
	p.RPush(ctx, k, b)
	p.LTrim(ctx, k, -SessionCellsKept, -1)
	p.Expire(ctx, k, jobs.MaxSessionLifetime+jobs.SessionRetention)
	return nil
}

// SessionCells returns session id's kept cells, oldest first.
func (s *Store) SessionCells(ctx context.Context, id string) ([]SessionCell, error) {
	raw, err := s.rdb.LRange(ctx, s.SessionCellsKey(id), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: session cells %s: %w", id, err)
	}
	out := make([]SessionCell, 0, len(raw))
	for _, r := range raw {
		var c SessionCell
		if json.Unmarshal([]byte(r), &c) == nil {
			out = append(out, c)
		}
	}
	return out, nil
}
