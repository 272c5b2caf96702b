package registry

import (
	"container/list"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
)

// A pod's image names a registry, and that registry names token realms and redirect
// targets: hosts chosen by whoever wrote the pod or runs the registry. Some addresses
// must never be reached that way (server-side request forgery). The rules are the Python
// client's (src/layersched/registry/_addresses.py), per connection:
//
//   - a connection to the registry the request is for (the origin) is refused only on a
//     cloud metadata address: a registry on loopback or a private address is a test's or
//     a testbed's, and which registries may be contacted at all is the allow-list's
//     business (allowRegistries);
//   - a connection to any other host (a token realm, a redirect target) is refused on
//     any internal address (Classify), unless the origin resolved to that same address
//     when the client connected to it (a registry on 127.0.0.1 may name a token service
//     on 127.0.0.1).
//
// The dialer resolves a host name once, checks every address it resolved to, and
// connects to those addresses, not to the name (TLS still verifies, and SNI and Host
// still name, the host name): a DNS answer that changes between the check and the
// connect (DNS rebinding) cannot steer the client.

// metadataAddresses are cloud metadata services: each answers unauthenticated requests
// from the machine with the machine's identity and credentials. One here is refused even
// for a registry.
var metadataAddresses = map[netip.Addr]string{
	netip.MustParseAddr("169.254.169.254"): "AWS, GCP, Azure, OpenStack and others",
	netip.MustParseAddr("fd00:ec2::254"):   "AWS, over IPv6",
	netip.MustParseAddr("169.254.170.2"):   "AWS ECS task credentials",
	netip.MustParseAddr("100.100.100.200"): "Alibaba Cloud",
	netip.MustParseAddr("168.63.129.16"):   "Azure WireServer",
}

var (
	// nat64WellKnown is RFC 6052's prefix: the IPv4 address is the last 32 bits.
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
	// nat64LocalUse is RFC 8215's: where the IPv4 address sits is the operator's
	// choice, so what it maps to cannot be read from the address; all of it is refused.
	nat64LocalUse = netip.MustParsePrefix("64:ff9b:1::/48")
	// ipv4ThisNetwork: 0.0.0.0 reaches this machine on Linux; no host has another 0/8.
	ipv4ThisNetwork = netip.MustParsePrefix("0.0.0.0/8")
)

// maxRememberedOrigins bounds the origins remembered with the addresses they resolved
// to: more than any client talks to between two reuses of its connections.
const maxRememberedOrigins = 1024

// Kind is why an address is internal.
type Kind string

const (
	Loopback    Kind = "loopback"
	Unspecified Kind = "unspecified"
	LinkLocal   Kind = "link-local"
	Metadata    Kind = "cloud metadata"
	NAT64Local  Kind = "local-use NAT64"
)

// Internal is an internal address's kind, and the IPv4 address an IPv6 form carries.
type Internal struct {
	Kind Kind
	// Carried is the IPv4 address an IPv4-mapped or NAT64 address stands for (invalid
	// for a plain one).
	Carried netip.Addr
}

func (i Internal) String() string {
	if !i.Carried.IsValid() {
		return string(i.Kind)
	}
	return fmt.Sprintf("%s (%s)", i.Kind, i.Carried)
}

func plainKind(address netip.Addr) (Kind, bool) {
	switch {
	case metadataAddresses[address] != "":
		return Metadata, true
	case address.IsLoopback():
		return Loopback, true
	case address.IsUnspecified() || (address.Is4() && ipv4ThisNetwork.Contains(address)):
		return Unspecified, true
	case address.IsLinkLocalUnicast():
		return LinkLocal, true
	}
	return "", false
}

// Classify says what makes address internal; ok is false for an address the client may
// reach (a public or private one). IPv4-mapped and NAT64 forms are judged by the IPv4
// address they carry.
func Classify(address netip.Addr) (Internal, bool) {
	address = address.WithZone("")
	if address.Is6() {
		var carried netip.Addr
		if address.Is4In6() {
			carried = address.Unmap()
		} else if nat64WellKnown.Contains(address) {
			raw := address.As16()
			carried = netip.AddrFrom4([4]byte{raw[12], raw[13], raw[14], raw[15]})
		}
		if carried.IsValid() {
			kind, internal := plainKind(carried)
			return Internal{Kind: kind, Carried: carried}, internal
		}
		if nat64LocalUse.Contains(address) {
			return Internal{Kind: NAT64Local}, true
		}
	}
	kind, internal := plainKind(address)
	return Internal{Kind: kind}, internal
}

// normalizeHost is a host as a connection sees it: an IP address in its compressed form
// without brackets, a name lowercased.
func normalizeHost(host string) string {
	bare := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if address, err := netip.ParseAddr(bare); err == nil {
		return address.WithZone("").String()
	}
	return strings.ToLower(bare)
}

// hostOf is a "host[:port]" without its port, normalised ("reg.lan:5000" -> "reg.lan",
// "[::1]:5000" -> "::1").
func hostOf(netloc string) string {
	if host, _, err := net.SplitHostPort(netloc); err == nil {
		return normalizeHost(host)
	}
	return normalizeHost(netloc)
}

type originKey struct{}

// withOrigin marks ctx's requests as made on behalf of registry netloc.
func withOrigin(ctx context.Context, netloc string) context.Context {
	return context.WithValue(ctx, originKey{}, hostOf(netloc))
}

func originOf(ctx context.Context) (string, bool) {
	origin, ok := ctx.Value(originKey{}).(string)
	return origin, ok
}

// LookupFunc resolves a host name to its addresses (tests inject one).
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

func systemLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// guard checks each connection's addresses against the rules and remembers the
// origins' addresses (bounded, least recently used first out).
type guard struct {
	lookup  LookupFunc
	mu      sync.Mutex
	origins map[string]*list.Element
	order   *list.List // of *rememberedOrigin, most recent at the front
}

type rememberedOrigin struct {
	host      string
	addresses []netip.Addr
}

func newGuard(lookup LookupFunc) *guard {
	if lookup == nil {
		lookup = systemLookup
	}
	return &guard{lookup: lookup, origins: map[string]*list.Element{}, order: list.New()}
}

func (g *guard) remember(host string, addresses []netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if element, ok := g.origins[host]; ok {
		element.Value.(*rememberedOrigin).addresses = addresses
		g.order.MoveToFront(element)
		return
	}
	g.origins[host] = g.order.PushFront(&rememberedOrigin{host, addresses})
	for g.order.Len() > maxRememberedOrigins {
		oldest := g.order.Back()
		g.order.Remove(oldest)
		delete(g.origins, oldest.Value.(*rememberedOrigin).host)
	}
}

func (g *guard) originAddresses(host string) []netip.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	if element, ok := g.origins[host]; ok {
		return element.Value.(*rememberedOrigin).addresses
	}
	return nil
}

// resolve is host's addresses, each once, in the resolver's order.
func (g *guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	bare := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if address, err := netip.ParseAddr(bare); err == nil {
		return []netip.Addr{address}, nil
	}
	found, err := g.lookup(ctx, bare)
	if err != nil {
		return nil, err
	}
	seen := map[netip.Addr]bool{}
	var addresses []netip.Addr
	for _, address := range found {
		if !seen[address] {
			seen[address] = true
			addresses = append(addresses, address)
		}
	}
	if len(addresses) == 0 {
		return nil, fmt.Errorf("%s resolved to no IP address", bare)
	}
	return addresses, nil
}

// refusal says why target (resolved to found) must not be contacted on behalf of
// registry, which is on the allowed addresses; "" when it may be.
func refusal(target string, found []netip.Addr, registry string, allowed []netip.Addr) string {
	var refused []string
	for _, address := range found {
		internal, ok := Classify(address)
		if !ok || containsAddr(allowed, address) {
			continue
		}
		refused = append(refused, fmt.Sprintf("%s: %s", address, internal))
	}
	if len(refused) == 0 {
		return ""
	}
	onBehalf := "(and no registry asked for it)"
	if registry != "" {
		onBehalf = "and " + registry + " is not"
	}
	return fmt.Sprintf("%s is on an internal address (%s) %s", target, strings.Join(refused, ", "), onBehalf)
}

func containsAddr(addresses []netip.Addr, address netip.Addr) bool {
	for _, a := range addresses {
		if a == address {
			return true
		}
	}
	return false
}

// addressError is a connection the rules refused.
type addressError struct{ reason string }

func (e *addressError) Error() string { return e.reason }

// addresses resolves host once and returns the addresses the client may connect to on
// behalf of ctx's origin: an *addressError when the rules refuse any of them (a name
// resolving to a public and an internal address is refused whole: the client would
// otherwise fall back to the internal one).
func (g *guard) addresses(ctx context.Context, host string) ([]netip.Addr, error) {
	name := normalizeHost(host)
	found, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	registry, hasOrigin := originOf(ctx)
	if hasOrigin && registry == name {
		var metadata []string
		for _, address := range found {
			if internal, ok := Classify(address); ok && internal.Kind == Metadata {
				metadata = append(metadata, fmt.Sprintf("%s: %s", address, internal))
			}
		}
		if len(metadata) > 0 {
			return nil, &addressError{fmt.Sprintf("the registry %s is on a cloud metadata address (%s), which no registry is",
				host, strings.Join(metadata, ", "))}
		}
		g.remember(name, found)
		return found, nil
	}
	var allowed []netip.Addr
	if hasOrigin {
		allowed = g.originAddresses(registry)
	}
	if reason := refusal(host, found, registry, allowed); reason != "" {
		return nil, &addressError{reason}
	}
	return found, nil
}

// targetRefusal is the early check of a token realm or redirect target, before any
// request is sent to it: why target (a host) must not be contacted on behalf of registry
// ("host[:port]"), or "". The dialer checks again where it connects.
func (g *guard) targetRefusal(ctx context.Context, registry, target string) string {
	registryHost := hostOf(registry)
	if normalizeHost(target) == registryHost {
		return ""
	}
	found, err := g.resolve(ctx, target)
	if err != nil {
		return "" // the connection fails on its own
	}
	allowed, err := g.resolve(ctx, registryHost)
	if err != nil {
		allowed = nil
	}
	return refusal(target, found, registry, allowed)
}

// dialer connects only to addresses the guard checked; a connection to one of the
// environment's proxies is made as asked (the proxy resolves the registry's name
// itself, as the Python client's proxy transports do).
type dialer struct {
	guard   *guard
	net     net.Dialer
	proxies map[string]bool
}

func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.proxies[addr] {
		return d.net.DialContext(ctx, network, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addresses, err := d.guard.addresses(ctx, host)
	if err != nil {
		return nil, err
	}
	var failure error
	for _, address := range addresses { // in the resolver's order, as net.Dial tries them
		conn, err := d.net.DialContext(ctx, network, net.JoinHostPort(address.String(), port))
		if err == nil {
			return conn, nil
		}
		failure = err
	}
	return nil, failure
}
