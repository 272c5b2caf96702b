// Package registry resolves image references to their layers over the OCI distribution
// API, for the LayerLocality plugin's background resolver. It follows the rules of
// layersched's Python registry client (src/layersched/registry, docs/registry.md),
// which the extender resolves pod images with:
//
//   - an allow-list: only the registries named (host, or host:port; a host alone allows
//     its default port 443 only) are contacted at all, others fail with no request;
//   - plain HTTP only for the registries named insecure and for loopback ones;
//   - the address guard (addresses.go): the registry itself is refused on a cloud
//     metadata address, a token realm or redirect target on any internal address the
//     registry is not on; names resolved once, connections made to the addresses checked;
//   - token realms on the registry's own host, or on a host allowed for it (Docker Hub's
//     auth.docker.io built in), over HTTPS unless the registry is plain HTTP itself;
//   - redirects followed hop by hop (each hop's own credentials and token; at most 5,
//     no loop, never from HTTPS to HTTP);
//   - bodies capped (manifests 4 MiB, token answers 64 KiB, error bodies 2 KiB, never
//     decompressed), an image manifest at 1,000 layers; a deadline per attempt (token,
//     redirects, body) and a timeout per connection step; bounded retries on 429, 5xx and
//     connection errors;
//   - a digest-pinned reference's manifest checked against its digest.
//
// Errors name what was being done, where, and how to fix it; none holds a credential.
package registry

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"layersched.io/kube-scheduler/pkg/layers"
)

// The client's defaults: the Python client's (registry/_client.py, _auth.py).
const (
	// DefaultTimeout bounds each connection step (connect, TLS, waiting for headers): a
	// manifest request takes well under a second; 10 s tolerates slow edge links.
	DefaultTimeout = 10 * time.Second
	// DefaultDeadline bounds one attempt as a whole (a token request, up to 5 redirects, a
	// manifest of a few KB): a server dribbling a byte per read never trips a timeout.
	DefaultDeadline = 30 * time.Second
	// DefaultMaxManifestBytes: the OCI distribution spec asks registries to accept
	// manifests of at least 4 MiB, and distribution refuses bigger ones on push.
	DefaultMaxManifestBytes = 4 * 1024 * 1024
	// DefaultMaxTokenBytes: a token answer is a JWT of 1-4 KB; 64 KiB is far past any.
	DefaultMaxTokenBytes = 64 * 1024
	// MaxLayersPerManifest is what a NodeLayerInventory may hold per image; real images
	// stop near 127 (overlayfs' stacking limit).
	MaxLayersPerManifest = layers.MaxLayersPerImage
	// DefaultRetries after the first attempt on 429/5xx/connection errors: 3 covers a
	// registry restart.
	DefaultRetries = 3
	// defaultRetryBackoff doubles per retry (0.2 s, 0.4 s, 0.8 s ...) plus jitter, at most
	// maxRetryBackoff; a Retry-After is obeyed up to maxRetryAfter.
	defaultRetryBackoff = 200 * time.Millisecond
	maxRetryBackoff     = 5 * time.Second
	maxRetryAfter       = 10 * time.Second
	// maxRedirects: registry.k8s.io answers with one redirect, S3-backed registries with
	// one to storage; a longer chain is a loop or a misconfiguration.
	maxRedirects = 5
	// maxErrorBodyBytes: error bodies only feed messages.
	maxErrorBodyBytes = 2048
	// httpsDefaultPort is the port of a registry an allow-list entry names without one.
	httpsDefaultPort = "443"
	// dockerHubAPIHost serves Docker Hub's /v2/ (its references say docker.io).
	dockerHubAPIHost = "registry-1.docker.io"
	// UserAgent names the plugin's registry requests in registries' logs.
	UserAgent = "layersched-kube-scheduler/LayerLocality"
)

// builtinTokenHosts are token services on another host than their registry known to be
// genuine; any other must be allowed (Options.TokenHosts).
var builtinTokenHosts = map[string][]string{dockerHub: {"auth.docker.io"}, "registry.gitlab.com": {"gitlab.com"}}

var (
	loopbackHosts      = []string{"localhost", "127.0.0.1", "[::1]"}
	transientStatuses  = map[int]bool{429: true, 500: true, 502: true, 503: true, 504: true}
	redirectStatuses   = map[int]bool{301: true, 302: true, 303: true, 307: true, 308: true}
	okStatuses         = map[int]bool{200: true, 201: true, 202: true, 204: true}
	statusHints        = map[int]string{400: "the registry rejected the request", 403: "the credentials have no access to this repository", 404: "is the image pushed?", 405: "the registry does not allow this operation", 429: "the registry rate-limits requests: wait, or authenticate for a higher limit"}
	serverErrorHint    = "the registry is failing: try again later"
	errDeadlineReached = errors.New("request deadline reached")
)

// Options configure a Client. A zero timeout, deadline or cap takes its default.
type Options struct {
	// AllowRegistries are the only registries contacted ("host" or "host:port", as image
	// references write them: "docker.io", "10.0.0.1:5000"); an empty list allows none.
	AllowRegistries []string
	// InsecureRegistries are reached over plain HTTP ("host" or "host:port"); loopback
	// registries are too, everything else over HTTPS.
	InsecureRegistries []string
	// TokenHosts maps a registry to other hosts its token realm may be on (added to the
	// built-in auth.docker.io for docker.io).
	TokenHosts map[string][]string
	// Credentials by registry as references write it (LoadAuthFiles).
	Credentials map[string]Credentials
	Timeout     time.Duration
	Deadline    time.Duration
	// Retries after the first attempt on 429, 5xx and connection errors (the plugin's
	// args default it to DefaultRetries); 0: none.
	Retries          int
	MaxManifestBytes int64
	MaxTokenBytes    int64
	MaxLayers        int
	// RootCAs verify registries' certificates (nil: the system's).
	RootCAs *x509.CertPool
	// Lookup resolves host names (nil: the system resolver); tests inject one.
	Lookup LookupFunc
}

// Client is a thread-safe OCI distribution API client for resolving images' layers.
type Client struct {
	opts       Options
	allowed    map[string]bool
	insecure   []string
	tokenHosts map[string]map[string]bool
	creds      map[string]Credentials
	guard      *guard
	http       *http.Client
	tokens     *tokens
	sleep      func(context.Context, time.Duration) error
	// retryBackoff is defaultRetryBackoff (tests shorten it).
	retryBackoff time.Duration
}

// New makes a client; its options are checked by the plugin's args already.
func New(opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Deadline <= 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.Retries < 0 {
		opts.Retries = 0
	}
	if opts.MaxManifestBytes <= 0 {
		opts.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if opts.MaxTokenBytes <= 0 {
		opts.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if opts.MaxLayers <= 0 {
		opts.MaxLayers = MaxLayersPerManifest
	}
	c := &Client{
		opts:         opts,
		allowed:      map[string]bool{},
		insecure:     append([]string(nil), opts.InsecureRegistries...),
		tokenHosts:   map[string]map[string]bool{},
		creds:        map[string]Credentials{},
		guard:        newGuard(opts.Lookup),
		tokens:       newTokens(time.Now),
		sleep:        sleepContext,
		retryBackoff: defaultRetryBackoff,
	}
	for _, registry := range opts.AllowRegistries {
		c.allowed[registry] = true
	}
	for _, table := range []map[string][]string{builtinTokenHosts, opts.TokenHosts} {
		for registry, hosts := range table {
			key := apiHost(registry)
			if c.tokenHosts[key] == nil {
				c.tokenHosts[key] = map[string]bool{}
			}
			for _, host := range hosts {
				c.tokenHosts[key][hostOf(host)] = true
			}
		}
	}
	for registry, credentials := range opts.Credentials {
		c.creds[apiHost(registry)] = credentials
	}
	d := &dialer{guard: c.guard, net: net.Dialer{Timeout: opts.Timeout}, proxies: environmentProxies()}
	transport := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   opts.Timeout,
		ResponseHeaderTimeout: opts.Timeout,
		// a cap on the wire is a cap in memory: no gzip bombs
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	c.http = &http.Client{
		Transport: transport,
		// redirects are followed hop by hop in following(), where the auth flow sees each
		// hop's host and the chain is bounded and checked
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// environmentProxies are the host:port of HTTP(S)_PROXY: connections to them are not
// guarded (the proxy resolves the registry's name itself).
func environmentProxies() map[string]bool {
	found := map[string]bool{}
	for _, name := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		value := os.Getenv(name)
		if value == "" {
			continue
		}
		if !strings.Contains(value, "://") {
			value = "http://" + value
		}
		parsed, err := url.Parse(value)
		if err != nil || parsed.Hostname() == "" {
			continue
		}
		port := parsed.Port()
		if port == "" {
			port = map[string]string{"https": "443", "socks5": "1080"}[parsed.Scheme]
			if port == "" {
				port = "80"
			}
		}
		found[net.JoinHostPort(parsed.Hostname(), port)] = true
	}
	return found
}

// Close drops the client's idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// apiHost is the host serving /v2/ for a reference domain (docker.io is special).
func apiHost(domain string) string {
	if domain == dockerHub {
		return dockerHubAPIHost
	}
	return domain
}

// listed: domain ("host" or "host:port") is an entry, or its host without the port is.
func listed(domain string, entries []string) bool {
	hostname := domain
	if !strings.HasSuffix(domain, "]") {
		if i := strings.LastIndex(domain, ":"); i >= 0 {
			hostname = domain[:i]
		}
	}
	for _, entry := range entries {
		if entry == domain || entry == hostname {
			return true
		}
	}
	return false
}

// Scheme is "http" for insecure and loopback registries, else "https".
func (c *Client) Scheme(domain string) string {
	if listed(domain, c.insecure) || listed(domain, loopbackHosts) {
		return "http"
	}
	return "https"
}

// Allows says whether the allow-list lets the client contact domain: an entry names it,
// or it is host:443 and the entry host (an entry without a port allows the default port
// only: "ghcr.io" does not allow "ghcr.io:22").
func (c *Client) Allows(domain string) bool {
	if c.allowed[domain] {
		return true
	}
	i := strings.LastIndex(domain, ":")
	if i < 0 || strings.HasSuffix(domain, "]") {
		return false
	}
	port := domain[i+1:]
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return false
	}
	return port == httpsDefaultPort && c.allowed[domain[:i]]
}

// Resolved is what a reference resolves to on one platform: Digest is what the
// reference names (an index for a multi-platform image), ManifestDigest the platform's
// image manifest, whose Layers these are.
type Resolved struct {
	Digest         string
	ManifestDigest string
	Layers         []layers.Layer
}

// Resolve is the layers of ref on platform: its manifest, or the platform's entry of
// its index followed once (a nested index is refused).
func (c *Client) Resolve(ctx context.Context, ref layers.Reference, platform Platform) (Resolved, error) {
	text := ref.Canonical()
	digest, top, err := c.fetchManifest(ctx, ref, ref.Name(), text)
	if err != nil {
		return Resolved{}, err
	}
	if !top.index {
		return Resolved{Digest: digest, ManifestDigest: digest, Layers: top.layers}, nil
	}
	source := fmt.Sprintf("%q at %s", text, apiHost(ref.Domain))
	chosen, err := selectPlatform(top, platform, source)
	if err != nil {
		return Resolved{}, err
	}
	platformDigest, platformManifest, err := c.fetchManifest(ctx, ref, chosen.digest, text)
	if err != nil {
		return Resolved{}, err
	}
	if platformManifest.index {
		return Resolved{}, manifestErrorf("%s: the index entry for %s is itself an index (%s); nested indexes are not supported", source, platform, chosen.digest)
	}
	return Resolved{Digest: digest, ManifestDigest: platformDigest, Layers: platformManifest.layers}, nil
}

// CurrentDigest is the digest ref's tag points to now (one HEAD, which Docker Hub does
// not count against its pull limit); "" when the registry does not say.
func (c *Client) CurrentDigest(ctx context.Context, ref layers.Reference) (string, error) {
	if ref.Digest != "" {
		return ref.Digest, nil
	}
	where := c.where(fmt.Sprintf("resolving manifest for %q", ref.Canonical()), ref)
	var found string
	err := c.call(ctx, where, ref, func(ctx context.Context) error {
		response, err := c.following(ctx, http.MethodHead, c.url(ref, ref.Name()), ref)
		if err != nil {
			return err
		}
		defer drain(response)
		if err := check(response); err != nil {
			return err
		}
		if digest := response.Header.Get("Docker-Content-Digest"); strings.HasPrefix(digest, "sha256:") {
			found = digest
		}
		return nil
	})
	return found, err
}

func (c *Client) url(ref layers.Reference, name string) string {
	return fmt.Sprintf("%s://%s/v2/%s/manifests/%s", c.Scheme(ref.Domain), apiHost(ref.Domain), ref.Path, name)
}

func (c *Client) where(doing string, ref layers.Reference) string {
	return doing + " at " + apiHost(ref.Domain)
}

// fetchManifest GETs a manifest or index by tag or digest: its digest (computed) and
// contents; a digest reference is checked against the body.
func (c *Client) fetchManifest(ctx context.Context, ref layers.Reference, name, image string) (string, *manifest, error) {
	doing := fmt.Sprintf("resolving manifest for %q", image)
	where := c.where(doing, ref)
	var body []byte
	var contentType string
	err := c.call(ctx, where, ref, func(ctx context.Context) error {
		response, err := c.following(ctx, http.MethodGet, c.url(ref, name), ref)
		if err != nil {
			return err
		}
		defer drain(response)
		if err := check(response); err != nil {
			return err
		}
		body, err = readCapped(response, c.opts.MaxManifestBytes)
		contentType = response.Header.Get("Content-Type")
		return err
	})
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(body)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if strings.HasPrefix(name, "sha256:") && name != digest {
		return "", nil, manifestErrorf("%s: the registry served content with digest %s for %s – the registry or a proxy is corrupting data", where, digest, name)
	}
	source := fmt.Sprintf("%s/%s:%s", ref.Domain, ref.Path, name)
	if strings.Contains(name, ":") {
		source = fmt.Sprintf("%s/%s@%s", ref.Domain, ref.Path, name)
	}
	parsed, err := parseManifest(body, contentType, source, c.opts.MaxLayers)
	if err != nil {
		return "", nil, err
	}
	return digest, parsed, nil
}

// statusError is a registry answering with a status not wanted.
type statusError struct {
	status     int
	detail     string
	retryAfter string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d", e.status) }

// redirectError is a redirect chain that loops, runs too long, downgrades HTTPS to HTTP
// or points at an internal address.
type redirectError struct {
	problem  string
	chain    []string
	internal bool
}

func (e *redirectError) Error() string { return e.problem }

// tooLargeError is a response body past its cap.
type tooLargeError struct {
	url      string
	capBytes int64
	declared int64
	manifest bool
}

func (e *tooLargeError) Error() string {
	size := ""
	if e.declared >= 0 {
		size = fmt.Sprintf(" (%d bytes)", e.declared)
	}
	return fmt.Sprintf("the answer of %s is larger than the %d-byte cap%s", e.url, e.capBytes, size)
}

// call runs attempt under the allow-list, with bounded retries, each attempt within the
// deadline; any failure becomes one *Error whose message continues where.
func (c *Client) call(ctx context.Context, where string, ref layers.Reference, attempt func(context.Context) error) error {
	if !c.Allows(ref.Domain) {
		return &Error{Kind: NotAllowed, Message: fmt.Sprintf("%s: %s is not an allowed registry (allowRegistries: %s), so no request was sent – add %s to allowRegistries if its images should be resolved",
			where, ref.Domain, strings.Join(c.opts.AllowRegistries, ", "), ref.Domain)}
	}
	ctx = withOrigin(ctx, apiHost(ref.Domain))
	var err error
	for try := 0; ; try++ {
		err = c.attempt(ctx, attempt)
		if err == nil || try >= c.opts.Retries || !transient(err) || ctx.Err() != nil {
			break
		}
		if c.sleep(ctx, c.wait(err, try)) != nil {
			break
		}
	}
	if err == nil {
		return nil
	}
	return c.describe(where, ref, err)
}

func (c *Client) attempt(ctx context.Context, attempt func(context.Context) error) error {
	bounded, cancel := context.WithTimeoutCause(ctx, c.opts.Deadline, errDeadlineReached)
	defer cancel()
	err := attempt(bounded)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(bounded), errDeadlineReached) {
		return &deadlineError{err}
	}
	return err
}

type deadlineError struct{ err error }

func (e *deadlineError) Error() string { return e.err.Error() }

func transient(err error) bool {
	var status *statusError
	if errors.As(err, &status) {
		return transientStatuses[status.status]
	}
	var (
		deadline *deadlineError
		address  *addressError
		redirect *redirectError
		large    *tooLargeError
		refused  *authRefused
		token    *tokenError
	)
	if errors.As(err, &deadline) || errors.As(err, &address) || errors.As(err, &redirect) || errors.As(err, &large) || errors.As(err, &refused) || errors.As(err, &token) {
		return false
	}
	var netErr net.Error
	var urlErr *url.Error
	return errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (c *Client) wait(err error, try int) time.Duration {
	var status *statusError
	if errors.As(err, &status) && status.retryAfter != "" {
		if after, ok := retryAfter(status.retryAfter); ok {
			return min(after, maxRetryAfter)
		}
	}
	backoff := c.retryBackoff << try
	jitter := time.Duration(rand.Int64N(int64(c.retryBackoff) + 1))
	return min(backoff+jitter, maxRetryBackoff)
}

// retryAfter reads Retry-After: delta-seconds or an HTTP date.
func retryAfter(value string) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if seconds, err := strconv.ParseUint(value, 10, 32); err == nil {
		return time.Duration(seconds) * time.Second, true
	}
	if when, err := http.ParseTime(value); err == nil {
		return max(time.Until(when), 0), true
	}
	return 0, false
}

func sleepContext(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// describe turns a failure into the one *Error the caller sees, with a hint.
func (c *Client) describe(where string, ref layers.Reference, err error) error {
	attempts := c.opts.Retries + 1
	var (
		status   *statusError
		redirect *redirectError
		large    *tooLargeError
		deadline *deadlineError
		refused  *authRefused
		address  *addressError
		token    *tokenError
		typed    *Error
	)
	switch {
	case errors.As(err, &typed):
		return typed
	case errors.As(err, &status):
		return c.statusFailure(where, ref, status, attempts)
	case errors.As(err, &redirect):
		hint := "the registry or a proxy in front of it is misconfigured"
		if redirect.internal {
			hint = "the registry tried to send the client to an internal address: treat it as hostile"
		}
		return registryErrorf("%s: %s (%s) – %s", where, redirect.problem, strings.Join(redirect.chain, " -> "), hint)
	case errors.As(err, &large):
		if large.manifest {
			return manifestErrorf("%s: %s – no real image has one; raise maxManifestBytes if this one is genuine", where, large)
		}
		return registryErrorf("%s: %s, so it was abandoned – a real token answer is a few KB; the token service is broken or hostile", where, large)
	case errors.As(err, &deadline):
		return registryErrorf("%s: no complete answer within the %s request deadline (%s) – the registry is overloaded, or trickles bytes on purpose", where, c.opts.Deadline, quiet(deadline.err))
	case errors.As(err, &refused):
		return registryErrorf("%s: refused: %s", where, refused.reason)
	case errors.As(err, &address):
		return registryErrorf("%s: connection refused: %s, so nothing was sent there – the registry or its DNS tried to make the client reach an internal address: treat it as hostile", where, address.reason)
	case errors.As(err, &token):
		hint := "is the token service up?"
		if token.status == 401 || token.status == 403 {
			hint = "check the user name and password"
		}
		return registryErrorf("%s: %s – %s", where, token, hint)
	case ctxDone(err):
		return registryErrorf("%s: abandoned (%s): the scheduler is stopping", where, quiet(err))
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return registryErrorf("%s: timed out after %s (%s) after %d attempts – is the registry overloaded or unreachable?", where, c.opts.Timeout, quiet(err), attempts)
	}
	hint := "is the registry running and the address right?"
	if c.Scheme(ref.Domain) == "https" {
		hint += " A plain-HTTP registry needs insecureRegistries"
	}
	return registryErrorf("%s: cannot connect (%s) after %d attempts – %s", where, quiet(err), attempts, hint)
}

func ctxDone(err error) bool {
	return errors.Is(err, context.Canceled)
}

// quiet is an error's text without URLs' query strings (a token request's account
// name, say): messages say where, never what was sent.
func quiet(err error) string {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Op + " " + redact(urlErr.URL) + ": " + urlErr.Err.Error()
	}
	return err.Error()
}

// redact is a URL without user info or query.
func redact(raw string) string {
	parsed, err := url.Parse(raw)
	if err != nil {
		return "(a malformed URL)"
	}
	parsed.User = nil
	parsed.RawQuery = ""
	parsed.Fragment = ""
	return parsed.String()
}

func (c *Client) statusFailure(where string, ref layers.Reference, err *statusError, attempts int) error {
	detail := ""
	if err.detail != "" {
		detail = " (" + err.detail + ")"
	}
	var hint string
	switch {
	case err.status == http.StatusUnauthorized:
		if _, ok := c.creds[apiHost(ref.Domain)]; ok {
			hint = fmt.Sprintf("the credentials for %s were rejected: check the user name and password", ref.Domain)
		} else {
			hint = fmt.Sprintf("%s needs credentials: add them to a docker config file in the plugin's authFiles (a dockerconfigjson Secret)", ref.Domain)
		}
	case transientStatuses[err.status]:
		hint = statusHints[err.status]
		if hint == "" {
			hint = serverErrorHint
		}
		hint = fmt.Sprintf("gave up after %d attempts; %s", attempts, hint)
	default:
		hint = statusHints[err.status]
		if hint == "" {
			hint = "unexpected answer"
		}
	}
	return registryErrorf("%s: %d%s – %s", where, err.status, detail, hint)
}

// check turns an unwanted status into a *statusError, its body read up to 2 KiB.
func check(response *http.Response) error {
	if okStatuses[response.StatusCode] {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(response.Body, maxErrorBodyBytes))
	return &statusError{status: response.StatusCode, detail: errorDetail(body), retryAfter: response.Header.Get("Retry-After")}
}

// readCapped reads a success body up to capBytes: past it (declared or counted) a
// *tooLargeError.
func readCapped(response *http.Response, capBytes int64) ([]byte, error) {
	large := &tooLargeError{url: redact(response.Request.URL.String()), capBytes: capBytes, declared: -1, manifest: strings.Contains(response.Request.URL.Path, "/manifests/")}
	if response.ContentLength > capBytes {
		large.declared = response.ContentLength
		return nil, large
	}
	body, err := io.ReadAll(io.LimitReader(response.Body, capBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > capBytes {
		return nil, large
	}
	return body, nil
}

// drain reads what is left of a body (up to the error cap, so the connection may be
// reused) and closes it.
func drain(response *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(response.Body, maxErrorBodyBytes))
	_ = response.Body.Close()
}

// following sends a GET or HEAD, following at most maxRedirects redirects, and returns
// the last answer (its body open). Each hop is a request of its own, so the auth flow
// sees the hop's host: another host never gets this host's credentials or tokens.
func (c *Client) following(ctx context.Context, method, target string, ref layers.Reference) (*http.Response, error) {
	current, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	chain := []*url.URL{current}
	for {
		response, err := c.authorized(ctx, method, current)
		if err != nil {
			return nil, err
		}
		location := response.Header.Get("Location")
		if !redirectStatuses[response.StatusCode] || location == "" {
			return response, nil
		}
		drain(response)
		next, err := current.Parse(location)
		if err != nil {
			return nil, &redirectError{problem: fmt.Sprintf("a malformed redirect (%v)", err), chain: hops(chain)}
		}
		for _, seen := range chain {
			if seen.String() == next.String() {
				return nil, &redirectError{problem: "redirect loop", chain: hops(append(chain, next))}
			}
		}
		if len(chain) > maxRedirects {
			return nil, &redirectError{problem: fmt.Sprintf("more than %d redirects", maxRedirects), chain: hops(append(chain, next))}
		}
		if current.Scheme == "https" && next.Scheme != "https" {
			return nil, &redirectError{problem: "redirect from HTTPS to plain HTTP refused", chain: hops(append(chain, next))}
		}
		if next.Scheme != "http" && next.Scheme != "https" {
			return nil, &redirectError{problem: fmt.Sprintf("redirect to a %q URL refused", next.Scheme), chain: hops(append(chain, next))}
		}
		if reason := c.guard.targetRefusal(ctx, chain[0].Host, next.Hostname()); reason != "" {
			return nil, &redirectError{problem: "redirect refused: " + reason, chain: hops(append(chain, next)), internal: true}
		}
		chain = append(chain, next)
		current = next
	}
}

func hops(chain []*url.URL) []string {
	texts := make([]string, len(chain))
	for i, u := range chain {
		texts[i] = redact(u.String())
	}
	return texts
}

func (c *Client) newRequest(ctx context.Context, method string, target *url.URL) (*http.Request, error) {
	request, err := http.NewRequestWithContext(ctx, method, target.String(), nil)
	if err != nil {
		return nil, err
	}
	request.Header.Set("User-Agent", UserAgent)
	request.Header.Set("Accept-Encoding", "identity")
	request.Header.Set("Accept", ManifestAccept)
	return request, nil
}

// authorized sends one request under the auth flow: with what is known to work for its
// host and scope, then once more as a 401's challenge asks.
func (c *Client) authorized(ctx context.Context, method string, target *url.URL) (*http.Response, error) {
	host := target.Host
	scope := scopeFor(method, target.Path)
	token := c.tokens.get(host, scope)
	known, hasCredentials := c.creds[host]
	sentBasic := token == "" && c.tokens.basicFirst(host) && hasCredentials && known.basicUsable()
	request, err := c.newRequest(ctx, method, target)
	if err != nil {
		return nil, err
	}
	if token != "" {
		request.Header.Set("Authorization", "Bearer "+token)
	} else if sentBasic {
		request.Header.Set("Authorization", known.basicHeader())
	}
	response, err := c.http.Do(request)
	if err != nil {
		return nil, err
	}
	if response.StatusCode != http.StatusUnauthorized {
		return response, nil
	}
	found, ok := parseChallenge(response.Header.Get("WWW-Authenticate"))
	if !ok {
		return response, nil
	}
	switch {
	case found.scheme == "basic":
		if sentBasic || !hasCredentials || !known.basicUsable() {
			return response, nil // nothing (new) to offer: the 401 stands
		}
		drain(response)
		c.tokens.markBasic(host)
		retry, err := c.newRequest(ctx, method, target)
		if err != nil {
			return nil, err
		}
		retry.Header.Set("Authorization", known.basicHeader())
		return c.http.Do(retry)
	case found.scheme == "bearer" && found.params["realm"] != "":
		drain(response)
		var credentials *Credentials
		if hasCredentials {
			credentials = &known
		}
		fresh, err := c.fetchToken(ctx, host, scope, found, credentials)
		if err != nil {
			return nil, err
		}
		retry, err := c.newRequest(ctx, method, target)
		if err != nil {
			return nil, err
		}
		retry.Header.Set("Authorization", "Bearer "+fresh)
		return c.http.Do(retry)
	}
	return response, nil
}

// checkRealm refuses a token realm that is not the registry's own token service: over
// HTTPS (plain HTTP only for a plain-HTTP registry), on the registry's host or one
// allowed for it, not on an internal address the registry is not on.
func (c *Client) checkRealm(ctx context.Context, host string, realm *url.URL) error {
	if realm.Scheme != "https" && (realm.Scheme != "http" || c.Scheme(host) != "http") {
		scheme := realm.Scheme
		if scheme == "" {
			scheme = "no scheme"
		}
		return &authRefused{fmt.Sprintf("%s names the token realm %s over %s: token services are only asked over HTTPS (plain HTTP only for a registry that is itself plain HTTP: insecureRegistries or loopback)",
			host, redact(realm.String()), scheme)}
	}
	realmHost := normalizeHost(realm.Hostname())
	allowed := c.tokenHosts[host][realmHost] || c.tokenHosts[hostOf(host)][realmHost]
	if realmHost != hostOf(host) && !allowed {
		return &authRefused{fmt.Sprintf("%s names the token realm %s, on another host, and no request was sent there – if %s is %s's token service, allow it with tokenHosts (%s=%s)",
			host, redact(realm.String()), realm.Host, host, host, realm.Host)}
	}
	if reason := c.guard.targetRefusal(ctx, host, realm.Hostname()); reason != "" {
		return &authRefused{fmt.Sprintf("%s names the token realm %s: %s, so no request was sent (a realm there would reach this machine's or the cloud's internal services)",
			host, redact(realm.String()), reason)}
	}
	return nil
}

// fetchToken asks the challenge's realm for a token for (host, scope) and caches it.
func (c *Client) fetchToken(ctx context.Context, host, scope string, found challenge, credentials *Credentials) (string, error) {
	realm, err := url.Parse(found.params["realm"])
	if err != nil || realm.Host == "" {
		return "", &authRefused{fmt.Sprintf("%s names a malformed token realm", host)}
	}
	if err := c.checkRealm(ctx, host, realm); err != nil {
		return "", err
	}
	params := url.Values{}
	if service := found.params["service"]; service != "" {
		params.Set("service", service)
	}
	wanted := found.params["scope"]
	if wanted == "" {
		wanted = scope
	}
	if wanted != "" {
		params.Set("scope", wanted)
	}
	var request *http.Request
	if credentials != nil && credentials.Username == identityTokenUser {
		// an identity token is an OAuth2 refresh token: POST it (the token spec)
		params.Set("grant_type", "refresh_token")
		params.Set("refresh_token", credentials.Password)
		params.Set("client_id", oauthClientID)
		request, err = http.NewRequestWithContext(ctx, http.MethodPost, realm.String(), strings.NewReader(params.Encode()))
		if err == nil {
			request.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		if credentials != nil {
			params.Set("account", credentials.Username)
		}
		query := realm.Query()
		for key, values := range params {
			query[key] = values
		}
		target := *realm
		target.RawQuery = query.Encode()
		request, err = http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
		if err == nil && credentials != nil {
			request.Header.Set("Authorization", credentials.basicHeader())
		}
	}
	if err != nil {
		return "", &authRefused{fmt.Sprintf("%s names a token realm no request can be made to", host)}
	}
	request.Header.Set("Accept", "application/json")
	request.Header.Set("Accept-Encoding", "identity")
	request.Header.Set("User-Agent", UserAgent)
	response, err := c.http.Do(request)
	if err != nil {
		return "", err
	}
	defer drain(response)
	var body []byte
	if response.StatusCode == http.StatusOK {
		if body, err = readCapped(response, c.opts.MaxTokenBytes); err != nil {
			return "", err
		}
	} else {
		body, _ = io.ReadAll(io.LimitReader(response.Body, maxErrorBodyBytes))
	}
	token, lifetime, err := parseTokenResponse(redact(realm.String()), response.StatusCode, body)
	if err != nil {
		return "", err
	}
	c.tokens.put(host, scope, token, lifetime)
	return token, nil
}

// errorDetail is the errors[].message of an OCI error body, else its start.
func errorDetail(body []byte) string {
	var doc struct {
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &doc); err == nil && doc.Errors != nil {
		var messages []string
		for _, e := range doc.Errors {
			if e.Message != "" {
				messages = append(messages, e.Message)
			}
		}
		return strings.Join(messages, "; ")
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(body[:min(len(body), 200)]), "?"))
}
