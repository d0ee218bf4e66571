package settings_test

import (
	"fmt"

	"github.com/toolbus/toolbus/internal/settings"
)

func ExampleParse() {
	data := []byte(`{
	  // Gemini CLI's settings.json; its other keys are not ours.
	  "theme": "GitHub",
	  "tools": {"exclude": ["run_shell_command"], "discoveryCommand": "sh tools/discover.sh", "callCommand": "sh tools/call.sh"},
	  "mcpServers": {"github": {"httpUrl": "https://api.githubcopilot.com/mcp/", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}}},
	  "hooks": {"BeforeTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "./check.sh"}]}]}
	}`)
	f, err := settings.Parse(data, ".gemini/settings.json", settings.GeminiSettings)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("excluded:", f.Tools.Exclude)
	fmt.Println("discovery:", f.Discovery.DiscoveryCommand)
	github, _ := f.MCPServers[0].Expand(func(string) string { return "ghp_example" })
	fmt.Println("server:", github.Name, github.HTTPURL, github.Headers["Authorization"])
	fmt.Println("hooks before a tool call:", len(f.Hooks.Pre))

	_, err = settings.Parse([]byte("{\n  \"tools\": {\"exclude\": \"run_shell_command\"}\n}"), ".gemini/settings.json", settings.GeminiSettings)
	fmt.Println(err)
	// Output:
	// excluded: [run_shell_command]
	// discovery: sh tools/discover.sh
	// server: github https://api.githubcopilot.com/mcp/ Bearer ghp_example
	// hooks before a tool call: 1
	// .gemini/settings.json:2:24: tools.exclude is not a list of strings
}
