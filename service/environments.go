package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandq/sandq/internal/store"
	"github.com/sandq/sandq/jobs"
)

// Environments built from recipes (docs/environments.md, "Recipes"): a
// caller makes, lists, reads and deletes its tenant's; a caller with
// ScopeSharedEnvironments (the operator) the shared ones, which every
// tenant's jobs may name. The workers build them when a job first names
// one; what the service shows of a build is the workers' record of it.

// Environment states ([EnvironmentView].State).
const (
	EnvBuilt    = "built"     // an engine has its image
	EnvFailed   = "failed"    // its last build failed
	EnvNotBuilt = "not_built" // no job has named it yet (or its image was collected)
)

// EnvironmentView is an environment as its caller sees it: its recipe,
// when it was made and what the workers recorded of its build.
type EnvironmentView struct {
	jobs.Recipe
	// Tenant is the environment's tenant, shown to the operator's tools
	// only (which list every tenant's).
	Tenant  string            `json:"tenant,omitempty" doc:"the environment's tenant (shown to the operator's tools only)"`
	Created time.Time         `json:"created" doc:"when the environment was made"`
	State   string            `json:"state" enum:"built,failed,not_built" doc:"built: an engine has its image; failed: its last build failed (see build.error and build.log_tail); not_built: no job has named it yet, or its image was collected"`
	Build   *EnvironmentBuild `json:"build,omitempty" doc:"the last build a worker recorded, when there is one"`
}

// EnvironmentBuild is what a worker recorded of an environment's last
// build.
type EnvironmentBuild struct {
	Image    string    `json:"image,omitempty" doc:"the built image's ID"`
	Error    string    `json:"error,omitempty" doc:"why the build failed"`
	LogTail  string    `json:"log_tail,omitempty" doc:"the tail of the build's output (at most 4 KiB), when it failed"`
	TookMS   int64     `json:"took_ms" doc:"how long the build took"`
	Built    time.Time `json:"built" doc:"when the build ended"`
	LastUsed time.Time `json:"last_used,omitzero" doc:"when a job last ran in the image (recorded at most once a minute per worker)"`
}

// buildLogTail caps EnvironmentBuild.LogTail.
const buildLogTail = 4 << 10

// CreateEnvironment validates recipe r and records it as c's tenant's
// environment (a shared one, Recipe.Shared, needs ScopeSharedEnvironments).
// It returns the environment and whether it was made: one of that name
// with the same recipe is returned as it is (created false); one with
// another recipe is a Conflict.
func (s *Service) CreateEnvironment(ctx context.Context, c Caller, r jobs.Recipe) (EnvironmentView, bool, error) {
	if err := c.need(ScopeWrite); err != nil {
		return EnvironmentView{}, false, err
	}
	if r.Shared {
		if err := c.need(ScopeSharedEnvironments); err != nil {
			return EnvironmentView{}, false, err
		}
	}
	if err := s.Policy(c).ValidateRecipe(r); err != nil {
		return EnvironmentView{}, false, invalid(c, "invalid environment", err)
	}
	tenant := c.Tenant
	if r.Shared {
		tenant = ""
	}
	e, made, err := s.st.AddEnvironment(ctx, store.Environment{Recipe: r, Tenant: tenant, Created: time.Now().UTC()})
	if err != nil {
		return EnvironmentView{}, false, unavailable("cannot record the environment", err)
	}
	if !made && (e.Recipe.Key() != r.Key() || e.Recipe.Lang != r.Lang) {
		scope := "the tenant has"
		if r.Shared {
			scope = "there is a shared"
		}
		return EnvironmentView{}, false, newError(Conflict, "%s an environment %s with another recipe; delete it first", scope, r.Name)
	}
	v, err := s.environmentView(ctx, c, e, nil)
	return v, made, err
}

// Environments lists the environments c's jobs may name: its tenant's
// own and the shared ones (the operator's tools: every tenant's), sorted
// by name.
func (s *Service) Environments(ctx context.Context, c Caller) ([]EnvironmentView, error) {
	if err := c.need(ScopeRead); err != nil {
		return nil, err
	}
	list, err := s.st.Environments(ctx, c.Tenant, c.raw)
	if err != nil {
		return nil, unavailable("cannot list the environments", err)
	}
	builds, err := s.st.EnvBuilds(ctx)
	if err != nil {
		return nil, unavailable("cannot read the environments' builds", err)
	}
	out := make([]EnvironmentView, 0, len(list))
	for _, e := range list {
		v, err := s.environmentView(ctx, c, e, builds)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Environment returns the environment name means to c's jobs: its
// tenant's own, else a shared one (shared set: the shared one only).
// NotFound if there is none.
func (s *Service) Environment(ctx context.Context, c Caller, name string, shared bool) (EnvironmentView, error) {
	if err := c.need(ScopeRead); err != nil {
		return EnvironmentView{}, err
	}
	var e store.Environment
	var err error
	if shared {
		e, err = s.st.EnvironmentOf(ctx, "", name, true)
	} else {
		e, err = s.st.ResolveEnvironment(ctx, c.Tenant, name)
	}
	if errors.Is(err, store.ErrNoEnvironment) {
		return EnvironmentView{}, noEnvironment(name, shared)
	}
	if err != nil {
		return EnvironmentView{}, unavailable("cannot read the environment", err)
	}
	return s.environmentView(ctx, c, e, nil)
}

// DeleteEnvironment deletes c's tenant's environment name (the shared one
// when shared, which needs ScopeSharedEnvironments). Jobs naming it are
// rejected from then on (or run in a shared one of that name); its image
// is the workers' collector's to remove. NotFound if there is none.
func (s *Service) DeleteEnvironment(ctx context.Context, c Caller, name string, shared bool) error {
	if err := c.need(ScopeWrite); err != nil {
		return err
	}
	if shared {
		if err := c.need(ScopeSharedEnvironments); err != nil {
			return err
		}
	}
	err := s.st.DeleteEnvironment(ctx, c.Tenant, name, shared)
	if errors.Is(err, store.ErrNoEnvironment) {
		return noEnvironment(name, shared)
	}
	if err != nil {
		return unavailable("cannot delete the environment", err)
	}
	return nil
}

func noEnvironment(name string, shared bool) error {
	if shared {
		return newError(NotFound, "no shared environment %s", name)
	}
	return newError(NotFound, "the tenant has no environment %s", name)
}

// checkEnvironment refuses a job or session naming a recipe environment c
// cannot use: none of that name (the tenant's own or shared), or one built
// on another language. The worker checks again when it runs the job (the
// environment may be deleted meanwhile).
func (s *Service) checkEnvironment(ctx context.Context, c Caller, what, env, lang string) error {
	if env == "" || strings.HasPrefix(env, "image:") {
		return nil
	}
	e, err := s.st.ResolveEnvironment(ctx, c.Tenant, env)
	if errors.Is(err, store.ErrNoEnvironment) {
		return &Error{Kind: Invalid, Msg: "invalid " + what, Field: "environment", Value: env,
			Detail: fmt.Sprintf("no environment %s (the tenant's own or shared)", env)}
	}
	if err != nil {
		return unavailable("cannot read the environment", err)
	}
	if e.Recipe.Lang != lang {
		return &Error{Kind: Invalid, Msg: "invalid " + what, Field: "environment", Value: env,
			Detail: fmt.Sprintf("environment %s is built on the %s image: it runs %s %ss, not %s", env, e.Recipe.Lang, e.Recipe.Lang, what, lang)}
	}
	return nil
}

// environmentView is e as c sees it, with its last build from builds
// (read when nil).
func (s *Service) environmentView(ctx context.Context, c Caller, e store.Environment, builds map[string]store.EnvBuild) (EnvironmentView, error) {
	v := EnvironmentView{Recipe: e.Recipe, Created: e.Created, State: EnvNotBuilt}
	if c.raw {
		v.Tenant = e.Tenant
	}
	if builds == nil {
		var err error
		if builds, err = s.st.EnvBuilds(ctx); err != nil {
			return v, unavailable("cannot read the environment's build", err)
		}
	}
	// The builds of the recipe, one per language image ID (engines may
	// differ): the newest is shown.
	key := e.Recipe.Key()
	var last *store.EnvBuild
	for _, b := range builds {
		if b.Recipe == key && (last == nil || b.Built.After(last.Built)) {
			last = &b
		}
	}
	if last == nil {
		return v, nil
	}
	v.Build = &EnvironmentBuild{Image: last.Image, Error: last.Error, TookMS: last.TookMS, Built: last.Built, LastUsed: last.LastUsed}
	switch {
	case last.Image != "":
		v.State = EnvBuilt
	case last.Error != "":
		v.State = EnvFailed
		tail := last.Log
		if len(tail) > buildLogTail {
			tail = "[...]" + tail[len(tail)-buildLogTail:]
		}
		v.Build.LogTail = tail
	}
	return v, nil
}
