package node

// configChanged is called after any configuration the node serves from
// (the policies, the Envoy rate limit service's rules) was put in force,
// whatever brought it: SIGHUP, a watched file, a control plane.
func (n *Node) configChanged() {}
