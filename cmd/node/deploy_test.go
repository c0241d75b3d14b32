package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// The deployment files configure this binary, so they are checked against
// its real flag parser: there is no Kubernetes cluster to apply the
// manifests to, and a typo in an environment variable's name would
// otherwise be ignored silently (parseFlags reads only the names it knows).

const repoRoot = "../.."

// dockerfile is what the image promises: who runs, what runs, the health
// check, and the directories it makes its user's (COPY --chown), by path.
type dockerfile struct {
	uid         int64
	entrypoint  []string
	healthcheck []string
	owned       map[string]int64
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	d := dockerfile{owned: map[string]int64{}}
	var lines []string
	sc := bufio.NewScanner(f)
	for cont := ""; sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, `\`) {
			cont += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		lines, cont = append(lines, cont+l), ""
	}
	require.NoError(t, sc.Err())
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "FROM "):
			assert.Equal(t, "FROM scratch", l, "no base image: nothing to pull")
		case strings.HasPrefix(l, "USER "):
			uid, _, _ := strings.Cut(strings.TrimPrefix(l, "USER "), ":")
			d.uid, err = strconv.ParseInt(uid, 10, 64)
			require.NoError(t, err, "USER must be numeric: a scratch image has no /etc/passwd")
		case strings.HasPrefix(l, "COPY --chown="):
			f := strings.Fields(strings.TrimPrefix(l, "COPY --chown="))
			uid, _, _ := strings.Cut(f[0], ":")
			d.owned[strings.TrimSuffix(f[len(f)-1], "/")], err = strconv.ParseInt(uid, 10, 64)
			require.NoError(t, err, "COPY --chown with a numeric user: %s", l)
		case strings.HasPrefix(l, "ENTRYPOINT "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(l, "ENTRYPOINT ")), &d.entrypoint), "exec form")
		case strings.HasPrefix(l, "HEALTHCHECK "):
			_, cmd, ok := strings.Cut(l, " CMD ")
			require.True(t, ok, l)
			require.NoError(t, json.Unmarshal([]byte(cmd), &d.healthcheck), "exec form: there is no shell")
		}
	}
	require.NotZero(t, d.uid, "the image runs as a non-root user")
	require.Equal(t, []string{"/peerlimit-node"}, d.entrypoint)
	require.GreaterOrEqual(t, len(d.healthcheck), 2)
	require.Equal(t, []string{"/peerlimit-node", "healthcheck"}, d.healthcheck[:2], "the binary checks itself")
	return d
}

func TestDockerfileHealthcheckHitsTheNodesHTTPPort(t *testing.T) {
	d := readDockerfile(t)
	o, err := parseFlags(onLoopback, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	args := d.healthcheck[2:]
	i := slices.Index(args, "--addr")
	require.GreaterOrEqual(t, i, 0, "the health check names its address")
	assert.Equal(t, "http://127.0.0.1:"+port(t, o.node.HTTPAddr), args[i+1], "the node's default HTTP port, on loopback")

	// The same flags, pointed at a server, pass: they are the subcommand's.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, `{"status":"SERVING"}`)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	args = slices.Clone(args)
	args[i+1] = srv.URL
	assert.Equal(t, 0, dispatch(append([]string{"healthcheck"}, args...), func(string) string { return "" }, io.Discard, io.Discard))
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	return p
}

// The Kubernetes objects the test reads; only the fields it checks.
type (
	k8sObject struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec yaml.Node `yaml:"spec"`
	}
	k8sService struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
			Protocol   string `yaml:"protocol"`
		} `yaml:"ports"`
	}
	k8sWorkload struct { // StatefulSet or Deployment
		ServiceName          string `yaml:"serviceName"`
		Replicas             int    `yaml:"replicas"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
			Spec struct {
				AccessModes []string `yaml:"accessModes"`
				Resources   struct {
					Requests map[string]string `yaml:"requests"`
				} `yaml:"resources"`
			} `yaml:"spec"`
		} `yaml:"volumeClaimTemplates"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	}
	k8sPodSpec struct {
		TerminationGracePeriodSeconds *int64 `yaml:"terminationGracePeriodSeconds"`
		EnableServiceLinks            *bool  `yaml:"enableServiceLinks"`
		SecurityContext               struct {
			RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
			RunAsUser    *int64 `yaml:"runAsUser"`
			RunAsGroup   *int64 `yaml:"runAsGroup"`
			FSGroup      *int64 `yaml:"fsGroup"`
		} `yaml:"securityContext"`
		Containers []k8sContainer `yaml:"containers"`
		Volumes    []struct {
			Name   string `yaml:"name"`
			Secret *struct {
				SecretName  string `yaml:"secretName"`
				DefaultMode *int   `yaml:"defaultMode"`
			} `yaml:"secret"`
		} `yaml:"volumes"`
	}
	k8sContainer struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				FieldRef *struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
				ResourceFieldRef *struct {
					Resource string `yaml:"resource"`
				} `yaml:"resourceFieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
			Protocol      string `yaml:"protocol"`
		} `yaml:"ports"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
		ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
		LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port string `yaml:"port"`
		} `yaml:"httpGet"`
	}
	k8sPDB struct {
		MaxUnavailable *int `yaml:"maxUnavailable"`
		MinAvailable   *int `yaml:"minAvailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	}
)

// downward is what the API server fills in for the downward API, here
// with sample values.
var downward = map[string]string{
	"status.podIP":       "10.42.0.7",
	"metadata.name":      "peerlimit-0",
	"metadata.namespace": "default",
	"limits.memory":      "536870912",
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

func readManifests(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy/kubernetes/*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "deploy/kubernetes holds the manifests")
	var objs []k8sObject
	for _, file := range files {
		f, err := os.Open(file)
		require.NoError(t, err)
		dec := yaml.NewDecoder(f)
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, file)
			require.NotEmpty(t, o.APIVersion, "%s: apiVersion", file)
			require.NotEmpty(t, o.Kind, "%s: kind", file)
			require.NotEmpty(t, o.Metadata.Name, "%s: a %s without a name", file, o.Kind)
			objs = append(objs, o)
		}
		f.Close()
	}
	return objs
}

func TestKubernetesManifests(t *testing.T) {
	objs := readManifests(t)
	services := map[string]k8sService{}
	var (
		workload     k8sWorkload
		workloadSeen int
		pdbs         []k8sPDB
	)
	for _, o := range objs {
		switch o.Kind {
		case "Service":
			var s k8sService
			require.NoError(t, o.Spec.Decode(&s), o.Metadata.Name)
			services[o.Metadata.Name] = s
		case "StatefulSet", "Deployment":
			require.NoError(t, o.Spec.Decode(&workload), o.Metadata.Name)
			workloadSeen++
		case "PodDisruptionBudget":
			var p k8sPDB
			require.NoError(t, o.Spec.Decode(&p), o.Metadata.Name)
			pdbs = append(pdbs, p)
		}
	}
	require.Equal(t, 1, workloadSeen, "one StatefulSet or Deployment")
	labels := workload.Template.Metadata.Labels
	require.NotEmpty(t, workload.Selector.MatchLabels)
	assert.True(t, subset(workload.Selector.MatchLabels, labels), "the selector matches the pods")
	assert.GreaterOrEqual(t, workload.Replicas, 3)

	pod := workload.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]

	// The environment, as the kubelet builds it, through the node's flags.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				v, ok := env[envRef.FindStringSubmatch(ref)[1]]
				require.True(t, ok, "%s refers to %s, which is not defined before it", e.Name, ref)
				return v
			})
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = downward[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = downward[e.ValueFrom.ResourceFieldRef.Resource]
		}
		require.NotEmpty(t, env[e.Name], "%s has a value", e.Name)
	}
	asked := map[string]bool{}
	o, err := parseFlags(c.Args, func(k string) string { asked[k] = true; return env[k] }, io.Discard)
	require.NoError(t, err, "the manifest's settings parse with the node's flags")
	for name := range env {
		if strings.HasPrefix(name, "PEERLIMIT_") {
			assert.True(t, asked[name], "%s is not a setting of peerlimit-node (typo?)", name)
		}
	}
	assert.Equal(t, "peerlimit-0", o.node.ID, "the pod name is the node id")
	checkClusterSecretVolume(t, pod, c, o.node.Security.ClusterSecretFile)
	checkDataVolume(t, workload, c, o.node.Persist.Dir)
	assert.Equal(t, "10.42.0.7:7946", o.node.AdvertiseAddr, "the pod IP is advertised")
	if assert.NotNil(t, pod.EnableServiceLinks) {
		assert.False(t, *pod.EnableServiceLinks, "service links would inject PEERLIMIT_*_PORT variables")
	}

	ports := map[string]int{}
	protocols := map[int][]string{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
		protocols[p.ContainerPort] = append(protocols[p.ContainerPort], cmpOr(p.Protocol, "TCP"))
	}
	httpPort, grpcPort, gossipPort := port(t, o.node.HTTPAddr), port(t, o.node.GRPCAddr), port(t, o.node.GossipAddr)
	assert.Equal(t, httpPort, strconv.Itoa(ports["http"]))
	assert.Equal(t, grpcPort, strconv.Itoa(ports["grpc"]))
	assert.Equal(t, gossipPort, port(t, o.node.AdvertiseAddr))
	gp, _ := strconv.Atoi(gossipPort)
	assert.ElementsMatch(t, []string{"TCP", "UDP"}, protocols[gp], "gossip needs TCP and UDP")

	for name, probe := range map[string]*k8sProbe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		require.NotNil(t, probe, "%s probe", name)
		require.NotNil(t, probe.HTTPGet, "%s probe is an HTTP GET", name)
		assert.Equal(t, "/healthz", probe.HTTPGet.Path, name)
		assert.Equal(t, httpPort, strconv.Itoa(ports[probe.HTTPGet.Port]), "%s probe hits the HTTP port", name)
	}

	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	assert.GreaterOrEqual(t, grace, o.shutdownTimeout+10*time.Second,
		"the kubelet must wait out --shutdown-timeout (%s): the handoff runs in it", o.shutdownTimeout)

	d := readDockerfile(t)
	if assert.NotNil(t, pod.SecurityContext.RunAsNonRoot) {
		assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	}
	if assert.NotNil(t, pod.SecurityContext.RunAsUser) {
		assert.Equal(t, d.uid, *pod.SecurityContext.RunAsUser, "the image's USER")
	}
	sc := c.SecurityContext
	assert.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem: the node writes only to its data volume")
	assert.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation)
	assert.Contains(t, sc.Capabilities.Drop, "ALL")
	assert.NotEmpty(t, c.Resources.Requests["cpu"])
	assert.NotEmpty(t, c.Resources.Requests["memory"])
	assert.NotEmpty(t, c.Resources.Limits["memory"], "GOMEMLIMIT and the key cap are sized against it")

	// Gossip discovery: every seed is the headless Service of the workload.
	require.NotEmpty(t, o.node.Join)
	headless, ok := services[workload.ServiceName]
	require.True(t, ok, "the StatefulSet's serviceName %q is a Service here", workload.ServiceName)
	assert.Equal(t, "None", headless.ClusterIP, "headless: the name resolves to every pod")
	assert.True(t, headless.PublishNotReadyAddresses, "starting pods must be found before they are ready")
	assert.True(t, subset(headless.Selector, labels))
	for _, seed := range o.node.Join {
		host, p, err := net.SplitHostPort(seed)
		require.NoError(t, err, seed)
		assert.True(t, host == workload.ServiceName || strings.HasPrefix(host, workload.ServiceName+"."), "seed %s is the headless Service", seed)
		assert.Equal(t, gossipPort, p)
	}
	for name, s := range services {
		assert.True(t, subset(s.Selector, labels), "Service %s selects the pods", name)
		for _, sp := range s.Ports {
			_, named := ports[sp.TargetPort]
			assert.True(t, named, "Service %s targets the container port %q", name, sp.TargetPort)
		}
	}

	require.Len(t, pdbs, 1)
	assert.True(t, subset(pdbs[0].Selector.MatchLabels, labels))
	if assert.NotNil(t, pdbs[0].MaxUnavailable, "one pod at a time: each hands off before the next goes") {
		assert.Equal(t, 1, *pdbs[0].MaxUnavailable)
	}
}

// checkClusterSecretVolume requires the pod's cluster secret file, which
// its Peer calls need (a pod listens beyond loopback), to be a key of a
// Secret mounted read-only and readable by the pod's user, and the
// manifest's header to say how to create that Secret: the manifests do
// not hold it, so that applying them never overwrites it.
func checkClusterSecretVolume(t *testing.T, pod k8sPodSpec, c k8sContainer, file string) {
	t.Helper()
	require.NotEmpty(t, file, "peer calls need the cluster secret: PEERLIMIT_CLUSTER_SECRET_FILE")
	var secretName, key string
	var mode *int
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		assert.True(t, m.ReadOnly, "the secret's volume is mounted read-only")
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				secretName, key, mode = v.Secret.SecretName, rel, v.Secret.DefaultMode
			}
		}
	}
	require.NotEmpty(t, secretName, "%s is in a volume of a Secret", file)
	if mode != nil && *mode&0o004 == 0 {
		require.NotNil(t, pod.SecurityContext.FSGroup, "mode %#o: the pod's user reads the file through fsGroup", *mode)
		assert.NotZero(t, *mode&0o040, "mode %#o: the group reads the file", *mode)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kubernetes/peerlimit.yaml"))
	require.NoError(t, err)
	assert.Regexp(t, `kubectl create secret generic `+secretName+` .*\n.*--from-literal=`+key+`=`, string(raw),
		"the header says how to create the Secret")
}

// checkDataVolume requires the pod's data directory to be the mount of a
// claim of the StatefulSet's own (a volumeClaimTemplate: one per pod,
// which is a node's directory's rule), writable by the pod's user through
// fsGroup, with the image's directory under it owned by the image's user.
func checkDataVolume(t *testing.T, w k8sWorkload, c k8sContainer, dir string) {
	t.Helper()
	require.NotEmpty(t, dir, "counts survive a restart of the whole cluster: PEERLIMIT_DATA_DIR")
	var claim string
	for _, m := range c.VolumeMounts {
		if m.MountPath == dir {
			assert.False(t, m.ReadOnly, "the data volume is written")
			claim = m.Name
		}
	}
	require.NotEmpty(t, claim, "the data directory %s is a volume mount", dir)
	var found bool
	for _, v := range w.VolumeClaimTemplates {
		if v.Metadata.Name == claim {
			found = true
			assert.Equal(t, []string{"ReadWriteOnce"}, v.Spec.AccessModes, "one pod's claim")
			assert.NotEmpty(t, v.Spec.Resources.Requests["storage"])
		}
	}
	assert.True(t, found, "the data volume %q is a volumeClaimTemplate: a claim per pod", claim)
	pod := w.Template.Spec
	if assert.NotNil(t, pod.SecurityContext.FSGroup, "the claim's root is made writable for the pod's group") {
		assert.Equal(t, *pod.SecurityContext.RunAsGroup, *pod.SecurityContext.FSGroup)
	}
	d := readDockerfile(t)
	assert.Equal(t, d.uid, d.owned[dir], "the image's %s is its user's, for a runtime that mounts over it as it is", dir)
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// compose is the part of docker-compose.yml the test checks.
type composeFile struct {
	Services map[string]struct {
		Image           string            `yaml:"image"`
		Command         []string          `yaml:"command"`
		Environment     map[string]string `yaml:"environment"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
		Ports           []string          `yaml:"ports"`
		Volumes         []string          `yaml:"volumes"`
		Networks        map[string]struct {
			Aliases []string `yaml:"aliases"`
		} `yaml:"networks"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// checkComposeDataVolume requires a named service's data directory to be
// a named volume of the file's, mounted by no other service (a node's
// directory is its own), at a directory of the image owned by its user:
// Docker gives a new named volume the ownership of what it covers.
func checkComposeDataVolume(t *testing.T, cf composeFile, name, dir string, volumes map[string]string) {
	t.Helper()
	require.NotEmpty(t, dir, "%s: counts survive a restart of the cluster: --data-dir", name)
	var vol string
	for _, v := range cf.Services[name].Volumes {
		if src, dst, ok := strings.Cut(v, ":"); ok && strings.TrimSuffix(dst, ":rw") == dir {
			vol = src
		}
	}
	require.NotEmpty(t, vol, "%s: %s is a volume", name, dir)
	_, declared := cf.Volumes[vol]
	assert.True(t, declared, "%s: %s is a named volume of the file", name, vol)
	assert.Empty(t, volumes[vol], "%s: volume %s is already %s's", name, vol, volumes[vol])
	volumes[vol] = name
	d := readDockerfile(t)
	assert.Equal(t, d.uid, d.owned[dir], "the image's %s is its user's", dir)
}

// composeValue is v as docker-compose interpolates it with none of its
// variables set: ${NAME:-default} and ${NAME-default} are the default.
func composeValue(v string) string {
	return composeVar.ReplaceAllString(v, "${1}")
}

var composeVar = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}`)

func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(b, &cf))
	require.Subset(t, slices.Collect(maps.Keys(cf.Services)), []string{"n1", "n2", "n3"})
	ids := map[string]bool{}
	volumes := map[string]string{} // named volume → the service that mounts it
	for name, s := range cf.Services {
		assert.Contains(t, s.Image, "peerlimit:dev", name)
		o, err := parseFlags(s.Command, func(k string) string { return composeValue(s.Environment[k]) }, io.Discard)
		require.NoError(t, err, "%s: command and environment parse with the node's flags", name)
		// The nodes listen beyond loopback: Peer calls need the secret,
		// which whoever runs the file can set (compose-test.sh does).
		assert.Len(t, o.node.Security.ClusterSecrets, 1, "%s: a cluster secret", name)
		assert.Regexp(t, `^\$\{PEERLIMIT_CLUSTER_SECRET:-.+\}$`, s.Environment["PEERLIMIT_CLUSTER_SECRET"],
			"%s: the secret is the variable's, its default only a fallback", name)
		if len(s.Command) > 0 {
			assert.False(t, ids[o.node.ID], "%s: id %s is unique", name, o.node.ID)
			ids[o.node.ID] = true
			checkComposeDataVolume(t, cf, name, o.node.Persist.Dir, volumes)
		}
		grace, err := time.ParseDuration(s.StopGracePeriod)
		require.NoError(t, err, "%s: stop_grace_period", name)
		assert.GreaterOrEqual(t, grace, o.shutdownTimeout+5*time.Second, "%s: Docker must wait out the handoff", name)

		// Every node carries every seed's name as an alias, so a seed
		// resolves to all of them and any one of them is enough to join.
		require.NotEmpty(t, o.node.Join, name)
		for _, seed := range o.node.Join {
			host, p, err := net.SplitHostPort(seed)
			require.NoError(t, err)
			assert.Equal(t, port(t, o.node.GossipAddr), p, "%s: seed %s", name, seed)
			var aliased bool
			for _, n := range s.Networks {
				aliased = aliased || slices.Contains(n.Aliases, host)
			}
			assert.True(t, aliased, "%s carries the alias %q it joins through", name, host)
		}
		// Published: the HTTP and gRPC ports, never gossip.
		var published []string
		for _, p := range s.Ports {
			published = append(published, p[strings.LastIndex(p, ":")+1:])
		}
		assert.ElementsMatch(t, []string{port(t, o.node.HTTPAddr), port(t, o.node.GRPCAddr)}, published, name)
	}
}
