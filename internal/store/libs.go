package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandq/sandq/jobs"
)

// LibsUse is what workers record of an installed library set's volume:
// the tenant it was installed for (a set is its tenant's own), its size
// when installed and when a job last used it. The collector of unused sets
// (worker.LibsCollector) reads it.
type LibsUse struct {
	Volume   string    `json:"volume"`
	Tenant   string    `json:"tenant,omitempty"`
	Bytes    int64     `json:"bytes,omitempty"`
	LastUsed time.Time `json:"last_used"`
}

// UseLibs records that a job of tenant used the set in volume now; bytes,
// when not zero, is its size (known when it was installed). A zero bytes
// or an empty tenant keeps what was recorded.
func (s *Store) UseLibs(ctx context.Context, volume, tenant string, bytes int64) error {
	if bytes == 0 || tenant == "" {
		if old, err := s.rdb.HGet(ctx, s.LibsKey(), volume).Bytes(); err == nil {
			var u LibsUse
			if json.Unmarshal(old, &u) == nil {
				bytes = cmp.Or(bytes, u.Bytes)
				tenant = cmp.Or(tenant, u.Tenant)
			}
		}
	}
	b, err := jobs.EncodeJSON(LibsUse{Volume: volume, Tenant: tenant, Bytes: bytes, LastUsed: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.LibsKey(), volume, b).Err(); err != nil {
		return fmt.Errorf("store: record use of %s: %w", volume, err)
	}
	return nil
}

// LibsUses returns the recorded uses by volume.
func (s *Store) LibsUses(ctx context.Context) (map[string]LibsUse, error) {
	m, err := s.rdb.HGetAll(ctx, s.LibsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read library uses: %w", err)
	}
	out := make(map[string]LibsUse, len(m))
	for vol, b := range m {
		var u LibsUse
		if err := json.Unmarshal([]byte(b), &u); err == nil {
			out[vol] = u
		}
	}
	return out, nil
}

// ForgetLibs removes the record of volume (removed).
func (s *Store) ForgetLibs(ctx context.Context, volume string) error {
	return s.rdb.HDel(ctx, s.LibsKey(), volume).Err()
}
