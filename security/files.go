package security

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// MaxFileBytes bounds a credentials file (tokens, secrets, gossip keys):
// thousands of lines; past it the path is a mistake (a log, a device).
const MaxFileBytes = 1 << 20

// MinSecretBytes is the shortest bearer token or cluster secret accepted:
// 16 random bytes (128 bits) put guessing out of reach; a shorter value is
// a typo or a password.
const MinSecretBytes = 16

// ReadLines reads a credentials file: one value per line, surrounding
// whitespace trimmed, blank lines and lines starting with # skipped. The
// file must hold at least one value, and be a regular file (after
// symlinks) of at most MaxFileBytes: a named pipe there would hold the
// start, or the reload, up. Errors name the file, never a value.
func ReadLines(path string) ([]string, error) {
	b, err := regularfile.Read(path, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no values (one per line; # starts a comment)", path)
	}
	return out, nil
}

// ReadSecrets reads a token or secret file (ReadLines) and checks every
// value is at least MinSecretBytes long.
func ReadSecrets(path string) ([]string, error) {
	lines, err := ReadLines(path)
	if err != nil {
		return nil, err
	}
	for i, l := range lines {
		if len(l) < MinSecretBytes {
			return nil, fmt.Errorf("%s: value %d is %d bytes; want at least %d", path, i+1, len(l), MinSecretBytes)
		}
	}
	return lines, nil
}

// ReadKeyring reads a gossip keyring file: one base64 AES key (16, 24 or
// 32 bytes) per line, the first the primary (the one that encrypts).
func ReadKeyring(path string) ([][]byte, error) {
	lines, err := ReadLines(path)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, len(lines))
	for i, l := range lines {
		k, err := ParseGossipKey(l)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d: %w", path, i+1, err)
		}
		keys[i] = k
	}
	return keys, nil
}

// ParseGossipKey decodes one base64 gossip key and checks its length.
func ParseGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if n := len(k); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("decodes to %d bytes; want 16, 24 or 32", n)
	}
	return k, nil
}
