package resolver

import (
	"context"
	"errors"
	"fmt"

	"layersched.io/kube-scheduler/pkg/layers"
	"layersched.io/kube-scheduler/pkg/registry"
)

// RegistrySource resolves keys through a registry client: the key's image parsed as a
// reference (a name that is none fails, naming it), its platform as an OCI platform.
type RegistrySource struct {
	Client *registry.Client
}

// notAllowed is an allow-list refusal, grouped by registry in the logs.
type notAllowed struct {
	domain string
	err    error
}

func (e *notAllowed) Error() string      { return e.err.Error() }
func (e *notAllowed) Unwrap() error      { return e.err }
func (e *notAllowed) WarningKey() string { return "registry " + e.domain }

func (s RegistrySource) parse(key Key) (layers.Reference, registry.Platform, error) {
	ref, ok := layers.ParseReference(key.Image)
	if !ok {
		return ref, registry.Platform{}, &registry.Error{Kind: InvalidReference,
			Message: fmt.Sprintf("resolving layers of %q: it is no image reference a registry serves", key.Image)}
	}
	platform, err := registry.ParsePlatform(key.Platform)
	if err != nil {
		return ref, platform, &registry.Error{Kind: InvalidReference, Message: fmt.Sprintf("resolving layers of %q: %v", key.Image, err)}
	}
	return ref, platform, nil
}

// InvalidReference labels a key that is no image reference, or no platform.
const InvalidReference registry.ErrorKind = "invalid_reference"

// Fetch resolves the key's image on its platform.
func (s RegistrySource) Fetch(ctx context.Context, key Key) (Fetched, error) {
	ref, platform, err := s.parse(key)
	if err != nil {
		return Fetched{}, err
	}
	resolved, err := s.Client.Resolve(ctx, ref, platform)
	if err != nil {
		var typed *registry.Error
		if errors.As(err, &typed) && typed.Kind == registry.NotAllowed {
			return Fetched{}, &notAllowed{ref.Domain, err}
		}
		return Fetched{}, err
	}
	return Fetched{Layers: resolved.Layers, Digest: resolved.Digest}, nil
}

// CurrentDigest is the digest the key's tag points to now (one HEAD).
func (s RegistrySource) CurrentDigest(ctx context.Context, key Key) (string, error) {
	ref, _, err := s.parse(key)
	if err != nil {
		return "", err
	}
	return s.Client.CurrentDigest(ctx, ref)
}
