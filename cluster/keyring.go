package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// errNoKeyring is SetKeys on a member started without Config.Keys.
var errNoKeyring = errors.New("cluster: gossip encryption was not started with a keyring; it cannot be turned on, or a single key rotated, while running")

// validKeyLen is memberlist's rule for a gossip key: AES-128, -192 or -256.
func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// SetKeys makes the gossip keyring hold exactly keys, keys[0] encrypting
// and every key decrypting. It works only on a member started with
// Config.Keys: encryption cannot be turned on or off while running, since
// members would stop understanding each other at once.
//
// New keys are added first, then the primary is switched, then the keys
// no longer listed are removed, so no key this member may still receive is
// missing at any point. A rolling rotation is three passes over the
// cluster, each finished on every member before the next starts: add the
// new key (primary unchanged), make it the primary, remove the old one.
func (c *Cluster) SetKeys(keys [][]byte) error {
	if c.keyring == nil {
		return errNoKeyring
	}
	if len(keys) == 0 {
		return errors.New("cluster: SetKeys: no keys; encryption cannot be turned off while running")
	}
	for i, k := range keys {
		if n := len(k); !validKeyLen(n) {
			return fmt.Errorf("cluster: SetKeys: key %d must be 16, 24 or 32 bytes, got %d", i+1, n)
		}
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	kr := c.keyring
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil { // a no-op for a key already there
			return fmt.Errorf("cluster: add gossip key: %w", err)
		}
	}
	if !bytes.Equal(kr.GetPrimaryKey(), keys[0]) {
		if err := kr.UseKey(keys[0]); err != nil {
			return fmt.Errorf("cluster: use gossip key: %w", err)
		}
	}
	wanted := func(k []byte) bool {
		return slices.ContainsFunc(keys, func(w []byte) bool { return bytes.Equal(w, k) })
	}
	// memberlist's RemoveKey shifts the keys after the removed one in
	// place, in the slice its packet handlers are reading without a lock
	// (a data race) — unless the removed key is the last. So remove only
	// last keys: to drop a key in the middle, take the wanted keys after it
	// off, drop it, and put them back. Those keys are missing for
	// microseconds (a packet encrypted with one may be lost, which gossip
	// tolerates); in the three-step rotation the old key is already last
	// and nothing moves.
	for {
		cur := slices.Clone(kr.GetKeys())
		j := slices.IndexFunc(cur, func(k []byte) bool { return !wanted(k) })
		if j < 0 {
			return nil
		}
		for i := len(cur) - 1; i >= j; i-- {
			if err := kr.RemoveKey(cur[i]); err != nil {
				return fmt.Errorf("cluster: remove gossip key: %w", err)
			}
		}
		for _, k := range cur[j+1:] {
			if err := kr.AddKey(k); err != nil {
				return fmt.Errorf("cluster: restore gossip key: %w", err)
			}
		}
	}
}

// Keys returns a copy of the gossip keyring, the primary first; nil
// without one.
func (c *Cluster) Keys() [][]byte {
	if c.keyring == nil {
		return nil
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	var out [][]byte
	for _, k := range c.keyring.GetKeys() {
		out = append(out, bytes.Clone(k))
	}
	return out
}
