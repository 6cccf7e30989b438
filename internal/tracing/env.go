package tracing

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// exporterConfigFromEnv reads the exporter's configuration from the
// standard OTLP exporter variables, as getenv returns them; readFile
// reads the certificate files they name. Each OTEL_EXPORTER_OTLP_TRACES_X
// wins over OTEL_EXPORTER_OTLP_X:
//
//   - ENDPOINT: the base URL, to which /v1/traces is appended;
//     TRACES_ENDPOINT is used as is (its path / if it has none).
//   - HEADERS: k=v pairs separated by commas, the values URL-encoded.
//   - TIMEOUT: milliseconds, 10 s if unset or 0.
//   - COMPRESSION: gzip or none.
//   - PROTOCOL: http/protobuf only.
//   - CERTIFICATE: a PEM file of the CAs to trust; CLIENT_CERTIFICATE
//     and CLIENT_KEY: PEM files of a client certificate and its key.
//
// A value it cannot use is an error naming the variable.
func exporterConfigFromEnv(getenv func(string) string, readFile func(string) ([]byte, error)) (ExporterConfig, error) {
	var cfg ExporterConfig
	// get returns the traces variable's value if it is set, else the
	// general one's, and the name of the one it read.
	get := func(key string) (name, value string) {
		for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + key, "OTEL_EXPORTER_OTLP_" + key} {
			if v := strings.TrimSpace(getenv(name)); v != "" {
				return name, v
			}
		}
		return "", ""
	}

	if name, p := get("PROTOCOL"); p != "" && p != "http/protobuf" {
		return cfg, fmt.Errorf("tracing: %s=%s: sandq exports OTLP over HTTP with protobuf only (http/protobuf)", name, p)
	}

	name, v := get("ENDPOINT")
	if v == "" {
		return cfg, errors.New("tracing: neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set")
	}
	u, err := url.Parse(v)
	if err != nil {
		return cfg, fmt.Errorf("tracing: %s: %w", name, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return cfg, fmt.Errorf("tracing: %s=%s: want an http:// or https:// URL", name, v)
	}
	if name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
		u.Path, u.RawPath = path.Join("/", u.Path, "v1/traces"), ""
	} else if u.Path == "" {
		u.Path = "/"
	}
	cfg.URL = u.String()

	if name, v := get("HEADERS"); v != "" {
		cfg.Headers = map[string]string{}
		for pair := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(pair) == "" {
				continue
			}
			k, val, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || !validHeaderName(k) {
				return cfg, fmt.Errorf("tracing: %s: %q is not name=value", name, pair)
			}
			dec, err := url.PathUnescape(val)
			if err != nil {
				return cfg, fmt.Errorf("tracing: %s: the value of %s: %w", name, k, err)
			}
			cfg.Headers[k] = strings.TrimSpace(dec)
		}
	}

	if name, v := get("TIMEOUT"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return cfg, fmt.Errorf("tracing: %s=%s: want milliseconds", name, v)
		}
		cfg.Timeout = time.Duration(ms) * time.Millisecond
	}

	switch name, v := get("COMPRESSION"); v {
	case "", "none":
	case "gzip":
		cfg.Gzip = true
	default:
		return cfg, fmt.Errorf("tracing: %s=%s: want gzip or none", name, v)
	}

	var tlsCfg tls.Config
	if name, v := get("CERTIFICATE"); v != "" {
		pem, err := readFile(v)
		if err != nil {
			return cfg, fmt.Errorf("tracing: %s: %w", name, err)
		}
		tlsCfg.RootCAs = x509.NewCertPool()
		if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
			return cfg, fmt.Errorf("tracing: %s=%s: no PEM certificate in it", name, v)
		}
	}
	certName, cert := get("CLIENT_CERTIFICATE")
	keyName, key := get("CLIENT_KEY")
	if (cert == "") != (key == "") {
		return cfg, errors.New("tracing: OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE and _CLIENT_KEY go together")
	}
	if cert != "" {
		certPEM, err := readFile(cert)
		if err != nil {
			return cfg, fmt.Errorf("tracing: %s: %w", certName, err)
		}
		keyPEM, err := readFile(key)
		if err != nil {
			return cfg, fmt.Errorf("tracing: %s: %w", keyName, err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return cfg, fmt.Errorf("tracing: %s, %s: %w", certName, keyName, err)
		}
		tlsCfg.Certificates = []tls.Certificate{c}
	}
	if tlsCfg.RootCAs != nil || tlsCfg.Certificates != nil {
		cfg.TLS = &tlsCfg
	}
	return cfg, nil
}
