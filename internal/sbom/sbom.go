// Package sbom writes the software bill of materials of a Go binary as an
// SPDX 2.3 JSON document, from the build information Go embeds in every
// binary it links (runtime/debug.BuildInfo): the main module, each module
// linked into it with its version and go.sum hash, and the Go toolchain.
// It reads a binary of any platform (debug/buildinfo), so one host writes
// the bills of a release built for several.
package sbom

import (
	"cmp"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// Document is the part of SPDX 2.3 this package writes.
type Document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      CreationInfo   `json:"creationInfo"`
	Packages          []Package      `json:"packages"`
	Relationships     []Relationship `json:"relationships"`
}

// CreationInfo says when and by what the document was made.
type CreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// Package is one module (or the toolchain) in the binary.
type Package struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []Checksum    `json:"checksums,omitempty"`
	ExternalRefs     []ExternalRef `json:"externalRefs,omitempty"`
	Comment          string        `json:"comment,omitempty"`
}

// Checksum is a package's digest.
type Checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

// ExternalRef names a package elsewhere: its package URL.
type ExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

// Relationship ties two elements of the document.
type Relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// OfFile is the bill of the Go binary at path.
func OfFile(path string) (*Document, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sbom: %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return Of(info, filepath.Base(path), hex.EncodeToString(h.Sum(nil))), nil
}

// Of is the bill of a binary called name, built as info says, whose
// bytes have the SHA-256 digest sum (hex; "" when unknown).
func Of(info *debug.BuildInfo, name, sum string) *Document {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// Made when its commit was, so that two builds of one commit give
	// the same document.
	created := settings["vcs.time"]
	if created == "" {
		created = time.Now().UTC().Format(time.RFC3339)
	}
	platform := settings["GOOS"] + "-" + settings["GOARCH"]
	version := cleanVersion(info.Main.Version)
	doc := &Document{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name: name + "-" + version + "-" + platform,
		// Unique per binary: its digest, else its module and version.
		DocumentNamespace: "https://" + info.Main.Path + "/spdx/" + name + "-" + version + "-" + platform + "-" + cmp.Or(sum, "unhashed"),
		CreationInfo:      CreationInfo{Created: created, Creators: []string{"Tool: toolbus version --sbom"}},
	}
	main := Package{Name: info.Main.Path, SPDXID: "SPDXRef-Package-main", VersionInfo: version,
		DownloadLocation: "NOASSERTION", ExternalRefs: purl(info.Main.Path, version),
		Comment: fmt.Sprintf("binary %s for %s, built by %s from revision %s", name, platform, info.GoVersion, cmp.Or(settings["vcs.revision"], "unknown"))}
	if sum != "" {
		main.Checksums = []Checksum{{Algorithm: "SHA256", Value: sum}}
	}
	doc.Packages = append(doc.Packages, main)
	doc.Relationships = append(doc.Relationships, Relationship{"SPDXRef-DOCUMENT", "DESCRIBES", main.SPDXID})
	toolchain := Package{Name: "go", SPDXID: "SPDXRef-Package-go", VersionInfo: strings.TrimPrefix(info.GoVersion, "go"),
		DownloadLocation: "https://go.dev/dl/", ExternalRefs: purl("stdlib", info.GoVersion)}
	doc.Packages = append(doc.Packages, toolchain)
	doc.Relationships = append(doc.Relationships, Relationship{main.SPDXID, "DEPENDS_ON", toolchain.SPDXID})
	for i, m := range info.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		p := Package{Name: m.Path, SPDXID: fmt.Sprintf("SPDXRef-Package-%d", i), VersionInfo: m.Version,
			DownloadLocation: "https://proxy.golang.org/" + escape(m.Path) + "/@v/" + m.Version + ".zip", ExternalRefs: purl(m.Path, m.Version)}
		if m.Sum != "" {
			p.Comment = "go.sum " + m.Sum
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, Relationship{main.SPDXID, "DEPENDS_ON", p.SPDXID})
	}
	return doc
}

// JSON is the document as SPDX's JSON, indented.
func (d *Document) JSON() ([]byte, error) { return json.MarshalIndent(d, "", "  ") }

// purl is the package URL of a Go module at version.
func purl(path, version string) []ExternalRef {
	return []ExternalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}}
}

// cleanVersion is a main module's version: "(devel)" says nothing.
func cleanVersion(v string) string {
	if v == "" || v == "(devel)" {
		return "devel"
	}
	return v
}

// escape is a module path as the module proxy's URLs spell it: each
// capital letter as "!" and its lower case.
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
