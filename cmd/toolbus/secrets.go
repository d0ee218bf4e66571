package main

import (
	"net"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/executornode"
)

// toolSecrets are what `toolbus up`'s tool processes may not read: its
// data dir (the bus's store, the checkpoint key, the identities by
// default), its identities wherever they are, and what cli.ToolSecrets
// adds.
func (f *upFlags) toolSecrets() []string {
	dirs := []string{*f.dataDir}
	if id := f.idDir(); id != "off" {
		dirs = append(dirs, id)
	}
	if key := *f.audit.StoreKeyFile; key != "" {
		dirs = append(dirs, key) // the store's key at rest, wherever it is kept
	}
	return cli.ToolSecrets(*f.workspace, dirs...)
}

// ownPorts are the TCP ports of this `toolbus up` that the tool processes
// may never connect to, even when --tool-ports lists one: the bus's, the
// console's, the MCP endpoint's (as asked for: a free port taken in its
// place is refused anyway, being on no list) and the metrics'.
func (f *upFlags) ownPorts(busURL string, console net.Listener) []uint16 {
	addrs := []string{busURL, *f.metricsAddr}
	if console != nil {
		addrs = append(addrs, console.Addr().String())
	}
	switch *f.mcpListen {
	case "off":
	case "":
		addrs = append(addrs, defaultMCPListen)
	default:
		addrs = append(addrs, *f.mcpListen)
	}
	var out []uint16
	for _, a := range addrs {
		if p, ok := executornode.PortOf(a); ok {
			out = append(out, p)
		}
	}
	return out
}
