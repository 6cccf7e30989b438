package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestComposeFileValid checks docker-compose.yml with the Compose tool that
// is installed (scripts/setup.sh installs docker-compose): `docker compose`
// (v2 plugin) when present, else `docker-compose` (v1).
func TestComposeFileValid(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("docker", "compose", "config", "-q")
	if err := exec.Command("docker", "compose", "version").Run(); err != nil {
		cmd = exec.Command("docker-compose", "config", "-q")
	}
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(cmd.Args, " "), out)

	cmd = exec.Command(cmd.Args[0], append(cmd.Args[1:len(cmd.Args)-2], "config", "--services")...)
	cmd.Dir = ".."
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.ElementsMatch(t, []string{"redis", "minio", "worker", "api"}, strings.Fields(string(out)))
}
