// The @anthropic-ai/sdk npm package against the gateway: the two-line change (baseURL,
// apiKey), one plain message, one stream read to its final message, a wrong key; prints JSON.
import Anthropic from "@anthropic-ai/sdk";

const client = new Anthropic({ baseURL: process.env.GATEWAY_URL, apiKey: process.env.GATEWAY_KEY, maxRetries: 0 });
const request = { model: "claude-haiku", max_tokens: 200, messages: [{ role: "user", content: "hi from node" }] };
const headers = { "x-session-id": "node-2", "x-actor-id": "ts-claude" };

const plain = await client.messages.create(request, { headers });
const stream = client.messages.stream(request, { headers });
let text = "";
stream.on("text", (delta) => { text += delta; });
const final = await stream.finalMessage();
let status = null;
try {
  await new Anthropic({ baseURL: process.env.GATEWAY_URL, apiKey: "wrong", maxRetries: 0 }).messages.create(request);
} catch (error) {
  status = error.status;
}
console.log(JSON.stringify({ plain: plain.content[0].text, plainId: plain.id, plainUsage: plain.usage, text, usage: final.usage, status }));
