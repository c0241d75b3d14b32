package node

import (
	"errors"

	"github.com/peerlimit/peerlimit/policy"
)

// ErrNoPolicyFile is returned by ReloadPolicies on a node started without
// Config.PoliciesFile: there is nothing to reload.
var ErrNoPolicyFile = errors.New("no policy file configured")

// ReloadPolicies reads Config.PoliciesFile again and puts it in force
// (cmd/node calls it on SIGHUP; with Config.WatchConfig a change of the
// file does too, configwatch.go). On any error, such as a bad line or a
// missing file, the policies in force stay as they were; the error names
// the line, is logged, counted in
// peerlimit_policy_reloads_total{result="error"}, and shown by
// ConfigErrors (GET /healthz) and peerlimit_config_reload_failing until a
// reload succeeds.
//
// Limiter state is untouched: it is keyed by (key, window, algorithm),
// never by policy name. A policy whose limit changed applies the new limit
// at once to what its keys already counted; one whose window or algorithm
// changed starts its keys on a fresh state (the old one expires by
// itself), since that is another limit.
//
// Only this node reloads: the policy is resolved where a request arrives,
// so until every node has reloaded the same file, the same policy name may
// mean different numbers on different nodes.
func (n *Node) ReloadPolicies() error {
	if n.policies == nil {
		n.log.Warn("policy reload asked, but the node was started without a policy file")
		return ErrNoPolicyFile
	}
	return n.reloadPolicies(reloadAsked)
}

// reloadPolicies is ReloadPolicies, for the reason why (reloadCause).
func (n *Node) reloadPolicies(why reloadCause) error {
	old := n.policies.Current().Digest
	set, err := n.policies.Reload()
	if err != nil {
		if !n.reloadFailed(sourcePolicies, why, err) {
			n.log.Debug("policy file still unusable; the policies in force are kept", "file", n.policies.Path(), "err", err)
			return err
		}
		n.metrics.policyReloads.WithLabelValues("error").Inc()
		n.log.Error("policy reload failed; the policies in force are kept", "file", n.policies.Path(), "err", err, "by", why.String())
		return err
	}
	if !n.reloadSucceeded(sourcePolicies, why, set.Digest != old, "file", set.File, "digest", set.Digest) {
		return nil
	}
	n.metrics.policyReloads.WithLabelValues("ok").Inc()
	n.configChanged()
	n.log.Info("policies reloaded", "file", set.File, "policies", set.Len(), "digest", set.Digest, "by", why.String())
	return nil
}

// Policies returns the policies in force, or nil without a policy file.
func (n *Node) Policies() *policy.Set { return n.policySet() }

func (n *Node) policySet() *policy.Set {
	if n.policies == nil {
		return nil
	}
	return n.policies.Current()
}
