package jepsenlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DockerConfig names a running compose project of docker-compose.yml: its
// services n1, n2, n3 are the scenario's nodes.
type DockerConfig struct {
	// Project is the compose project name (-p).
	Project string
}

// Docker returns the backend of a compose cluster. Faults are what an
// operator of containers has: docker kill, docker pause / unpause,
// docker network disconnect / connect, docker stop (graceful leave), and
// docker run of one more container on the project's network for a node
// added under load. Each scenario starts from the three services running,
// unpaused and connected, and extras removed.
//
// A disconnected container is cut off from every peer and from its
// published ports, so partitions are limited to isolating single nodes
// (n1 | n2 n3), and the isolated side answers no clients; single links
// cannot be cut. Reconnecting keeps the container's address (--ip), which
// needs a network with a configured subnet (compose-test's override).
func Docker(cfg DockerConfig) BackendFactory {
	return func(ctx context.Context, sc Scenario, dir string) (Backend, error) {
		if sc.Nodes > 3 {
			return nil, fmt.Errorf("%w: docker mode has 3 nodes, the scenario wants %d", ErrUnsupported, sc.Nodes)
		}
		b := &dockerBackend{cfg: cfg, ids: []string{"n1", "n2", "n3"}[:sc.Nodes], ctr: map[string]string{},
			addr: map[string]netAddr{}, isolated: map[string]bool{}, extras: map[string]bool{},
			needs: sc.Needs, dir: dir, since: time.Now()}
		if len(sc.Args) > 0 || len(sc.NodeArgs) > 0 {
			b.argsErr = fmt.Errorf("%w: the compose cluster's nodes cannot get this scenario's flags %v", ErrUnsupported, sc.Args)
		}
		for i := range sc.Extra {
			id := fmt.Sprintf("n%d", sc.Nodes+i+1)
			b.ids = append(b.ids, id)
			b.extras[id] = true
		}
		if err := b.reset(ctx); err != nil {
			return nil, fmt.Errorf("docker mode: %w", err)
		}
		return b, nil
	}
}

// findMesh picks the network the nodes gossip on: the internal one of
// compose-test's override (clients reach the nodes through another), or
// else the container's only network. It notes whether a partition can be
// made and healed there.
func (b *dockerBackend) findMesh(ctx context.Context, st containerState) error {
	type netInfo struct {
		Internal bool
		IPAM     struct{ Config []struct{ Subnet string } }
	}
	for name := range st.NetworkSettings.Networks {
		var nets []netInfo
		out, err := docker(ctx, "network", "inspect", name)
		if err != nil || json.Unmarshal([]byte(out), &nets) != nil || len(nets) != 1 {
			return fmt.Errorf("docker network inspect %s: %v", name, err)
		}
		if nets[0].Internal || len(st.NetworkSettings.Networks) == 1 {
			b.network = name
			b.subnet = len(nets[0].IPAM.Config) > 0 && nets[0].IPAM.Config[0].Subnet != ""
		}
	}
	if b.network == "" {
		return errors.New("the nodes are on several networks, none internal: which one do they gossip on?")
	}
	b.frontDoor = len(st.NetworkSettings.Networks) > 1
	return nil
}

type netAddr struct {
	IP      string
	Aliases []string
}

type dockerBackend struct {
	cfg     DockerConfig
	argsErr error // the scenario wants node flags compose cannot give: skipped
	ids     []string
	extras  map[string]bool
	network string
	subnet  bool // the network has a configured subnet: --ip works
	// frontDoor: clients reach the nodes through another network, so a
	// node cut off from the mesh still answers them.
	frontDoor bool
	needs     Need      // the scenario's: it runs (and logs) only if Supports
	dir       string    // the scenario's output: each node's log, at Close
	since     time.Time // the scenario's start, for docker logs --since

	mu       sync.Mutex
	ctr      map[string]string  // id → container id
	addr     map[string]netAddr // id → address on the network, taken at reset
	isolated map[string]bool
	grpc     map[string]string
}

// reset brings n1..n3 back to running, unpaused and connected, removes
// extras left by an earlier scenario, and learns addresses and ports.
func (b *dockerBackend) reset(ctx context.Context) error {
	_, _ = docker(ctx, "rm", "-f", b.extraName("n4")) // a previous scenario's extra, if any
	b.grpc = map[string]string{}
	for _, id := range []string{"n1", "n2", "n3"} {
		ctr, err := docker(ctx, "ps", "-aq", "--filter", "label=com.docker.compose.project="+b.cfg.Project,
			"--filter", "label=com.docker.compose.service="+id)
		if err != nil || ctr == "" {
			return fmt.Errorf("no container for service %s in project %s: %v", id, b.cfg.Project, err)
		}
		b.ctr[id] = strings.Fields(ctr)[0]
		st, err := b.inspect(ctx, id)
		if err != nil {
			return err
		}
		if b.network == "" {
			if err := b.findMesh(ctx, st); err != nil {
				return err
			}
		}
		n, connected := st.NetworkSettings.Networks[b.network]
		switch {
		case !connected:
			// Left disconnected by an interrupted run: reconnect with
			// whatever address Docker gives.
			if _, err := docker(ctx, "network", "connect", "--alias", "peerlimit", "--alias", id, b.network, b.ctr[id]); err != nil {
				return err
			}
		default:
			b.addr[id] = netAddr{IP: n.IPAddress, Aliases: n.Aliases}
		}
		if st.State.Paused {
			if _, err := docker(ctx, "unpause", b.ctr[id]); err != nil {
				return err
			}
		}
		if err := b.Start(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

type containerState struct {
	State struct {
		Running, Paused bool
	}
	NetworkSettings struct {
		Networks map[string]struct {
			IPAddress string
			Aliases   []string
		}
		Ports map[string][]struct{ HostIP, HostPort string }
	}
	Config struct {
		Image string
		Env   []string
	}
}

func (b *dockerBackend) inspect(ctx context.Context, id string) (containerState, error) {
	var st []containerState
	out, err := docker(ctx, "inspect", b.container(id))
	if err != nil {
		return containerState{}, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		return containerState{}, fmt.Errorf("docker inspect %s: %v", id, err)
	}
	return st[0], nil
}

func (b *dockerBackend) container(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.ctr[id]; ok {
		return c
	}
	return b.extraName(id)
}

func (b *dockerBackend) extraName(id string) string { return b.cfg.Project + "-jepsen-" + id }

func (b *dockerBackend) Nodes() []string { return b.ids }

func (b *dockerBackend) Supports(n Need) error {
	switch {
	case b.argsErr != nil:
		return b.argsErr
	case n == NeedSlowLink:
		return fmt.Errorf("%w: slow links are made by the local backend's delayer (netfilter queue on loopback addresses)", ErrUnsupported)
	case n == NeedLinkCut:
		return fmt.Errorf("%w: docker network disconnect cuts a container off from every peer; one link cannot be cut", ErrUnsupported)
	case n == NeedPartition && !b.subnet:
		return fmt.Errorf("%w: network %s has no configured subnet, so a disconnected container cannot get its address back (use scripts/compose-test.override.yml)", ErrUnsupported, b.network)
	case n == NeedPartition && !b.frontDoor:
		return fmt.Errorf("%w: the nodes' only network is %s; a node cut off from it could not answer clients (use scripts/compose-test.override.yml)", ErrUnsupported, b.network)
	}
	return nil
}

func (b *dockerBackend) Start(ctx context.Context, id string) error {
	if b.extras[id] {
		if err := b.runExtra(ctx, id); err != nil {
			return err
		}
	} else if st, err := b.inspect(ctx, id); err != nil {
		return err
	} else if !st.State.Running {
		if _, err := docker(ctx, "start", b.container(id)); err != nil {
			return err
		}
	}
	// Docker may publish on a new host port after a restart.
	st, err := b.inspect(ctx, id)
	if err != nil {
		return err
	}
	http, grpc := published(st, "8080/tcp"), published(st, "9090/tcp")
	if http == "" || grpc == "" {
		return fmt.Errorf("%s publishes no HTTP or gRPC port", id)
	}
	b.mu.Lock()
	b.grpc[id] = grpc
	b.mu.Unlock()
	return waitHealthy(ctx, "http://"+http+"/healthz", nil, 30*time.Second)
}

// runExtra starts one more node as a plain container configured like the
// services (image, environment, networks, alias), with its own id and the
// next address on the mesh (n4 at .14 when n1 is at .11).
func (b *dockerBackend) runExtra(ctx context.Context, id string) error {
	tmpl, err := b.inspect(ctx, "n1")
	if err != nil {
		return err
	}
	var slot int
	if _, err := fmt.Sscanf(id, "n%d", &slot); err != nil {
		return fmt.Errorf("extra node id %q: %w", id, err)
	}
	ip := b.addr["n1"].IP
	if b.subnet {
		i := strings.LastIndexByte(ip, '.')
		var last int
		fmt.Sscanf(ip[i+1:], "%d", &last)
		ip = fmt.Sprintf("%s.%d", ip[:i], last+slot-1)
	}
	front := b.network
	for name := range tmpl.NetworkSettings.Networks {
		if name != b.network {
			front = name
		}
	}
	name := b.extraName(id)
	args := []string{"create", "--name", name, "--hostname", id, "--network", front,
		"--label", "peerlimit.jepsen=" + b.cfg.Project,
		"-p", "127.0.0.1::8080", "-p", "127.0.0.1::9090",
		"--read-only", "--cap-drop", "ALL", "--stop-timeout", strconv.Itoa(int(stopGrace.Seconds()))}
	for _, e := range tmpl.Config.Env {
		if strings.HasPrefix(e, "PEERLIMIT_ADVERTISE_ADDR=") {
			e = "PEERLIMIT_ADVERTISE_ADDR=" + ip + ":7946"
		}
		if strings.HasPrefix(e, "PEERLIMIT_") {
			args = append(args, "-e", e)
		}
	}
	if _, err := docker(ctx, append(args, tmpl.Config.Image, "--id="+id)...); err != nil {
		return err
	}
	if front != b.network {
		conn := []string{"network", "connect", "--alias", "peerlimit"}
		if b.subnet {
			conn = append(conn, "--ip", ip)
		}
		if _, err := docker(ctx, append(conn, b.network, name)...); err != nil {
			return err
		}
	}
	_, err = docker(ctx, "start", name)
	return err
}

func published(st containerState, port string) string {
	for _, p := range st.NetworkSettings.Ports[port] {
		ip := p.HostIP
		if ip == "" || ip == "0.0.0.0" {
			ip = "127.0.0.1"
		}
		if !strings.Contains(ip, ":") {
			return ip + ":" + p.HostPort
		}
	}
	return ""
}

func (b *dockerBackend) Kill(ctx context.Context, id string) error {
	_, err := docker(ctx, "kill", b.container(id))
	return err
}

func (b *dockerBackend) Pause(ctx context.Context, id string) error {
	_, err := docker(ctx, "pause", b.container(id))
	return err
}

func (b *dockerBackend) Resume(ctx context.Context, id string) error {
	_, err := docker(ctx, "unpause", b.container(id))
	return err
}

// stopGrace is how long a leaving node has to exit before Docker kills
// it: docker-compose.yml's stop_grace_period, runExtra's --stop-timeout.
const stopGrace = 40 * time.Second

// Leave stops the node's container as `compose stop` does, with the same
// engine call (docker stop: SIGTERM, SIGKILL after stopGrace), but without
// compose's own start-up: docker-compose v1 (Python) took 1.1–2.7 s on a
// scenario's load before it sent the SIGTERM, over 5 s with the CPU busy,
// so the leave came late or, killed at the end of the run, not at all
// (compose-test failed so: step "remove n1": ... signal: killed).
// Like the process backend's, a leave is bounded by its own grace period,
// not by the end of the run; a node still running when the grace period
// ends, killed, did not leave, and the step fails.
func (b *dockerBackend) Leave(ctx context.Context, id string) error {
	return b.StopAll(ctx, []string{id})
}

// StopAll stops the nodes' containers with one docker stop, which sends
// each its SIGTERM at once (the CLI stops its containers in parallel),
// and waits as Leave does.
func (b *dockerBackend) StopAll(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopGrace+10*time.Second)
	defer cancel()
	args := []string{"stop", "-t", strconv.Itoa(int(stopGrace.Seconds()))}
	if _, err := docker(ctx, append(args, b.containers(ids)...)...); err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		code, err := docker(ctx, "inspect", "-f", "{{.State.ExitCode}}", b.container(id))
		switch {
		case err != nil:
			errs = append(errs, err)
		case code == "137":
			errs = append(errs, fmt.Errorf("%s did not exit within %s of SIGTERM: docker killed it", id, stopGrace))
		}
	}
	return errors.Join(errs...)
}

// KillAll kills the nodes' containers with one docker kill, which the
// CLI sends to them all in parallel.
func (b *dockerBackend) KillAll(ctx context.Context, ids []string) error {
	_, err := docker(ctx, append([]string{"kill"}, b.containers(ids)...)...)
	return err
}

func (b *dockerBackend) containers(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = b.container(id)
	}
	return out
}

// Partition isolates every node outside the largest group.
func (b *dockerBackend) Partition(ctx context.Context, groups [][]string) error {
	if err := b.Supports(NeedPartition); err != nil {
		return err
	}
	largest := 0
	for i, g := range groups {
		if len(g) > len(groups[largest]) {
			largest = i
		}
	}
	for i, g := range groups {
		if i == largest {
			continue
		}
		if len(g) != 1 {
			return fmt.Errorf("%w: only single nodes can be cut off (disconnected), not the group %v", ErrUnsupported, g)
		}
		if _, err := docker(ctx, "network", "disconnect", b.network, b.container(g[0])); err != nil {
			return err
		}
		b.mu.Lock()
		b.isolated[g[0]] = true
		b.mu.Unlock()
	}
	return nil
}

func (b *dockerBackend) Cut(context.Context, string, string) error {
	return b.Supports(NeedLinkCut)
}

func (b *dockerBackend) Lose(context.Context, string, string, float64) error {
	return b.Supports(NeedLinkCut)
}

func (b *dockerBackend) Delay(context.Context, []string, []string, Link) error {
	return b.Supports(NeedSlowLink)
}

// Heal reconnects every isolated node with its address and aliases.
func (b *dockerBackend) Heal(ctx context.Context) error {
	b.mu.Lock()
	var ids []string
	for id := range b.isolated {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	var errs []error
	for _, id := range ids {
		a := b.addr[id]
		args := []string{"network", "connect", "--ip", a.IP}
		for _, al := range a.Aliases {
			if !strings.HasPrefix(b.ctr[id], al) { // Docker adds the short container id itself
				args = append(args, "--alias", al)
			}
		}
		if _, err := docker(ctx, append(args, b.network, b.container(id))...); err != nil {
			errs = append(errs, err)
			continue
		}
		b.mu.Lock()
		delete(b.isolated, id)
		b.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (b *dockerBackend) Answering(id string) bool {
	st, err := b.inspect(context.Background(), id)
	return err == nil && st.State.Running && !st.State.Paused
}

func (b *dockerBackend) GRPCAddr(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.grpc[id]
}

// Close undoes the faults that outlive a scenario here: isolation and
// pauses, and the extra containers. Killed and stopped services are
// started by the next scenario's reset (or torn down with the project).
func (b *dockerBackend) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := []error{b.Heal(ctx)}
	ran := b.Supports(b.needs) == nil
	for _, id := range b.ids {
		if ran {
			b.saveLog(ctx, id)
		}
		if b.extras[id] {
			_, _ = docker(ctx, "rm", "-f", b.extraName(id))
			continue
		}
		if st, err := b.inspect(ctx, id); err == nil && st.State.Paused {
			_, err := docker(ctx, "unpause", b.container(id))
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// saveLog writes what the node's container logged since the scenario
// began to dir/ID.log, as the process backend's nodes do; an added node's
// log would go with its container.
func (b *dockerBackend) saveLog(ctx context.Context, id string) {
	out, err := exec.CommandContext(ctx, "docker", "logs", "--since", b.since.Format(time.RFC3339Nano), b.container(id)).CombinedOutput()
	if err == nil && len(out) > 0 {
		_ = os.WriteFile(filepath.Join(b.dir, id+".log"), out, 0o644)
	}
}

func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}
