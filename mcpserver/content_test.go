package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// artifactBackend serves artifacts from memory; the tools that need the
// queue are driven end to end in api and e2e.
type artifactBackend struct {
	Backend
	data map[string][]byte
}

func (b artifactBackend) Artifact(_ context.Context, id, name string, max int64) (jobs.Artifact, []byte, error) {
	d, ok := b.data[name]
	if !ok {
		return jobs.Artifact{}, nil, fmt.Errorf("no %s", name)
	}
	if int64(len(d)) > max {
		return jobs.Artifact{}, nil, fmt.Errorf("too large")
	}
	return jobs.Artifact{Name: name}, d, nil
}

// TestArtifactContentCaps: plots inline as images up to the count, size
// and total caps, everything else (and what passes a cap) as resource
// links whose URIs the artifact template parses back.
func TestArtifactContentCaps(t *testing.T) {
	s := &server{cfg: Config{MaxImages: 2, MaxImageBytes: 10, MaxInlineBytes: 15}.withDefaults()}
	b := artifactBackend{data: map[string][]byte{}}
	r := jobs.Result{ID: "j1"}
	add := func(name, kind string, size int) {
		b.data[name] = []byte(strings.Repeat("x", size))
		r.Artifacts = append(r.Artifacts, jobs.Artifact{Name: name, Kind: kind, Size: int64(size), ContentType: map[bool]string{true: "image/png"}[strings.HasSuffix(name, ".png")]})
	}
	add("plots/plot-001.png", "plot", 8)
	add("plots/plot-002.png", "plot", 11) // over MaxImageBytes
	add("plots/plot-003.png", "plot", 8)  // over MaxInlineBytes (8+8 > 15)
	add("plots/plot-004.png", "plot", 4)  // the second image
	add("plots/plot-005.png", "plot", 1)  // over MaxImages
	add("out/data.csv", "file", 3)
	content := s.artifactContent(context.Background(), b, r)
	require.Len(t, content, 6)
	var images, links []string
	for i, c := range content {
		switch c := c.(type) {
		case *mcp.ImageContent:
			images = append(images, r.Artifacts[i].Name)
		case *mcp.ResourceLink:
			links = append(links, c.Name)
			id, name, ok := parseArtifactURI(c.URI)
			require.True(t, ok, c.URI)
			require.Equal(t, "j1", id)
			require.Equal(t, c.Name, name, "the name's slashes survive the URI")
		}
	}
	require.Equal(t, []string{"plots/plot-001.png", "plots/plot-004.png"}, images)
	require.Equal(t, []string{"plots/plot-002.png", "plots/plot-003.png", "plots/plot-005.png", "out/data.csv"}, links)
}

func TestElideKeepsRunes(t *testing.T) {
	text := strings.Repeat("é", 1000) // 2 bytes each
	for _, max := range []int{7, 100, 1001} {
		out, cut := elide(text, max)
		require.True(t, cut)
		require.True(t, utf8.ValidString(out), "max %d", max)
		require.Contains(t, out, "bytes elided")
		require.LessOrEqual(t, len(out), max+64)
	}
	out, cut := elide("short", 100)
	require.False(t, cut)
	require.Equal(t, "short", out)
}

func TestWaitFor(t *testing.T) {
	s := &server{cfg: Config{MaxWait: time.Minute}.withDefaults()}
	require.Equal(t, time.Minute, s.waitFor(0))
	require.Equal(t, 5*time.Second, s.waitFor(5))
	require.Equal(t, time.Minute, s.waitFor(3600))
}
