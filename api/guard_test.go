package api

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/service"
)

// A form a web page could make a browser send is refused (415); a
// program's untyped body (curl -d) is read as JSON as before.
func TestFormsFromPagesAreRefused(t *testing.T) {
	t.Parallel()
	b := newAPI(t, func(c *Config) { c.Open = true })
	job := `{"lang":"python","code":"print(1)"}`
	for _, tt := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"CrossSiteForm", []string{"Content-Type", "application/x-www-form-urlencoded", "Origin", "http://evil.example"}, 415},
		{"CrossSiteText", []string{"Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}, 415},
		{"CrossSiteMultipart", []string{"Content-Type", "multipart/form-data; boundary=x", "Origin", "null"}, 415},
		{"CurlForm", []string{"Content-Type", "application/x-www-form-urlencoded"}, 202},
		{"PageWithJSON", []string{"Content-Type", "application/json", "Origin", "http://app.example"}, 202},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := b.do("POST", "/v1/jobs", "", job, tt.hdr...)
			require.Equal(t, tt.want, resp.StatusCode, string(body))
			if tt.want == 415 {
				require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
				require.Contains(t, string(body), "takes no forms")
			}
		})
	}
}

// An address that keeps failing authentication is refused before its key
// is looked up; a valid key from another address is unaffected.
func TestFailedAuthenticationsAreThrottled(t *testing.T) {
	t.Parallel()
	b := newAPI(t, nil)
	key := b.key("acme", service.KeyOptions{})
	var codes []int
	for i := range failedAuthBurst + 5 {
		resp, _ := b.do("GET", "/v1/languages", fmt.Sprintf("sqk_guess_%d", i), nil)
		codes = append(codes, resp.StatusCode)
	}
	require.Equal(t, 401, codes[0])
	require.Equal(t, 429, codes[len(codes)-1], "past the burst the guesses are refused: %v", codes)
	require.False(t, b.srv.auths.blocked("192.0.2.1"), "another address is not")
	require.NotEmpty(t, key)
}
