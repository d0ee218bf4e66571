package main

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// toolbus up's tool processes are kept from its data dir, its
// identities, wherever --identities puts them, and the store's key,
// wherever --store-key-file keeps it.
func TestUpHidesItsDataAndIdentitiesFromTools(t *testing.T) {
	data, ids := t.TempDir(), t.TempDir()
	key := filepath.Join(t.TempDir(), "store.key")
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--data", data}, []string{data, filepath.Join(data, "identities")}},
		{[]string{"--data", data, "--identities", ids}, []string{data, ids}},
		{[]string{"--data", data, "--identities", "off"}, []string{data}},
		{[]string{"--data", data, "--store-key-file", key}, []string{data, key}},
	} {
		fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
		f := newUpFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		got := f.toolSecrets()
		for _, w := range tt.want {
			if !slices.Contains(got, w) {
				t.Errorf("%v: %v does not hide %s", tt.args, got, w)
			}
		}
		if slices.ContainsFunc(got, func(p string) bool { return filepath.Base(p) == "off" }) {
			t.Errorf("%v: %v hides a directory named off", tt.args, got)
		}
	}
}
