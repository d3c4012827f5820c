// Runs discord-digital-twin (npm, installed by scripts/install-discord-twin) for the Rust tests and
// takes commands from them: one JSON object per line on stdin, one JSON answer per line on stdout.
//   usage: node driver.mjs TWIN_CACHE_DIR
// The first line out is {"ready": {...}} with the REST base, the gateway URL, the token and the ids.
// Commands ({"cmd": ..., ...}): post (with optional Discord attachment objects), host, fetches,
// click, messages, threads, channel, drop_gateway, restore_gateway, stop. Every answer is
// {"ok": value} or {"error": "..."}.
//
// The twin stores the attachment objects a posted message carries and delivers them in its
// MESSAGE_CREATE, but serves no file bytes (it has no CDN). `host` puts bytes at a path of the twin's
// own origin (`/attachments/...`, as cdn.discordapp.com names them), served here in front of the
// twin's request handler; everything else goes to the twin unchanged.
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

// Files served at the twin's origin, and who asked for them (method, path, whether a token came).
const hosted = new Map();
const fetches = [];
{
  const http = discord.server.httpServer;
  const twinHandlers = http.listeners('request');
  http.removeAllListeners('request');
  http.on('request', (req, res) => {
    const path = (req.url ?? '').split('?')[0];
    const file = hosted.get(path);
    if (path.startsWith('/attachments/')) {
      fetches.push({ method: req.method, path, authorization: req.headers.authorization != null });
      if (!file) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-type': file.type, 'content-length': file.bytes.length });
      res.end(file.bytes);
      return;
    }
    for (const h of twinHandlers) h.call(http, req, res);
  });
}
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
  post: ({ channel, user, content, attachments }) =>
    discord.simulateUserMessage({ channelId: channel, userId: user, content, attachments }),
  // Serves `base64` at `path` (under /attachments/) with `content_type`; answers its full URL.
  host: ({ path: at, base64, content_type }) => {
    if (!at.startsWith('/attachments/')) throw new Error('hosted files live under /attachments/');
    hosted.set(at, { bytes: Buffer.from(base64, 'base64'), type: content_type });
    return `http://127.0.0.1:${discord.port}${at}`;
  },
  fetches: () => fetches,
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
