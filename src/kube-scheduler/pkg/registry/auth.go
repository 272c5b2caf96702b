package registry

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Registry authentication, as the Python client's (registry/_auth.py, _config.py): a
// request first goes out with what is known to work for its host and scope (a cached
// token, or basic credentials once the host asked for them); on 401 the
// WWW-Authenticate challenge decides: Basic resends once with the host's credentials;
// Bearer realm=...,service=...,scope=... has its realm checked against the client's
// policy, asks it for a token (with basic credentials if any, an identity token as an
// OAuth2 refresh grant, anonymously otherwise), caches it per (host, scope) until its
// expires_in runs out, and resends once.

const (
	// defaultTokenLifetime is the distribution token spec's default when an answer has no
	// expires_in.
	defaultTokenLifetime = 60 * time.Second
	// tokenExpiryMargin: a token is refreshed this long before it expires, so it never
	// lapses in flight.
	tokenExpiryMargin = 5 * time.Second
	// maxCachedTokens bounds the tokens kept (one per host and repository): past it the
	// expired go, then all (they are fetched again on the next 401).
	maxCachedTokens = 4096
	// oauthClientID is sent with an identity-token (OAuth2 refresh) grant.
	oauthClientID = "layersched"
	// identityTokenUser is Docker's marker user name: the "password" is an identity token.
	identityTokenUser = "<token>"
	// dockerHub is Docker Hub's reference domain, under which docker config files store
	// its credentials by several names.
	dockerHub = "docker.io"
)

var (
	dockerHubAuthKeys = map[string]bool{"https://index.docker.io/v1/": true, "index.docker.io": true, "registry-1.docker.io": true}
	// repoPath: /v2/<name>/manifests/<ref> and the other repository paths a scope names.
	repoPath        = regexp.MustCompile(`^/v2/(.+?)/(?:manifests/[^/]+|blobs/uploads/[^/]*|blobs/[^/]+|tags/list)$`)
	challengeParam  = regexp.MustCompile(`([A-Za-z_][\w-]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)`)
	challengeEscape = regexp.MustCompile(`\\(.)`)
)

// Credentials are a user name and a password (or, under identityTokenUser, an identity
// token). They are never printed: no error or log line of this package holds one.
type Credentials struct {
	Username, Password string
}

// basicUsable: an identity token only works with a token service, never as HTTP basic.
func (c *Credentials) basicUsable() bool {
	return c != nil && c.Username != identityTokenUser
}

func (c *Credentials) basicHeader() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.Username+":"+c.Password))
}

// LoadAuthFiles reads the static credentials of docker config files (Docker's
// config.json, or a kubernetes.io/dockerconfigjson Secret's .dockerconfigjson), keyed by
// registry as image references write it (docker.io, 127.0.0.1:5000); earlier files win,
// key by key. auths entries hold "auth" (base64 user:password), or username and
// password, or identitytoken (wins, as in Docker). A missing file is an error (the args
// name it); credential helpers (credHelpers, credsStore) are not run inside
// kube-scheduler, so a file naming one is an error saying so.
func LoadAuthFiles(paths []string) (map[string]Credentials, error) {
	found := map[string]Credentials{}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading registry credentials from %s: %v; mount the dockerconfigjson Secret there (key .dockerconfigjson) or drop the path", path, err)
		}
		var doc struct {
			Auths       map[string]json.RawMessage `json:"auths"`
			CredHelpers map[string]string          `json:"credHelpers"`
			CredsStore  string                     `json:"credsStore"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("reading registry credentials from %s: not a docker config (%v); expected {\"auths\": {...}} (a dockerconfigjson Secret's .dockerconfigjson)", path, err)
		}
		if len(doc.CredHelpers) > 0 || doc.CredsStore != "" {
			return nil, fmt.Errorf("reading registry credentials from %s: it names credential helpers (credHelpers/credsStore), which the plugin does not run inside kube-scheduler: put the registries' credentials under auths (kubectl create secret docker-registry) instead", path)
		}
		for key, entry := range doc.Auths {
			credentials, ok := decodeAuthEntry(entry)
			host := authKeyHost(key)
			if _, known := found[host]; ok && !known {
				found[host] = credentials
			}
		}
	}
	return found, nil
}

func decodeAuthEntry(raw json.RawMessage) (Credentials, bool) {
	var entry struct {
		Auth          *string `json:"auth"`
		Username      *string `json:"username"`
		Password      *string `json:"password"`
		IdentityToken *string `json:"identitytoken"`
	}
	if json.Unmarshal(raw, &entry) != nil {
		return Credentials{}, false
	}
	if entry.IdentityToken != nil && *entry.IdentityToken != "" {
		return Credentials{identityTokenUser, *entry.IdentityToken}, true
	}
	if entry.Username != nil && entry.Password != nil {
		return Credentials{*entry.Username, *entry.Password}, true
	}
	if entry.Auth == nil {
		return Credentials{}, false
	}
	decoded, err := base64.StdEncoding.DecodeString(*entry.Auth)
	if err != nil {
		return Credentials{}, false
	}
	user, password, found := strings.Cut(string(decoded), ":")
	return Credentials{user, password}, found
}

// authKeyHost is a docker config key as a reference domain: "https://index.docker.io/v1/"
// -> "docker.io", "http://h:5000" -> "h:5000".
func authKeyHost(key string) string {
	if dockerHubAuthKeys[key] {
		return dockerHub
	}
	if _, rest, found := strings.Cut(key, "://"); found {
		key = rest
	}
	host, _, _ := strings.Cut(key, "/")
	return host
}

// challenge is one parsed WWW-Authenticate challenge: its scheme (lowercase) and
// parameters (keys lowercase).
type challenge struct {
	scheme string
	params map[string]string
}

func parseChallenge(header string) (challenge, bool) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(header), " ")
	if scheme == "" {
		return challenge{}, false
	}
	params := map[string]string{}
	for _, match := range challengeParam.FindAllStringSubmatch(rest, -1) {
		value := match[2]
		if strings.HasPrefix(value, `"`) {
			value = challengeEscape.ReplaceAllString(value[1:len(value)-1], "$1")
		}
		params[strings.ToLower(match[1])] = value
	}
	return challenge{scheme: strings.ToLower(scheme), params: params}, true
}

// scopeFor is the token scope a request needs: "repository:<name>:pull" (reads only).
func scopeFor(method, path string) string {
	match := repoPath.FindStringSubmatch(path)
	if match == nil {
		return ""
	}
	actions := "pull,push"
	if method == "GET" || method == "HEAD" {
		actions = "pull"
	}
	return "repository:" + match[1] + ":" + actions
}

// tokens caches Bearer tokens per (host, scope), and the hosts that asked for basic
// credentials; safe for concurrent use.
type tokens struct {
	mu         sync.Mutex
	now        func() time.Time
	byScope    map[[2]string]cachedToken
	basicHosts map[string]bool
}

type cachedToken struct {
	token     string
	expiresAt time.Time
}

func newTokens(now func() time.Time) *tokens {
	return &tokens{now: now, byScope: map[[2]string]cachedToken{}, basicHosts: map[string]bool{}}
}

func (t *tokens) get(host, scope string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	entry, ok := t.byScope[[2]string{host, scope}]
	if !ok {
		return ""
	}
	if !t.now().Before(entry.expiresAt) {
		delete(t.byScope, [2]string{host, scope})
		return ""
	}
	return entry.token
}

func (t *tokens) put(host, scope, token string, lifetime time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if len(t.byScope) >= maxCachedTokens {
		for key, entry := range t.byScope {
			if !now.Before(entry.expiresAt) {
				delete(t.byScope, key)
			}
		}
		if len(t.byScope) >= maxCachedTokens {
			clear(t.byScope)
		}
	}
	t.byScope[[2]string{host, scope}] = cachedToken{token, now.Add(max(lifetime-tokenExpiryMargin, 0))}
}

func (t *tokens) basicFirst(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.basicHosts[host]
}

func (t *tokens) markBasic(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.basicHosts[host] = true
}

// tokenError is a token service refusing, or answering nonsense.
type tokenError struct {
	realm  string
	status int
	detail string
}

func (e *tokenError) Error() string {
	return fmt.Sprintf("token service %s answered %d: %s", e.realm, e.status, e.detail)
}

// authRefused is the client's policy refusing to follow a challenge.
type authRefused struct{ reason string }

func (e *authRefused) Error() string { return e.reason }

// parseTokenResponse reads (token, lifetime) from a token service's answer: "token" or
// "access_token", and "expires_in" (seconds; default 60).
func parseTokenResponse(realm string, status int, body []byte) (string, time.Duration, error) {
	if status != 200 {
		detail := strings.TrimSpace(string(body[:min(len(body), 200)]))
		if detail == "" {
			detail = "no body"
		}
		return "", 0, &tokenError{realm, status, detail}
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", 0, &tokenError{realm, status, fmt.Sprintf("not JSON (%v)", err)}
	}
	token, _ := doc["token"].(string)
	if token == "" {
		token, _ = doc["access_token"].(string)
	}
	if token == "" {
		return "", 0, &tokenError{realm, status, "no 'token' or 'access_token' field"}
	}
	lifetime := defaultTokenLifetime
	if seconds, ok := doc["expires_in"].(float64); ok && seconds > 0 {
		lifetime = time.Duration(seconds * float64(time.Second))
	}
	return token, lifetime, nil
}
