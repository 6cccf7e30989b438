package jobs

// What the external tests (package jobs_test, which may import langs)
// check against the rules' own bounds.
var (
	CheckInputKey = checkInputKey
	IsEnvName     = isEnvName
)

const (
	MaxPathBytes     = maxPathBytes
	MaxPathComponent = maxPathComponent
	MaxTenantBytes   = maxTenantBytes
)
