package node

import (
	"errors"

	"github.com/peerlimit/peerlimit/configs"
)

// Configs are the policies and the Envoy rate limit service's rules the
// node serves: what is in force, why the last reload of a file failed,
// and each source's own reload.
func (n *Node) Configs() *configs.Set { return n.configs }

// Reload re-reads every file the node was started with, as cmd/node
// does on SIGHUP: the policy file (configs.Set.ReloadPolicies), the
// credential files (security.Credentials.Reload: TLS material, API
// tokens, cluster secrets, which also key the reservation tokens, the
// gossip keyring) and the Envoy rules'
// files (configs.Set.ReloadEnvoyRLS). Each part logs and counts its own
// outcome, and keeps what it had when its files are unusable. The error
// joins the parts' errors; a part the node was started without is none.
func (n *Node) Reload() error {
	var errs []error
	for _, reload := range []func() error{
		n.configs.ReloadPolicies,
		func() error {
			err := n.sec.Reload(n.members)
			n.cfg.Limiter.TokenKeys.Set(n.sec.ClusterSecrets(), n.cfg.ClusterName) // what is in force, reloaded or kept
			return err
		},
		n.configs.ReloadEnvoyRLS,
	} {
		if err := reload(); err != nil && !errors.Is(err, configs.ErrNoPolicyFile) && !errors.Is(err, configs.ErrNoEnvoyRLSConfig) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
