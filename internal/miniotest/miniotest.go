// Package miniotest starts private MinIO servers for tests: each on its own
// loopback port with its own data directory, so tests never share a bucket
// and one may stop its server without disturbing another. The binary comes
// from scripts/minio.sh (/usr/local/bin/minio, or $SANDQ_MINIO_BIN).
package miniotest

import (
	"cmp"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Server is one MinIO process.
type Server struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	dir       string
	log       string
	cmd       *exec.Cmd
	t         testing.TB
}

// Start starts a server and stops it when the test ends. The test fails if
// MinIO is not installed or does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("miniotest: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	s := &Server{Endpoint: addr, AccessKey: "sandq-test", SecretKey: "sandq-test-secret",
		dir: dir, log: filepath.Join(dir, "minio.log"), t: t}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func bin() string { return cmp.Or(os.Getenv("SANDQ_MINIO_BIN"), "/usr/local/bin/minio") }

func (s *Server) start() {
	s.t.Helper()
	if _, err := os.Stat(bin()); err != nil {
		s.t.Fatalf("miniotest: no MinIO binary at %s (run scripts/minio.sh, or make setup): %v", bin(), err)
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("miniotest: %v", err)
	}
	defer logf.Close()
	s.cmd = exec.Command(bin(), "server", filepath.Join(s.dir, "data"), "--address", s.Endpoint, "--quiet")
	s.cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("miniotest: start: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		// The health endpoints answer before the object layer is up; an
		// anonymous S3 request answers 503 "Server not initialized" until it
		// is, and 403 after.
		resp, err := http.Get("http://" + s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.log)
			s.t.Fatalf("miniotest: MinIO on %s did not come up in 60 s:\n%s", s.Endpoint, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server (its data stays until Restart or the test's end).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same address and data.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// String describes the server for messages.
func (s *Server) String() string { return fmt.Sprintf("minio@%s", s.Endpoint) }
