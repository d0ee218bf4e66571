package mcp_test

import (
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	toolmcp "github.com/toolbus/toolbus/internal/mcp"
)

// A screenshot tool answers with an image and no text: the image is a part,
// and the model's text says what it is.
func ExampleOutput() {
	res := &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewImageContent("iVBORw0KGgo=", "image/png"),
	}}
	out := toolmcp.Output("browser", "screenshot", res)
	fmt.Println(out.LLMContent)
	fmt.Println(out.Parts[0].Type, out.Parts[0].MIMEType, out.Parts[0].Size)
	fmt.Println(out.ReturnDisplay)
	// Output:
	// [Tool 'screenshot' of MCP server 'browser' returned an image (image/png)]
	// image image/png 12
	// ```json
	// [
	//   {
	//     "type": "image",
	//     "data": "<base64 12 bytes>",
	//     "mimeType": "image/png"
	//   }
	// ]
	// ```
}
