package main

import "github.com/toolbus/toolbus/internal/cli"

// toolSecrets are what `toolbus up`'s tool processes may not read: its
// data dir (the bus's store, the checkpoint key, the identities by
// default), its identities wherever they are, and what cli.ToolSecrets
// adds.
func (f *upFlags) toolSecrets() []string {
	dirs := []string{*f.dataDir}
	if id := f.idDir(); id != "off" {
		dirs = append(dirs, id)
	}
	return cli.ToolSecrets(*f.workspace, dirs...)
}
