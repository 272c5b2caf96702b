package registry

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"layersched.io/kube-scheduler/pkg/layers"
)

func digestOf(body []byte) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256(body))
}

func layerDigest(label string) string {
	return digestOf([]byte(label))
}

// imageManifest is an OCI image manifest listing layers (label, size).
func imageManifest(labels ...string) []byte {
	type desc struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	doc := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{SchemaVersion: 2, MediaType: OCIManifest, Config: desc{"application/vnd.oci.image.config.v1+json", layerDigest("config"), 100}, Layers: []desc{}}
	for i, label := range labels {
		doc.Layers = append(doc.Layers, desc{"application/vnd.oci.image.layer.v1.tar+gzip", layerDigest(label), int64(1000 * (i + 1))})
	}
	body, _ := json.Marshal(doc)
	return body
}

func expectedLayers(labels ...string) []layers.Layer {
	found := make([]layers.Layer, len(labels))
	for i, label := range labels {
		found[i] = layers.Layer{Digest: layerDigest(label), SizeBytes: int64(1000 * (i + 1))}
	}
	return found
}

// indexOf is an OCI index of (platform, manifest) entries.
func indexOf(entries map[string][]byte, order ...string) []byte {
	var manifests []map[string]any
	for _, key := range order {
		platform, _ := ParsePlatform(key)
		entry := map[string]any{"mediaType": OCIManifest, "digest": digestOf(entries[key]), "size": len(entries[key]),
			"platform": map[string]any{"os": platform.OS, "architecture": platform.Architecture}}
		if parts := strings.Split(key, "/"); len(parts) == 3 {
			entry["platform"].(map[string]any)["variant"] = parts[2]
		}
		manifests = append(manifests, entry)
	}
	body, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": OCIIndex, "manifests": manifests})
	return body
}

// fakeRegistry serves manifests by repository and tag or digest, optionally behind
// basic auth or a Bearer token service (on the same server), and counts requests.
type fakeRegistry struct {
	mu        sync.Mutex
	manifests map[string][]byte // "repo:tag" and "repo@digest"
	types     map[string]string
	// basic: "user:password" required on every /v2/ request (Basic challenge).
	basic string
	// bearer: a token required (Bearer challenge naming realm); tokenAuth "user:password"
	// required on the token request.
	bearer    bool
	realm     string
	tokenAuth string
	// hook may answer a request itself (true: handled).
	hook           func(w http.ResponseWriter, r *http.Request) bool
	requests       atomic.Int64
	tokenRequests  atomic.Int64
	lastAccept     atomic.Value
	lastAuthHeader atomic.Value
	tokenQuery     atomic.Value
	server         *httptest.Server
}

func newFakeRegistry() *fakeRegistry {
	return &fakeRegistry{manifests: map[string][]byte{}, types: map[string]string{}}
}

// push stores body under repo:tag (tag "" stores by digest only) and by digest.
func (f *fakeRegistry) push(repo, tag string, body []byte, mediaType string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	digest := digestOf(body)
	f.manifests[repo+"@"+digest] = body
	f.types[repo+"@"+digest] = mediaType
	if tag != "" {
		f.manifests[repo+":"+tag] = body
		f.types[repo+":"+tag] = mediaType
	}
	return digest
}

const testToken = "the-token"

func (f *fakeRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		f.tokenRequests.Add(1)
		f.tokenQuery.Store(r.URL.RawQuery)
		if f.tokenAuth != "" && r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte(f.tokenAuth)) {
			http.Error(w, `{"details":"bad credentials"}`, http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"token": testToken, "expires_in": 300})
		return
	}
	f.requests.Add(1)
	f.lastAccept.Store(r.Header.Get("Accept"))
	f.lastAuthHeader.Store(r.Header.Get("Authorization"))
	if f.hook != nil && f.hook(w, r) {
		return
	}
	switch {
	case f.basic != "" && r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte(f.basic)):
		w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
		return
	case f.bearer && r.Header.Get("Authorization") != "Bearer "+testToken:
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s",service="fake",scope="repository:%s:pull"`, f.realm, strings.TrimPrefix(strings.Split(r.URL.Path, "/manifests/")[0], "/v2/")))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	repo, name, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/manifests/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	key := repo + ":" + name
	if strings.Contains(name, ":") {
		key = repo + "@" + name
	}
	f.mu.Lock()
	body, found := f.manifests[key]
	mediaType := f.types[key]
	f.mu.Unlock()
	if !found {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`))
		return
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Docker-Content-Digest", digestOf(body))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// start serves the fake on address ("127.0.0.1:0" by default) over plain HTTP; its
// domain as a reference writes it is returned.
func (f *fakeRegistry) start(t *testing.T, address string) string {
	t.Helper()
	if address == "" {
		address = "127.0.0.1:0"
	}
	listener, err := net.Listen("tcp", address)
	if err != nil {
		t.Skipf("cannot listen on %s here: %v", address, err)
	}
	f.server = httptest.NewUnstartedServer(f)
	_ = f.server.Listener.Close()
	f.server.Listener = listener
	f.server.Start()
	t.Cleanup(f.server.Close)
	if f.realm == "" {
		f.realm = f.server.URL + "/token"
	}
	return f.server.Listener.Addr().String()
}

// startTLS serves the fake over HTTPS; the certificate is httptest's (example.com).
func (f *fakeRegistry) startTLS(t *testing.T) string {
	t.Helper()
	f.server = httptest.NewTLSServer(f)
	t.Cleanup(f.server.Close)
	_, port, _ := net.SplitHostPort(f.server.Listener.Addr().String())
	if f.realm == "" {
		f.realm = "https://example.com:" + port + "/token"
	}
	return "example.com:" + port
}
