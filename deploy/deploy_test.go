package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// handOff is cmd/corvo's handOffTimeout: a stopping node first moves its
// leaderships away for up to this long, then drains for --shutdown-timeout.
const handOff = 5 * time.Second

// corvoBin is cmd/corvo built once for the whole test.
var corvoBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "corvo-deploy-")
	if err != nil {
		panic(err)
	}
	corvoBin = filepath.Join(dir, "corvo")
	build := exec.Command("go", "build", "-o", corvoBin, "./cmd/corvo")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		panic("building corvo: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var flagRe = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)

// cliFlags lists the flags `corvo <cmd> --help` documents.
func cliFlags(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	out, err := exec.Command(corvoBin, cmd, "--help").CombinedOutput()
	require.NoError(t, err, string(out))
	flags := map[string]bool{}
	for _, m := range flagRe.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	require.True(t, flags["help"], "cannot parse corvo %s --help:\n%s", cmd, out)
	return flags
}

// argFlags parses `--name=value` and `--name value` arguments into
// name → value ("" for a bare flag).
func argFlags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, val, ok := strings.Cut(a[2:], "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			val = args[i+1]
			i++
		}
		out[name] = val
	}
	return out
}

// requireKnownFlags checks that every flag in a `corvo <cmd> …` command line
// exists in that command's --help.
func requireKnownFlags(t *testing.T, where string, args []string) {
	t.Helper()
	require.NotEmpty(t, args, where)
	known := cliFlags(t, args[0])
	for name := range argFlags(args[1:]) {
		require.True(t, known[name], "%s: `corvo %s` has no flag --%s", where, args[0], name)
	}
}

func durationFlag(t *testing.T, flags map[string]string, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := flags[name]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "--%s=%s", name, v)
	return d
}

// dockerfile is the parsed deploy/Dockerfile.
type dockerfile struct {
	stages []stage
}

type stage struct {
	from, name string
	ins        []instruction
}

type instruction struct {
	cmd   string   // lower case
	flags []string // --from=…, --chown=…
	args  []string // exec-form elements or words
	json  bool     // exec (JSON) form
}

func (s *stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.ins {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func (s *stage) last(cmd string) *instruction {
	all := s.all(cmd)
	if len(all) == 0 {
		return nil
	}
	return &all[len(all)-1]
}

// parseDockerfile parses with BuildKit's own parser.
func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	res, err := parser.Parse(bytes.NewReader(b))
	require.NoError(t, err)
	require.Empty(t, res.Warnings, "parser warnings")
	var df dockerfile
	for _, n := range res.AST.Children {
		in := instruction{cmd: strings.ToLower(n.Value), flags: n.Flags, json: n.Attributes["json"]}
		for a := n.Next; a != nil; a = a.Next {
			in.args = append(in.args, a.Value)
		}
		if in.cmd == "healthcheck" && n.Next != nil {
			// HEALTHCHECK CMD [...]: the command hangs off the CMD node.
			in.args = nil
			for a := n.Next.Next; a != nil; a = a.Next {
				in.args = append(in.args, a.Value)
			}
		}
		if in.cmd == "from" {
			st := stage{from: in.args[0]}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "as") {
				st.name = in.args[2]
			}
			df.stages = append(df.stages, st)
			continue
		}
		if len(df.stages) == 0 {
			continue // ARG before the first FROM
		}
		df.stages[len(df.stages)-1].ins = append(df.stages[len(df.stages)-1].ins, in)
	}
	return df
}

func TestDockerfile(t *testing.T) {
	df := parseDockerfile(t, "Dockerfile")
	require.Len(t, df.stages, 2, "a builder and a runtime stage")
	build, run := &df.stages[0], &df.stages[1]
	require.True(t, strings.HasPrefix(build.from, "golang:"), "builder: the Go image (it has gcc for cgo): %s", build.from)
	require.Equal(t, "build", build.name)
	var buildCmds string
	for _, in := range build.all("run") {
		buildCmds += strings.Join(in.args, " ") + "\n"
	}
	require.Contains(t, buildCmds, "CGO_ENABLED=1", "the SQLite mirror needs cgo")
	require.Contains(t, buildCmds, "./cmd/corvo")
	require.Regexp(t, `^gcr\.io/distroless/base-debian\d+(:nonroot)?$`, run.from, "runtime: glibc for the cgo binary, no shell")

	copied := false
	for _, in := range run.all("copy") {
		if slices.Contains(in.flags, "--from=build") && slices.Contains(in.args, "/usr/local/bin/corvo") {
			copied = true
		}
	}
	require.True(t, copied, "the runtime stage copies the binary from the build stage")

	user := run.last("user")
	require.NotNil(t, user, "the runtime stage sets USER")
	uid, _, _ := strings.Cut(user.args[0], ":")
	require.NotContains(t, []string{"root", "0", ""}, uid, "USER must not be root")

	vol := run.last("volume")
	require.NotNil(t, vol)
	require.Contains(t, vol.args, "/data")
	expose := run.last("expose")
	require.NotNil(t, expose)
	require.ElementsMatch(t, []string{"8080", "9400"}, expose.args)

	ep := run.last("entrypoint")
	require.NotNil(t, ep)
	require.True(t, ep.json)
	require.Equal(t, []string{"corvo"}, ep.args)
	cmd := run.last("cmd")
	require.NotNil(t, cmd)
	require.True(t, cmd.json, "exec form, so SIGTERM reaches corvo")
	require.Equal(t, "server", cmd.args[0])
	requireKnownFlags(t, "Dockerfile CMD", cmd.args)
	flags := argFlags(cmd.args[1:])
	require.Equal(t, "/data", flags["data-dir"])

	hc := run.last("healthcheck")
	require.NotNil(t, hc, "HEALTHCHECK")
	require.True(t, hc.json)
	require.Equal(t, "corvo", hc.args[0], "distroless has no curl: corvo checks itself")
	requireKnownFlags(t, "Dockerfile HEALTHCHECK", hc.args[1:])

	// The command and the health check work: run them as the image would,
	// with /data and the ports mapped to this machine.
	// The health check reaches the server at the image's CORVO_URL (the
	// TLS overlays set their own).
	srv := startNode(t, "single", cmd.args)
	imgEnv, hcArgs := imageHealthCheck(t)
	require.Contains(t, envMap(imgEnv), "CORVO_URL")
	env := srv.containerEnv(t.TempDir(), imgEnv)
	hcArgs = srv.rewrite(hcArgs)
	out, err := healthCheck(t, hcArgs, env)
	require.NoError(t, err, "the HEALTHCHECK command fails against a healthy server: %s", out)
	require.Contains(t, out, "status: ok")
	srv.stop(t, durationFlag(t, flags, "shutdown-timeout", 30*time.Second)+handOff)
	out, err = healthCheck(t, hcArgs, env)
	require.Error(t, err, "the HEALTHCHECK command passes with no server: %s", out)

	// .dockerignore keeps the context small but not what the build copies.
	ign, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	lines := strings.Split(string(ign), "\n")
	require.Contains(t, lines, ".git")
	require.Contains(t, lines, "deploy/compose/tls/", "the compose files' certificates and keys stay out of the build context")
	for _, need := range []string{"go.mod", "go.sum", "sdk/go/go.mod", "cmd/corvo"} {
		for _, l := range lines {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			ok, err := filepath.Match(strings.TrimPrefix(l, "/"), need)
			require.NoError(t, err)
			require.False(t, ok || strings.HasPrefix(need, strings.TrimSuffix(l, "/")+"/"), ".dockerignore %q excludes %s, which the build needs", l, need)
		}
	}
}

// composeFile is the part of a Compose file the test reads.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Hostname  string                       `yaml:"hostname"`
	Command   []string                     `yaml:"command"`
	Ports     []string                     `yaml:"ports"`
	Volumes   []string                     `yaml:"volumes"`
	DependsOn map[string]map[string]string `yaml:"depends_on"`
	StopGrace string                       `yaml:"stop_grace_period"`
	Restart   string                       `yaml:"restart"`
	Env       []string                     `yaml:"environment"`
}

func loadCompose(t *testing.T, path string) composeFile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cf composeFile
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal(b, &raw))
	for k := range raw {
		if strings.HasPrefix(k, "x-") { // extension fields (YAML anchors)
			delete(raw, k)
		}
	}
	clean, err := yaml.Marshal(raw)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(clean))
	dec.KnownFields(true) // a misspelt key fails here, not silently in Compose
	require.NoError(t, dec.Decode(&cf), path)
	require.NotEmpty(t, cf.Services, path)
	return cf
}

// checkService checks what every Corvo service needs and returns its
// `corvo server` flags.
func checkService(t *testing.T, path string, cf composeFile, name string, s composeService) map[string]string {
	t.Helper()
	where := path + " " + name
	require.NotEmpty(t, s.Image, where)
	require.NotNil(t, s.Build, "%s: builds the image", where)
	require.FileExists(t, filepath.Join(filepath.Dir(path), s.Build.Context, s.Build.Dockerfile), where)
	require.Equal(t, "server", s.Command[0], where)
	requireKnownFlags(t, where, s.Command)
	flags := argFlags(s.Command[1:])
	require.Equal(t, "/data", flags["data-dir"], where)

	// Its own named volume, declared, on /data.
	require.Len(t, s.Volumes, 1, where)
	vol, mount, ok := strings.Cut(s.Volumes[0], ":")
	require.True(t, ok, where)
	require.Equal(t, "/data", mount, where)
	require.Contains(t, cf.Volumes, vol, "%s: volume %s is not declared", where, vol)

	// SIGTERM gets the hand-off plus the drain before Docker kills it.
	grace, err := time.ParseDuration(s.StopGrace)
	require.NoError(t, err, "%s: stop_grace_period", where)
	require.GreaterOrEqual(t, grace, durationFlag(t, flags, "shutdown-timeout", 30*time.Second)+handOff, where)
	return flags
}

// composeOIDCEnv passes the single sign-on settings through from the
// environment (empty: off).
var composeOIDCEnv = []string{
	"CORVO_OIDC_ISSUER=${CORVO_OIDC_ISSUER:-}",
	"CORVO_OIDC_CLIENT_ID=${CORVO_OIDC_CLIENT_ID:-}",
	"CORVO_OIDC_CLIENT_SECRET=${CORVO_OIDC_CLIENT_SECRET:-}",
	"CORVO_OIDC_REDIRECT_URL=${CORVO_OIDC_REDIRECT_URL:-}",
	"CORVO_OIDC_ROLE_MAP=${CORVO_OIDC_ROLE_MAP:-}",
}

func TestComposeSingle(t *testing.T) {
	cf := loadCompose(t, "compose/single.yaml")
	require.Len(t, cf.Services, 1)
	for name, s := range cf.Services {
		flags := checkService(t, "compose/single.yaml", cf, name, s)
		require.NotContains(t, flags, "join")
		require.Equal(t, []string{"8080:8080"}, s.Ports)

		require.Equal(t, append([]string{"CORVO_ADMIN_KEY=${CORVO_ADMIN_KEY:-}"}, composeOIDCEnv...), s.Env,
			"the admin key and the single sign-on settings come from the environment")

		// The container listens on every interface, so keys are needed
		// (here on loopback: --auth on); the key from the environment is
		// the admin's.
		n := newNodes(t, name)[name]
		n.env = []string{"CORVO_ADMIN_KEY=" + composeAdminKey}
		n.start(t, append(slices.Clone(s.Command), "--auth=on"))
		n.waitHealthy(t)
		requireAdminKey(t, n, composeAdminKey)
		n.stop(t, durationFlag(t, flags, "shutdown-timeout", 30*time.Second)+handOff)
	}
}

// composeAdminKey is a key as the compose files' comment makes one.
const composeAdminKey = "corvo_0123456789abcdef_Zm9vYmFyYmF6cXV4LWNvbXBvc2UtYWRtaW4ta2V5LTA"

var keyFormat = regexp.MustCompile(`^corvo_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`)

// requireAdminKey checks that n wants a key and takes key as an admin's.
func requireAdminKey(t *testing.T, n *node, key string) {
	t.Helper()
	whoami := func(key string) (int, map[string]any) {
		req, err := http.NewRequest("GET", "http://"+n.http+"/api/v1/auth/whoami", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	code, body := whoami("")
	require.Equal(t, http.StatusUnauthorized, code, "%v", body)
	code, body = whoami(key)
	require.Equal(t, http.StatusOK, code, "%v", body)
	require.Equal(t, "admin", body["role"], "%v", body)
}

// TestComposeCluster checks the three-node file, then runs its commands as
// three processes and waits until node 1 lists all three members.
func TestComposeCluster(t *testing.T) {
	const path = "compose/cluster.yaml"
	cf := loadCompose(t, path)
	require.Len(t, cf.Services, 3)
	var boot string
	volumes, ids, hostPorts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	all := map[string]map[string]string{}
	for name, s := range cf.Services {
		flags := checkService(t, path, cf, name, s)
		all[name] = flags
		require.False(t, volumes[s.Volumes[0]], "%s shares a volume", name)
		volumes[s.Volumes[0]] = true
		require.False(t, ids[flags["node-id"]], "%s: node IDs must differ", name)
		ids[flags["node-id"]] = true
		require.Equal(t, name, s.Hostname, "%s: the host name is the service name (the node's default ID)", name)
		// Raft addresses are fixed for the life of a data dir: advertise
		// the stable service name, never a container IP.
		require.Equal(t, name+":"+containerRaft, flags["raft-advertise"], name)
		require.Equal(t, name+":"+containerHTTP, flags["http-advertise"], name)
		for _, p := range s.Ports {
			host, _, _ := strings.Cut(p, ":")
			require.False(t, hostPorts[host], "%s: host port %s used twice", name, host)
			hostPorts[host] = true
		}
		if _, ok := flags["bootstrap"]; ok {
			require.Empty(t, boot, "two nodes bootstrap")
			boot = name
		}
	}
	require.NotEmpty(t, boot, "one node bootstraps")
	names := []string{boot}
	for name, s := range cf.Services {
		if name == boot {
			continue
		}
		names = append(names, name)
		require.Equal(t, boot+":"+containerHTTP, all[name]["join"], "%s joins the bootstrap node's HTTP address", name)
		require.Equal(t, "service_healthy", s.DependsOn[boot]["condition"], "%s waits for %s to be healthy", name, boot)
	}

	// Every node gets the same cluster secret from the environment.
	const secret = "compose-test-cluster-secret-0123456789"
	for name, s := range cf.Services {
		require.Equal(t, append([]string{"CORVO_CLUSTER_SECRET=${CORVO_CLUSTER_SECRET:?set CORVO_CLUSTER_SECRET, the same for every node (openssl rand -hex 32)}",
			"CORVO_ADMIN_KEY=${CORVO_ADMIN_KEY:-}"}, composeOIDCEnv...), s.Env, name)
	}
	nodes := newNodes(t, names...)
	for _, n := range nodes {
		n.env = []string{"CORVO_CLUSTER_SECRET=" + secret}
	}
	nodes[boot].start(t, cf.Services[boot].Command)
	nodes[boot].waitHealthy(t)
	for _, name := range names[1:] {
		nodes[name].start(t, cf.Services[name].Command)
	}
	for _, name := range names[1:] {
		nodes[name].waitHealthy(t)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got := nodes[boot].clusterNodes(t)
		slices.Sort(got)
		want := []string{all[names[0]]["node-id"], all[names[1]]["node-id"], all[names[2]]["node-id"]}
		slices.Sort(want)
		if slices.Equal(got, want) {
			break
		}
		require.True(t, time.Now().Before(deadline), "cluster members: %v, want %v", got, want)
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range names {
		nodes[name].stop(t, durationFlag(t, all[name], "shutdown-timeout", 30*time.Second)+handOff)
	}
}

// rendered is one Helm rendering: every manifest by "Kind/name".
type rendered map[string][]byte

func renderChart(t *testing.T, set map[string]any) (rendered, error) {
	t.Helper()
	ch, err := loader.Load("helm/corvo")
	require.NoError(t, err)
	vals, err := chartutil.ToRenderValues(ch, set, chartutil.ReleaseOptions{Name: "corvo", Namespace: "jobs", IsInstall: true, Revision: 1}, chartutil.DefaultCapabilities)
	require.NoError(t, err)
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, err
	}
	out := rendered{}
	for path, body := range files {
		if strings.HasSuffix(path, "NOTES.txt") {
			require.Contains(t, body, "corvo top --url")
			continue
		}
		for _, doc := range strings.Split(body, "\n---") {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			require.NoError(t, sigsyaml.Unmarshal([]byte(doc), &meta), "%s:\n%s", path, doc)
			if meta.Kind == "" {
				require.Empty(t, strings.TrimSpace(stripComments(doc)), "%s renders YAML without a kind", path)
				continue
			}
			require.NotEmpty(t, meta.Metadata.Name, path)
			out[meta.Kind+"/"+meta.Metadata.Name] = []byte(doc)
		}
	}
	return out, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// decode parses a manifest strictly into its Kubernetes type: an unknown
// or misspelt field is an error.
func decode[T any](t *testing.T, r rendered, key string) *T {
	t.Helper()
	doc, ok := r[key]
	require.True(t, ok, "no %s among %v", key, keys(r))
	var v T
	require.NoError(t, sigsyaml.UnmarshalStrict(doc, &v), "%s:\n%s", key, doc)
	return &v
}

func keys(r rendered) []string {
	var ks []string
	for k := range r {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// checkPod checks what both modes share and returns the server's flags.
func checkPod(t *testing.T, sts *appsv1.StatefulSet, headless string, shutdown int) map[string]string {
	t.Helper()
	require.Equal(t, headless, sts.Spec.ServiceName)
	pod := sts.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	require.Equal(t, "corvo/corvo:0.1.0", c.Image, "the tag defaults to the chart's appVersion")
	requireKnownFlags(t, "helm StatefulSet args", c.Args)
	flags := argFlags(c.Args[1:])
	require.Equal(t, "/data", flags["data-dir"])
	require.Equal(t, fmt.Sprintf("%ds", shutdown), flags["shutdown-timeout"])
	require.Equal(t, int64(shutdown)+int64(handOff/time.Second)+10, *pod.TerminationGracePeriodSeconds,
		"grace = --shutdown-timeout + hand-off + margin")

	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		require.NotNil(t, p, name)
		require.NotNil(t, p.HTTPGet, name)
		require.Equal(t, "/healthz", p.HTTPGet.Path, name)
		require.Equal(t, "http", p.HTTPGet.Port.String(), name)
	}
	require.Equal(t, "http", c.Ports[0].Name)
	require.Equal(t, int32(8080), c.Ports[0].ContainerPort)
	require.Equal(t, ":8080", flags["bind"])

	sc, psc := c.SecurityContext, pod.SecurityContext
	require.True(t, *psc.RunAsNonRoot)
	require.NotZero(t, *psc.RunAsUser)
	require.NotZero(t, *psc.FSGroup, "the volume is writable by the non-root user")
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.True(t, *sc.ReadOnlyRootFilesystem)
	require.NotEmpty(t, c.Resources.Requests)

	require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
	vct := sts.Spec.VolumeClaimTemplates[0]
	require.Equal(t, "10Gi", vct.Spec.Resources.Requests.Storage().String())
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	require.Equal(t, "/data", mounts[vct.Name])
	require.Equal(t, "/tmp", mounts["tmp"], "a writable /tmp beside the read-only root")

	require.Equal(t, sts.Spec.Selector.MatchLabels, subset(sts.Spec.Template.Labels, sts.Spec.Selector.MatchLabels))
	return flags
}

func subset(labels, of map[string]string) map[string]string {
	out := map[string]string{}
	for k := range of {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func TestHelmSingle(t *testing.T) {
	r, err := renderChart(t, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"Secret/corvo-admin-key", "Service/corvo", "Service/corvo-headless", "StatefulSet/corvo"}, keys(r), "no PDB for a single node")
	sts := decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	require.Equal(t, int32(1), *sts.Spec.Replicas)
	flags := checkPod(t, sts, "corvo-headless", 30)
	require.NotContains(t, flags, "discover")
	require.NotContains(t, flags, "join")
	svc := decode[corev1.Service](t, r, "Service/corvo")
	require.Equal(t, sts.Spec.Selector.MatchLabels, svc.Spec.Selector)
	require.Equal(t, "http", svc.Spec.Ports[0].TargetPort.String())

	require.Equal(t, "auto", flags["auth"], "keys off loopback")
	// The admin key: random, a Corvo key, in every pod's CORVO_ADMIN_KEY.
	sec := decode[corev1.Secret](t, r, "Secret/corvo-admin-key")
	adminKey := string(sec.Data["admin-key"])
	require.Regexp(t, keyFormat, adminKey)
	require.Equal(t, "keep", sec.Annotations["helm.sh/resource-policy"], "a helm uninstall keeps the key")
	env := sts.Spec.Template.Spec.Containers[0].Env
	require.Len(t, env, 1)
	require.Equal(t, "CORVO_ADMIN_KEY", env[0].Name)
	require.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "corvo-admin-key"}, Key: "admin-key"}, *env[0].ValueFrom.SecretKeyRef)
	r2, err := renderChart(t, nil)
	require.NoError(t, err)
	require.NotEqual(t, adminKey, string(decode[corev1.Secret](t, r2, "Secret/corvo-admin-key").Data["admin-key"]), "random per install")

	// The rendered command runs.
	n := startNode(t, "corvo-0", sts.Spec.Template.Spec.Containers[0].Args)
	n.stop(t, time.Duration(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second)

	// With keys on (here on loopback), the Secret's key is the admin's.
	r, err = renderChart(t, map[string]any{"auth": map[string]any{"mode": "on"}})
	require.NoError(t, err)
	sts = decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	require.Equal(t, "on", argFlags(sts.Spec.Template.Spec.Containers[0].Args)["auth"])
	n = newNodes(t, "corvo-0")["corvo-0"]
	n.env = []string{"CORVO_ADMIN_KEY=" + string(decode[corev1.Secret](t, r, "Secret/corvo-admin-key").Data["admin-key"])}
	n.start(t, sts.Spec.Template.Spec.Containers[0].Args)
	n.waitHealthy(t)
	requireAdminKey(t, n, strings.TrimPrefix(n.env[0], "CORVO_ADMIN_KEY="))
	n.stop(t, time.Duration(*sts.Spec.Template.Spec.TerminationGracePeriodSeconds)*time.Second)
}

func TestHelmAuth(t *testing.T) {
	// An admin key the operator manages.
	r, err := renderChart(t, map[string]any{"auth": map[string]any{"existingSecret": "my-admin-key"}})
	require.NoError(t, err)
	require.NotContains(t, keys(r), "Secret/corvo-admin-key")
	env := decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo").Spec.Template.Spec.Containers[0].Env
	require.Len(t, env, 1)
	require.Equal(t, "my-admin-key", env[0].ValueFrom.SecretKeyRef.Name)

	// Keys off: no key, no Secret, and the server says so.
	r, err = renderChart(t, map[string]any{"auth": map[string]any{"mode": "off"}})
	require.NoError(t, err)
	require.NotContains(t, keys(r), "Secret/corvo-admin-key")
	c := decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo").Spec.Template.Spec.Containers[0]
	require.Empty(t, c.Env)
	require.Equal(t, "off", argFlags(c.Args)["auth"])
	r, err = renderChart(t, map[string]any{"auth": map[string]any{"mode": "off"}, "cluster": map[string]any{"enabled": true}, "replicas": 3})
	require.NoError(t, err)
	env = decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo").Spec.Template.Spec.Containers[0].Env
	require.Len(t, env, 1)
	require.Equal(t, "CORVO_CLUSTER_SECRET", env[0].Name)

	_, err = renderChart(t, map[string]any{"auth": map[string]any{"mode": "maybe"}})
	require.ErrorContains(t, err, `auth.mode must be auto, on or off, not "maybe"`)
}

func TestHelmCluster(t *testing.T) {
	r, err := renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true}, "replicas": 5,
		"server": map[string]any{"shutdownTimeoutSeconds": 60}})
	require.NoError(t, err)
	require.Equal(t, []string{"PodDisruptionBudget/corvo", "Secret/corvo-admin-key", "Secret/corvo-cluster", "Service/corvo", "Service/corvo-headless", "StatefulSet/corvo"}, keys(r))
	sts := decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	// Every pod gets the one cluster secret, random and long.
	sec := decode[corev1.Secret](t, r, "Secret/corvo-cluster")
	require.Len(t, sec.Data["cluster-secret"], 64)
	env := sts.Spec.Template.Spec.Containers[0].Env
	require.Len(t, env, 2)
	require.Equal(t, "CORVO_CLUSTER_SECRET", env[0].Name)
	require.Equal(t, "CORVO_ADMIN_KEY", env[1].Name)
	require.Equal(t, "corvo-cluster", env[0].ValueFrom.SecretKeyRef.Name)
	require.Equal(t, "cluster-secret", env[0].ValueFrom.SecretKeyRef.Key)
	// Or one the operator manages.
	r2, err := renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true, "existingSecret": "mine"}, "replicas": 3})
	require.NoError(t, err)
	require.NotContains(t, keys(r2), "Secret/corvo-cluster")
	require.Equal(t, "mine", decode[appsv1.StatefulSet](t, r2, "StatefulSet/corvo").Spec.Template.Spec.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name)
	require.Equal(t, int32(5), *sts.Spec.Replicas)
	require.Equal(t, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy, "after a full restart the members must start together")
	flags := checkPod(t, sts, "corvo-headless", 60)
	require.Equal(t, "dns", flags["discover"])
	require.Equal(t, "corvo-headless.jobs.svc.cluster.local", flags["discover-service"])
	require.Equal(t, ":9400", flags["raft-bind"])
	require.Equal(t, "3", flags["replicas"])
	require.NotContains(t, flags, "bootstrap", "pod 0 bootstraps by itself (--discover)")
	require.NotNil(t, sts.Spec.Template.Spec.Affinity.PodAntiAffinity, "spread over machines")

	hl := decode[corev1.Service](t, r, "Service/corvo-headless")
	require.Equal(t, corev1.ClusterIPNone, hl.Spec.ClusterIP)
	require.True(t, hl.Spec.PublishNotReadyAddresses, "a starting cluster must find its not-ready members")
	require.Equal(t, sts.Spec.Selector.MatchLabels, hl.Spec.Selector)
	ports := map[string]int32{}
	for _, p := range hl.Spec.Ports {
		ports[p.Name] = p.Port
	}
	require.Equal(t, map[string]int32{"http": 8080, "raft": 9400}, ports)

	pdb := decode[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget/corvo")
	require.Equal(t, 1, pdb.Spec.MaxUnavailable.IntValue())
	require.Equal(t, sts.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels)

	// The spec's one-liner works as is.
	r, err = renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true}, "replicas": 3})
	require.NoError(t, err)
	require.Equal(t, int32(3), *decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo").Spec.Replicas)

	// A two-node Raft cluster survives no failure: refused.
	_, err = renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true}, "replicas": 2})
	require.ErrorContains(t, err, "replicas >= 3")
}

// TestHelmTLS: tls.secretName serves the API over HTTPS from a mounted
// Secret (probes in HTTPS); tls.peerSecretName, in cluster mode, gives
// every pod the peer CA, certificate and key for mutual TLS between nodes.
func TestHelmTLS(t *testing.T) {
	mounts := func(sts *appsv1.StatefulSet) (map[string]string, map[string]string) {
		vols, at := map[string]string{}, map[string]string{}
		for _, v := range sts.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				vols[v.Name] = v.Secret.SecretName
			}
		}
		for _, m := range sts.Spec.Template.Spec.Containers[0].VolumeMounts {
			if _, ok := vols[m.Name]; ok {
				require.True(t, m.ReadOnly, m.Name)
				at[m.Name] = m.MountPath
			}
		}
		return vols, at
	}
	schemes := func(sts *appsv1.StatefulSet) []corev1.URIScheme {
		c := sts.Spec.Template.Spec.Containers[0]
		return []corev1.URIScheme{c.StartupProbe.HTTPGet.Scheme, c.ReadinessProbe.HTTPGet.Scheme, c.LivenessProbe.HTTPGet.Scheme}
	}
	https := []corev1.URIScheme{corev1.URISchemeHTTPS, corev1.URISchemeHTTPS, corev1.URISchemeHTTPS}

	// Off by default.
	r, err := renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true}, "replicas": 3})
	require.NoError(t, err)
	sts := decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	vols, _ := mounts(sts)
	require.Empty(t, vols)
	flags := argFlags(sts.Spec.Template.Spec.Containers[0].Args[1:])
	for _, f := range []string{"tls-cert", "tls-key", "peer-tls-ca", "peer-tls-cert", "peer-tls-key"} {
		require.NotContains(t, flags, f)
	}

	// Both, in cluster mode.
	r, err = renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true}, "replicas": 3,
		"tls": map[string]any{"secretName": "corvo-api-tls", "peerSecretName": "corvo-peer-tls"}})
	require.NoError(t, err)
	sts = decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	flags = checkPod(t, sts, "corvo-headless", 30)
	require.Equal(t, "/etc/corvo/tls/tls.crt", flags["tls-cert"])
	require.Equal(t, "/etc/corvo/tls/tls.key", flags["tls-key"])
	require.Equal(t, "/etc/corvo/peer-tls/ca.crt", flags["peer-tls-ca"])
	require.Equal(t, "/etc/corvo/peer-tls/tls.crt", flags["peer-tls-cert"])
	require.Equal(t, "/etc/corvo/peer-tls/tls.key", flags["peer-tls-key"])
	vols, at := mounts(sts)
	require.Equal(t, map[string]string{"tls": "corvo-api-tls", "peer-tls": "corvo-peer-tls"}, vols)
	require.Equal(t, map[string]string{"tls": "/etc/corvo/tls", "peer-tls": "/etc/corvo/peer-tls"}, at)
	require.Equal(t, https, schemes(sts))

	// Peer TLS alone serves the API with the peer certificate: HTTPS probes.
	r, err = renderChart(t, map[string]any{"cluster": map[string]any{"enabled": true}, "replicas": 3,
		"tls": map[string]any{"peerSecretName": "corvo-peer-tls"}})
	require.NoError(t, err)
	sts = decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	require.Equal(t, https, schemes(sts))
	flags = argFlags(sts.Spec.Template.Spec.Containers[0].Args[1:])
	require.NotContains(t, flags, "tls-cert")
	require.Equal(t, "/etc/corvo/peer-tls/ca.crt", flags["peer-tls-ca"])

	// A single node: API TLS only (no peers to authenticate).
	r, err = renderChart(t, map[string]any{"tls": map[string]any{"secretName": "corvo-api-tls", "peerSecretName": "corvo-peer-tls"}})
	require.NoError(t, err)
	sts = decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	vols, _ = mounts(sts)
	require.Equal(t, map[string]string{"tls": "corvo-api-tls"}, vols)
	flags = argFlags(sts.Spec.Template.Spec.Containers[0].Args[1:])
	require.Equal(t, "/etc/corvo/tls/tls.crt", flags["tls-cert"])
	require.NotContains(t, flags, "peer-tls-ca")
	require.Equal(t, https, schemes(sts))
}

// TestHelmValuesDocumented: every value the templates read is in
// values.yaml, so `helm show values` tells the whole story.
func TestHelmValuesDocumented(t *testing.T) {
	b, err := os.ReadFile("helm/corvo/values.yaml")
	require.NoError(t, err)
	var vals map[string]any
	require.NoError(t, yaml.Unmarshal(b, &vals))
	re := regexp.MustCompile(`\.Values\.([A-Za-z0-9_.]+)`)
	tpls, err := filepath.Glob("helm/corvo/templates/*")
	require.NoError(t, err)
	for _, p := range tpls {
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			var cur any = vals
			for _, k := range strings.Split(m[1], ".") {
				mp, ok := cur.(map[string]any)
				require.True(t, ok, "%s: .Values.%s: %q is not a map in values.yaml", p, m[1], k)
				cur, ok = mp[k]
				require.True(t, ok, "%s: .Values.%s is not in values.yaml", p, m[1])
			}
		}
	}
}

// TestHelmDiskAlerts: server.minFreeDisk becomes --min-free-disk, and
// prometheusRule.enabled adds a PrometheusRule whose two alerts compare
// the free-disk guard's gauges, with the labels given for the operator's
// rule selector; off by default.
func TestHelmDiskAlerts(t *testing.T) {
	r, err := renderChart(t, nil)
	require.NoError(t, err)
	require.NotContains(t, keys(r), "PrometheusRule/corvo", "off by default")
	require.NotContains(t, argFlags(decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo").Spec.Template.Spec.Containers[0].Args), "min-free-disk",
		"the server's default")

	r, err = renderChart(t, map[string]any{
		"server":         map[string]any{"minFreeDisk": "10%,4GiB"},
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}},
	})
	require.NoError(t, err)
	sts := decode[appsv1.StatefulSet](t, r, "StatefulSet/corvo")
	flags := checkPod(t, sts, "corvo-headless", 30)
	require.Equal(t, "10%,4GiB", flags["min-free-disk"])

	var rule struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					For         string            `json:"for"`
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	require.NoError(t, sigsyaml.UnmarshalStrict(r["PrometheusRule/corvo"], &rule))
	require.Equal(t, "monitoring.coreos.com/v1", rule.APIVersion)
	require.Equal(t, "kube-prometheus-stack", rule.Metadata.Labels["release"])
	require.Len(t, rule.Spec.Groups, 1)
	alerts := map[string]string{}
	for _, a := range rule.Spec.Groups[0].Rules {
		alerts[a.Alert] = a.Labels["severity"]
		require.Contains(t, a.Expr, "corvo_disk_free_bytes <")
		require.Contains(t, a.Expr, "corvo_disk_min_free_bytes > 0 and", "no alert on a node without a floor")
		require.NotEmpty(t, a.For)
		require.Contains(t, a.Annotations["description"], "{{ $labels.instance }}", "Prometheus's template, not Helm's")
	}
	require.Equal(t, map[string]string{"CorvoDiskNearFloor": "warning", "CorvoDiskBelowFloor": "critical"}, alerts)
}
