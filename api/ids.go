package api

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Job IDs are namespaced per tenant. A client names its jobs as it likes
// (or lets the API generate an ID); sandq stores a tenant's job X as
// "t<12 hex of the tenant's SHA-256>.X", so two tenants' IDs never meet:
// tenant B asking for A's X reads, cancels or enqueues its own X, which is
// another job, and cannot squat or plant a result under A's. Without a
// tenant (an API without keys) IDs are stored as given. Batch IDs follow the
// same rule.

// tenantPrefixLen is the length of a tenant's ID prefix: "t", 12 hex, ".".
const tenantPrefixLen = 14

// MaxClientIDBytes caps the IDs clients give: sandq's 128 less the tenant
// prefix.
const MaxClientIDBytes = 128 - tenantPrefixLen

func tenantPrefix(tenant string) string {
	if tenant == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t" + hex.EncodeToString(sum[:6]) + "."
}

// internalID is the ID sandq stores the tenant's job id under.
func internalID(tenant, id string) string { return tenantPrefix(tenant) + id }

// externalID is the ID the tenant knows a stored ID by.
func externalID(tenant, id string) string { return strings.TrimPrefix(id, tenantPrefix(tenant)) }

// StoredID returns the ID sandq stores the tenant's job (or batch) id
// under, for operators reading a tenant's jobs with the Go client or the
// CLI.
func StoredID(tenant, id string) string { return internalID(tenant, id) }
