// Runs discord-digital-twin (npm, installed by scripts/install-discord-twin) for the Rust tests and
// takes commands from them: one JSON object per line on stdin, one JSON answer per line on stdout.
//   usage: node driver.mjs TWIN_CACHE_DIR
// The first line out is {"ready": {...}} with the REST base, the gateway URL, the token and the ids.
// Commands ({"cmd": ..., ...}): post, click, messages, message, threads, channel, drop_gateway,
// restore_gateway, stop. Every answer is {"ok": value} or {"error": "..."}.
import path from 'node:path';
import readline from 'node:readline';
import { pathToFileURL } from 'node:url';

const dir = process.argv[2];
const twin = await import(pathToFileURL(path.join(dir, 'node_modules/discord-digital-twin/dist/index.js')).href);

const PEOPLE = [{ id: '501', username: 'ana' }, { id: '502', username: 'bob' }];
const discord = new twin.DigitalDiscord({
  guild: { name: 'chat-bridge tests' },
  channels: [{ name: 'general', type: 0 }],
  users: PEOPLE,
  botUser: { username: 'chat-bridge' },
  botToken: 'twin-token-0123456789',
});
await discord.start();
const channels = await discord.prisma.channel.findMany({ where: { type: 0 } });
const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');
out({
  ready: {
    base_url: `http://127.0.0.1:${discord.port}`,
    gateway_url: discord.gatewayUrl,
    token: discord.botToken,
    bot: discord.botUserId,
    guild: discord.guildId,
    channel: channels[0].id,
    people: PEOPLE.map((p) => p.id),
  },
});

// The gateway alone goes away (REST stays): every client gets a close frame without a status code,
// as the twin sends when it stops, and new connections are refused until restore_gateway.
function dropGateway() {
  const gw = discord.server.gateway;
  for (const client of gw.clients) client.ws.close();
  gw.clients = [];
  gw.wss.close();
}
function restoreGateway() {
  const gw = discord.server.gateway;
  const Server = gw.wss.constructor;
  gw.wss = new Server({ noServer: true });
  gw.wss.on('connection', (ws) => gw.handleConnection(ws));
}

const commands = {
  post: ({ channel, user, content }) => discord.simulateUserMessage({ channelId: channel, userId: user, content }),
  click: ({ channel, user, message, custom_id }) =>
    discord.simulateButtonClick({ channelId: channel, userId: user, messageId: message, customId: custom_id }),
  messages: ({ channel }) => discord.channel(channel).getMessages(),
  threads: ({ channel }) => discord.channel(channel).getThreads(),
  channel: ({ channel }) => discord.channel(channel).getChannel(),
  reactions: async ({ message }) =>
    (await discord.prisma.reaction.findMany({ where: { messageId: message } })).map((r) => r.emoji),
  interactions: ({ channel }) => discord.getInteractionEvents({ channelId: channel }),
  drop_gateway: () => dropGateway(),
  restore_gateway: () => restoreGateway(),
  stop: async () => {
    // Closes every gateway client without a status code, then the HTTP server (not waited for:
    // keep-alive connections may hold it).
    void discord.stop();
    return true;
  },
};

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let req;
  try {
    req = JSON.parse(line);
    const fn = commands[req.cmd];
    if (!fn) throw new Error(`unknown command ${req.cmd}`);
    out({ ok: (await fn(req)) ?? null });
  } catch (e) {
    out({ error: String(e?.stack ?? e) });
  }
}
process.exit(0);
