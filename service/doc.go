// Package service is the producer model: what every door of sandq (the
// HTTP API, MCP over HTTP and stdio, the CLI) does for a caller, with the
// rules in one place.
//
//   - The caller ([Caller]): a tenant with scopes and caps, from an API key
//     ([Service.Authenticate]) or the operator's own tool ([Operator]).
//   - IDs: a tenant's job, batch and session IDs are namespaced
//     ([StoredID]), so tenants never meet.
//   - Admission: the policy with the caller's caps, the tenant's quota of
//     jobs not yet final and of open sessions, rates.
//   - Jobs, batches, sessions, artifacts, live output ([Service.Follow])
//     and webhooks, as the caller sees them.
//
// Every failure is an [*Error] of a [Kind] that each door maps to its own
// answer: the API to an RFC 9457 problem and HTTP status, MCP to a tool
// error's text, the CLI to an exit status. The service reaches Redis only
// through the client and the store (internal/store); it links no
// container engine and no storage SDK.
package service
