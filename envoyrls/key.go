package envoyrls

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// keyPrefix starts every state key of this API, so that its counters
// cannot meet the keys applications send to the peerlimit API by accident.
const keyPrefix = "envoy:"

// hashedPrefix starts the key of a descriptor whose full key would exceed
// the node's key size limit.
const hashedPrefix = "envoy#sha256:"

// Key returns the limiter key of a request descriptor in a domain: the
// domain and every entry's key and value, as netstrings
// ("envoy:9:messaging,12:message_type,9:marketing,"). Length prefixes make
// it unambiguous whatever the strings hold. Two values of a wildcard key
// are two keys, hence two counters, as in envoyproxy/ratelimit; the window
// and algorithm are not in the key because the limiter keeps each
// (key, window, algorithm) apart already.
//
// A key longer than maxBytes is replaced by the SHA-256 of its full form
// (77 bytes): a long header value (a path, a token) still gets its own
// counter instead of an error, which Envoy, failing open by default,
// would turn into an unlimited request.
func Key[E Entry](domain string, entries []E, maxBytes int) string {
	return sharedKey(domain, entries, nil, maxBytes)
}

// sharedKey is Key, except that an entry whose shared[i] is not empty is
// written as its key and that pattern, marked by '*' in place of the
// netstring's ':' ("4:wild,7*wild_f*,"), so that every value a
// share_threshold wildcard matches has the one key, and no value, not
// even the pattern's own text, has that key by itself.
func sharedKey[E Entry](domain string, entries []E, shared []string, maxBytes int) string {
	value := func(i int) (string, byte) {
		if i < len(shared) && shared[i] != "" {
			return shared[i], '*'
		}
		return entries[i].GetValue(), ':'
	}
	n := len(keyPrefix) + netstringLen(domain)
	for i, e := range entries {
		v, _ := value(i)
		n += netstringLen(e.GetKey()) + netstringLen(v)
	}
	if n > maxBytes {
		return hashedKey(domain, entries, value)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(keyPrefix)
	writeNetstring(&b, domain, ':')
	for i, e := range entries {
		writeNetstring(&b, e.GetKey(), ':')
		v, sep := value(i)
		writeNetstring(&b, v, sep)
	}
	return b.String()
}

// hashedKey is the SHA-256 form of sharedKey's key, for one too long.
func hashedKey[E Entry](domain string, entries []E, value func(int) (string, byte)) string {
	h := sha256.New()
	var buf [20]byte
	write := func(s string, sep byte) {
		h.Write(strconv.AppendInt(buf[:0], int64(len(s)), 10))
		h.Write([]byte{sep})
		h.Write([]byte(s))
		h.Write([]byte{','})
	}
	write(domain, ':')
	for i, e := range entries {
		write(e.GetKey(), ':')
		write(value(i))
	}
	return hashedPrefix + hex.EncodeToString(h.Sum(nil))
}

func netstringLen(s string) int {
	n := len(s) + 2 // ':' and ','
	for l := len(s); ; l /= 10 {
		n++
		if l < 10 {
			return n
		}
	}
}

func writeNetstring(b *strings.Builder, s string, sep byte) {
	var buf [20]byte
	b.Write(strconv.AppendInt(buf[:0], int64(len(s)), 10))
	b.WriteByte(sep)
	b.WriteString(s)
	b.WriteByte(',')
}
