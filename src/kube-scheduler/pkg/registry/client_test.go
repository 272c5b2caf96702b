package registry

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"layersched.io/kube-scheduler/pkg/layers"
)

func reference(t *testing.T, text string) layers.Reference {
	t.Helper()
	ref, ok := layers.ParseReference(text)
	if !ok {
		t.Fatalf("%q is no reference", text)
	}
	return ref
}

// client is a client allowed to contact domain (and what else is given), with quick
// retries.
func client(opts Options, domains ...string) *Client {
	opts.AllowRegistries = append(opts.AllowRegistries, domains...)
	c := New(opts)
	c.retryBackoff = time.Millisecond
	return c
}

func failure(t *testing.T, err error, kind ErrorKind, wants ...string) {
	t.Helper()
	var typed *Error
	if !errors.As(err, &typed) {
		t.Fatalf("expected a *registry.Error of kind %s, got %T %v", kind, err, err)
	}
	if typed.Kind != kind {
		t.Fatalf("kind %s, want %s: %s", typed.Kind, kind, typed.Message)
	}
	for _, want := range wants {
		if !strings.Contains(typed.Message, want) {
			t.Fatalf("message %q does not say %q", typed.Message, want)
		}
	}
}

// lookup resolves the names given to the addresses given (anything else fails).
func lookup(table map[string]string) LookupFunc {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		if address, ok := table[host]; ok {
			return []netip.Addr{netip.MustParseAddr(address)}, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}
}

func TestResolvesAManifestByTagWithTheAcceptHeaders(t *testing.T) {
	fake := newFakeRegistry()
	body := imageManifest("L1", "L2", "L3")
	digest := fake.push("team/app", "v1", body, OCIManifest)
	domain := fake.start(t, "")
	c := client(Options{}, domain)
	// loopback registries are plain HTTP; docker.io's library/ is not added to a host's path
	resolved, err := c.Resolve(context.Background(), reference(t, domain+"/team/app:v1"), DefaultPlatform)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(resolved.Layers, expectedLayers("L1", "L2", "L3")) || resolved.Digest != digest || resolved.ManifestDigest != digest {
		t.Fatalf("resolved %+v", resolved)
	}
	accept, _ := fake.lastAccept.Load().(string)
	for _, mediaType := range []string{OCIManifest, DockerManifest, OCIIndex, DockerManifestList} {
		if !strings.Contains(accept, mediaType) {
			t.Fatalf("Accept %q lacks %s", accept, mediaType)
		}
	}
	// by digest too: the pinned content checked and served
	resolved, err = c.Resolve(context.Background(), reference(t, domain+"/team/app@"+digest), DefaultPlatform)
	if err != nil || resolved.Digest != digest {
		t.Fatalf("by digest: %+v %v", resolved, err)
	}
	current, err := c.CurrentDigest(context.Background(), reference(t, domain+"/team/app:v1"))
	if err != nil || current != digest {
		t.Fatalf("HEAD: %q %v", current, err)
	}
}

func TestResolvesAnIndexToTheNodesPlatform(t *testing.T) {
	fake := newFakeRegistry()
	entries := map[string][]byte{"linux/amd64": imageManifest("A1", "A2"), "linux/arm64/v8": imageManifest("R1"), "linux/arm/v7": imageManifest("V7")}
	for _, body := range entries {
		fake.push("app", "", body, OCIManifest)
	}
	index := indexOf(entries, "linux/arm/v7", "linux/arm64/v8", "linux/amd64")
	indexDigest := fake.push("app", "multi", index, OCIIndex)
	nested := fake.push("app", "", index, OCIIndex)
	fake.push("app", "nested", indexOf(map[string][]byte{"linux/amd64": index}, "linux/amd64"), OCIIndex)
	domain := fake.start(t, "")
	c := client(Options{}, domain)
	for _, tc := range []struct {
		platform string
		want     []layers.Layer
	}{
		{"linux/amd64", expectedLayers("A1", "A2")},
		// arm64 is v8 unless said otherwise; aarch64 is arm64
		{"linux/arm64", expectedLayers("R1")},
		{"linux/aarch64", expectedLayers("R1")},
		{"linux/arm/v7", expectedLayers("V7")},
	} {
		platform, err := ParsePlatform(tc.platform)
		if err != nil {
			t.Fatal(err)
		}
		resolved, err := c.Resolve(context.Background(), reference(t, domain+"/app:multi"), platform)
		if err != nil {
			t.Fatalf("%s: %v", tc.platform, err)
		}
		if !reflect.DeepEqual(resolved.Layers, tc.want) || resolved.Digest != indexDigest || resolved.ManifestDigest == indexDigest {
			t.Fatalf("%s: %+v", tc.platform, resolved)
		}
	}
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:multi"), Platform{OS: "windows", Architecture: "amd64"})
	failure(t, err, ManifestInvalid, "no manifest for platform windows/amd64", "linux/amd64")
	// an index whose amd64 entry is an index again
	_, err = c.Resolve(context.Background(), reference(t, domain+"/app:nested"), DefaultPlatform)
	failure(t, err, ManifestInvalid, "is itself an index", nested)
}

func TestTheAnonymousBearerTokenFlowAndItsCache(t *testing.T) {
	fake := newFakeRegistry()
	fake.bearer = true
	fake.push("app", "v1", imageManifest("L1"), OCIManifest)
	domain := fake.start(t, "")
	c := client(Options{}, domain)
	for range 3 {
		if _, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform); err != nil {
			t.Fatal(err)
		}
	}
	// one token for the repository's pull scope, reused for the next two resolutions
	if got := fake.tokenRequests.Load(); got != 1 {
		t.Fatalf("%d token requests, want 1", got)
	}
	query, _ := fake.tokenQuery.Load().(string)
	if !strings.Contains(query, "scope=repository%3Aapp%3Apull") || !strings.Contains(query, "service=fake") || strings.Contains(query, "account") {
		t.Fatalf("token query %q", query)
	}
	// 1 challenged + 1 with the token, then 2 with the cached token
	if got := fake.requests.Load(); got != 4 {
		t.Fatalf("%d registry requests, want 4", got)
	}
}

func writeDockerConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBasicAuthAndTokenCredentialsFromADockerConfig(t *testing.T) {
	fake := newFakeRegistry()
	fake.basic = "alice:s3cret-password"
	fake.push("app", "v1", imageManifest("L1"), OCIManifest)
	domain := fake.start(t, "")
	tokened := newFakeRegistry()
	tokened.bearer = true
	tokened.tokenAuth = "bob:t0ken-password"
	tokened.push("app", "v1", imageManifest("L2"), OCIManifest)
	tokenDomain := tokened.start(t, "")
	path := writeDockerConfig(t, fmt.Sprintf(`{"auths": {"http://%s": {"auth": "YWxpY2U6czNjcmV0LXBhc3N3b3Jk"}, "%s": {"username": "bob", "password": "t0ken-password"}}}`, domain, tokenDomain))
	credentials, err := LoadAuthFiles([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	c := client(Options{Credentials: credentials}, domain, tokenDomain)
	if _, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform); err != nil {
		t.Fatal(err)
	}
	// the host asked for basic once: the next request sends it at once
	before := fake.requests.Load()
	if _, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform); err != nil {
		t.Fatal(err)
	}
	if got := fake.requests.Load() - before; got != 1 {
		t.Fatalf("%d requests for a host known to want basic, want 1", got)
	}
	if _, err := c.Resolve(context.Background(), reference(t, tokenDomain+"/app:v1"), DefaultPlatform); err != nil {
		t.Fatal(err)
	}
	if query, _ := tokened.tokenQuery.Load().(string); !strings.Contains(query, "account=bob") {
		t.Fatalf("token query %q lacks the account", query)
	}
	// wrong credentials: the message says so, and never holds the password
	wrong := client(Options{Credentials: map[string]Credentials{domain: {"alice", "wrong-password"}}}, domain)
	_, err = wrong.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "401", "credentials for "+domain+" were rejected")
	if strings.Contains(err.Error(), "wrong-password") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a password in %q", err)
	}
	anonymous := client(Options{}, domain)
	_, err = anonymous.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "401 (authentication required)", "needs credentials")
	// helpers are not run inside kube-scheduler: said at start-up
	_, err = LoadAuthFiles([]string{writeDockerConfig(t, `{"credsStore": "desktop"}`)})
	if err == nil || !strings.Contains(err.Error(), "credential helpers") {
		t.Fatalf("credsStore: %v", err)
	}
	_, err = LoadAuthFiles([]string{filepath.Join(t.TempDir(), "missing.json")})
	if err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestAPinnedDigestIsCheckedAgainstWhatTheRegistryServes(t *testing.T) {
	fake := newFakeRegistry()
	honest := imageManifest("L1")
	pinned := digestOf(honest)
	// the registry serves other content under the pinned digest
	fake.mu.Lock()
	fake.manifests["app@"+pinned] = imageManifest("EVIL")
	fake.types["app@"+pinned] = OCIManifest
	fake.mu.Unlock()
	domain := fake.start(t, "")
	_, err := client(Options{}, domain).Resolve(context.Background(), reference(t, domain+"/app@"+pinned), DefaultPlatform)
	failure(t, err, ManifestInvalid, "served content with digest "+digestOf(imageManifest("EVIL"))+" for "+pinned, "corrupting")
}

func TestTheAllowList(t *testing.T) {
	fake := newFakeRegistry()
	fake.push("app", "v1", imageManifest("L1"), OCIManifest)
	domain := fake.start(t, "")
	c := client(Options{AllowRegistries: []string{"ghcr.io", "reg.lan:5000"}})
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, NotAllowed, domain+" is not an allowed registry", "no request was sent", "add "+domain)
	if fake.requests.Load() != 0 {
		t.Fatal("a request reached a registry the allow-list does not name")
	}
	for domain, want := range map[string]bool{
		"ghcr.io": true, "ghcr.io:443": true,
		// an entry without a port allows the default port only (issue 30)
		"ghcr.io:22": false, "reg.lan:5000": true, "reg.lan": false, "reg.lan:443": false,
		"docker.io": false, "evil.ghcr.io": false,
	} {
		if got := c.Allows(domain); got != want {
			t.Errorf("Allows(%q) = %v, want %v", domain, got, want)
		}
	}
}

func TestOversizedAnswersAreRefused(t *testing.T) {
	fake := newFakeRegistry()
	huge := imageManifest("L1")
	huge = append(huge[:len(huge)-1], []byte(`,"padding":"`+strings.Repeat("x", 5000)+`"}`)...)
	fake.push("app", "big", huge, OCIManifest)
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("L%d", i)
	}
	fake.push("app", "many", imageManifest(many...), OCIManifest)
	fake.hook = func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/chunked") {
			return false
		}
		// no Content-Length: the body is counted as it comes
		flusher := w.(http.Flusher)
		for range 10 {
			_, _ = w.Write([]byte(strings.Repeat(" ", 1000)))
			flusher.Flush()
		}
		return true
	}
	domain := fake.start(t, "")
	c := client(Options{MaxManifestBytes: 4096}, domain)
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:big"), DefaultPlatform)
	failure(t, err, ManifestInvalid, "larger than the 4096-byte cap", "raise maxManifestBytes")
	_, err = c.Resolve(context.Background(), reference(t, domain+"/app:chunked"), DefaultPlatform)
	failure(t, err, ManifestInvalid, "larger than the 4096-byte cap")
	_, err = client(Options{}, domain).Resolve(context.Background(), reference(t, domain+"/app:many"), DefaultPlatform)
	failure(t, err, ManifestInvalid, "lists 1001 layers, more than the 1000")
}

func TestTokenRealmsAreChecked(t *testing.T) {
	// the registry on 127.0.0.2 names a token service on 127.0.0.1: loopback, and not
	// where the registry is
	tokens := newFakeRegistry()
	tokenDomain := tokens.start(t, "")
	fake := newFakeRegistry()
	fake.bearer = true
	fake.realm = "http://" + tokenDomain + "/token"
	fake.push("app", "v1", imageManifest("L1"), OCIManifest)
	domain := fake.start(t, "127.0.0.2:0")
	c := client(Options{TokenHosts: map[string][]string{domain: {"127.0.0.1"}}, InsecureRegistries: []string{domain}}, domain)
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "127.0.0.1: loopback", "and "+domain+" is not")
	if tokens.tokenRequests.Load() != 0 {
		t.Fatal("a token request reached an internal address")
	}
	// on another host and not allowed for the registry
	other := client(Options{InsecureRegistries: []string{domain}}, domain)
	_, err = other.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "on another host", "tokenHosts")
	// a registry on 127.0.0.1 may name a token service on 127.0.0.1 (tested by the
	// anonymous flow above); a plain-HTTP realm for an HTTPS registry is refused
	secure := newFakeRegistry()
	secure.bearer = true
	secure.push("app", "v1", imageManifest("L1"), OCIManifest)
	secureDomain := secure.startTLS(t)
	secure.realm = "http://example.com:1/token"
	pool := x509.NewCertPool()
	pool.AddCert(secure.server.Certificate())
	tls := client(Options{RootCAs: pool, Lookup: lookup(map[string]string{"example.com": "127.0.0.1"})}, secureDomain)
	_, err = tls.Resolve(context.Background(), reference(t, secureDomain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "over http", "only asked over HTTPS")
	secure.realm = "https://" + secureDomain + "/token"
	if _, err := tls.Resolve(context.Background(), reference(t, secureDomain+"/app:v1"), DefaultPlatform); err != nil {
		t.Fatalf("the HTTPS flow: %v", err)
	}
}

func TestRedirectsAreFollowedHopByHopAndBounded(t *testing.T) {
	storage := newFakeRegistry()
	storage.push("app", "v1", imageManifest("L1"), OCIManifest)
	storageDomain := storage.start(t, "")
	fake := newFakeRegistry()
	fake.basic = "alice:s3cret"
	fake.hook = func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case strings.HasSuffix(r.URL.Path, "/manifests/v1"):
			if r.Header.Get("Authorization") == "" {
				return false // challenge first
			}
			http.Redirect(w, r, "http://"+storageDomain+r.URL.Path, http.StatusTemporaryRedirect)
		case strings.HasSuffix(r.URL.Path, "/manifests/loop"):
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		case strings.Contains(r.URL.Path, "/manifests/chain"):
			var n int
			_, _ = fmt.Sscanf(r.URL.Path[strings.LastIndex(r.URL.Path, "chain")+5:], "%d", &n)
			http.Redirect(w, r, fmt.Sprintf("/v2/app/manifests/chain%d", n+1), http.StatusFound)
		default:
			return false
		}
		return true
	}
	domain := fake.start(t, "127.0.0.2:0")
	c := client(Options{Credentials: map[string]Credentials{domain: {"alice", "s3cret"}}, InsecureRegistries: []string{domain}}, domain)
	// the storage host is loopback, the registry is not there: refused before any request
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "redirect refused", "127.0.0.1: loopback", "treat it as hostile")
	if storage.requests.Load() != 0 {
		t.Fatal("a redirect reached an internal address")
	}
	_, err = c.Resolve(context.Background(), reference(t, domain+"/app:loop"), DefaultPlatform)
	failure(t, err, RegistryFailure, "redirect loop")
	_, err = c.Resolve(context.Background(), reference(t, domain+"/app:chain0"), DefaultPlatform)
	failure(t, err, RegistryFailure, "more than 5 redirects")

	// on the same address, the redirect is followed, and the storage host (another port)
	// never sees the registry's credentials
	same := newFakeRegistry()
	same.basic = "alice:s3cret"
	same.hook = fake.hook
	sameDomain := same.start(t, "")
	c = client(Options{Credentials: map[string]Credentials{sameDomain: {"alice", "s3cret"}}}, sameDomain)
	resolved, err := c.Resolve(context.Background(), reference(t, sameDomain+"/app:v1"), DefaultPlatform)
	if err != nil || !reflect.DeepEqual(resolved.Layers, expectedLayers("L1")) {
		t.Fatalf("%+v %v", resolved, err)
	}
	if header, _ := storage.lastAuthHeader.Load().(string); header != "" {
		t.Fatalf("the storage host got the registry's credentials: %q", header)
	}
}

func TestHTTPSToPlainHTTPRedirectsAreRefused(t *testing.T) {
	fake := newFakeRegistry()
	fake.hook = func(w http.ResponseWriter, r *http.Request) bool {
		http.Redirect(w, r, "http://example.com:1/v2/app/manifests/v1", http.StatusFound)
		return true
	}
	domain := fake.startTLS(t)
	pool := x509.NewCertPool()
	pool.AddCert(fake.server.Certificate())
	c := client(Options{RootCAs: pool, Lookup: lookup(map[string]string{"example.com": "127.0.0.1"})}, domain)
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "redirect from HTTPS to plain HTTP refused")
}

func TestARegistryOnACloudMetadataAddressIsRefused(t *testing.T) {
	c := client(Options{Lookup: lookup(map[string]string{"reg.test": "169.254.169.254"}), Retries: 3}, "reg.test:5000")
	c.insecure = []string{"reg.test:5000"}
	_, err := c.Resolve(context.Background(), reference(t, "reg.test:5000/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "connection refused", "cloud metadata address", "treat it as hostile")
	// a private address is a registry like any other (the allow-list decides); loopback too
	g := newGuard(lookup(map[string]string{"reg.lan": "10.0.0.5", "auth.lan": "10.0.0.6", "local": "127.0.0.1"}))
	for _, tc := range []struct {
		origin, host string
		refused      bool
	}{
		{"reg.lan:5000", "reg.lan", false},
		{"reg.lan:5000", "auth.lan", false}, // private, not internal
		{"reg.lan:5000", "local", true},     // loopback, not where the registry is
		{"local:5000", "local", false},      // the registry itself on loopback
		{"local:5000", "127.0.0.1", false},  // another name for where the registry is
		{"reg.lan:5000", "169.254.170.2", true},
		{"reg.lan:5000", "::ffff:127.0.0.1", true},
	} {
		ctx := withOrigin(context.Background(), tc.origin)
		if tc.origin == "local:5000" {
			if _, err := g.addresses(ctx, "local"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := g.addresses(ctx, tc.host)
		if (err != nil) != tc.refused {
			t.Errorf("%s on behalf of %s: refused %v, want %v (%v)", tc.host, tc.origin, err != nil, tc.refused, err)
		}
	}
}

func TestClassify(t *testing.T) {
	for text, want := range map[string]Kind{
		"127.0.0.1": Loopback, "127.8.9.1": Loopback, "::1": Loopback,
		"0.0.0.0": Unspecified, "0.1.2.3": Unspecified, "::": Unspecified,
		"169.254.1.1": LinkLocal, "fe80::1": LinkLocal,
		"169.254.169.254": Metadata, "fd00:ec2::254": Metadata, "100.100.100.200": Metadata, "168.63.129.16": Metadata,
		// IPv6 forms carrying an internal IPv4 address
		"::ffff:127.0.0.1": Loopback, "64:ff9b::a9fe:a9fe": Metadata, "64:ff9b:1::1": NAT64Local,
		// reachable: public, private (RFC 1918), unique local
		"8.8.8.8": "", "10.250.61.1": "", "192.168.1.1": "", "172.16.0.1": "", "fd12::1": "", "::ffff:8.8.8.8": "", "64:ff9b::808:808": "",
	} {
		internal, ok := Classify(netip.MustParseAddr(text))
		if (want == "") == ok || internal.Kind != want {
			t.Errorf("Classify(%s) = %v %v, want %q", text, internal, ok, want)
		}
	}
}

func TestTheDeadlineStopsATricklingRegistryWithoutRetrying(t *testing.T) {
	fake := newFakeRegistry()
	fake.hook = func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", OCIManifest)
		w.WriteHeader(http.StatusOK)
		flusher := w.(http.Flusher)
		for range 100 {
			select {
			case <-r.Context().Done():
				return true
			case <-time.After(20 * time.Millisecond):
			}
			_, _ = w.Write([]byte(" "))
			flusher.Flush()
		}
		return true
	}
	domain := fake.start(t, "")
	c := client(Options{Deadline: 200 * time.Millisecond, Timeout: time.Second, Retries: 3}, domain)
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "request deadline", "trickles bytes")
	if got := fake.requests.Load(); got != 1 {
		t.Fatalf("%d attempts, want 1 (a trickle would recur)", got)
	}
}

func TestTransientFailuresAreRetriedWithinBounds(t *testing.T) {
	fake := newFakeRegistry()
	fake.push("app", "v1", imageManifest("L1"), OCIManifest)
	var failures int
	fake.hook = func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/down") || failures < 2 {
			failures++
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	domain := fake.start(t, "")
	c := client(Options{Retries: 3}, domain)
	if _, err := c.Resolve(context.Background(), reference(t, domain+"/app:v1"), DefaultPlatform); err != nil {
		t.Fatalf("after two 503s: %v", err)
	}
	before := fake.requests.Load()
	_, err := c.Resolve(context.Background(), reference(t, domain+"/app:down"), DefaultPlatform)
	failure(t, err, RegistryFailure, "503", "gave up after 4 attempts")
	if got := fake.requests.Load() - before; got != 4 {
		t.Fatalf("%d attempts, want 4", got)
	}
	// a 404 is not retried
	before = fake.requests.Load()
	_, err = c.Resolve(context.Background(), reference(t, domain+"/app:gone"), DefaultPlatform)
	failure(t, err, RegistryFailure, "404 (manifest unknown)", "is the image pushed?")
	if got := fake.requests.Load() - before; got != 1 {
		t.Fatalf("%d attempts at a 404, want 1", got)
	}
}

func TestACancelledResolutionStopsAtOnce(t *testing.T) {
	fake := newFakeRegistry()
	fake.hook = func(w http.ResponseWriter, r *http.Request) bool {
		<-r.Context().Done()
		return true
	}
	domain := fake.start(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := client(Options{Retries: 3}, domain).Resolve(ctx, reference(t, domain+"/app:v1"), DefaultPlatform)
	failure(t, err, RegistryFailure, "abandoned")
}
