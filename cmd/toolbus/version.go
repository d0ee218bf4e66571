package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/sbom"
)

// version, when set at link time with -ldflags "-X main.version=...",
// is the version toolbus reports instead of its module's.
var version string

// build is what a binary knows of its own making.
type build struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// readBuildInfo reads the build from the binary: the version -ldflags
// set, else the main module's (a tag, or the pseudo-version Go derives
// from the commit), else "devel"; and the commit it was built from when
// the build recorded it (go build in a git checkout, unless
// -buildvcs=false; Go does not record it in a git worktree, whose .git is
// a file).
func readBuildInfo() build {
	info, ok := debug.ReadBuildInfo()
	return buildOf(info, ok)
}

// buildOf is the build info describes (readBuildInfo); ok is false when
// the binary has none.
func buildOf(info *debug.BuildInfo, ok bool) build {
	b := build{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if ok && b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if !ok {
		return b
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionText is what `toolbus --version` and `toolbus version` print.
func versionText(b build) string {
	var s strings.Builder
	fmt.Fprintf(&s, "toolbus %s\n", b.Version)
	switch {
	case b.Revision == "":
		s.WriteString("revision: unknown (built without version control information)\n")
	case b.Modified:
		fmt.Fprintf(&s, "revision: %s, with uncommitted changes\n", b.Revision)
	default:
		fmt.Fprintf(&s, "revision: %s\n", b.Revision)
	}
	if b.Time != "" {
		fmt.Fprintf(&s, "committed: %s\n", b.Time)
	}
	fmt.Fprintf(&s, "go: %s %s", b.Go, b.Platform)
	return s.String()
}

func newVersionCommand() *cobra.Command {
	var asJSON, bill bool
	cmd := &cobra.Command{
		Use:   "version [--sbom [BINARY]]",
		Short: "Print the version and build of toolbus",
		Long: `Prints the version of toolbus: the version set at link time
(-ldflags "-X main.version=V"), else its module's, else "devel"; the commit
it was built from, whether that checkout had uncommitted changes, and the
Go toolchain. 'toolbus --version' prints the same.

With --sbom it prints the software bill of materials of this binary, or of
the Go binary BINARY (of any platform), as an SPDX 2.3 JSON document: the
main module, every module linked into it with its version and go.sum
hash, and the Go toolchain, from the build information Go embeds.`,
		Example: "  toolbus version\n  toolbus version --json\n  toolbus version --sbom dist/toolbus_v1.0.0_linux_arm64/executor",
		RunE: func(cmd *cobra.Command, args []string) error {
			if bill {
				return printSBOM(args)
			}
			if len(args) > 0 {
				return usageError{errors.New("version takes a binary only with --sbom")}
			}
			b := readBuildInfo()
			if asJSON {
				return writeJSON(os.Stdout, b)
			}
			fmt.Println(versionText(b))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build as JSON")
	cmd.Flags().BoolVar(&bill, "sbom", false, "print the software bill of materials (SPDX 2.3 JSON) of this binary, or of BINARY")
	return cmd
}

// printSBOM prints the bill of the binary args name, or of this one.
func printSBOM(args []string) error {
	var path string
	switch len(args) {
	case 0:
		self, err := os.Executable()
		if err != nil {
			return err
		}
		path = self
	case 1:
		path = args[0]
	default:
		return usageError{errors.New("version --sbom takes one binary")}
	}
	doc, err := sbom.OfFile(path)
	if err != nil {
		return err
	}
	data, err := doc.JSON()
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", data)
	return err
}
