package policy

import "github.com/open-policy-agent/opa/v1/ast"

// InputValue is the input document Decide evaluates for in.
func InputValue(in *Input) (ast.Value, error) { return in.value() }

// RecordedValue is the input document Replay evaluates for rec and args.
func RecordedValue(rec Recorded, args map[string]any) (ast.Value, error) { return rec.value(args) }
