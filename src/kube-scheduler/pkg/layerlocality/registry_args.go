package layerlocality

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"layersched.io/kube-scheduler/pkg/registry"
	"layersched.io/kube-scheduler/pkg/resolver"
)

// registryFields are RegistryArgs' fields, for the strict decoder's message.
const registryFields = "{enabled, allowRegistries, insecureRegistries, tokenHosts, authFiles, platform, timeoutSeconds, deadlineSeconds, retries, workers, queueSize, maxCachedImages, maxCachedBytes, cacheTTLSeconds, failureTTLSeconds, resolveWaitMilliseconds}"

// DefaultAllowRegistries are the registries resolved from when the args name none: the
// public ones most images come from (install/kustomize/'s --allow-registry default,
// layersched.deploy DEFAULT_ALLOWED_REGISTRIES).
var DefaultAllowRegistries = []string{"docker.io", "registry.k8s.io", "ghcr.io", "quay.io"}

// Bounds of RegistryArgs: each default is the Python extender's (registry/_client.py,
// _cache.py, extender/_resolver.py); the bounds only refuse nonsense.
const (
	DefaultRegistryTimeoutSeconds  int64 = int64(registry.DefaultTimeout / time.Second)
	MaxRegistryTimeoutSeconds      int64 = 300
	DefaultRegistryDeadlineSeconds int64 = int64(registry.DefaultDeadline / time.Second)
	MaxRegistryDeadlineSeconds     int64 = 600
	DefaultRegistryRetries         int64 = registry.DefaultRetries
	MaxRegistryRetries             int64 = 10
	DefaultResolverWorkers         int64 = resolver.DefaultWorkers
	MaxResolverWorkers             int64 = 64
	DefaultResolverQueueSize       int64 = resolver.DefaultQueueSize
	MaxResolverQueueSize           int64 = 65_536
	DefaultMaxCachedImages         int64 = resolver.DefaultMaxEntries
	MaxMaxCachedImages             int64 = 1_000_000
	DefaultMaxCachedBytes          int64 = resolver.DefaultMaxBytes
	// MinMaxCachedBytes holds a few images; MaxMaxCachedBytes is far past any cluster's.
	MinMaxCachedBytes        int64 = 64 * 1024
	MaxMaxCachedBytes        int64 = 4 * 1024 * 1024 * 1024
	DefaultCacheTTLSeconds   int64 = int64(resolver.DefaultPositiveTTL / time.Second)
	MaxCacheTTLSeconds       int64 = 24 * 3600
	DefaultFailureTTLSeconds int64 = int64(resolver.DefaultNegativeTTL / time.Second)
	MaxFailureTTLSeconds     int64 = 3600
	// DefaultResolveWaitMilliseconds is the extender's own wait for a pod's layers
	// (extender/_server.py DEFAULT_RESOLVE_TIMEOUT_S, its --resolve-timeout-s);
	// MaxResolveWaitMilliseconds is the extender's httpTimeout, what kube-scheduler
	// gives an extender's whole answer (kube-scheduler schedules one pod at a time: a
	// longer wait holds every pod behind this one).
	DefaultResolveWaitMilliseconds int64 = 200
	MaxResolveWaitMilliseconds     int64 = 1000
	DefaultRegistryPlatform              = "linux/amd64"
	maxRegistryListEntries               = 256
	maxRegistryEntryChars                = 255
)

// registryDomain is a registry as image references write it: "host" or "host:port"
// (the Python core's reference domain pattern).
var registryDomain = regexp.MustCompile(`^(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$`)

// RegistryArgs configure resolving pod images' layers from their registry, in the
// background (package resolver over package registry), under the rules of layersched's
// registry client (docs/registry.md): the allow-list, the address guard (a registry on
// a cloud metadata address, a token realm or redirect target on an internal address the
// registry is not on, are refused), pinned digests checked, bodies capped, a deadline
// per attempt. The first pod of an image no quorum of nodes publishes waits at most
// ResolveWaitMilliseconds for its registry's answer; one that does not come by then
// lands for the next pods of the image.
type RegistryArgs struct {
	// Enabled turns resolution on. Default false: a configuration without it makes no
	// registry call (layersched's generator renders true, with install/kustomize/'s allow-list).
	Enabled *bool `json:"enabled,omitempty"`
	// AllowRegistries are the only registries contacted, "host" or "host:port" as image
	// references write them ("docker.io", "10.0.0.5:5000"); a host alone allows its port
	// 443 only. Images of any other registry are never resolved, and that registry is
	// sent nothing (the extender's --allow-registry). Default: docker.io,
	// registry.k8s.io, ghcr.io, quay.io.
	AllowRegistries []string `json:"allowRegistries,omitempty"`
	// InsecureRegistries are reached over plain HTTP, "host" or "host:port" (the
	// extender's --insecure-registry); loopback registries always are, every other over
	// HTTPS.
	InsecureRegistries []string `json:"insecureRegistries,omitempty"`
	// TokenHosts are "REGISTRY=HOST" entries: HOST may serve REGISTRY's token realm
	// (the extender's --registry-token-host); without one a realm must be on the
	// registry's own host (docker.io's auth.docker.io is built in).
	TokenHosts []string `json:"tokenHosts,omitempty"`
	// AuthFiles are docker config files (a mounted kubernetes.io/dockerconfigjson
	// Secret's .dockerconfigjson) whose auths give registries' credentials, read at
	// start-up, earlier files winning. Credential helpers are not run inside
	// kube-scheduler: a file naming one is refused. Default: none (anonymous, and
	// Bearer tokens anonymous registries hand out).
	AuthFiles []string `json:"authFiles,omitempty"`
	// Platform is what an image index is resolved to for a node whose platform is
	// unknown (no kubernetes.io/os and kubernetes.io/arch labels, no nodeInfo);
	// os/arch[/variant]. Default linux/amd64. Nodes of up to 8 platforms are each
	// resolved for their own (the extender's MAX_PLATFORMS).
	Platform string `json:"platform,omitempty"`
	// TimeoutSeconds bounds each connection step (connect, TLS handshake, waiting for
	// the answer's headers). Default 10.
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// DeadlineSeconds bounds one attempt as a whole (a token request, redirects, the
	// body): a registry trickling bytes is abandoned. Default 30.
	DeadlineSeconds *int64 `json:"deadlineSeconds,omitempty"`
	// Retries after the first attempt on 429, 5xx and connection errors. Default 3.
	Retries *int64 `json:"retries,omitempty"`
	// Workers resolve images in parallel (never inside a scheduling cycle). Default 4.
	Workers *int64 `json:"workers,omitempty"`
	// QueueSize bounds the images queued or being resolved; past it a pod's request is
	// dropped (the next pod of the image asks again). Default 256.
	QueueSize *int64 `json:"queueSize,omitempty"`
	// MaxCachedImages bounds the answers kept (per image and platform). Default 65,536.
	MaxCachedImages *int64 `json:"maxCachedImages,omitempty"`
	// MaxCachedBytes bounds what the answers cost, estimated (a layer ~100 bytes, an
	// entry ~300); the least recently used go first. Default 64 MiB.
	MaxCachedBytes *int64 `json:"maxCachedBytes,omitempty"`
	// CacheTTLSeconds: a tag's layers are revalidated after this long (a digest check;
	// the old answer is served meanwhile, and kept if the registry cannot be reached). A
	// digest-pinned name is kept for good. Default 300.
	CacheTTLSeconds *int64 `json:"cacheTTLSeconds,omitempty"`
	// FailureTTLSeconds: a failure is remembered this long (its registry is asked again
	// by the first pod after it). Default 10.
	FailureTTLSeconds *int64 `json:"failureTTLSeconds,omitempty"`
	// ResolveWaitMilliseconds is how long a scheduling cycle waits for the registry's
	// answer for a pod image no quorum of nodes publishes and the resolver has no answer
	// for yet (the first pod of an image), so that its pulls go where its layers are,
	// as the extender's deadline lets it wait. One wait per resolution, however many
	// pods ask; a failure (for failureTTLSeconds) or a resolution that already kept a
	// cycle waiting to this bound is not waited for again. 0: never wait (the first pod
	// scores as if the image were unknown). Default 200, at most 1000.
	ResolveWaitMilliseconds *int64 `json:"resolveWaitMilliseconds,omitempty"`
}

func defaultInt(value **int64, fallback int64) {
	if *value == nil {
		v := fallback
		*value = &v
	}
}

func (r *RegistryArgs) setDefaults() {
	if r.Enabled == nil {
		enabled := false
		r.Enabled = &enabled
	}
	if r.AllowRegistries == nil {
		r.AllowRegistries = append([]string(nil), DefaultAllowRegistries...)
	}
	if r.Platform == "" {
		r.Platform = DefaultRegistryPlatform
	}
	defaultInt(&r.TimeoutSeconds, DefaultRegistryTimeoutSeconds)
	defaultInt(&r.DeadlineSeconds, DefaultRegistryDeadlineSeconds)
	defaultInt(&r.Retries, DefaultRegistryRetries)
	defaultInt(&r.Workers, DefaultResolverWorkers)
	defaultInt(&r.QueueSize, DefaultResolverQueueSize)
	defaultInt(&r.MaxCachedImages, DefaultMaxCachedImages)
	defaultInt(&r.MaxCachedBytes, DefaultMaxCachedBytes)
	defaultInt(&r.CacheTTLSeconds, DefaultCacheTTLSeconds)
	defaultInt(&r.FailureTTLSeconds, DefaultFailureTTLSeconds)
	defaultInt(&r.ResolveWaitMilliseconds, DefaultResolveWaitMilliseconds)
}

func (r *RegistryArgs) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	within := func(name string, value *int64, least, most int64, unit string) {
		if value != nil && (*value < least || *value > most) {
			errs = append(errs, field.Invalid(path.Child(name), *value, fmt.Sprintf("must be between %d and %d %s", least, most, unit)))
		}
	}
	within("timeoutSeconds", r.TimeoutSeconds, 1, MaxRegistryTimeoutSeconds, "seconds")
	within("deadlineSeconds", r.DeadlineSeconds, 1, MaxRegistryDeadlineSeconds, "seconds")
	within("retries", r.Retries, 0, MaxRegistryRetries, "retries")
	within("workers", r.Workers, 1, MaxResolverWorkers, "workers")
	within("queueSize", r.QueueSize, 1, MaxResolverQueueSize, "images")
	within("maxCachedImages", r.MaxCachedImages, 1, MaxMaxCachedImages, "images")
	within("maxCachedBytes", r.MaxCachedBytes, MinMaxCachedBytes, MaxMaxCachedBytes, "bytes")
	within("cacheTTLSeconds", r.CacheTTLSeconds, 1, MaxCacheTTLSeconds, "seconds")
	within("failureTTLSeconds", r.FailureTTLSeconds, 1, MaxFailureTTLSeconds, "seconds")
	if wait := r.ResolveWaitMilliseconds; wait != nil && (*wait < 0 || *wait > MaxResolveWaitMilliseconds) {
		errs = append(errs, field.Invalid(path.Child("resolveWaitMilliseconds"), *wait, fmt.Sprintf(
			"must be between 0 (never wait: the first pod of an image scores without its layers) and %d milliseconds "+
				"(kube-scheduler schedules one pod at a time: every pod behind this one waits too); default %d",
			MaxResolveWaitMilliseconds, DefaultResolveWaitMilliseconds)))
	}
	domains := func(name string, entries []string) {
		if len(entries) > maxRegistryListEntries {
			errs = append(errs, field.TooMany(path.Child(name), len(entries), maxRegistryListEntries))
			return
		}
		for i, entry := range entries {
			if len(entry) > maxRegistryEntryChars || !registryDomain.MatchString(entry) {
				errs = append(errs, field.Invalid(path.Child(name).Index(i), entry,
					`must be a registry as image references write it: "host" or "host:port" (e.g. "ghcr.io", "10.0.0.5:5000"), no scheme or path`))
			}
		}
	}
	domains("allowRegistries", r.AllowRegistries)
	domains("insecureRegistries", r.InsecureRegistries)
	if r.Enabled != nil && *r.Enabled && r.AllowRegistries != nil && len(r.AllowRegistries) == 0 {
		errs = append(errs, field.Required(path.Child("allowRegistries"),
			"resolution is enabled with no registry allowed: name the registries pods' images come from, or set enabled: false"))
	}
	if len(r.TokenHosts) > maxRegistryListEntries {
		errs = append(errs, field.TooMany(path.Child("tokenHosts"), len(r.TokenHosts), maxRegistryListEntries))
	} else if _, err := tokenHosts(r.TokenHosts); err != nil {
		errs = append(errs, field.Invalid(path.Child("tokenHosts"), r.TokenHosts, err.Error()))
	}
	for i, file := range r.AuthFiles {
		if file == "" || !strings.HasPrefix(file, "/") {
			errs = append(errs, field.Invalid(path.Child("authFiles").Index(i), file, "must be an absolute path (where the dockerconfigjson Secret is mounted)"))
		}
	}
	if r.Platform != "" {
		if _, err := registry.ParsePlatform(r.Platform); err != nil {
			errs = append(errs, field.Invalid(path.Child("platform"), r.Platform, err.Error()))
		}
	}
	return errs
}

// tokenHosts reads "REGISTRY=HOST" entries as the client's table.
func tokenHosts(entries []string) (map[string][]string, error) {
	found := map[string][]string{}
	for _, entry := range entries {
		name, host, ok := strings.Cut(entry, "=")
		name, host = strings.TrimSpace(name), strings.TrimSpace(host)
		if !ok || !registryDomain.MatchString(name) || host == "" || strings.Contains(host, "/") || !registryDomain.MatchString(host) {
			return nil, fmt.Errorf("%q: expected REGISTRY=HOST, e.g. reg.example.com=auth.example.com", entry)
		}
		found[name] = append(found[name], host)
	}
	return found, nil
}

// on says whether the args turn resolution on.
func (r *RegistryArgs) on() bool {
	return r != nil && r.Enabled != nil && *r.Enabled
}
