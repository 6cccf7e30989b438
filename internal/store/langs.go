package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandq/sandq/jobs"
)

// PutLangVersion publishes v, replacing the version published for its
// language.
func (s *Store) PutLangVersion(ctx context.Context, v jobs.LangVersion) error {
	b, err := jobs.EncodeJSON(v)
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.LangsKey(), v.Lang, b).Err(); err != nil {
		return fmt.Errorf("store: put version of %s: %w", v.Lang, err)
	}
	return nil
}

// LangVersions returns the published toolchain versions by language.
func (s *Store) LangVersions(ctx context.Context) (map[string]jobs.LangVersion, error) {
	m, err := s.rdb.HGetAll(ctx, s.LangsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read versions: %w", err)
	}
	out := make(map[string]jobs.LangVersion, len(m))
	for lang, b := range m {
		var v jobs.LangVersion
		if err := json.Unmarshal([]byte(b), &v); err != nil {
			return nil, fmt.Errorf("store: decode version of %s: %w", lang, err)
		}
		out[lang] = v
	}
	return out, nil
}
