package main

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeDescribesTheLocalFleet: deploy/compose.yaml is valid YAML
// (anchors and merge keys resolved), has the parts local-fleet.sh starts,
// every command is one of this repository's with flags its binary takes,
// and the bus nodes route to each other. Where docker's compose plugin is
// installed, `docker compose config` must accept it too.
func TestComposeDescribesTheLocalFleet(t *testing.T) {
	data, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(data, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var names []string
	for name := range compose.Services {
		names = append(names, name)
	}
	slices.Sort(names)
	if got := strings.Join(names, " "); got != "bus1 bus2 bus3 console executor1 executor2 identities registry" {
		t.Errorf("services: %s", got)
	}
	script, _ := os.ReadFile("../../deploy/local-fleet.sh")
	for name, svc := range compose.Services {
		// The image deploy/build-images.sh builds (TestComposeFleetInContainers).
		if svc.Image != "${TOOLBUS_IMAGE:-toolbus:dev}" || len(svc.Command) == 0 {
			t.Errorf("%s: image %q, command %v", name, svc.Image, svc.Command)
			continue
		}
		if !strings.Contains(string(script), svc.Command[0]) {
			t.Errorf("%s runs %s, which local-fleet.sh does not", name, svc.Command[0])
		}
		// The binary parses the flags and stops at -h: an unknown flag or
		// a bad value is reported before (in the flag package's words, or
		// in pflag's for toolbus).
		cmd := exec.Command(bin(svc.Command[0]), append(slices.Clone(svc.Command[1:]), "-h")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		if msg := stderr.String(); strings.Contains(msg, "flag provided but not defined") || strings.Contains(msg, "invalid value") ||
			strings.Contains(msg, "unknown flag") || strings.Contains(msg, "invalid argument") || cmd.ProcessState == nil {
			t.Errorf("%s: %v does not parse: %s", name, svc.Command, firstLine(msg, 200))
		}
		for _, v := range svc.Volumes {
			if vol, _, _ := strings.Cut(v, ":"); compose.Volumes != nil {
				if _, ok := compose.Volumes[vol]; !ok {
					t.Errorf("%s mounts volume %s, which is not declared", name, vol)
				}
			}
		}
		// Every part but the one making them connects with an identity
		// it makes; the nodes enforce them.
		if name != "identities" {
			made := strings.Join(compose.Services["identities"].Command, " ")
			if !slices.Contains(svc.Volumes, "identities:/identities:ro") {
				t.Errorf("%s does not mount the identities read-only: %v", name, svc.Volumes)
			}
			if strings.HasPrefix(name, "bus") {
				if !slices.Contains(svc.Command, "--identities") || !strings.Contains(made, "bus:bus") {
					t.Errorf("%s does not enforce the identities: %v", name, svc.Command)
				}
			} else if id := svc.Environment["TOOLBUS_IDENTITY"]; !strings.HasPrefix(id, "/identities/") ||
				!strings.Contains(made, ":"+strings.TrimSuffix(strings.TrimPrefix(id, "/identities/"), ".nk")+" ") && !strings.HasSuffix(made, ":"+strings.TrimSuffix(strings.TrimPrefix(id, "/identities/"), ".nk")) {
				t.Errorf("%s connects as %q, which the identities service does not make (%s)", name, id, made)
			}
		}
		if strings.HasPrefix(name, "bus") {
			routes := svc.Command[slices.Index(svc.Command, "--routes")+1]
			for _, n := range []string{"bus1", "bus2", "bus3"} {
				if !strings.Contains(routes, "nats-route://"+n+":6222") {
					t.Errorf("%s does not route to %s: %s", name, n, routes)
				}
			}
		}
	}
	// Docker's own check, where its compose plugin is installed.
	if docker, err := exec.LookPath("docker"); err == nil && exec.Command(docker, "compose", "version").Run() == nil {
		out, err := exec.Command(docker, "compose", "-f", "../../deploy/compose.yaml", "config", "--quiet").CombinedOutput()
		if err != nil {
			t.Errorf("docker compose config: %v\n%s", err, out)
		}
	}
}
