//go:build remote

package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Podman takes a seccomp profile only as a path (SpecGenerator's
// SeccompProfilePath) that the service itself reads, on its own host, when
// it creates the container: the libpod API has no field for the profile's
// JSON (Docker's has, see seccompSecurityOpt), and neither the bindings
// nor podman-remote send the file. So the worker writes the profile to a
// file named by its hash, which the service reads:
//
//	/var/lib/sandq/seccomp/<first 16 hex digits of sha256(seccomp.json)>.json
//
// when the worker runs as root, else
// $TMPDIR/sandq-seccomp-<euid>/<same name>. This works with a local
// service (the tested set-up). A service on another host (tcp:// or
// ssh:// URI) needs the same file at the same path on its host, e.g.
//
//	h=$(sha256sum sandbox/seccomp.json | cut -c1-16)
//	install -D -m 0644 sandbox/seccomp.json /var/lib/sandq/seccomp/$h.json
//
// from the worker's version of sandq; without it every create fails
// ("opening seccomp profile failed"): it never falls back to the
// engine's default profile.

// seccompDir is the directory of the profile file.
func seccompDir() string {
	if euid := os.Geteuid(); euid != 0 {
		return filepath.Join(os.TempDir(), fmt.Sprintf("sandq-seccomp-%d", euid))
	}
	return "/var/lib/sandq/seccomp"
}

var seccompFileMu sync.Mutex

// seccompProfileFile makes sure the profile's file holds seccomp.json and
// returns its path. It checks on every call (a stat and a 14 KB read per
// container created), so a file removed by a temp cleaner or edited is
// written again. It refuses a directory that someone else could write: its
// files are what the service loads as the filter.
func seccompProfileFile() (string, error) {
	seccompFileMu.Lock()
	defer seccompFileMu.Unlock()
	dir := seccompDir()
	path := filepath.Join(dir, seccompHash[:16]+".json")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("sandbox: seccomp profile: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("sandbox: seccomp profile: %w", err)
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	if !fi.IsDir() || (uid != os.Geteuid() && uid != 0) || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("sandbox: seccomp profile: %s must be a directory owned by this user or root "+
			"and writable by no one else (it is %v, uid %d)", dir, fi.Mode(), uid)
	}
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, seccompJSON) {
		return path, nil
	}
	// Written whole, then renamed: the service never reads a partial file.
	f, err := os.CreateTemp(dir, ".tmp-*.json")
	if err != nil {
		return "", fmt.Errorf("sandbox: seccomp profile: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(seccompJSON)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("sandbox: seccomp profile: %w", err)
	}
	return path, nil
}
