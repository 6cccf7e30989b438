// Package store is sandq's Redis schema and the only code that builds a
// Redis key or channel name, runs a script, or decodes a stored value.
// schema.go lists every key and channel family with its type, owner and
// TTL, and builds them; the other files hold the operations on each
// family: results (first final wins, in one script), cancels, live-output
// streams, the session registry and records, workers' heartbeats, library
// sets, toolchain versions, API keys and rates, tenants' active jobs,
// batch records, webhook records, and the asynq task codec. Producers reach
// it through package client and package service, workers through package
// worker.
package store
