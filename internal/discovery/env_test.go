package discovery

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/tool"
)

// executorEnv is an executor's environment as an attacker would like it:
// bus credentials, the console and MCP tokens, cloud keys, a password in
// a URL, next to what programs need.
var executorEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/ada", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TERM=xterm", "USER=ada", "TZ=UTC",
	"NATS_URL=nats://secret@10.0.0.1:4222", "NATS_CREDS=/home/ada/.nats/ci.creds", "NATS_TOKEN=s3cr3t-nats",
	"TOOLBUS_NATS=nats://admin:pw@bus:4222", "TOOLBUS_CONSOLE_TOKEN=console-token", "TOOLBUS_MCP_TOKEN=mcp-token",
	"GITHUB_TOKEN=ghp_x", "AWS_SECRET_ACCESS_KEY=aws", "OPENAI_API_KEY=sk-x", "DATABASE_URL=postgres://u:pw@db/x",
	"MY_PASSWORD=hunter2", "SSH_AUTH_SOCK=/tmp/ssh-agent.sock", "GOPATH=/home/ada/go", "PATHEXT=.x", "LC=not-a-locale", "=weird", "NOEQUALS",
}

func TestFilterEnv(t *testing.T) {
	t.Parallel()
	got := FilterEnv(executorEnv, []string{"GOPATH", "NOT_SET"})
	want := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/ada", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TERM=xterm", "USER=ada", "TZ=UTC", "GOPATH=/home/ada/go"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q,\nwant %q", got, want)
	}
	if got := FilterEnv(nil, nil); got == nil {
		t.Error("an empty environment is nil, which proctree takes for the executor's own")
	}
}

// TestToolCannotReadExecutorSecrets is the attacker's side: a discovered
// tool dumps its environment and finds none of the executor's secrets,
// unless the settings name one in tools.callEnv.
func TestToolCannotReadExecutorSecrets(t *testing.T) {
	t.Parallel()
	secrets := []string{"secret@", "ci.creds", "s3cr3t-nats", "admin:pw", "console-token", "mcp-token", "ghp_x", "aws", "sk-x", "u:pw", "hunter2", "ssh-agent"}
	for _, c := range []struct {
		name  string
		pass  []string
		shown []string
	}{
		{"default", nil, nil},
		{"callEnv names one", []string{"GITHUB_TOKEN"}, []string{"GITHUB_TOKEN=ghp_x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl, _ := callTool(t, "env", executorEnv, c.pass)
			out, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{}`)})
			if err != nil || out.Err != nil {
				t.Fatalf("%+v, %v", out, err)
			}
			env := out.LLMContent
			for _, s := range secrets {
				if strings.Contains(env, s) && !strings.Contains(strings.Join(c.shown, "\n"), s) {
					t.Errorf("the tool sees %q:\n%s", s, env)
				}
			}
			for _, v := range append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/ada", "LC_ALL=C.UTF-8"}, c.shown...) {
				if !strings.Contains(env, v+"\n") {
					t.Errorf("the tool does not see %s:\n%s", v, env)
				}
			}
		})
	}
}
