// The openai npm package against the gateway: the two-line change (baseURL, apiKey),
// one plain call, one stream with usage, one async-iterated stream without; prints JSON.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.GATEWAY_URL, apiKey: process.env.GATEWAY_KEY, maxRetries: 0 });
const messages = [{ role: "user", content: "hi from node" }];
const headers = { "x-session-id": "node-1", "x-actor-id": "ts-agent" };

const plain = await client.chat.completions.create({ model: "gpt-4o-mini", messages }, { headers });
const stream = await client.chat.completions.create(
  { model: "gpt-4o-mini", messages, stream: true, stream_options: { include_usage: true } },
  { headers },
);
let text = "";
let usage = null;
for await (const chunk of stream) {
  text += chunk.choices[0]?.delta?.content ?? "";
  usage = chunk.usage ?? usage;
}
let status = null;
try {
  await new OpenAI({ baseURL: process.env.GATEWAY_URL, apiKey: "wrong", maxRetries: 0 })
    .chat.completions.create({ model: "gpt-4o-mini", messages });
} catch (error) {
  status = error.status;
}
console.log(JSON.stringify({ plain: plain.choices[0].message.content, plainUsage: plain.usage, text, usage, status }));
