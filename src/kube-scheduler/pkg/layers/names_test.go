package layers

import "testing"

func TestReferencesAsTheRegistryIsAskedForThem(t *testing.T) {
	pin := "sha256:" + "ab12" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
	for _, tc := range []struct {
		text, canonical, name string
		pinned                bool
	}{
		// docker.io's official images live under library/; no tag means latest
		{"nginx", "docker.io/library/nginx:latest", "latest", false},
		{"nginx:1.25", "docker.io/library/nginx:1.25", "1.25", false},
		{"index.docker.io/team/app:v1", "docker.io/team/app:v1", "v1", false},
		// a registry with a port is no tag; a host's path gets no library/
		{"10.250.61.1:5000/img1", "10.250.61.1:5000/img1:latest", "latest", false},
		{"localhost/app@" + pin, "localhost/app@" + pin, pin, true},
		// a tag and a digest: the digest is what is asked for
		{"ghcr.io/o/app:v2@" + pin, "ghcr.io/o/app:v2@" + pin, pin, true},
	} {
		ref, ok := ParseReference(tc.text)
		if !ok || ref.Canonical() != tc.canonical || ref.Name() != tc.name || Pinned(tc.text) != tc.pinned {
			t.Errorf("%s: %+v ok=%v canonical %s name %s pinned %v", tc.text, ref, ok, ref.Canonical(), ref.Name(), Pinned(tc.text))
		}
	}
	for _, bad := range []string{"", "<none>@<none>", "team/App", " nginx", "app@sha256:short"} {
		if _, ok := ParseReference(bad); ok || Pinned(bad) {
			t.Errorf("%q parsed", bad)
		}
	}
}
