package registry

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/settings"
)

// FuzzRegisterSchema feeds arbitrary parameter schemas through registration
// (compaction, Gemini sanitising, every declaration format): nothing may
// panic, a rejected tool says why, and an accepted one yields valid JSON in
// every format.
func FuzzRegisterSchema(f *testing.F) {
	for _, s := range []string{`{}`, `{"type":"object"}`, `{"anyOf":[{"enum":[1,null,{"a":[]}]}],"default":3}`,
		`{"properties":{"a":{"items":{"enum":[1e400,-0,"x"]}}}}`, `[]`, `null`, `{"a":`, `"str"`, `{"enum":"notalist","anyOf":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		r := New(Settings{}, slog.New(slog.DiscardHandler))
		res := r.Register(&events.RegisterRequest{Provider: "p", Source: events.SourceMCP, Server: "s",
			Tools: []events.ToolSpec{{Name: "t", Parameters: schema}}})
		out := res.Outcomes[0]
		if out.Name == "" {
			if out.Error == "" {
				t.Fatal("rejected without a reason")
			}
			return
		}
		e, ok := r.Catalog().Lookup("t")
		if !ok {
			t.Fatal("accepted but not in the catalogue")
		}
		for f := catalog.Gemini; f <= catalog.MCP; f++ {
			if d := r.Catalog().DeclarationsFor(f, []string{e.Name}); !json.Valid(d) {
				t.Fatalf("%s: invalid JSON %s", f, d)
			}
		}
	})
}

// FuzzParseSettings: a settings file of any content gives settings or an
// error, never a panic.
func FuzzParseSettings(f *testing.F) {
	f.Add([]byte(`{"tools":{"core":["read_file"],"exclude":["x"]}} // c`))
	f.Add([]byte(`/* a */ {"coreTools":["run_shell_command(git)"], "excludeTools": []}`))
	f.Add([]byte(`{"tools":{"aliases":{"a":""}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if file, err := settings.Parse(data, "", settings.GeminiSettings); err == nil {
			SettingsFrom(file.Tools)
		}
	})
}
