package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
)

// probeJS is an npm install script, run by `npm install` in the install
// container (the mirror, HOSTPORT, is on the bridge gateway): it tries to reach cloud metadata, the host's Redis, a private
// address and the configured mirror, directly and through the egress
// proxy (HTTPS_PROXY, CONNECT and a plain absolute-URL GET), and writes
// what happened to probe.out in its package directory.
const probeJS = `
const net = require('net'), fs = require('fs');
const proxy = (process.env.HTTPS_PROXY || '').replace('http://', '').split(':');
const mirror = 'HOSTPORT', gw = mirror.split(':')[0];
const lines = [];
function direct(host, port) {
  return new Promise(done => {
    const s = net.connect({host, port, timeout: 5000});
    const end = r => { s.destroy(); lines.push('direct ' + host + ':' + port + ' ' + r); done(); };
    s.on('connect', () => end('CONNECTED'));
    s.on('timeout', () => end('fail'));
    s.on('error', () => end('fail'));
  });
}
function viaProxy(what, request) {
  return new Promise(done => {
    if (!proxy[0]) { lines.push('proxy ' + what + ' no proxy'); return done(); }
    const s = net.connect({host: proxy[0], port: +proxy[1], timeout: 20000});
    let buf = '';
    const end = r => { s.destroy(); lines.push('proxy ' + what + ' ' + r); done(); };
    s.on('connect', () => s.write(request));
    s.on('data', d => { buf += d; const m = buf.match(/^HTTP\/1\.[01] (\d{3})/); if (m) end(m[1]); });
    s.on('timeout', () => end('timeout'));
    s.on('error', e => end('error ' + e.code));
    s.on('end', () => end('closed'));
  });
}
const connect = hp => viaProxy(hp, 'CONNECT ' + hp + ' HTTP/1.1\r\nHost: ' + hp + '\r\n\r\n');
(async () => {
  await direct('169.254.169.254', 80);
  await direct(gw, 6379);
  await direct('10.255.255.1', 80);
  await direct(mirror.split(':')[0], +mirror.split(':')[1]);
  await connect('169.254.169.254:80');
  await viaProxy('GET http://169.254.169.254/latest/meta-data/',
    'GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n');
  await connect(gw + ':6379');
  await connect('127.0.0.1:6379');
  await connect('10.255.255.1:80');
  await connect('metadata.google.internal:80');
  await connect(mirror);
  fs.writeFileSync('probe.out', lines.join('\n') + '\n');
})();
`

// serveNpm serves an npm registry of packages at version 1.0.0, each with
// an install lifecycle script (name: the script's JavaScript, run by npm
// as "node install.js" in the package's directory). It returns the
// registry's URL and host:port as install containers reach it; script
// texts may use HOSTPORT for the latter.
func serveNpm(t *testing.T, scripts map[string]string) (string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	hostPort := fmt.Sprintf("%s:%d", bridgeGateway(t), ln.Addr().(*net.TCPAddr).Port)
	base := "http://" + hostPort + "/"
	mux := http.NewServeMux()
	for name, script := range scripts {
		pkg := map[string]any{"name": name, "version": "1.0.0", "scripts": map[string]string{"install": "node install.js"}}
		pkgJSON, err := json.Marshal(pkg)
		require.NoError(t, err)
		var tgz bytes.Buffer
		gz := gzip.NewWriter(&tgz)
		tw := tar.NewWriter(gz)
		script = strings.ReplaceAll(script, "HOSTPORT", hostPort)
		for file, body := range map[string]string{"package/package.json": string(pkgJSON), "package/install.js": script} {
			require.NoError(t, tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1e9, 0)}))
			_, err := tw.Write([]byte(body))
			require.NoError(t, err)
		}
		require.NoError(t, tw.Close())
		require.NoError(t, gz.Close())
		sum := sha1.Sum(tgz.Bytes())
		tarball := name + "/-/" + name + "-1.0.0.tgz"
		version := map[string]any{"name": name, "version": "1.0.0", "hasInstallScript": true, "scripts": pkg["scripts"],
			"dist": map[string]any{"tarball": base + tarball, "shasum": hex.EncodeToString(sum[:])}}
		packument, err := json.Marshal(map[string]any{"name": name, "dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": version}})
		require.NoError(t, err)
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(packument)
		})
		data := tgz.Bytes()
		mux.HandleFunc("/"+tarball, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(data) })
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return base, hostPort
}

// TestInstallEgress: an install script (an npm package's install
// lifecycle script, run by npm in the install container) tries to reach
// cloud metadata, the host's Redis and a private address. The install
// container has no network, so every direct connection fails; through
// the egress proxy, the only way out, each is refused with 403, and only
// the configured mirror (a private address, allowed because a mirror is
// configured there) is reached. The install itself succeeds from that
// mirror.
func TestInstallEgress(t *testing.T) {
	t.Parallel()
	requireImage(t, "javascript")
	registry, mirror := serveNpm(t, map[string]string{"sandq-probe": probeJS})
	gw := bridgeGateway(t)
	e := newEnv(t)
	e.startWorker("--warm", "", "--npm-registry", registry)
	job := jobs.Job{Lang: "javascript", Libraries: []string{"sandq-probe@1.0.0"},
		Code: `const p = require('path'), fs = require('fs');
process.stdout.write(fs.readFileSync(p.join(p.dirname(require.resolve('sandq-probe/package.json')), 'probe.out'), 'utf8'));`}
	r := e.wait(e.enqueue(job), 5*time.Minute)
	require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s\ninstall: %+v\nstderr: %s", r.Status, r.Reason, r.Install, r.Stderr)
	want := strings.Join([]string{
		"direct 169.254.169.254:80 fail",
		"direct " + gw + ":6379 fail",
		"direct 10.255.255.1:80 fail",
		"direct " + mirror + " fail",
		"proxy 169.254.169.254:80 403",
		"proxy GET http://169.254.169.254/latest/meta-data/ 403",
		"proxy " + gw + ":6379 403",
		"proxy 127.0.0.1:6379 403",
		"proxy 10.255.255.1:80 403",
		"proxy metadata.google.internal:80 403",
		"proxy " + mirror + " 200",
	}, "\n") + "\n"
	require.Equal(t, want, r.Stdout)
}
