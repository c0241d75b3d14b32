package cluster

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// Members advertise the digests of the configurations they serve (a
// node's policies, its Envoy rate limit rules), so that every member can
// tell which of the others would decide the same request differently.
// They ride in memberlist's node metadata, next to the gRPC address: no
// extra message, and every member learns a change with the next gossip.
// That metadata is at most 512 bytes (memberlist.MetaMaxSize); whatever
// does not fit is not sent at all, gRPC address included, so the limits
// below are checked before anything is advertised, and a test holds the
// worst case to them.
const (
	// MaxConfigSources is how many configurations a member may advertise.
	MaxConfigSources = 4
	// MaxConfigSourceLen and MaxConfigDigestLen bound a source's name and
	// its digest, in bytes. A digest is meant to be a prefix of a hash
	// (12 hex digits: 48 bits, ample to tell a handful of versions apart).
	MaxConfigSourceLen = 16
	MaxConfigDigestLen = 16

	// maxGRPCAddrLen is the longest gRPC address: a 253-byte host name,
	// or a bracketed IPv6 address, and a port.
	maxGRPCAddrLen = 253 + len("[]:65535")

	// configUpdateTimeout bounds how long SetConfigDigests waits for its
	// broadcast. Past it the change still spreads, by gossip and
	// push-pull; only the wait is cut.
	configUpdateTimeout = time.Second
)

// validateConfigDigests refuses what could overflow the metadata, or be
// escaped by JSON into more bytes than it looks: names and digests are
// non-empty and of [A-Za-z0-9_.:-] only.
func validateConfigDigests(d map[string]string) error {
	if len(d) > MaxConfigSources {
		return fmt.Errorf("at most %d sources, got %d", MaxConfigSources, len(d))
	}
	for _, src := range slices.Sorted(maps.Keys(d)) {
		if err := checkConfigToken(src, MaxConfigSourceLen); err != nil {
			return fmt.Errorf("source %q: %w", src, err)
		}
		if err := checkConfigToken(d[src], MaxConfigDigestLen); err != nil {
			return fmt.Errorf("digest of %q: %w", src, err)
		}
	}
	return nil
}

func checkConfigToken(s string, maxLen int) error {
	if s == "" || len(s) > maxLen {
		return fmt.Errorf("must be 1 to %d bytes, got %d", maxLen, len(s))
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == ':' || r == '-') {
			return fmt.Errorf("must be of [A-Za-z0-9_.:-], has %q", r)
		}
	}
	return nil
}

// SetConfigDigests advertises digests, by source, as the configurations
// this member serves, in place of the ones advertised so far, and waits
// until the change is broadcast or a second passes: the others see it
// within a gossip round or two. The wait is only a courtesy: the change
// is queued before it, and a cut wait is no error (memberlist marks a
// broadcast done after RetransmitMult × log(n) gossip rounds, which
// passes a second from about ten members on the LAN profile). An
// unchanged set sends nothing. Once the member is leaving or shut down,
// the change is kept but not sent: the others are forgetting it anyway.
// Safe for concurrent use; concurrent callers must order their calls
// themselves (the last one wins).
func (c *Cluster) SetConfigDigests(digests map[string]string) error {
	if err := validateConfigDigests(digests); err != nil {
		return fmt.Errorf("cluster: config digests: %w", err)
	}
	d := maps.Clone(digests)
	if d == nil {
		d = map[string]string{}
	}
	c.metaMu.Lock()
	same, leaving := maps.Equal(c.meta.Config, d), c.meta.Leaving
	c.meta.Config = d
	c.metaMu.Unlock()
	select {
	case <-c.stop:
		return nil
	default:
	}
	if same || leaving {
		return nil
	}
	// memberlist reads the new metadata through the delegate, and tells
	// our own event delegate too: this member's Config changes with the
	// others'.
	// UpdateNode's only error is the cut wait (metadata too long panics,
	// and validateConfigDigests keeps it short).
	_ = c.ml.UpdateNode(configUpdateTimeout)
	return nil
}

// ConfigDiffers returns the sources, sorted, whose digest m advertises
// differently from want: one side having a source the other lacks is a
// difference too. It returns nil when m advertises no digests at all
// (Config nil: a member older than digests, or not alive), which is
// unknown rather than different.
func (m Member) ConfigDiffers(want map[string]string) []string {
	if m.Config == nil {
		return nil
	}
	var out []string
	for src, d := range want {
		if m.Config[src] != d {
			out = append(out, src)
		}
	}
	for src := range m.Config {
		if _, ok := want[src]; !ok {
			out = append(out, src)
		}
	}
	sort.Strings(out)
	return out
}
