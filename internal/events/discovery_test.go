package events

import (
	"reflect"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/toolbus/toolbus/internal/testkit"
)

// discoveryExamples holds one filled-in value of every discovery envelope,
// keyed by the file name it has in its golden archive (kept apart from
// envelopes.txtar).
func discoveryExamples() map[string]Envelope {
	exec := Identity{ID: "executor@dev-1", Role: "executor", Host: "dev-1"}
	ran, ok := when.Add(-time.Minute), when.Add(-2*time.Minute)
	return map[string]Envelope{
		"discovery_status.json": &DiscoveryStatus{Header: hdr("ds-1", exec), Executor: "executor@dev-1", Workspace: "/home/ada/project",
			DiscoveryCommand: "sh tools/discover.sh", CallCommand: "sh tools/call.sh", State: DiscoveryFailed,
			Error:    "the discovery command `sh tools/discover.sh` failed with exit code 1; stderr: tools.yaml: no such file",
			Warnings: []string{"item 3: a tool with no name; skipped"}, Tools: 2, Expired: 1, Runs: 4, LastRun: &ran, LastSuccess: &ok},
		"discover_request.json": &DiscoverRequest{Header: hdr("dr-1", Identity{ID: "cli@dev-1", Role: "cli"}), Force: true},
		"discover_reply.json": &DiscoverReply{Header: hdr("dp-1", exec), RequestID: "dr-1", Tools: []string{"calc", "wc"}, Cached: true, CachedAt: &ran,
			Warnings: []string{`tool "read_file": the executor hosts a tool of that name already; skipped`}},
	}
}

func TestGoldenDiscoveryEnvelopes(t *testing.T) {
	t.Parallel()
	const path = "testdata/discovery_envelopes.txtar"
	ex := discoveryExamples()
	var files []txtar.File
	for name, e := range ex {
		data, err := Encode(e)
		if err != nil {
			t.Fatalf("%s: Encode: %v", name, err)
		}
		files = append(files, txtar.File{Name: name, Data: indent(t, data)})
	}
	sortFiles(files)
	ar := testkit.Golden(t, path, "Golden wire forms of the discovery envelopes.\nRegenerate with: go test ./internal/events -run TestGoldenDiscoveryEnvelopes -update\n", *update, files)
	for name, e := range ex {
		got, err := decodeDiscovery(e, find(ar, name))
		if err != nil {
			t.Errorf("%s: decode golden: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(normalise(t, got), normalise(t, e)) {
			t.Errorf("%s: round trip changed the value:\ngot  %+v\nwant %+v", name, got, e)
		}
	}
}

func decodeDiscovery(e Envelope, data []byte) (Envelope, error) {
	switch e.(type) {
	case *DiscoveryStatus:
		return Decode[DiscoveryStatus](data)
	case *DiscoverRequest:
		return Decode[DiscoverRequest](data)
	case *DiscoverReply:
		return Decode[DiscoverReply](data)
	}
	panic("decodeDiscovery: unknown envelope")
}

func TestDiscoveryEnvelopesValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		e    Envelope
	}{
		{"status without executor", &DiscoveryStatus{Header: hdr("x", agent), State: DiscoveryOK}},
		{"status of an unknown state", &DiscoveryStatus{Header: hdr("x", agent), Executor: "e", State: "fine"}},
		{"reply without request", &DiscoverReply{Header: hdr("x", agent)}},
		{"request without sender", &DiscoverRequest{Header: hdr("x", Identity{})}},
	} {
		if _, err := Encode(c.e); err == nil {
			t.Errorf("%s: encoded", c.name)
		}
	}
}

// FuzzDecodeDiscovery: a discovery envelope from the bus never panics a
// decoder, and what decodes encodes and decodes again.
func FuzzDecodeDiscovery(f *testing.F) {
	for _, e := range discoveryExamples() {
		data, err := Encode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, e := range []func() (Envelope, error){
			func() (Envelope, error) { return Decode[DiscoveryStatus](data) },
			func() (Envelope, error) { return Decode[DiscoverRequest](data) },
			func() (Envelope, error) { return Decode[DiscoverReply](data) },
		} {
			got, err := e()
			if err != nil {
				continue
			}
			again, err := Encode(got)
			if err != nil {
				t.Fatalf("decoded %T does not re-encode: %v", got, err)
			}
			if _, err := decodeDiscovery(got, again); err != nil {
				t.Fatalf("re-encoded %T does not decode: %v\n%s", got, err, again)
			}
		}
	})
}
