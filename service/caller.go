package service

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/sandq/sandq/jobs"
)

// Scopes a caller may hold.
const (
	// ScopeRead reads jobs, batches and sessions: results, events,
	// artifacts, files.
	ScopeRead = "jobs:read"
	// ScopeWrite enqueues and cancels jobs and batches, and opens and
	// drives sessions.
	ScopeWrite = "jobs:write"
)

// ScopeCritical lets a key's jobs use the critical queue (weight 6 of
// 10): without it a key's jobs may use default and batch only, so no
// tenant can jump every other's queue by asking.
const ScopeCritical = "queue:critical"

// ScopeMetrics reads the API's /metrics, where every tenant's usage and
// refusals are: for the operator's scraper, never a tenant's key.
const ScopeMetrics = "metrics:read"

// ScopeNetwork lets a key's jobs ask for a network policy
// (jobs.Job.Network), within the operator's --run-allow-hosts: without
// it a key's jobs run without network, as every job does by default.
const ScopeNetwork = "network:egress"

// ScopeSharedEnvironments lets a key make and delete shared environments
// (built from recipes), which every tenant's jobs may name: the
// operator's. Every key with ScopeWrite makes and deletes its tenant's own.
const ScopeSharedEnvironments = "environments:shared"

// Scopes lists every scope, for validation and help.
var Scopes = []string{ScopeRead, ScopeWrite, ScopeCritical, ScopeMetrics, ScopeNetwork, ScopeSharedEnvironments, ScopeTenants}

// DefaultScopes are a new key's scopes when none are given.
var DefaultScopes = []string{ScopeRead, ScopeWrite}

// Caller is who asks: a tenant with its scopes and caps. An API key makes
// one ([Service.Authenticate]); the operator's own tools (the CLI, MCP over
// stdio) make theirs with [Operator].
type Caller struct {
	// KeyID and KeyHash name the API key; empty for the operator and for
	// an open API.
	KeyID, KeyHash string
	// Tenant owns every job, batch and session the caller makes; "" is the
	// anonymous tenant.
	Tenant string
	// Scopes are what the caller may do.
	Scopes []string
	// Caps lower the operator's caps on limits for the caller's jobs and
	// sessions; zero fields leave them.
	Caps jobs.Limits
	// RatePerSecond and MaxQueued are the caller's own rate and quota of
	// jobs not yet final, MaxQueuedBytes its quota of their held bytes (jobs.Job.HeldBytes);
	// 0 uses the service's defaults. MaxRunning caps the caller's tenant's
	// jobs released to the workers at once; 0 is a fair share of the
	// workers' slots (the slots over the tenants with jobs not yet final).
	RatePerSecond, MaxQueued, MaxRunning int
	MaxQueuedBytes                       int64
	// WebhookSecret signs the caller's webhooks; empty for the open
	// API's callers, whose webhooks the service's own secret signs.
	WebhookSecret string
	// IDs as stored: the operator's tools name jobs as sandq stores them,
	// whatever their tenant; a tenant's own callers name theirs (see
	// [Caller.StoredID]).
	raw bool
}

// mayUse refuses a job on a queue c's scopes do not allow.
func (c Caller) mayUse(q jobs.Queue) error {
	if q == jobs.QueueCritical && !c.Has(ScopeCritical) {
		return &Error{Kind: Forbidden, Msg: "this API key may not use the critical queue (its scope " + ScopeCritical + ")"}
	}
	return nil
}

// mayReach refuses a network policy to a caller without ScopeNetwork.
func (c Caller) mayReach(n *jobs.NetworkPolicy) error {
	if n != nil && !c.Has(ScopeNetwork) {
		return &Error{Kind: Forbidden, Msg: "this API key may not ask for a network (its scope " + ScopeNetwork + ")"}
	}
	return nil
}

// Operator is the caller of an operator's own tool: every scope, no caps,
// jobs of tenant (may be "") and IDs as stored.
func Operator(tenant string) Caller {
	return Caller{Tenant: tenant, Scopes: Scopes, raw: true}
}

// Open is the caller of an API without keys (the anonymous tenant, every
// scope).
func Open() Caller { return Caller{KeyID: openKeyID, Scopes: Scopes} }

const openKeyID = "open"

// IsOpen reports whether c is an open API's caller.
func (c Caller) IsOpen() bool { return c.KeyID == openKeyID && c.KeyHash == "" }

// Has reports whether c holds scope.
func (c Caller) Has(scope string) bool { return slices.Contains(c.Scopes, scope) }

// need refuses a caller without scope.
func (c Caller) need(scope string) error {
	if !c.Has(scope) {
		return newError(Forbidden, "this API key lacks the %s scope", scope)
	}
	return nil
}

// IDs are namespaced per tenant. A caller names its jobs as it likes (or
// lets sandq generate an ID); sandq stores tenant T's job X as
// "t<32 hex of T's SHA-256>.X" (128 bits: no tenant name can be found
// whose prefix is another's), so two tenants' IDs never meet: tenant B
// asking for A's X reads, cancels or enqueues its own X, which is another
// job, and cannot squat or plant a result under A's. The anonymous tenant's
// IDs are stored as given. Batch and session IDs follow the same rule.

// tenantPrefixLen is the length of a tenant's ID prefix: "t", 32 hex, ".".
const tenantPrefixLen = 34

// MaxClientIDBytes caps the IDs callers give: sandq's 128 less the tenant
// prefix.
const MaxClientIDBytes = 128 - tenantPrefixLen

// checkClientID refuses the ID a caller gave a job, session or batch (what)
// if it breaks the ID rule (jobs.CheckName), judged on the ID as given: the
// reason's byte offsets are the caller's, and "." and ".." are refused
// (the links the API answers with, /v1/jobs/.., would not resolve). An
// empty ID is sandq's to generate; the operator's tools are checked on
// the stored ID (jobs.Policy).
func (c Caller) checkClientID(what, id string) error {
	if c.raw || id == "" {
		return nil
	}
	if msg := jobs.CheckName(id, MaxClientIDBytes); msg != "" {
		return &Error{Kind: Invalid, Msg: "invalid " + what, Field: "id", Detail: msg, Value: id}
	}
	return nil
}

func tenantPrefix(tenant string) string {
	if tenant == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t" + hex.EncodeToString(sum[:16]) + "."
}

// StoredID is the ID sandq stores tenant's job (batch, session) id under,
// for operators reading a tenant's jobs with the Go client or the CLI.
func StoredID(tenant, id string) string { return tenantPrefix(tenant) + id }

// StoredID is the ID sandq stores c's job (batch, session) id under.
func (c Caller) StoredID(id string) string {
	if c.raw {
		return id
	}
	return StoredID(c.Tenant, id)
}

// ClientID is the ID c knows a stored ID by.
func (c Caller) ClientID(stored string) string {
	if c.raw {
		return stored
	}
	return strings.TrimPrefix(stored, tenantPrefix(c.Tenant))
}

// owns reports whether c may see stored job r: the operator's tools see
// every job, a tenant's callers only their tenant's (the Result records
// it; the ID prefix alone is no proof).
func (c Caller) owns(r jobs.Result) bool { return c.raw || r.Tenant == c.Tenant }

// clean leaves c's ID prefix out of a message meant for c.
func (c Caller) clean(msg string) string {
	if c.raw || c.Tenant == "" {
		return msg
	}
	return strings.ReplaceAll(msg, tenantPrefix(c.Tenant), "")
}
