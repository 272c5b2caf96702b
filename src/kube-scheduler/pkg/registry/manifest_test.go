package registry

import (
	"strings"
	"testing"
)

func TestParseManifestAsThePythonCoreDoes(t *testing.T) {
	layer := `{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"` + layerDigest("L1") + `","size":5}`
	config := `"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + layerDigest("c") + `","size":2}`
	for _, tc := range []struct {
		name, body, contentType string
		// index: an index is expected; err: a substring of the expected error
		index bool
		err   string
	}{
		{name: "OCI manifest by header", body: `{"schemaVersion":2,` + config + `,"layers":[` + layer + `]}`, contentType: OCIManifest},
		{name: "Docker manifest by mediaType, generic header", body: `{"schemaVersion":2,"mediaType":"` + DockerManifest + `",` + config + `,"layers":[` + layer + `]}`, contentType: "application/json"},
		{name: "a manifest by its shape (OCI may omit mediaType)", body: `{"schemaVersion":2,` + config + `,"layers":[]}`},
		{name: "an index by its shape", body: `{"schemaVersion":2,"manifests":[]}`, index: true},
		{name: "a header with parameters", body: `{"schemaVersion":2,"manifests":[]}`, contentType: DockerManifestList + "; charset=utf-8", index: true},
		{name: "schema 1 by header", body: `{"schemaVersion":1}`, contentType: dockerSchema1Signed, err: "schema 1"},
		{name: "schema 1 by version", body: `{"schemaVersion":1,"fsLayers":[]}`, err: "schema 1"},
		{name: "no schemaVersion", body: `{"layers":[]}`, err: "schemaVersion is missing, expected 2"},
		{name: "a header that is no manifest type", body: `{"schemaVersion":2,"layers":[]}`, contentType: "text/html", err: `Content-Type "text/html" is not a manifest type`},
		{name: "a mediaType that is no manifest", body: `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.config.v1+json"}`, err: "is not an image manifest or index"},
		{name: "neither layers nor manifests", body: `{"schemaVersion":2}`, err: "neither 'layers' nor 'manifests'"},
		{name: "not JSON", body: `<html>`, err: "not a JSON object"},
		{name: "a bad layer digest", body: `{"schemaVersion":2,` + config + `,"layers":[{"digest":"sha256:xyz","size":1}]}`, err: "layers[0].digest"},
		{name: "a negative size", body: `{"schemaVersion":2,` + config + `,"layers":[{"digest":"` + layerDigest("L") + `","size":-1}]}`, err: "non-negative integer"},
		{name: "a size over 1 TiB", body: `{"schemaVersion":2,` + config + `,"layers":[{"digest":"` + layerDigest("L") + `","size":1099511627777}]}`, err: "over the 1099511627776-byte cap"},
		{name: "a fractional size", body: `{"schemaVersion":2,` + config + `,"layers":[{"digest":"` + layerDigest("L") + `","size":1.5}]}`, err: "non-negative integer"},
		{name: "no config", body: `{"schemaVersion":2,"layers":[]}`, err: "config: expected a descriptor object"},
		{name: "layers not a list", body: `{"schemaVersion":2,` + config + `,"layers":{}}`, err: "'layers' must be a list"},
		{name: "a platform without os", body: `{"schemaVersion":2,"manifests":[{"digest":"` + layerDigest("m") + `","size":1,"platform":{"architecture":"amd64"}}]}`, err: "'os' and 'architecture' must be strings"},
	} {
		parsed, err := parseManifest([]byte(tc.body), tc.contentType, "reg/app:v1", MaxLayersPerManifest)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && parsed.index != tc.index:
			t.Errorf("%s: index %v, want %v", tc.name, parsed.index, tc.index)
		case err != nil && !strings.HasPrefix(err.Error(), "reg/app:v1"):
			t.Errorf("%s: %q does not name its source first", tc.name, err)
		}
	}
}

func TestPlatforms(t *testing.T) {
	for text, want := range map[string]string{
		"linux/amd64": "linux/amd64", "Linux/X86_64": "linux/amd64", "linux/aarch64/v8": "linux/arm64",
		"linux/arm64/v9": "linux/arm64/v9", "linux/armhf/v7": "linux/arm/v7",
	} {
		platform, err := ParsePlatform(text)
		if err != nil || platform.String() != want {
			t.Errorf("ParsePlatform(%q) = %v %v, want %s", text, platform, err, want)
		}
	}
	for _, bad := range []string{"linux", "linux/amd64/v1/x", "linux/", "linux/am d64"} {
		if _, err := ParsePlatform(bad); err == nil {
			t.Errorf("ParsePlatform(%q) accepted", bad)
		}
	}
	arm64 := Platform{OS: "linux", Architecture: "arm64"}
	for _, tc := range []struct {
		want, have Platform
		matches    bool
	}{
		{arm64, Platform{"linux", "arm64", "v8"}, true},
		{arm64, Platform{"linux", "aarch64", ""}, true},
		// a wanted variant must match; without one any variant serves
		{Platform{"linux", "arm", "v7"}, Platform{"linux", "arm", "v6"}, false},
		{Platform{"linux", "arm", ""}, Platform{"linux", "arm", "v6"}, true},
		{DefaultPlatform, Platform{"windows", "amd64", ""}, false},
	} {
		if got := tc.want.Matches(tc.have); got != tc.matches {
			t.Errorf("%v.Matches(%v) = %v", tc.want, tc.have, got)
		}
	}
	// without a wanted variant, an entry without one is preferred, else the first match
	index := &manifest{index: true, manifests: []descriptor{
		{digest: "first", platform: &Platform{"linux", "arm", "v6"}},
		{digest: "second", platform: &Platform{"linux", "arm", "v7"}},
		{digest: "plain", platform: &Platform{"linux", "arm", ""}},
	}}
	if chosen, _ := selectPlatform(index, Platform{"linux", "arm", ""}, "x"); chosen.digest != "plain" {
		t.Errorf("chose %s, want the entry without a variant", chosen.digest)
	}
	index.manifests = index.manifests[:2]
	if chosen, _ := selectPlatform(index, Platform{"linux", "arm", ""}, "x"); chosen.digest != "first" {
		t.Errorf("chose %s, want the first match", chosen.digest)
	}
}

func TestChallengesAndScopes(t *testing.T) {
	found, ok := parseChallenge(`Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"`)
	if !ok || found.scheme != "bearer" || found.params["realm"] != "https://auth.docker.io/token" || found.params["scope"] != "repository:library/nginx:pull" {
		t.Fatalf("%+v", found)
	}
	found, _ = parseChallenge(`Basic realm="a \"quoted\" realm"`)
	if found.scheme != "basic" || found.params["realm"] != `a "quoted" realm` {
		t.Fatalf("%+v", found)
	}
	for path, want := range map[string]string{
		"/v2/library/nginx/manifests/1.25": "repository:library/nginx:pull",
		"/v2/a/b/c/blobs/sha256:abc":       "repository:a/b/c:pull",
		"/v2/":                             "",
	} {
		if got := scopeFor("GET", path); got != want {
			t.Errorf("scopeFor(%s) = %q, want %q", path, got, want)
		}
	}
	for key, want := range map[string]string{"https://index.docker.io/v1/": "docker.io", "http://h:5000": "h:5000", "ghcr.io/v2/": "ghcr.io", "reg:5000": "reg:5000"} {
		if got := authKeyHost(key); got != want {
			t.Errorf("authKeyHost(%s) = %s, want %s", key, got, want)
		}
	}
}
