package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/podman"
)

// TestComposeFleetInContainers: deploy/build-images.sh builds the image
// with no registry, deploy/compose.yaml starts the fleet from it on
// podman (docker-compose against podman's API), a call works through each
// node's published port in each workspace, and with one bus container
// stopped calls go on through the others. The fleet is torn down, also on
// failure, and leaves no container, network or volume of its project.
func TestComposeFleetInContainers(t *testing.T) {
	t.Parallel()
	engine := podman.Require(t, "../../deploy/containers.conf")
	run := func(name string, args ...string) (string, error) {
		t.Helper()
		cmd := engine.Command(name, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	// A project and an image of the test's own, beside any fleet of the
	// user's. The base image is kept: it is made once (debootstrap).
	tag := fmt.Sprintf("%d", rand.IntN(1<<30))
	project, image := "toolbustest"+tag, "toolbus:compose-test-"+tag
	build := exec.Command("../../deploy/build-images.sh")
	build.Env = append(append(os.Environ(), engine.Env...), "TOOLBUS_ENGINE=podman", "TOOLBUS_IMAGE="+image)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/build-images.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := run("podman", "rmi", image); err != nil {
			t.Errorf("podman rmi %s: %v\n%s", image, err, out)
		}
	})
	engine.Serve(t)

	port := freeRun(t, 4) // the buses', then the console's: runs found apart may overlap
	consolePort := port + 3
	engine.Env = append(engine.Env, "TOOLBUS_IMAGE="+image, fmt.Sprintf("TOOLBUS_CONSOLE_PORT=%d", consolePort))
	for i := range 3 {
		engine.Env = append(engine.Env, fmt.Sprintf("TOOLBUS_BUS%d_PORT=%d", i+1, port+i))
	}
	compose := func(args ...string) (string, error) {
		return run("docker-compose", append([]string{"-p", project, "-f", "../../deploy/compose.yaml"}, args...)...)
	}
	label := "label=com.docker.compose.project=" + project
	// container is the name of a service's container.
	container := func(service string) string {
		t.Helper()
		out, err := run("podman", "ps", "-a", "--filter", label, "--filter", "label=com.docker.compose.service="+service, "--format", "{{.Names}}")
		if name := strings.TrimSpace(out); err == nil && name != "" && !strings.Contains(name, "\n") {
			return name
		}
		t.Fatalf("no one container of service %s: %v %s", service, err, out)
		return ""
	}
	t.Cleanup(func() {
		if t.Failed() {
			// What each part said last, to go on with.
			out, _ := run("podman", "ps", "-a", "--filter", label, "--format", "{{.Names}} {{.Status}}")
			t.Logf("containers:\n%s", out)
			names, _ := run("podman", "ps", "-a", "--filter", label, "--format", "{{.Names}}")
			for _, name := range strings.Fields(names) {
				logs, _ := run("podman", "logs", "--tail", "30", name)
				t.Logf("%s, last lines:\n%s", name, logs)
			}
		}
		if out, err := compose("down", "--volumes", "--remove-orphans", "--timeout", "30"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
		// Nothing of the project is left; what is, is said and removed.
		for _, kind := range []struct{ list, remove []string }{
			{[]string{"ps", "-a", "--format", "{{.Names}}"}, []string{"rm", "-f"}},
			{[]string{"network", "ls", "--format", "{{.Name}}"}, []string{"network", "rm", "-f"}},
			{[]string{"volume", "ls", "--format", "{{.Name}}"}, []string{"volume", "rm", "-f"}},
		} {
			out, err := run("podman", append(kind.list, "--filter", label)...)
			if left := strings.Fields(out); err != nil || len(left) > 0 {
				t.Errorf("after down, podman %s: %v %v", strings.Join(kind.list[:2], " "), err, left)
				if len(left) > 0 {
					run("podman", append(kind.remove, left...)...)
				}
			}
		}
	})
	if out, err := compose("up", "-d"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}

	// The agent's seed out of the identities volume, and a file in each
	// workspace that says which it is.
	dir := t.TempDir()
	agent, admin := filepath.Join(dir, "agent.nk"), filepath.Join(dir, "admin.nk")
	for _, seed := range []string{agent, admin} {
		if out, err := run("podman", "cp", container("identities")+":/identities/"+filepath.Base(seed), seed); err != nil {
			t.Fatalf("copy %s out of the identities volume: %v\n%s", filepath.Base(seed), err, out)
		}
	}
	for i, ws := range []string{"one", "two"} {
		readme := filepath.Join(dir, "README-"+ws+".md")
		if err := os.WriteFile(readme, []byte("# workspace "+ws+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run("podman", "cp", readme, container(fmt.Sprintf("executor%d", i+1))+":/workspace/README.md"); err != nil {
			t.Fatalf("copy into workspace %s: %v\n%s", ws, err, out)
		}
	}

	node := func(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", port+i) }
	// call reads workspace ws's README through node i. A call stuck on a
	// fleet in trouble ends with the context, and fails.
	call := func(i int, ws string) (string, string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin("toolbus"), "call", "read_file", "--workspace", ws, "--args", `{"file_path":"README.md"}`, "--nats", node(i))
		cmd.Env = append(os.Environ(), "TOOLBUS_IDENTITY="+agent, "TOOLBUS_NATS=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	works := func(i int, ws string) bool {
		out, _, code := call(i, ws)
		return code == 0 && strings.Contains(out, "# workspace "+ws)
	}
	// The executors register their tools once the cluster answers.
	for _, ws := range []string{"one", "two"} {
		if !testkit.Poll(3*time.Minute, func() bool { return works(0, ws) }) {
			_, errOut, code := call(0, ws)
			t.Fatalf("no call in workspace %s worked through bus1 in three minutes: exit %d %s", ws, code, errOut)
		}
	}
	for i := range 3 {
		for _, ws := range []string{"one", "two"} {
			if out, errOut, code := call(i, ws); code != 0 || !strings.Contains(out, "# workspace "+ws) {
				t.Errorf("through bus%d, workspace %s: exit %d %s %s", i+1, ws, code, out, errOut)
			}
		}
	}

	// Every store of the fleet is kept on the three nodes, so that none
	// goes offline with the node about to go.
	streamCopies(t, admin, node(1), 3)

	// One node goes; the fleet serves through the other two.
	if out, err := compose("stop", "--timeout", "30", "bus1"); err != nil {
		t.Fatalf("docker-compose stop bus1: %v\n%s", err, out)
	}
	if _, errOut, code := call(0, "one"); code == 0 || !strings.Contains(errOut, "cannot reach the bus") {
		t.Errorf("through the stopped bus1: exit %d %s", code, errOut)
	}
	for i := 1; i < 3; i++ {
		for _, ws := range []string{"one", "two"} {
			if !testkit.Poll(2*time.Minute, func() bool { return works(i, ws) }) {
				_, errOut, code := call(i, ws)
				t.Errorf("through bus%d with bus1 stopped, workspace %s, for two minutes: exit %d %s", i+1, ws, code, errOut)
			}
		}
	}
}

// streamCopies checks that every stream on the bus at url, as the member
// whose seed is given sees them, keeps want copies, each on a node of
// its own.
func streamCopies(t *testing.T, seed, url string, want int) {
	t.Helper()
	_, opts, err := identity.Connect(seed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := js.StreamNames(ctx)
	var seen []string
	for name := range names.Name() {
		seen = append(seen, name)
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		info := s.CachedInfo()
		if info.Config.Replicas != want || info.Cluster == nil || len(info.Cluster.Replicas) != want-1 {
			t.Errorf("stream %s keeps %d copies (cluster %+v), want %d", name, info.Config.Replicas, info.Cluster, want)
		}
	}
	if err := names.Err(); err != nil || len(seen) == 0 {
		t.Errorf("the fleet's streams: %v %v", seen, err)
	}
}
