//go:build remote

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"syscall"
	"time"

	spec "github.com/opencontainers/runtime-spec/specs-go"
)

// The libpod API's requests and answers, reduced to the fields sandq
// writes and reads. Field names and JSON tags are libpod's (pkg/specgen,
// pkg/domain/entities, libpod/define, as of podman v5); the service
// ignores what a request leaves out, as it does a zero value.

// podmanSpecGen is specgen.SpecGenerator's subset that podmanSpec sets.
type podmanSpecGen struct {
	Name               string               `json:"name,omitempty"`
	Command            []string             `json:"command,omitempty"`
	Labels             map[string]string    `json:"labels,omitempty"`
	User               string               `json:"user,omitempty"`
	WorkDir            string               `json:"work_dir,omitempty"`
	Hostname           string               `json:"hostname,omitempty"`
	Stdin              *bool                `json:"stdin,omitempty"`
	Terminal           *bool                `json:"terminal,omitempty"`
	Env                map[string]string    `json:"env,omitempty"`
	EnvHost            *bool                `json:"env_host,omitempty"`
	HTTPProxy          *bool                `json:"httpproxy,omitempty"`
	UnsetEnv           []string             `json:"unsetenv,omitempty"`
	NetNS              podmanNamespace      `json:"netns"`
	Volumes            []*podmanNamedVolume `json:"volumes,omitempty"`
	ReadOnlyFilesystem *bool                `json:"read_only_filesystem,omitempty"`
	ReadWriteTmpfs     *bool                `json:"read_write_tmpfs,omitempty"`
	CapDrop            []string             `json:"cap_drop,omitempty"`
	CapAdd             []string             `json:"cap_add,omitempty"`
	NoNewPrivileges    *bool                `json:"no_new_privileges,omitempty"`
	SeccompProfilePath string               `json:"seccomp_profile_path,omitempty"`
	Mounts             []spec.Mount         `json:"mounts,omitempty"`
	IpcNS              podmanNamespace      `json:"ipcns"`
	ShmSize            *int64               `json:"shm_size,omitempty"`
	Sysctl             map[string]string    `json:"sysctl,omitempty"`
	LogConfiguration   *podmanLogConfig     `json:"log_configuration,omitempty"`
	OCIRuntime         string               `json:"oci_runtime,omitempty"`
	StopSignal         *syscall.Signal      `json:"stop_signal,omitempty"`
	StopTimeout        *uint                `json:"stop_timeout,omitempty"`
	ResourceLimits     *spec.LinuxResources `json:"resource_limits,omitempty"`
	Rlimits            []spec.POSIXRlimit   `json:"r_limits,omitempty"`
	Image              string               `json:"image"`
	// specgen.NewSpecGenerator's health-check log defaults.
	HealthLogDestination string `json:"healthLogDestination"`
	HealthMaxLogCount    uint   `json:"healthMaxLogCount"`
	HealthMaxLogSize     uint   `json:"healthMaxLogSize"`
}

// newPodmanSpecGen is specgen.NewSpecGenerator(image, false).
func newPodmanSpecGen(image string) *podmanSpecGen {
	return &podmanSpecGen{Image: image, HealthLogDestination: "local", HealthMaxLogCount: 5, HealthMaxLogSize: 500}
}

type podmanNamespace struct {
	NSMode string `json:"nsmode,omitempty"`
	Value  string `json:"value,omitempty"`
}

type podmanNamedVolume struct {
	Name    string
	Dest    string
	Options []string
}

type podmanLogConfig struct {
	Driver string `json:"driver,omitempty"`
}

// podmanCreated is entities' ContainerCreateResponse.
type podmanCreated struct {
	ID       string `json:"Id"`
	Warnings []string
}

// podmanInspect is define.InspectContainerData's subset.
type podmanInspect struct {
	State *struct {
		Running   bool
		OOMKilled bool
		ExitCode  int32
	}
}

// podmanListed is entities' ListContainer subset.
type podmanListed struct {
	ID      string `json:"Id"`
	Names   []string
	Labels  map[string]string
	State   string
	Created time.Time
}

// podmanRemoved is reports.RmReport; Err as the service encoded it.
type podmanRemoved struct {
	ID  string          `json:"Id"`
	Err json.RawMessage `json:"Err,omitempty"`
}

// podmanVolumeCreate is entities' VolumeCreateOptions subset (no tags:
// the bindings send Go's field names).
type podmanVolumeCreate struct {
	Name   string
	Driver string
	Label  map[string]string
}

// podmanVolume is define.InspectVolumeData's subset.
type podmanVolume struct {
	Name      string
	Labels    map[string]string
	CreatedAt time.Time
}

// podmanImage is entities' ImageInspectReport subset.
type podmanImage struct {
	ID string `json:"Id"`
}

// podmanLabelFilter is the filters parameter selecting labels, as the
// bindings' options encode it.
func podmanLabelFilter(labels map[string]string) string {
	var filter []string
	for k, v := range labels {
		filter = append(filter, k+"="+v)
	}
	b, _ := json.Marshal(map[string][]string{"label": filter})
	return string(b)
}

// The query parameters of the calls that take any, as the bindings'
// options (ListOptions, RemoveOptions, ...) make them.
func podmanListParams(labels map[string]string) url.Values {
	return url.Values{"all": {"true"}, "filters": {podmanLabelFilter(labels)}}
}

func podmanRemoveParams() url.Values { return url.Values{"force": {"true"}, "volumes": {"true"}} }

func podmanVolumeListParams(labels map[string]string) url.Values {
	return url.Values{"filters": {podmanLabelFilter(labels)}}
}

func podmanVolumeRemoveParams(force bool) url.Values {
	return url.Values{"force": {fmt.Sprint(force)}}
}

// call makes one request; out, if not nil, receives the JSON answer. An
// error answer is an *errorhandling.ErrorModel (isNotFound), as the
// bindings return it.
func (p *Podman) call(ctx context.Context, method, endpoint string, params url.Values, body any, out any, pathValues ...string) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	resp, err := p.conn.DoRequest(ctx, r, method, endpoint, params, nil, pathValues...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return resp.Process(out)
}
