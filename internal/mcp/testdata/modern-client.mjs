// A client of protocol 2026-07-28 built on the TypeScript SDK
// (@modelcontextprotocol/client), pinned to that revision: it fails if the
// server does not offer it. It calls one tool and answers every
// elicitation with the action given, as a person in front of it would.
//
//   node modern-client.mjs <sdk entry module> <url> <accept|decline|none> <tool> <arguments as JSON>
//   node modern-client.mjs <sdk entry module> <url> features <prompt> <arguments as JSON> <resource URI>
//
// "none" declares no elicitation capability. A call prints one JSON line:
// {"result": …, "asked": [messages shown to the user]}; "features" lists
// the prompts and resources, gets the prompt and reads the resource:
// {"prompts": …, "resources": …, "prompt": …, "resource": …}.
import { pathToFileURL } from 'node:url';

const [sdkPath, url, action, tool, args] = process.argv.slice(2);
const { Client, StreamableHTTPClientTransport } = await import(pathToFileURL(sdkPath).href);

const asked = [];
const capabilities = action === 'none' ? {} : { elicitation: { form: {} } };
const client = new Client(
	{ name: 'ts-modern-client', version: '2.4.0' },
	{ capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
if (action !== 'none') {
	client.setRequestHandler('elicitation/create', async (request) => {
		asked.push(request.params.message);
		if (action === 'accept') {
			return { action: 'accept', content: {} };
		}
		return { action: 'decline', content: { reason: 'not from a script' } };
	});
}
// The facade admits a client by its token, which the test gives.
const headers = process.env.TOOLBUS_TEST_TOKEN ? { Authorization: `Bearer ${process.env.TOOLBUS_TEST_TOKEN}` } : {};
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
if (action === 'features') {
	try {
		const [prompt, promptArgs, uri] = process.argv.slice(5);
		const prompts = (await client.listPrompts()).prompts;
		const resources = (await client.listResources()).resources;
		const got = await client.getPrompt({ name: prompt, arguments: JSON.parse(promptArgs) });
		const read = await client.readResource({ uri });
		console.log(JSON.stringify({ prompts, resources, prompt: got.messages, resource: read.contents }));
	} finally {
		await client.close();
	}
	process.exit(0);
}
try {
	const result = await client.callTool({ name: tool, arguments: JSON.parse(args) }, { timeout: 120000 });
	console.log(JSON.stringify({ result, asked }));
} finally {
	await client.close();
}
