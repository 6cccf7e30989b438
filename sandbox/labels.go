package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Labels on every container sandq creates. The reconciler finds containers
// by LabelManaged and decides who owns them by LabelOwner.
const (
	LabelManaged = "sandq.managed" // always "true"
	LabelOwner   = "sandq.worker"  // the owner ID of the pool that made it
	LabelPool    = "sandq.pool"    // the pool key's unique name, as in metrics (Stats.Pool)
	LabelJob     = "sandq.job"     // the job it was created for (fresh mode), else empty
	LabelBackend = "sandq.backend" // the runtime's Name
	// LabelNamespace marks a library volume with the namespace (the Redis
	// prefix) of the worker that made it: its collector manages it.
	LabelNamespace = "sandq.namespace"
)

// NewOwnerID returns an owner ID unique to this process: host, PID and a
// random suffix, so a restarted worker never mistakes its predecessor's
// containers for its own.
func NewOwnerID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", sanitizeName(host), os.Getpid(), hex.EncodeToString(b[:]))
}

var nameUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// sanitizeName makes s usable in a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*).
func sanitizeName(s string) string {
	s = strings.Trim(nameUnsafe.ReplaceAllString(s, "-"), "-._")
	if s == "" {
		return "x"
	}
	if len(s) > 40 {
		s = s[:40]
	}
	return s
}

// containerName derives a container's name from its pool and a counter, so
// `docker ps` shows what each container is for.
func containerName(owner, pool string, n uint64) string {
	return fmt.Sprintf("sandq-%s-%s-%d", sanitizeName(pool), sanitizeName(owner), n)
}
