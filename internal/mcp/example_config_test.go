package mcp_test

import (
	"fmt"

	"github.com/toolbus/toolbus/internal/mcp"
)

func ExampleParse() {
	settings := []byte(`{
	  // Gemini CLI's settings.json; its other keys are not ours.
	  "theme": "GitHub",
	  "mcp": {"excluded": ["old"]},
	  "mcpServers": {
	    "github": {
	      "httpUrl": "https://api.githubcopilot.com/mcp/",
	      "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
	      "excludeTools": ["delete_repository"]
	    },
	    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "$HOME"], "timeout": 30000},
	    "old": {"command": "old-server"},
	    "broken": {"command": "x", "url": "http://localhost:8080/sse"}
	  }
	}`)
	getenv := func(name string) string {
		return map[string]string{"GITHUB_TOKEN": "ghp_example", "HOME": "/home/me"}[name]
	}
	c, err := mcp.Parse(settings, getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range c.Servers {
		if s.Disabled != "" {
			fmt.Printf("%s: disabled: %s\n", s.Name, s.Disabled)
			continue
		}
		fmt.Printf("%s: %s %s%s%v timeout %v\n", s.Name, s.Transport, s.Command, s.URL, s.Args, s.Timeout)
	}
	github, _ := c.Server("github")
	fmt.Println("keeps delete_repository:", github.Keeps("delete_repository"))
	// Output:
	// broken: disabled: the entry gives both command and a URL; give one
	// files: stdio npx[-y @modelcontextprotocol/server-filesystem /home/me] timeout 30s
	// github: http https://api.githubcopilot.com/mcp/[] timeout 10m0s
	// old: disabled: excluded by mcp.excluded
	// keeps delete_repository: false
}
