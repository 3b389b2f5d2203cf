package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

// The TLS overlays mount the certificate directory here, read-only.
const (
	tlsDir   = "/etc/corvo/tls"
	tlsMount = "${CORVO_TLS_DIR:-./tls}:" + tlsDir + ":ro"
)

// overlayFile is a Compose file laid over another (-f base -f overlay):
// for each service of the base, environment entries and volumes to add.
type overlayFile struct {
	Services map[string]struct {
		Env     []string `yaml:"environment"`
		Volumes []string `yaml:"volumes"`
	} `yaml:"services"`
}

// loadOverlay reads an overlay; any other key of a service fails (the
// test runs the base's command with the overlay's environment, and
// nothing else may change).
func loadOverlay(t *testing.T, path string, base composeFile) overlayFile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, yaml.Unmarshal(b, &raw))
	for k := range raw {
		if strings.HasPrefix(k, "x-") {
			delete(raw, k)
		}
	}
	clean, err := yaml.Marshal(raw)
	require.NoError(t, err)
	var ov overlayFile
	dec := yaml.NewDecoder(bytes.NewReader(clean))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&ov), path)
	require.Len(t, ov.Services, len(base.Services), "%s: one entry per service of the base", path)
	for name, s := range ov.Services {
		require.Contains(t, base.Services, name, "%s adds a service", path)
		require.Equal(t, []string{tlsMount}, s.Volumes, "%s %s: the certificate directory", path, name)
		for _, e := range s.Env {
			require.NotContains(t, e, "${", "%s %s: %s", path, name, e)
		}
	}
	return ov
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

// containerEnv maps environment entries from the container's world to
// this machine's: the certificate directory becomes certDir, service
// addresses the nodes' loopback ones.
func (n *node) containerEnv(certDir string, env []string) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = n.rewrite1(strings.ReplaceAll(e, tlsDir, certDir))
	}
	return out
}

// imageHealthCheck is the runtime stage's environment (ENV, as KEY=value)
// and its HEALTHCHECK command's arguments.
func imageHealthCheck(t *testing.T) ([]string, []string) {
	t.Helper()
	df := parseDockerfile(t, "Dockerfile")
	run := &df.stages[len(df.stages)-1]
	var env []string
	for _, in := range run.all("env") {
		require.Zero(t, len(in.args)%3, "ENV %q", in.args)
		for i := 0; i < len(in.args); i += 3 { // name, value, "="
			env = append(env, in.args[i]+"="+in.args[i+1])
		}
	}
	hc := run.last("healthcheck")
	require.NotNil(t, hc)
	require.Equal(t, "corvo", hc.args[0])
	return env, hc.args[1:]
}

// healthCheck runs the image's health check on this machine with the
// container's environment env (already mapped).
func healthCheck(t *testing.T, args, env []string) (string, error) {
	t.Helper()
	cmd := exec.Command(corvoBin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestComposeSingleTLS: single.yaml with single.tls.yaml serves HTTPS from
// the mounted certificate, and the image's health check passes with the
// overlay's CORVO_URL and CORVO_TLS_CA (not without the CA, nor with the
// image's plain URL).
func TestComposeSingleTLS(t *testing.T) {
	cf := loadCompose(t, "compose/single.yaml")
	ov := loadOverlay(t, "compose/single.tls.yaml", cf)
	imgEnv, hc := imageHealthCheck(t)
	for name, o := range ov.Services {
		s := cf.Services[name]
		env := envMap(o.Env)
		require.Equal(t, tlsDir+"/"+name+".crt", env["CORVO_TLS_CERT"])
		require.Equal(t, tlsDir+"/"+name+".key", env["CORVO_TLS_KEY"])
		require.Equal(t, "https://"+name+":"+containerHTTP, env["CORVO_URL"], "the health check's URL: the service's name")
		require.Equal(t, tlsDir+"/ca.crt", env["CORVO_TLS_CA"])

		dir := t.TempDir()
		ca := newTestCA(t, dir)
		ca.issue(t, name)
		n := newNodes(t, name)[name]
		n.scheme, n.client = "https://", ca.client()
		n.env = n.containerEnv(dir, o.Env)
		n.start(t, s.Command)
		n.waitHealthy(t)

		image := n.containerEnv(dir, imgEnv)
		out, err := healthCheck(t, hc, append(slices.Clone(image), n.env...))
		require.NoError(t, err, "the health check fails against a healthy TLS server: %s", out)
		require.Contains(t, out, "status: ok")
		var noCA []string
		for _, e := range n.env {
			if !strings.HasPrefix(e, "CORVO_TLS_CA=") {
				noCA = append(noCA, e)
			}
		}
		out, err = healthCheck(t, hc, append(slices.Clone(image), noCA...))
		require.Error(t, err, "the health check trusted a CA it was not given: %s", out)
		require.Contains(t, out, "certificate")
		out, err = healthCheck(t, hc, image)
		require.Error(t, err, "the image's plain URL reached a TLS server: %s", out)
		n.stop(t, durationFlag(t, argFlags(s.Command[1:]), "shutdown-timeout", 30*time.Second)+handOff)
	}
}

// TestComposeClusterTLS: cluster.yaml with cluster.tls.yaml, each node
// with its own certificate of one peer CA, forms the three-node cluster
// over mutual TLS (the API on the same certificates), and the image's
// health check passes on every node.
func TestComposeClusterTLS(t *testing.T) {
	cf := loadCompose(t, "compose/cluster.yaml")
	ov := loadOverlay(t, "compose/cluster.tls.yaml", cf)
	imgEnv, hc := imageHealthCheck(t)
	dir := t.TempDir()
	ca := newTestCA(t, dir)
	var boot string
	var names []string
	for name, s := range cf.Services {
		env := envMap(ov.Services[name].Env)
		require.Equal(t, tlsDir+"/ca.crt", env["CORVO_PEER_TLS_CA"], name)
		require.Equal(t, tlsDir+"/"+name+".crt", env["CORVO_PEER_TLS_CERT"], name)
		require.Equal(t, tlsDir+"/"+name+".key", env["CORVO_PEER_TLS_KEY"], name)
		require.Equal(t, "https://"+name+":"+containerHTTP, env["CORVO_URL"], name)
		require.Equal(t, tlsDir+"/ca.crt", env["CORVO_TLS_CA"], name)
		ca.issue(t, name)
		if _, ok := argFlags(s.Command[1:])["bootstrap"]; ok {
			boot = name
		} else {
			names = append(names, name)
		}
	}
	require.NotEmpty(t, boot)
	names = append([]string{boot}, names...)

	const secret = "compose-tls-cluster-secret-0123456789"
	nodes := newNodes(t, names...)
	for _, name := range names {
		n := nodes[name]
		n.scheme, n.client = "https://", ca.client()
		n.env = append(n.containerEnv(dir, ov.Services[name].Env), "CORVO_CLUSTER_SECRET="+secret)
	}
	nodes[boot].start(t, cf.Services[boot].Command)
	nodes[boot].waitHealthy(t)
	for _, name := range names[1:] {
		nodes[name].start(t, cf.Services[name].Command)
	}
	want := make([]string, 0, len(names))
	for _, name := range names {
		nodes[name].waitHealthy(t)
		want = append(want, argFlags(cf.Services[name].Command[1:])["node-id"])
	}
	slices.Sort(want)
	deadline := time.Now().Add(time.Minute)
	for {
		got := nodes[boot].clusterNodes(t)
		slices.Sort(got)
		if slices.Equal(got, want) {
			break
		}
		require.True(t, time.Now().Before(deadline), "cluster members: %v, want %v", got, want)
		time.Sleep(100 * time.Millisecond)
	}
	for _, name := range names {
		n := nodes[name]
		out, err := healthCheck(t, hc, append(n.containerEnv(dir, imgEnv), n.env...))
		require.NoError(t, err, "%s: the health check: %s", name, out)
		require.Contains(t, out, "status: ok")
	}
	for _, name := range names {
		nodes[name].stop(t, durationFlag(t, argFlags(cf.Services[name].Command[1:]), "shutdown-timeout", 30*time.Second)+handOff)
	}
}
