package executor

import (
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// caseTwins refuses an argument whose name differs from a declared
// parameter only in case. The policy reads the parameter by its exact
// name, while a tool (an MCP server written with a case-insensitive JSON
// decoder, say) might take the twin: {"file_path":"README.md",
// "FILE_PATH":".env"} must not read .env after the policy judged README.md.
func caseTwins(sch *jsonschema.Schema, args map[string]any) error {
	for sch != nil && len(sch.Properties) == 0 && sch.Ref != nil {
		sch = sch.Ref
	}
	if sch == nil {
		return nil
	}
	for k := range args {
		if _, declared := sch.Properties[k]; declared {
			continue
		}
		for p := range sch.Properties {
			if strings.EqualFold(k, p) {
				return fmt.Errorf("argument %q differs from the parameter %q only in case", k, p)
			}
		}
	}
	return nil
}
