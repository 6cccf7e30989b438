// Package e2e holds sandq's end-to-end tests: real worker and API
// processes built from this module, real Redis (single, Cluster,
// Sentinel), real engines (Docker, Podman, gVisor) and MinIO, driven
// through the CLI, the HTTP API, MCP and the Go client, as users would.
package e2e
