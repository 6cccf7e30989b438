//go:build !linux

package sandbox

// allowedCPUs: unknown off Linux, so no pinning.
func allowedCPUs() []int { return nil }
