package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandq/sandq/jobs"
)

// Environment is an environment's record: its recipe, whose it is (Tenant;
// Recipe.Shared for the operator's shared ones) and when it was made.
type Environment struct {
	Recipe  jobs.Recipe `json:"recipe"`
	Tenant  string      `json:"tenant,omitempty"`
	Created time.Time   `json:"created"`
}

// EnvBuild is what a worker records of building a recipe's image, by the
// recipe's hash: the image, or why the build failed, with its log.
type EnvBuild struct {
	Hash string `json:"hash"`
	// Recipe is the recipe's key (jobs.Recipe.Key): what the doors find
	// an environment's builds by, without the base image's ID.
	Recipe string `json:"recipe,omitempty"`
	// Image is the built image's ID; empty when the build failed.
	Image string `json:"image,omitempty"`
	// Error says why the build failed ("" when it succeeded).
	Error string `json:"error,omitempty"`
	// Log is the build's output, at most MaxBuildLog bytes (head and tail).
	Log      string    `json:"log,omitempty"`
	TookMS   int64     `json:"took_ms"`
	Built    time.Time `json:"built"`
	LastUsed time.Time `json:"last_used"`
}

// MaxBuildLog caps EnvBuild.Log.
const MaxBuildLog = 64 << 10

// ErrNoEnvironment: no environment of that name for the tenant, nor shared.
var ErrNoEnvironment = errors.New("store: no such environment")

// sharedScope is the scope segment of shared environments: no tenant has
// it (tenants are [A-Za-z0-9_.:-]).
const sharedScope = "*"

func envField(tenant, name string, shared bool) string {
	if shared {
		return sharedScope + "/" + name
	}
	return tenantSegment(tenant) + "/" + name
}

// PutEnvironment stores e (replacing one of the same name and scope).
func (s *Store) PutEnvironment(ctx context.Context, e Environment) error {
	b, err := jobs.EncodeJSON(e)
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.envsKey(), envField(e.Tenant, e.Recipe.Name, e.Recipe.Shared), b).Err(); err != nil {
		return fmt.Errorf("store: put environment: %w", err)
	}
	return nil
}

// AddEnvironment stores e unless an environment of its name and scope
// exists: then it stores nothing and returns that one, and false.
func (s *Store) AddEnvironment(ctx context.Context, e Environment) (Environment, bool, error) {
	b, err := jobs.EncodeJSON(e)
	if err != nil {
		return Environment{}, false, err
	}
	field := envField(e.Tenant, e.Recipe.Name, e.Recipe.Shared)
	for range 3 { // an existing one deleted between the two commands: again
		ok, err := s.rdb.HSetNX(ctx, s.envsKey(), field, b).Result()
		if err != nil {
			return Environment{}, false, fmt.Errorf("store: add environment: %w", err)
		}
		if ok {
			return e, true, nil
		}
		v, err := s.rdb.HGet(ctx, s.envsKey(), field).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return Environment{}, false, fmt.Errorf("store: read environment: %w", err)
		}
		var old Environment
		if err := json.Unmarshal(v, &old); err != nil {
			return Environment{}, false, fmt.Errorf("store: read environment %s: %w", e.Recipe.Name, err)
		}
		return old, false, nil
	}
	return Environment{}, false, fmt.Errorf("store: add environment %s: it changes under us", e.Recipe.Name)
}

// EnvironmentOf returns tenant's own environment name (the shared one when
// shared); ErrNoEnvironment if there is none.
func (s *Store) EnvironmentOf(ctx context.Context, tenant, name string, shared bool) (Environment, error) {
	v, err := s.rdb.HGet(ctx, s.envsKey(), envField(tenant, name, shared)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Environment{}, fmt.Errorf("%w: %q", ErrNoEnvironment, name)
	}
	if err != nil {
		return Environment{}, fmt.Errorf("store: read environment: %w", err)
	}
	var e Environment
	if err := json.Unmarshal(v, &e); err != nil {
		return Environment{}, fmt.Errorf("store: read environment %s: %w", name, err)
	}
	return e, nil
}

// ResolveEnvironment returns the environment tenant means by name: its
// own, else a shared one; ErrNoEnvironment if neither is.
func (s *Store) ResolveEnvironment(ctx context.Context, tenant, name string) (Environment, error) {
	vs, err := s.rdb.HMGet(ctx, s.envsKey(), envField(tenant, name, false), envField("", name, true)).Result()
	if err != nil {
		return Environment{}, fmt.Errorf("store: read environment: %w", err)
	}
	for _, v := range vs {
		if str, ok := v.(string); ok {
			var e Environment
			if err := json.Unmarshal([]byte(str), &e); err != nil {
				return Environment{}, fmt.Errorf("store: read environment %s: %w", name, err)
			}
			return e, nil
		}
	}
	return Environment{}, fmt.Errorf("%w: %q", ErrNoEnvironment, name)
}

// Environments lists every environment (all tenants' and the shared ones)
// when all is set, else tenant's own and the shared ones; sorted by name,
// a tenant's own before a shared one of the same name.
func (s *Store) Environments(ctx context.Context, tenant string, all bool) ([]Environment, error) {
	m, err := s.rdb.HGetAll(ctx, s.envsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list environments: %w", err)
	}
	var out []Environment
	for f, v := range m {
		scope, _, _ := strings.Cut(f, "/")
		if !all && scope != sharedScope && scope != tenantSegment(tenant) {
			continue
		}
		var e Environment
		if json.Unmarshal([]byte(v), &e) == nil {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b Environment) int {
		if c := strings.Compare(a.Recipe.Name, b.Recipe.Name); c != 0 {
			return c
		}
		if a.Recipe.Shared != b.Recipe.Shared {
			if b.Recipe.Shared {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out, nil
}

// DeleteEnvironment removes an environment's record; ErrNoEnvironment if
// there is none. Its image is the collector's to remove.
func (s *Store) DeleteEnvironment(ctx context.Context, tenant, name string, shared bool) error {
	n, err := s.rdb.HDel(ctx, s.envsKey(), envField(tenant, name, shared)).Result()
	if err != nil {
		return fmt.Errorf("store: delete environment: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNoEnvironment, name)
	}
	return nil
}

// PutEnvBuild records a build (its Log cut to MaxBuildLog).
func (s *Store) PutEnvBuild(ctx context.Context, b EnvBuild) error {
	if len(b.Log) > MaxBuildLog {
		half := MaxBuildLog / 2
		b.Log = b.Log[:half] + "\n[... output cut ...]\n" + b.Log[len(b.Log)-half:]
	}
	v, err := jobs.EncodeJSON(b)
	if err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, s.envBuildsKey(), b.Hash, v).Err(); err != nil {
		return fmt.Errorf("store: record build: %w", err)
	}
	return nil
}

// EnvBuilds returns the recorded builds by hash.
func (s *Store) EnvBuilds(ctx context.Context) (map[string]EnvBuild, error) {
	m, err := s.rdb.HGetAll(ctx, s.envBuildsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read builds: %w", err)
	}
	out := make(map[string]EnvBuild, len(m))
	for h, v := range m {
		var b EnvBuild
		if json.Unmarshal([]byte(v), &b) == nil {
			out[h] = b
		}
	}
	return out, nil
}

// EnvBuildOf returns the build of hash, and whether one is recorded.
func (s *Store) EnvBuildOf(ctx context.Context, hash string) (EnvBuild, bool, error) {
	v, err := s.rdb.HGet(ctx, s.envBuildsKey(), hash).Bytes()
	if errors.Is(err, redis.Nil) {
		return EnvBuild{}, false, nil
	}
	if err != nil {
		return EnvBuild{}, false, fmt.Errorf("store: read build: %w", err)
	}
	var b EnvBuild
	if err := json.Unmarshal(v, &b); err != nil {
		return EnvBuild{}, false, fmt.Errorf("store: read build: %w", err)
	}
	return b, true, nil
}

// ForgetEnvBuild removes the record of hash's build (its image removed).
func (s *Store) ForgetEnvBuild(ctx context.Context, hash string) error {
	return s.rdb.HDel(ctx, s.envBuildsKey(), hash).Err()
}
