package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"debug/macho"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestTheReleaseBuildsEveryPlatform runs scripts/release.sh: an archive
// for each of linux and darwin on amd64 and arm64 with the four commands,
// the README and the changelog; each binary static, of its platform, and
// with its bill of materials; SHA256SUMS that check; and the host's
// toolbus says the version it was given.
func TestTheReleaseBuildsEveryPlatform(t *testing.T) {
	testkit.Heavy(t, "four cross-compiled builds of the commands")
	t.Parallel()
	out := t.TempDir()
	cmd := exec.Command("../../scripts/release.sh", out)
	cmd.Env = append(os.Environ(), "VERSION=v9.9.9-test")
	if data, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release.sh: %v\n%s", err, data)
	}
	sums := exec.Command("sha256sum", "-c", "SHA256SUMS")
	sums.Dir = out
	if data, err := sums.CombinedOutput(); err != nil || strings.Count(string(data), ": OK") != 4+16 {
		t.Errorf("sha256sum -c: %v\n%s", err, data)
	}
	for _, platform := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
		name := "toolbus_v9.9.9-test_" + platform
		if got := archived(t, filepath.Join(out, name+".tar.gz")); strings.Join(got, " ") != strings.Join([]string{
			name + "/CHANGELOG.md", name + "/README.md", name + "/bus", name + "/bus.spdx.json", name + "/executor", name + "/executor.spdx.json",
			name + "/registry", name + "/registry.spdx.json", name + "/toolbus", name + "/toolbus.spdx.json"}, " ") {
			t.Errorf("%s holds %v", name, got)
		}
		goos, goarch, _ := strings.Cut(platform, "_")
		for _, bin := range []string{"toolbus", "bus", "registry", "executor"} {
			path := filepath.Join(out, name, bin)
			checkBinary(t, path, goos, goarch)
			var bill struct {
				Name     string `json:"name"`
				Packages []struct {
					Name      string `json:"name"`
					Checksums []struct {
						Value string `json:"checksumValue"`
					} `json:"checksums"`
				} `json:"packages"`
			}
			data, err := os.ReadFile(path + ".spdx.json")
			if err != nil || json.Unmarshal(data, &bill) != nil || len(bill.Packages) < 10 || bill.Packages[0].Name != "github.com/toolbus/toolbus" ||
				len(bill.Packages[0].Checksums) != 1 || !strings.HasSuffix(bill.Name, goos+"-"+goarch) {
				t.Errorf("the bill of %s/%s: %v %.300s", name, bin, err, data)
			}
		}
	}
	host := filepath.Join(out, "toolbus_v9.9.9-test_"+runtime.GOOS+"_"+runtime.GOARCH, "toolbus")
	if data, err := exec.Command(host, "version").Output(); err != nil || !strings.HasPrefix(string(data), "toolbus v9.9.9-test\n") {
		t.Errorf("toolbus version of the release: %v %s", err, data)
	}
}

// archived lists the files of a tar.gz, sorted.
func archived(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	r := tar.NewReader(z)
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			names = append(names, h.Name)
		}
	}
	sort.Strings(names)
	return names
}

// checkBinary fails the test unless path is an executable of goos and
// goarch; a linux one must be static (no interpreter, no shared library).
func checkBinary(t *testing.T, path, goos, goarch string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		libs, _ := f.ImportedLibraries()
		interp := false
		for _, p := range f.Progs {
			interp = interp || p.Type == elf.PT_INTERP
		}
		if f.Machine != want || interp || len(libs) > 0 {
			t.Errorf("%s: machine %v (want %v), interpreter %v, libraries %v: not a static binary of its platform", path, f.Machine, want, interp, libs)
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if f.Cpu != want || f.Type != macho.TypeExec {
			t.Errorf("%s: cpu %v (want %v), type %v", path, f.Cpu, want, f.Type)
		}
	}
}
