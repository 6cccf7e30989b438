// Package kubernetes holds sandq's Kubernetes manifests (the YAML files
// beside this test) and the test that keeps them valid: every document is
// decoded strictly into the Kubernetes API type its kind names.
package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	"sigs.k8s.io/yaml"
)

// kinds maps apiVersion/kind to a fresh typed object.
var kinds = map[string]func() any{
	"v1/Namespace":                       func() any { return &corev1.Namespace{} },
	"v1/Service":                         func() any { return &corev1.Service{} },
	"apps/v1/StatefulSet":                func() any { return &appsv1.StatefulSet{} },
	"apps/v1/DaemonSet":                  func() any { return &appsv1.DaemonSet{} },
	"apps/v1/Deployment":                 func() any { return &appsv1.Deployment{} },
	"node.k8s.io/v1/RuntimeClass":        func() any { return &nodev1.RuntimeClass{} },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return &networkingv1.NetworkPolicy{} },
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// load decodes every manifest strictly: unknown fields, unknown kinds and
// YAML that is not one object fail.
func load(t *testing.T) (objs []any, files []string) {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	for _, p := range paths {
		if p == "kustomization.yaml" {
			continue
		}
		files = append(files, p)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		for i, doc := range docSep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			js, err := yaml.YAMLToJSON([]byte(doc))
			require.NoError(t, err, "%s document %d", p, i)
			var head struct{ APIVersion, Kind string }
			require.NoError(t, json.Unmarshal(js, &head))
			mk, ok := kinds[head.APIVersion+"/"+head.Kind]
			require.True(t, ok, "%s document %d: unknown kind %s/%s", p, i, head.APIVersion, head.Kind)
			obj := mk()
			dec := json.NewDecoder(bytes.NewReader(js))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(obj), "%s document %d (%s): strict decode", p, i, head.Kind)
			objs = append(objs, obj)
		}
	}
	return objs, files
}

func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestManifests(t *testing.T) {
	objs, files := load(t)

	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	data, err := os.ReadFile("kustomization.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, &kust, func(d *json.Decoder) *json.Decoder { return d }))
	slices.Sort(kust.Resources)
	require.Equal(t, files, kust.Resources, "kustomization.yaml lists every manifest")

	var containers []corev1.Container
	var sawRedis, sawWorker, sawDeny, sawAPI, sawGVisor bool
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.StatefulSet:
			containers = append(containers, o.Spec.Template.Spec.Containers...)
			if o.Name == "redis" {
				sawRedis = true
				args := strings.Join(o.Spec.Template.Spec.Containers[0].Args, " ")
				require.Contains(t, args, "--appendonly yes", "Redis is durable")
				require.Contains(t, args, "--maxmemory-policy noeviction", "queues are never evicted")
				require.NotEmpty(t, o.Spec.VolumeClaimTemplates, "Redis keeps its data on a volume")
			}
		case *appsv1.DaemonSet:
			containers = append(containers, o.Spec.Template.Spec.Containers...)
			if o.Name == "worker" {
				sawWorker = true
				mounts := o.Spec.Template.Spec.Containers[0].VolumeMounts
				require.True(t, slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/run/docker.sock" }),
					"the worker drives the node's engine through its socket")
				require.NotNil(t, o.Spec.Template.Spec.TerminationGracePeriodSeconds)
				require.GreaterOrEqual(t, *o.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(60), "time to drain in-flight jobs")
			}
		case *appsv1.Deployment:
			containers = append(containers, o.Spec.Template.Spec.Containers...)
			sawAPI = sawAPI || o.Name == "api"
		case *networkingv1.NetworkPolicy:
			if o.Name == "default-deny" {
				sawDeny = true
				require.Empty(t, o.Spec.PodSelector.MatchLabels, "selects every pod")
				require.Empty(t, o.Spec.PodSelector.MatchExpressions, "selects every pod")
				require.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, o.Spec.PolicyTypes)
				require.Empty(t, o.Spec.Ingress)
				require.Empty(t, o.Spec.Egress)
			}
		case *nodev1.RuntimeClass:
			sawGVisor = sawGVisor || o.Handler == "runsc"
		}
	}
	require.True(t, sawRedis && sawWorker && sawDeny && sawAPI && sawGVisor, "redis, worker, api, default-deny, gVisor RuntimeClass")
	for _, c := range containers {
		require.False(t, c.Resources.Limits.Cpu().IsZero(), "%s: a CPU limit", c.Name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: a memory limit", c.Name)
		for _, e := range c.Env {
			require.Regexp(t, `^SANDQ_[A-Z0-9_]+$`, e.Name, "%s", c.Name)
			require.NoError(t, knownEnv(e.Name), "%s", c.Name)
		}
	}
}

// knownEnv checks that a SANDQ_* variable is one a sandq binary reads.
func knownEnv(name string) error {
	for _, dir := range []string{"../../cmd/worker", "../../cmd/api", "../../internal/config", "../../artifacts", "../../sandbox"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			data, err := os.ReadFile(p)
			if err == nil && bytes.Contains(data, []byte(`"`+name+`"`)) {
				return nil
			}
		}
	}
	return fmt.Errorf("no sandq binary reads %s", name)
}
