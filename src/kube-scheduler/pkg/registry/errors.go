package registry

import "fmt"

// ErrorKind is why a resolution failed, as the plugin's metrics label it.
type ErrorKind string

const (
	// NotAllowed: the image's registry is not in the allow-list; no request was sent.
	NotAllowed ErrorKind = "not_allowed"
	// RegistryFailure: the registry (or its token service) refused, failed or could not
	// be reached, or the rules refused to contact it.
	RegistryFailure ErrorKind = "registry_error"
	// ManifestInvalid: the registry answered with something that is no image manifest we
	// read, or with content other than the digest pinned.
	ManifestInvalid ErrorKind = "manifest_error"
)

// Error is a failed resolution: its kind, and a message saying what was being done,
// where, and how to fix it (never a credential).
type Error struct {
	Kind    ErrorKind
	Message string
}

func (e *Error) Error() string { return e.Message }

func registryErrorf(format string, args ...any) *Error {
	return &Error{Kind: RegistryFailure, Message: fmt.Sprintf(format, args...)}
}

func manifestErrorf(format string, args ...any) *Error {
	return &Error{Kind: ManifestInvalid, Message: fmt.Sprintf(format, args...)}
}
