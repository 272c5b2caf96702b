package resolver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"layersched.io/kube-scheduler/pkg/registry"
)

const manifestBody = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",` +
	`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc","size":2},` +
	`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","size":4000},` +
	`{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:2222222222222222222222222222222222222222222222222222222222222222","size":3000}]}`

func TestAHangingRegistryOverHTTPNeverBlocksAndItsAnswerComesLater(t *testing.T) {
	gate := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", registry.OCIManifest)
		_, _ = w.Write([]byte(manifestBody))
	}))
	defer server.Close()
	domain := strings.TrimPrefix(server.URL, "http://")
	var mu sync.Mutex
	var outcomes []Outcome
	r := started(t, RegistrySource{Client: registry.New(registry.Options{AllowRegistries: []string{domain}})},
		Config{Hooks: Hooks{Resolved: func(o Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }}})
	for range 100 {
		if _, ok := r.Layers(key(domain + "/app:v1")); ok {
			t.Fatal("answered while the registry hangs")
		}
	}
	close(gate)
	r.Wait()
	found, ok := r.Layers(key(domain + "/app:v1"))
	if !ok || len(found) != 2 || found[0].SizeBytes != 4000 {
		t.Fatalf("after the registry answered: %v %v", found, ok)
	}
	// a registry off the allow-list and a name that is no reference: failures with their kinds
	r.Layers(key("ghcr.io/o/app:v1"))
	r.Layers(key("<none>@<none>"))
	r.Wait()
	mu.Lock()
	defer mu.Unlock()
	kinds := map[registry.ErrorKind]bool{}
	for _, o := range outcomes {
		var typed *registry.Error
		if errors.As(o.Err, &typed) {
			kinds[typed.Kind] = true
		}
	}
	if len(outcomes) != 3 || !kinds[registry.NotAllowed] || !kinds[InvalidReference] {
		t.Fatalf("outcomes %+v", outcomes)
	}
	var grouped interface{ WarningKey() string }
	for _, o := range outcomes {
		if errors.As(o.Err, &grouped) && grouped.WarningKey() != "registry ghcr.io" {
			t.Fatalf("a refusal grouped under %q", grouped.WarningKey())
		}
	}
}
