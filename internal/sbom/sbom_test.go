package sbom

import (
	"encoding/json"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// The bill of a binary names its module, the toolchain and every module
// linked (a replacement in place of what it replaces), each with its
// package URL, and SPDX's required fields are all there.
func TestABillNamesEveryModuleLinked(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/toolbus/toolbus", Version: "v1.2.3"},
		Deps: []*debug.Module{
			{Path: "github.com/nats-io/nats.go", Version: "v1.55.0", Sum: "h1:abc="},
			{Path: "github.com/BurntSushi/toml", Version: "v1.4.0"},
			{Path: "example.com/old", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}},
		},
		Settings: []debug.BuildSetting{{Key: "GOOS", Value: "darwin"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-11-29T10:00:00Z"}}}
	doc := Of(info, "executor", "ff00")
	data, err := doc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"spdxVersion", "dataLicense", "SPDXID", "name", "documentNamespace", "creationInfo", "packages", "relationships"} {
		if got[field] == nil {
			t.Errorf("no %s", field)
		}
	}
	if doc.Name != "executor-v1.2.3-darwin-arm64" || doc.CreationInfo.Created != "2026-11-29T10:00:00Z" || !strings.HasSuffix(doc.DocumentNamespace, "-ff00") {
		t.Errorf("name %q, created %q, namespace %q", doc.Name, doc.CreationInfo.Created, doc.DocumentNamespace)
	}
	var purls []string
	for _, p := range doc.Packages {
		if p.SPDXID == "" || p.DownloadLocation == "" || len(p.ExternalRefs) != 1 {
			t.Errorf("package %+v lacks a required field", p)
		}
		purls = append(purls, p.ExternalRefs[0].Locator)
	}
	want := []string{"pkg:golang/github.com/toolbus/toolbus@v1.2.3", "pkg:golang/stdlib@go1.26.8", "pkg:golang/github.com/nats-io/nats.go@v1.55.0",
		"pkg:golang/github.com/BurntSushi/toml@v1.4.0", "pkg:golang/example.com/fork@v1.0.1"}
	if strings.Join(purls, " ") != strings.Join(want, " ") {
		t.Errorf("package URLs %v, want %v", purls, want)
	}
	if loc := doc.Packages[3].DownloadLocation; loc != "https://proxy.golang.org/github.com/!burnt!sushi/toml/@v/v1.4.0.zip" {
		t.Errorf("download location %q", loc)
	}
	if len(doc.Relationships) != len(doc.Packages) || doc.Relationships[0].Type != "DESCRIBES" {
		t.Errorf("relationships %+v", doc.Relationships)
	}
}

// The bill of this test binary, read from its file as any binary's is.
func TestTheBillOfABinaryOnDisk(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := OfFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Packages) < 2 || len(doc.Packages[0].Checksums) != 1 || len(doc.Packages[0].Checksums[0].Value) != 64 {
		t.Errorf("bill of the test binary: %+v", doc.Packages[0])
	}
	if _, err := OfFile("sbom.go"); err == nil {
		t.Error("a source file read as a binary")
	}
}
