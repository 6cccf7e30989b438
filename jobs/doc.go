// Package jobs is sandq's wire contract: what a job and its results are.
// It holds the [Job] a producer submits and the [Result] a worker stores,
// [Limits] and the one table of their defaults, caps and minimums
// ([LimitTable]), statuses, the operator's [Policy] and its validation
// with precise errors ([ValidationError]), sessions' specs, cells and
// their results with a typed display bundle ([Display]), and the live
// output entry ([StreamEntry]). It imports the standard library only
// (make vet checks it): a Go program that needs the types links nothing
// else.
//
// A Job is JSON: language, code, stdin, args, env, input files, output
// globs, libraries, limits, isolation, queue, tags, tenant. Zero values
// mean "default"; an operator [Policy] may change the defaults and caps,
// and a job may lower a limit but never raise it above its cap.
// [Policy.Validate] checks every rule the worker enforces on a job's shape
// and reports the first broken one, naming the field, the value and the
// bound; [Policy.Normalize] fills the defaults (a language's own first,
// then the operator's). A Policy names the languages it offers
// ([Language]); the registry (langs.Catalog, langs.Policy) makes sandq's,
// so jobs itself knows no language. Producers validate at enqueue with
// their Policy and workers again with theirs, which is the one that
// counts.
//
// Where the rest lives: the Redis layout (results, done channels, cancels,
// streams, sessions, keys) is internal/store's; the producer's Go client
// is package client; what every door (HTTP, MCP, CLI) does for a tenant is
// package service; running a job is package worker.
package jobs
