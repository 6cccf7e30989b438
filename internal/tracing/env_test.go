package tracing

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/testing/protocmp"
)

// TestExporterConfigFromEnv: the standard variables, each traces one
// winning over the general one, and a value that cannot be used refused
// with the variable's name.
func TestExporterConfigFromEnv(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		want    ExporterConfig
		wantErr string
	}{
		{name: "base endpoint",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: ExporterConfig{URL: "http://c:4318/v1/traces"}},
		{name: "base endpoint with a path",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/otlp/"},
			want: ExporterConfig{URL: "https://c/otlp/v1/traces"}},
		{name: "traces endpoint as is",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored:4318",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom/traces?k=v"},
			want: ExporterConfig{URL: "http://c:4318/custom/traces?k=v"}},
		{name: "traces endpoint without a path",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " http://c:4318 "},
			want: ExporterConfig{URL: "http://c:4318/"}},
		{name: "headers",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
				"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20a%3Db, x-tenant = acme ,,empty="},
			want: ExporterConfig{URL: "http://c:4318/v1/traces",
				Headers: map[string]string{"Authorization": "Bearer a=b", "x-tenant": "acme", "empty": ""}}},
		{name: "traces headers replace the general ones",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
				"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2"},
			want: ExporterConfig{URL: "http://c:4318/v1/traces", Headers: map[string]string{"b": "2"}}},
		{name: "timeout and gzip",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
				"OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
			want: ExporterConfig{URL: "http://c:4318/v1/traces", Timeout: 2500 * time.Millisecond, Gzip: true}},
		{name: "traces timeout and compression win",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
				"OTEL_EXPORTER_OTLP_TIMEOUT": "2500", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "300",
				"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none"},
			want: ExporterConfig{URL: "http://c:4318/v1/traces", Timeout: 300 * time.Millisecond}},
		{name: "http/protobuf",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
				"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			want: ExporterConfig{URL: "http://c:4318/v1/traces"}},

		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantErr: "tracing: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: sandq exports OTLP over HTTP with protobuf only (http/protobuf)"},
		{name: "json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			wantErr: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json: sandq exports"},
		{name: "no endpoint", env: map[string]string{}, wantErr: "neither OTEL_EXPORTER_OTLP_ENDPOINT nor"},
		{name: "no scheme", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
			wantErr: "OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4318: want an http:// or https:// URL"},
		{name: "bad header", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b"},
			wantErr: `OTEL_EXPORTER_OTLP_HEADERS: "b" is not name=value`},
		{name: "bad header escape", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "a=%zz"},
			wantErr: "OTEL_EXPORTER_OTLP_TRACES_HEADERS: the value of a"},
		{name: "bad timeout", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "10s"},
			wantErr: "OTEL_EXPORTER_OTLP_TIMEOUT=10s: want milliseconds"},
		{name: "bad compression", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"},
			wantErr: "OTEL_EXPORTER_OTLP_COMPRESSION=zstd: want gzip or none"},
		{name: "missing certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
			wantErr: "OTEL_EXPORTER_OTLP_CERTIFICATE: open /nonexistent/ca.pem"},
		{name: "client certificate without its key", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/c.pem"},
			wantErr: "CLIENT_CERTIFICATE and _CLIENT_KEY go together"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := exporterConfigFromEnv(func(k string) string { return tt.env[k] }, os.ReadFile)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExporterTLS: OTEL_EXPORTER_OTLP_CERTIFICATE names the CA the
// collector's certificate is checked against, and _CLIENT_CERTIFICATE
// and _CLIENT_KEY the certificate the exporter shows a collector that
// asks for one.
func TestExporterTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clientCert, clientKey, clientCA := selfSigned(t, dir)

	coll := &collector{}
	srv := httptest.NewUnstartedServer(coll)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	for _, tt := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "trusted, with a client certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": clientCert, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": clientKey}},
		{name: "no client certificate", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": ca},
			wantErr: "certificate required"},
		{name: "collector not trusted", env: map[string]string{},
			wantErr: "certificate signed by unknown authority"},
	} {
		t.Run(tt.name, func(t *testing.T) { // not parallel: the count below
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := exporterConfigFromEnv(func(k string) string { return env[k] }, os.ReadFile)
			require.NoError(t, err)
			exp, err := NewExporter(cfg)
			require.NoError(t, err)
			defer exp.Shutdown(context.Background())
			err = exp.ExportSpans(context.Background(), oneSpan(t))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
		})
	}
	var ok int
	for _, r := range coll.received() {
		require.NoError(t, r.err)
		ok++
	}
	require.Equal(t, 1, ok, "only the trusted export with a client certificate got through")
}

// selfSigned writes a self-signed client certificate and its key in dir
// and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandq-test-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile, pool
}

// TestSetup: with the environment asking for export, Setup's provider
// sends its spans with the service's resource and sandq's scope through
// the exporter, headers and compression as the variables say, and its
// shutdown flushes them; a protocol other than http/protobuf leaves
// tracing off with an error.
func TestSetup(t *testing.T) {
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	coll := &collector{}
	srv := httptest.NewServer(coll)
	t.Cleanup(srv.Close)

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	tp, shutdown, err := Setup(context.Background(), "sandq-test")
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc")
	require.Nil(t, tp)
	require.NoError(t, shutdown(context.Background()))

	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s%2Fecret")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	tp, shutdown, err = Setup(context.Background(), "sandq-test")
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := Tracer().Start(context.Background(), "sandq.test", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("sandq.queue", "default")))
	span.End()
	require.NoError(t, shutdown(context.Background()))

	reqs := coll.received()
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.NoError(t, r.err)
	require.Equal(t, "/v1/traces", r.path)
	require.Equal(t, "s/ecret", r.header.Get("x-api-key"))
	require.Equal(t, "gzip", r.header.Get("Content-Encoding"))
	require.Len(t, r.export.ResourceSpans, 1)
	rs := r.export.ResourceSpans[0]
	attrs := map[string]*commonpb.AnyValue{}
	for _, kv := range rs.Resource.Attributes {
		attrs[kv.Key] = kv.Value
	}
	require.Equal(t, "sandq-test", attrs["service.name"].GetStringValue())
	require.Equal(t, "test", attrs["deployment.environment"].GetStringValue())
	require.Equal(t, "go", attrs["telemetry.sdk.language"].GetStringValue())
	require.NotZero(t, attrs["process.pid"].GetIntValue())
	require.Len(t, rs.ScopeSpans, 1)
	require.Equal(t, Name, rs.ScopeSpans[0].Scope.GetName())
	require.Len(t, rs.ScopeSpans[0].Spans, 1)
	s := rs.ScopeSpans[0].Spans[0]
	require.Equal(t, "sandq.test", s.Name)
	require.Len(t, s.TraceId, 16)
	require.Len(t, s.SpanId, 8)
	require.Empty(t, s.ParentSpanId)
	require.Less(t, s.StartTimeUnixNano, s.EndTimeUnixNano+1)
	require.Empty(t, cmp.Diff([]*commonpb.KeyValue{kv("sandq.queue", anyStr("default"))}, s.Attributes, protocmp.Transform()))
}
